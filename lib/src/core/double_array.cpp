#include "lmpipe/core/double_array.h"

#include <algorithm>

namespace lmp {

namespace {
// Bytes [from, from + 8) of s, big-endian, zero-padded: they order as the bytes do, and
// a key that is a prefix of another sorts first, as in std::string_view's order, on
// ties broken by the full compare.
std::uint64_t order_word(std::string_view s, std::size_t from) {
  std::uint64_t v = 0;
  for (std::size_t i = from; i < from + 8; ++i)
    v = (v << 8) | (i < s.size() ? static_cast<unsigned char>(s[i]) : 0u);
  return v;
}
}  // namespace

void DoubleArray::build(std::vector<std::pair<std::string_view, std::int32_t>> keys) {
  {
    // Sorted by their first 16 bytes as integers, the rest compared only on a tie: two
    // integer compares instead of a call to memcmp (Llama-3's 100k non-ASCII tokens: the
    // sort was half of building the trie).
    struct Ref {
      std::uint64_t w0, w1;
      std::uint32_t i;
    };
    std::vector<Ref> refs(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i)
      refs[i] = Ref{order_word(keys[i].first, 0), order_word(keys[i].first, 8), static_cast<std::uint32_t>(i)};
    std::sort(refs.begin(), refs.end(), [&](const Ref& a, const Ref& b) {
      if (a.w0 != b.w0) return a.w0 < b.w0;
      if (a.w1 != b.w1) return a.w1 < b.w1;
      return keys[a.i] < keys[b.i];
    });
    std::vector<std::pair<std::string_view, std::int32_t>> sorted(keys.size());
    for (std::size_t i = 0; i < refs.size(); ++i) sorted[i] = keys[refs[i].i];
    keys.swap(sorted);
  }
  nodes_.assign(1, Node{0, -2, -1});  // the root is its own, never a child
  auto grow = [&](std::size_t n) {
    if (n > nodes_.size()) nodes_.resize(n);
  };
  // Each task: a node and the range of keys below it, all sharing `depth` bytes.
  struct Task {
    std::int32_t node;
    std::size_t lo, hi, depth;
  };
  std::vector<Task> todo{{0, 0, keys.size(), 0}};
  std::vector<unsigned char> labels;
  std::vector<std::size_t> starts;
  std::size_t search_from = 1;  // first index that may be free
  while (!todo.empty()) {
    Task t = todo.back();
    todo.pop_back();
    labels.clear();
    starts.clear();
    std::size_t i = t.lo;
    // A key that ends here gives the node its value.
    if (i < t.hi && keys[i].first.size() == t.depth) {
      nodes_[static_cast<std::size_t>(t.node)].value = keys[i].second;
      ++i;
    }
    for (; i < t.hi; ++i) {
      auto c = static_cast<unsigned char>(keys[i].first[t.depth]);
      if (labels.empty() || labels.back() != c) {
        labels.push_back(c);
        starts.push_back(i);
      }
    }
    if (labels.empty()) continue;
    starts.push_back(t.hi);
    // Find a base where every child slot is free: put the first label on each free slot
    // in turn. Where slots are so packed that a node needed many tries, later nodes
    // start past them (a few slots are wasted; building stays linear).
    while (search_from < nodes_.size() && nodes_[search_from].check != -1) ++search_from;
    std::size_t f = search_from, tries = 0, b = 0;
    for (;; ++tries) {
      grow(f + 256 + 1);
      while (nodes_[f].check != -1) {
        ++f;
        grow(f + 256 + 1);
      }
      if (f > labels[0]) {
        b = f - labels[0];
        bool ok = true;
        for (unsigned char c : labels)
          if (nodes_[b + c].check != -1) {
            ok = false;
            break;
          }
        if (ok) break;
      }
      ++f;
    }
    if (tries > 32) search_from = f;
    nodes_[static_cast<std::size_t>(t.node)].base = static_cast<std::int32_t>(b);
    for (std::size_t k = 0; k < labels.size(); ++k) {
      std::size_t child = b + labels[k];
      nodes_[child].check = t.node;
      todo.push_back(Task{static_cast<std::int32_t>(child), starts[k], starts[k + 1], t.depth + 1});
    }
  }
  // Trim the unused tail.
  std::size_t used = nodes_.size();
  while (used > 1 && nodes_[used - 1].check == -1) --used;
  nodes_.resize(used);
}

}  // namespace lmp
