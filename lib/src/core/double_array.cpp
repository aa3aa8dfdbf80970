#include "lmpipe/core/double_array.h"

#include <algorithm>

namespace lmp {

void DoubleArray::build(std::vector<std::pair<std::string_view, std::int32_t>> keys) {
  std::sort(keys.begin(), keys.end());
  base_.assign(1, 0);
  check_.assign(1, -2);  // the root is its own, never a child
  value_.assign(1, -1);
  auto grow = [&](std::size_t n) {
    if (n > check_.size()) {
      base_.resize(n, 0);
      check_.resize(n, -1);
      value_.resize(n, -1);
    }
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
      value_[static_cast<std::size_t>(t.node)] = keys[i].second;
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
    while (search_from < check_.size() && check_[search_from] != -1) ++search_from;
    std::size_t f = search_from, tries = 0, b = 0;
    for (;; ++tries) {
      grow(f + 256 + 1);
      while (check_[f] != -1) {
        ++f;
        grow(f + 256 + 1);
      }
      if (f > labels[0]) {
        b = f - labels[0];
        bool ok = true;
        for (unsigned char c : labels)
          if (check_[b + c] != -1) {
            ok = false;
            break;
          }
        if (ok) break;
      }
      ++f;
    }
    if (tries > 32) search_from = f;
    base_[static_cast<std::size_t>(t.node)] = static_cast<std::int32_t>(b);
    for (std::size_t k = 0; k < labels.size(); ++k) {
      std::size_t child = b + labels[k];
      check_[child] = t.node;
      todo.push_back(Task{static_cast<std::int32_t>(child), starts[k], starts[k + 1], t.depth + 1});
    }
  }
  // Trim the unused tail.
  std::size_t used = check_.size();
  while (used > 1 && check_[used - 1] == -1) --used;
  base_.resize(used);
  check_.resize(used);
  value_.resize(used);
}

}  // namespace lmp
