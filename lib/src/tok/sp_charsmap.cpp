#include "lmpipe/tok/sp_charsmap.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lmpipe/text/unicode.h"

namespace lmp::tok {

namespace {

// darts-clone's unit layout (what SpNormalizer::match and spm_encode read):
// bits 0-7 label, bit 8 has_leaf, bit 9 offset extension, bits 10-31 offset; a value
// unit has bit 31 set and the value in bits 0-30.
struct Builder {
  std::vector<std::uint32_t> units;
  std::vector<bool> used;
  std::vector<bool> used_base;  // a base serves one node only: darts-clone knows a
                                // unit's parent only by its label, at parent base ^ label
  std::size_t scan = 1;

  void ensure(std::size_t n) {
    if (n > units.size()) {
      units.resize(n, 0);
      used.resize(n, false);
      used_base.resize(n, false);
    }
  }
  static std::uint32_t encode_offset(std::uint32_t offset) { return offset << 10; }  // offsets stay < 2^21
};

struct Key {
  std::string bytes;
  std::uint32_t value;
};

}  // namespace

std::string build_charsmap(bool case_fold) {
  // 1. Rules, and the pool of replacements.
  std::vector<Key> keys;
  std::string pool;
  std::string ch;
  for (std::uint32_t cp = 1; cp <= 0x10FFFF; ++cp) {
    // Unassigned code points: NFKC leaves them (NFKC_Casefold drops the reserved
    // default-ignorable ones, so with case folding every code point is asked).
    if ((cp >= 0xD800 && cp <= 0xDFFF) || (!case_fold && !text::is_assigned(cp))) continue;
    ch.clear();
    text::append_utf8(ch, cp);
    std::string n = text::normalize(ch, case_fold ? text::NormalForm::nfkc_cf : text::NormalForm::nfkc);
    if (n == ch) continue;
    keys.push_back({ch, static_cast<std::uint32_t>(pool.size())});
    pool += n;
    pool += '\0';
  }
  // Sequences that compose: the canonical decomposition of each precomposed character
  // (e + U+0301, Hangul jamo) maps to that character's normal form, so a letter followed
  // by its combining accent becomes one character, as NFKC makes it.
  std::string nf;
  for (std::uint32_t cp = 0xA0; cp <= 0x10FFFF; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || !text::is_assigned(cp)) continue;
    ch.clear();
    text::append_utf8(ch, cp);
    std::string d = text::normalize(ch, text::NormalForm::nfd);
    // (Under 6 bytes: HF's Precompiled normalizer only looks up whole graphemes that
    // short, so longer sequences, such as three-byte Hangul jamo pairs, would split the
    // two implementations.)
    if (d == ch || text::count_chars(d) < 2 || d.size() >= 6) continue;
    nf = text::normalize(ch, case_fold ? text::NormalForm::nfkc_cf : text::NormalForm::nfkc);
    if (nf == d) continue;
    keys.push_back({d, static_cast<std::uint32_t>(pool.size())});
    pool += nf;
    pool += '\0';
  }
  std::stable_sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) { return a.bytes < b.bytes; });
  keys.erase(std::unique(keys.begin(), keys.end(), [](const Key& a, const Key& b) { return a.bytes == b.bytes; }),
             keys.end());

  // 2. The double array, breadth first: node (index, key range, depth).
  Builder b;
  b.ensure(256);
  b.used[0] = true;
  struct Task {
    std::size_t index, lo, hi, depth;
  };
  std::vector<Task> todo{{0, 0, keys.size(), 0}}, next;
  std::vector<unsigned char> labels;
  std::vector<std::size_t> starts;
  while (!todo.empty()) {
    next.clear();
    for (const Task& t : todo) {
      labels.clear();
      starts.clear();
      std::size_t i = t.lo;
      bool leaf = false;
      std::uint32_t value = 0;
      if (i < t.hi && keys[i].bytes.size() == t.depth) {
        leaf = true;
        value = keys[i].value;
        ++i;
      }
      for (; i < t.hi; ++i) {
        auto c = static_cast<unsigned char>(keys[i].bytes[t.depth]);
        if (labels.empty() || labels.back() != c) {
          labels.push_back(c);
          starts.push_back(i);
        }
      }
      starts.push_back(t.hi);
      if (labels.empty() && !leaf) continue;
      // A base whose slots base^c (and base^0 for the value) are free.
      std::size_t base = b.scan;
      for (;; ++base) {
        b.ensure(base + 512);
        bool ok = !b.used_base[base] && (!leaf || !b.used[base]);
        for (unsigned char c : labels)
          if (b.used[base ^ c]) {
            ok = false;
            break;
          }
        if (ok) break;
      }
      b.used_base[base] = true;
      while (b.scan < b.used.size() && b.used[b.scan]) ++b.scan;
      auto offset = static_cast<std::uint32_t>(t.index ^ base);
      b.units[t.index] = (b.units[t.index] & 0xFFu) | Builder::encode_offset(offset) | (leaf ? 1u << 8 : 0u);
      if (leaf) {
        b.used[base] = true;
        b.units[base] = value | (1u << 31);
      }
      for (std::size_t k = 0; k < labels.size(); ++k) {
        std::size_t child = base ^ labels[k];
        b.used[child] = true;
        b.units[child] = labels[k];
        next.push_back({child, starts[k], starts[k + 1], t.depth + 1});
      }
    }
    todo.swap(next);
  }
  std::size_t n = b.units.size();
  while (n > 1 && !b.used[n - 1]) --n;
  b.units.resize(n);

  // 3. The blob: trie size in bytes, the units (little-endian), the pool.
  std::string blob;
  auto bytes = static_cast<std::uint32_t>(b.units.size() * 4);
  for (int k = 0; k < 4; ++k) blob += static_cast<char>((bytes >> (8 * k)) & 0xFF);
  for (std::uint32_t u : b.units)
    for (int k = 0; k < 4; ++k) blob += static_cast<char>((u >> (8 * k)) & 0xFF);
  blob += pool;
  return blob;
}

}  // namespace lmp::tok
