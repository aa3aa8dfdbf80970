#include "lmpipe/tok/sp_charsmap.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
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

std::optional<CharsmapRule> charsmap_rule(std::string_view name) {
  if (name == "nfkc") return CharsmapRule::nfkc;
  if (name == "nfkc_cf") return CharsmapRule::nfkc_cf;
  if (name == "nmt_nfkc") return CharsmapRule::nmt_nfkc;
  if (name == "nmt_nfkc_cf") return CharsmapRule::nmt_nfkc_cf;
  return std::nullopt;
}

std::string build_charsmap(CharsmapRule rule) {
  const bool case_fold = rule == CharsmapRule::nfkc_cf || rule == CharsmapRule::nmt_nfkc_cf;
  const bool nmt = rule == CharsmapRule::nmt_nfkc || rule == CharsmapRule::nmt_nfkc_cf;
  // The form of a string: NFKC, then each code point simply case-folded.
  std::string folded;
  auto form = [&](const std::string& s) {
    std::string n = text::normalize(s, text::NormalForm::nfkc);
    if (!case_fold) return n;
    folded.clear();
    const auto* p = reinterpret_cast<const unsigned char*>(n.data());
    for (std::size_t i = 0; i < n.size();) {
      text::CodePoint c = text::decode_utf8(p, n.size(), i);
      text::append_utf8(folded, text::simple_case_fold(c.cp));
      i += c.len;
    }
    return folded;
  };
  // nmt_nfkc's own rules for single code points (SentencePiece's nmt_nfkc, as spm_train
  // builds it): control characters dropped, line breaks, tabs, zero-width and other
  // invisible separators to a space, and the full-width tilde kept (Japanese wave dash).
  auto nmt_rule = [](std::uint32_t cp) -> std::optional<std::string> {
    if ((cp >= 0x01 && cp <= 0x08) || cp == 0x0B || (cp >= 0x0E && cp <= 0x1F) || cp == 0x7F || cp == 0x8F ||
        cp == 0x9F)
      return std::string();
    switch (cp) {
      case 0x09: case 0x0A: case 0x0C: case 0x0D: case 0x1680: case 0x200B: case 0x200C: case 0x200E:
      case 0x200F: case 0x2028: case 0x2029: case 0xFEFF: case 0xFFFD:
        return std::string(" ");
      case 0xFF5E:
        return std::string("\xEF\xBD\x9E");  // itself: no rule
      default:
        return std::nullopt;
    }
  };

  // 1. Rules, and the pool of replacements.
  std::vector<Key> keys;
  std::string pool;
  std::string ch;
  auto add = [&](const std::string& from, const std::string& to) {
    keys.push_back({from, static_cast<std::uint32_t>(pool.size())});
    pool += to;
    pool += '\0';
  };
  for (std::uint32_t cp = 1; cp <= 0x10FFFF; ++cp) {
    // Unassigned code points: neither NFKC nor simple case folding changes them.
    if ((cp >= 0xD800 && cp <= 0xDFFF) || !text::is_assigned(cp)) continue;
    ch.clear();
    text::append_utf8(ch, cp);
    std::optional<std::string> n = nmt ? nmt_rule(cp) : std::nullopt;
    if (!n) n = form(ch);
    if (*n != ch) add(ch, *n);
  }
  // Sequences that compose: the canonical decomposition of each precomposed character
  // (e + U+0301, Hangul jamo) maps to that character's form, so a letter followed by its
  // combining accent becomes one character, as NFKC makes it; so do the decomposition's
  // variants with a character that decomposes to one of its parts alone (K for K, U+0340
  // for U+0300: the Kelvin sign and an acute make Ḱ), as in SentencePiece's maps.
  struct Composite {
    std::uint32_t cp;
    std::vector<std::uint32_t> parts;
  };
  std::vector<Composite> composites;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> singletons;  // (part, character that decomposes to it alone)
  std::string d;
  for (std::uint32_t cp = 0xA0; cp <= 0x10FFFF; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || !text::is_assigned(cp)) continue;
    ch.clear();
    text::append_utf8(ch, cp);
    d = text::normalize(ch, text::NormalForm::nfd);
    if (d == ch) continue;
    std::vector<std::uint32_t> parts;
    const auto* p = reinterpret_cast<const unsigned char*>(d.data());
    for (std::size_t i = 0; i < d.size();) {
      text::CodePoint c = text::decode_utf8(p, d.size(), i);
      parts.push_back(c.cp);
      i += c.len;
    }
    if (parts.size() == 1) singletons.emplace_back(parts[0], cp);
    else composites.push_back({cp, std::move(parts)});
  }
  std::sort(singletons.begin(), singletons.end());
  std::string seq;
  for (const Composite& c : composites) {
    ch.clear();
    text::append_utf8(ch, c.cp);
    const std::string nf = form(ch);
    // Every choice, at each part, of the part itself or a character decomposing to it.
    std::vector<std::vector<std::uint32_t>> choices;
    for (std::uint32_t part : c.parts) {
      choices.push_back({part});
      auto it = std::lower_bound(singletons.begin(), singletons.end(), std::make_pair(part, std::uint32_t{0}));
      for (; it != singletons.end() && it->first == part; ++it) choices.back().push_back(it->second);
    }
    std::vector<std::size_t> pick(choices.size(), 0);
    for (;;) {
      seq.clear();
      for (std::size_t k = 0; k < pick.size(); ++k) text::append_utf8(seq, choices[k][pick[k]]);
      // (Under 6 bytes: HF's Precompiled normalizer only looks up whole graphemes that
      // short, so longer sequences, such as three-byte Hangul jamo pairs, would split the
      // two implementations.)
      if (seq.size() < 6 && nf != seq) add(seq, nf);
      std::size_t k = 0;
      while (k < pick.size() && ++pick[k] == choices[k].size()) pick[k++] = 0;
      if (k == pick.size()) break;
    }
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
