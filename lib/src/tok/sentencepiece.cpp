#include "lmpipe/tok/sentencepiece.h"

#include <unicode/ubrk.h>
#include <unicode/uchar.h>
#include <unicode/utext.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <cmath>
#include <limits>
#include <queue>
#include <unordered_map>

#include "lmpipe/text/unicode.h"
#include "best_combinations.h"

namespace lmp::tok {

namespace {

constexpr std::string_view kSpace = kMetaspace;
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
constexpr float kUnkPenalty = 10.0f;

// ---- A protobuf wire-format reader (bounds-checked, unknown fields skipped) ---------

class Proto {
 public:
  Proto(std::string_view b, const std::string& name, std::size_t base) : b_(b), name_(name), base_(base) {}
  bool done() const { return i_ >= b_.size(); }
  Result<std::uint64_t> varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (i_ >= b_.size()) return err("truncated varint");
      auto c = static_cast<unsigned char>(b_[i_++]);
      v |= static_cast<std::uint64_t>(c & 0x7F) << shift;
      if (c < 0x80) return v;
    }
    return err("varint longer than 10 bytes");
  }
  // (field number, wire type)
  Result<std::pair<std::uint32_t, std::uint32_t>> tag() {
    LMP_ASSIGN(std::uint64_t t, varint());
    if ((t >> 3) == 0 || (t >> 3) > 0x1FFFFFFF) return err("invalid field number");
    return std::pair<std::uint32_t, std::uint32_t>{static_cast<std::uint32_t>(t >> 3), static_cast<std::uint32_t>(t & 7)};
  }
  Result<std::string_view> bytes() {
    LMP_ASSIGN(std::uint64_t n, varint());
    if (n > b_.size() - i_) return err(fmt::format("length {} runs past the end ({} bytes left)", n, b_.size() - i_));
    std::string_view v = b_.substr(i_, static_cast<std::size_t>(n));
    i_ += static_cast<std::size_t>(n);
    return v;
  }
  Result<std::uint32_t> fixed32() {
    if (b_.size() - i_ < 4) return err("truncated fixed32");
    std::uint32_t v;
    std::memcpy(&v, b_.data() + i_, 4);
    i_ += 4;
    return v;
  }
  Status skip(std::uint32_t wire) {
    switch (wire) {
      case 0: {
        auto r = varint();
        if (!r.ok()) return std::move(r).error();
        return {};
      }
      case 1:
        if (b_.size() - i_ < 8) return err("truncated fixed64");
        i_ += 8;
        return {};
      case 2: {
        auto r = bytes();
        if (!r.ok()) return std::move(r).error();
        return {};
      }
      case 5: {
        auto r = fixed32();
        if (!r.ok()) return std::move(r).error();
        return {};
      }
      default: return err(fmt::format("unsupported wire type {}", wire));
    }
  }
  std::size_t offset() const { return base_ + i_; }
  std::size_t pos() const { return i_; }

 private:
  Error err(std::string_view what) const {
    return make_error(Errc::parse, "{}: byte {}: {}", name_, base_ + i_, what);
  }
  std::string_view b_;
  const std::string& name_;
  std::size_t base_;
  std::size_t i_ = 0;
};

float as_float(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::size_t utf8_len(std::string_view s) {  // bytes of the character at s[0], 0 if invalid
  auto c = text::decode_utf8(reinterpret_cast<const unsigned char*>(s.data()), s.size(), 0);
  return c.cp >= text::kInvalidBase ? 0 : c.len;
}

}  // namespace

// ---- Normalizer ---------------------------------------------------------------------

Status SpNormalizer::load_charsmap(std::string_view blob, const std::string& where) {
  charsmap.assign(blob);
  if (blob.empty()) return {};
  if (blob.size() < 4) return make_error(Errc::parse, "{}: precompiled charsmap shorter than its header", where);
  std::uint32_t trie_bytes;
  std::memcpy(&trie_bytes, blob.data(), 4);
  if (trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    return make_error(Errc::parse, "{}: precompiled charsmap: trie of {} bytes in a blob of {}", where, trie_bytes,
                      blob.size());
  trie_.resize(trie_bytes / 4);
  std::memcpy(trie_.data(), blob.data() + 4, trie_bytes);
  pool_.assign(blob.substr(4 + trie_bytes));
  if (pool_.empty() || pool_.back() != '\0') pool_ += '\0';
  return {};
}

// darts-clone's commonPrefixSearch, keeping the longest match (or the first, the shortest).
std::pair<std::string_view, std::size_t> SpNormalizer::match(std::string_view s, bool shortest) const {
  if (trie_.empty()) return {{}, 0};
  auto offset = [](std::uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
  auto label = [](std::uint32_t u) { return u & ((1u << 31) | 0xFFu); };
  auto has_leaf = [](std::uint32_t u) { return ((u >> 8) & 1u) != 0; };
  std::size_t id = 0;
  std::uint32_t unit = trie_[0];
  id ^= offset(unit);
  std::size_t best_len = 0;
  std::uint32_t best_value = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    id ^= c;
    if (id >= trie_.size()) break;
    unit = trie_[id];
    if (label(unit) != c) break;
    id ^= offset(unit);
    if (id >= trie_.size()) break;
    if (has_leaf(unit)) {
      best_len = i + 1;
      best_value = trie_[id] & 0x7FFFFFFFu;
      if (shortest) break;
    }
  }
  if (best_len == 0 || best_value >= pool_.size()) return {{}, 0};
  return {std::string_view(pool_.c_str() + best_value), best_len};
}

namespace {
// Record that the bytes of `out` not yet in `src` came from in[b, e).
void note_source(std::vector<text::SourceSpan>* src, const std::string& out, std::size_t b, std::size_t e) {
  if (src) src->resize(out.size(), {static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(e)});
}

// A rule replaced in[b, e) with the bytes of `out` not yet in `src`: its k-th output
// character came from the k-th input character (the last one when there are more
// outputs), so that "e" + U+0301 → "é" points at the "e" and "ﬁ" → "fi" at the ﬁ, as HF
// tokenizers aligns a replacement.
void note_rule(std::vector<text::SourceSpan>* src, const std::string& out, std::string_view in, std::size_t b,
               std::size_t e) {
  if (!src) return;
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const auto* q = reinterpret_cast<const unsigned char*>(out.data());
  std::size_t i = b;
  for (std::size_t o = src->size(); o < out.size();) {
    std::size_t n_in = i < e ? text::decode_utf8(p, e, i).len : 0;
    std::size_t n_out = text::decode_utf8(q, out.size(), o).len;
    text::SourceSpan from = n_in ? text::SourceSpan{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + n_in)}
                                 : (src->empty() ? text::SourceSpan{static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(e)}
                                                 : src->back());
    src->insert(src->end(), n_out, from);
    o += n_out;
    if (n_in && i + n_in < e) i += n_in;
  }
}

// The ends (byte offsets) of the extended grapheme clusters of valid UTF-8 `s`, by ICU's
// character break rules (Unicode's UAX #29, as Rust's unicode-segmentation in HF).
void grapheme_ends(std::string_view s, std::vector<std::size_t>& ends) {
  struct Iterator {
    UBreakIterator* bi = nullptr;
    ~Iterator() {
      if (bi) ubrk_close(bi);
    }
  };
  thread_local Iterator it;
  ends.clear();
  UErrorCode st = U_ZERO_ERROR;
  if (!it.bi) it.bi = ubrk_open(UBRK_CHARACTER, "", nullptr, 0, &st);
  UText* ut = U_SUCCESS(st) ? utext_openUTF8(nullptr, s.data(), static_cast<int64_t>(s.size()), &st) : nullptr;
  if (ut) ubrk_setUText(it.bi, ut, &st);
  if (ut && U_SUCCESS(st))
    for (int32_t e = ubrk_next(it.bi); e != UBRK_DONE; e = ubrk_next(it.bi)) ends.push_back(static_cast<std::size_t>(e));
  if (ut) utext_close(ut);
  if (U_FAILURE(st) || ends.empty() || ends.back() != s.size()) {  // ICU failed: one character each
    ends.clear();
    for (std::size_t i = 0; i < s.size();) ends.push_back(i += std::max<std::size_t>(1, utf8_len(s.substr(i))));
  }
}

// Whether a character's grapheme break class is Other, Control or LF. Where every
// character of a text is, each is a cluster of its own (rules GB4, GB5 and GB999; every
// rule that joins characters involves another class): CJK, and Latin, Greek or Cyrillic
// without combining marks. A table for the BMP, built once.
bool breaks_around(std::uint32_t cp) {
  auto simple = [](std::uint32_t c) {
    int gcb = u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_GRAPHEME_CLUSTER_BREAK);
    return gcb == U_GCB_OTHER || gcb == U_GCB_CONTROL || gcb == U_GCB_LF;
  };
  static const std::array<std::uint64_t, 1024> bmp = [&] {
    std::array<std::uint64_t, 1024> t{};
    for (std::uint32_t c = 0; c < 0x10000; ++c)
      if (simple(c)) t[c >> 6] |= std::uint64_t{1} << (c & 63);
    return t;
  }();
  return cp < 0x10000 ? (bmp[cp >> 6] >> (cp & 63)) & 1 : simple(cp);
}

}  // namespace

void SpNormalizer::apply_charsmap(std::string_view in, std::string& out, std::vector<text::SourceSpan>* src) const {
  out.clear();
  if (src) src->clear();
  // One character: its rule's replacement, or itself.
  auto one_char = [&](std::size_t at, std::size_t n) {
    auto m = match(in.substr(at, n));
    if (m.second > 0) {
      out += m.first;
      note_rule(src, out, in, at, at + n);
      return;
    }
    out.append(in.substr(at, n));
    if (src)
      for (std::size_t k = at; k < at + n; ++k)
        src->push_back({static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k + 1)});
  };
  std::vector<std::size_t> ends;
  std::size_t at = 0;
  while (at < in.size()) {
    // The run of valid UTF-8 from here (HF's text is valid; an invalid byte is kept as it
    // is), whether it is ASCII, and whether each of its characters is a cluster of its own.
    std::size_t run = at;
    bool ascii = true, single = true;
    const auto* p = reinterpret_cast<const unsigned char*>(in.data());
    while (run < in.size()) {
      if (p[run] < 0x80) {
        single = single && p[run] != '\r';  // CR LF is one cluster
        ++run;
        continue;
      }
      auto c = text::decode_utf8(p, in.size(), run);
      if (c.cp >= text::kInvalidBase) break;
      ascii = false;
      single = single && breaks_around(c.cp);
      run += c.len;
    }
    if (run == at) {
      one_char(at++, 1);
      continue;
    }
    if (ascii) {  // each character is a cluster, but CR LF
      for (; at < run; ++at) {
        if (in[at] == '\r' && at + 1 < run && in[at + 1] == '\n') {
          auto m = match(in.substr(at, 2), /*shortest=*/true);
          if (m.second > 0) {
            out += m.first;
            note_rule(src, out, in, at, at + 2);
            ++at;
            continue;
          }
        }
        one_char(at, 1);
      }
      continue;
    }
    if (single) {  // every character a cluster: a cluster's rule is its character's
      for (std::size_t n; at < run; at += n) {
        n = utf8_len(in.substr(at));
        one_char(at, n);
      }
      continue;
    }
    grapheme_ends(in.substr(at, run - at), ends);
    const std::size_t base = at;
    for (std::size_t e : ends) {
      std::size_t end = base + e;
      std::string_view g = in.substr(at, end - at);
      // HF's Precompiled normalizer: a cluster under 6 bytes that a rule starts is
      // replaced whole by the shortest such rule's replacement (what follows the rule's
      // match in the cluster is dropped); otherwise character by character.
      if (g.size() < 6) {
        auto m = match(g, /*shortest=*/true);
        if (m.second > 0) {
          out += m.first;
          note_rule(src, out, in, at, end);
          at = end;
          continue;
        }
      }
      for (std::size_t n; at < end; at += n) {
        n = std::max<std::size_t>(1, utf8_len(in.substr(at)));
        one_char(at, n);
      }
    }
  }
}

void SpNormalizer::normalize(std::string_view in, std::string& out, std::vector<text::SourceSpan>* src) const {
  out.clear();
  if (src) src->clear();
  const std::string_view whole = in;
  const std::size_t total = in.size();
  auto at = [&] { return total - in.size(); };  // bytes of the input consumed
  // The next normalized piece of `in` and the bytes it consumes.
  auto next = [&](std::string_view s) -> std::pair<std::string_view, std::size_t> {
    auto m = match(s);
    if (m.second > 0) return m;
    std::size_t n = utf8_len(s);
    if (n == 0) return {kReplacement, 1};  // a malformed byte: U+FFFD, one byte consumed
    return {s.substr(0, n), n};
  };
  auto add_ws = [&] { out += escape_whitespaces ? kSpace : std::string_view(" "); };
  if (remove_extra_whitespaces) {
    while (!in.empty()) {
      auto p = next(in);
      if (p.first != " ") break;
      in.remove_prefix(p.second);
    }
  }
  if (in.empty()) return;
  if (!treat_whitespace_as_suffix && add_dummy_prefix) {
    add_ws();
    note_source(src, out, at(), at() + next(in).second);
  }
  bool prev_space = remove_extra_whitespaces;
  while (!in.empty()) {
    auto [sp, used] = next(in);
    if (prev_space)
      while (!sp.empty() && sp.front() == ' ') sp.remove_prefix(1);
    if (!sp.empty()) {
      for (char c : sp) {
        if (escape_whitespaces && c == ' ') out += kSpace;
        else out += c;
      }
      prev_space = sp.back() == ' ';
      note_rule(src, out, whole, at(), at() + used);
    }
    in.remove_prefix(used);
    if (!remove_extra_whitespaces) prev_space = false;
  }
  if (remove_extra_whitespaces) {
    std::string_view ws = escape_whitespaces ? kSpace : std::string_view(" ");
    while (out.size() >= ws.size() && std::string_view(out).substr(out.size() - ws.size()) == ws)
      out.resize(out.size() - ws.size());
    if (src) src->resize(out.size());
  }
  if (treat_whitespace_as_suffix && add_dummy_prefix) {
    add_ws();
    std::size_t last = src && !src->empty() ? src->back().begin : 0;
    note_source(src, out, last, src && !src->empty() ? src->back().end : 0);
  }
}

// ---- Model --------------------------------------------------------------------------

Result<SentencePieceModel> SentencePieceModel::parse(std::string_view proto, const std::string& name) {
  SentencePieceModel m;
  m.byte_ids_.fill(-1);
  Proto top(proto, name, 0);
  bool have_trainer = false;
  int model_type = 1;
  while (!top.done()) {
    LMP_ASSIGN(auto t, top.tag());
    auto [field, wire] = t;
    if (field == 1 && wire == 2) {  // SentencePiece
      std::size_t at = top.offset();
      LMP_ASSIGN(std::string_view msg, top.bytes());
      Proto p(msg, name, at);
      std::string piece;
      float score = 0;
      int type = 1;
      while (!p.done()) {
        LMP_ASSIGN(auto pt, p.tag());
        if (pt.first == 1 && pt.second == 2) {
          LMP_ASSIGN(std::string_view v, p.bytes());
          piece.assign(v);
        } else if (pt.first == 2 && pt.second == 5) {
          LMP_ASSIGN(std::uint32_t bits, p.fixed32());
          score = as_float(bits);
        } else if (pt.first == 3 && pt.second == 0) {
          LMP_ASSIGN(std::uint64_t v, p.varint());
          type = static_cast<int>(v);
        } else {
          LMP_TRY(p.skip(pt.second));
        }
      }
      if (type < 1 || type > 6) return make_error(Errc::parse, "{}: byte {}: piece type {} is not known", name, at, type);
      m.pieces_.push_back(std::move(piece));
      m.scores_.push_back(score);
      m.types_.push_back(static_cast<SpPieceType>(type));
    } else if (field == 2 && wire == 2) {  // TrainerSpec
      std::size_t at = top.offset();
      LMP_ASSIGN(std::string_view msg, top.bytes());
      have_trainer = true;
      Proto p(msg, name, at);
      while (!p.done()) {
        LMP_ASSIGN(auto pt, p.tag());
        if (pt.second == 0 && (pt.first == 3 || pt.first == 35 || pt.first == 24)) {
          LMP_ASSIGN(std::uint64_t v, p.varint());
          if (pt.first == 3) model_type = static_cast<int>(v);
          if (pt.first == 35) m.byte_fallback_ = v != 0;
          if (pt.first == 24) m.norm_.treat_whitespace_as_suffix = v != 0;
        } else if (pt.first == 44 && pt.second == 2) {
          LMP_ASSIGN(std::string_view v, p.bytes());
          m.unk_surface_.assign(v);
        } else {
          LMP_TRY(p.skip(pt.second));
        }
      }
    } else if (field == 3 && wire == 2) {  // NormalizerSpec
      std::size_t at = top.offset();
      LMP_ASSIGN(std::string_view msg, top.bytes());
      Proto p(msg, name, at);
      while (!p.done()) {
        LMP_ASSIGN(auto pt, p.tag());
        if (pt.first == 1 && pt.second == 2) {
          LMP_ASSIGN(std::string_view v, p.bytes());
          m.norm_.name.assign(v);
        } else if (pt.first == 2 && pt.second == 2) {
          std::size_t cat = p.offset();
          LMP_ASSIGN(std::string_view v, p.bytes());
          LMP_TRY(m.norm_.load_charsmap(v, fmt::format("{}: byte {}", name, cat)));
        } else if (pt.second == 0 && pt.first >= 3 && pt.first <= 5) {
          LMP_ASSIGN(std::uint64_t v, p.varint());
          (pt.first == 3 ? m.norm_.add_dummy_prefix : pt.first == 4 ? m.norm_.remove_extra_whitespaces
                                                                     : m.norm_.escape_whitespaces) = v != 0;
        } else {
          LMP_TRY(p.skip(pt.second));
        }
      }
    } else {
      LMP_TRY(top.skip(wire));
    }
  }
  if (m.pieces_.empty()) return make_error(Errc::parse, "{}: not a SentencePiece model (no pieces)", name);
  if (!have_trainer) return make_error(Errc::parse, "{}: not a SentencePiece model (no trainer_spec)", name);
  if (model_type == 1) m.kind_ = Kind::unigram;
  else if (model_type == 2) m.kind_ = Kind::bpe;
  else
    return make_error(Errc::unsupported, "{}: model type {} (WORD or CHAR) is not supported; unigram and BPE are", name,
                      model_type);

  m.ids_.reserve(m.pieces_.size());
  m.min_score_ = FLT_MAX;
  m.max_score_ = FLT_MIN;  // as SentencePiece: the user-defined bonus is then about -0.1
  for (std::size_t i = 0; i < m.pieces_.size(); ++i) {
    const std::string& p = m.pieces_[i];
    auto id = static_cast<TokenId>(i);
    if (p.empty()) return make_error(Errc::parse, "{}: piece {} is empty", name, i);
    if (!m.ids_.insert(p, id)) return make_error(Errc::parse, "{}: piece {} '{}' appears twice", name, i, p);
    switch (m.types_[i]) {
      case SpPieceType::unknown:
        if (m.unk_id_ >= 0) return make_error(Errc::parse, "{}: more than one unknown piece", name);
        m.unk_id_ = id;
        break;
      case SpPieceType::normal:
        m.min_score_ = std::min(m.min_score_, m.scores_[i]);
        m.max_score_ = std::max(m.max_score_, m.scores_[i]);
        break;
      case SpPieceType::user_defined: m.user_defined_.push_back(p); break;
      case SpPieceType::byte:
        if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>') {
          unsigned v = 0;
          for (int k = 3; k < 5; ++k) {
            char c = p[static_cast<std::size_t>(k)];
            v = v * 16 + static_cast<unsigned>(c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 0);
          }
          m.byte_ids_[v] = id;
        }
        break;
      case SpPieceType::control:
        if (p == "<s>") m.bos_id_ = id;
        if (p == "</s>") m.eos_id_ = id;
        break;
      default: break;
    }
    if (m.types_[i] == SpPieceType::normal || m.types_[i] == SpPieceType::user_defined ||
        m.types_[i] == SpPieceType::unused) {
      m.max_piece_bytes_ = std::max(m.max_piece_bytes_, p.size());
    }
  }
  if (m.unk_id_ < 0) return make_error(Errc::parse, "{}: the model has no unknown piece", name);
  if (m.byte_fallback_)
    for (int b = 0; b < 256; ++b)
      if (m.byte_ids_[static_cast<std::size_t>(b)] < 0)
        return make_error(Errc::parse, "{}: byte fallback without the piece <0x{:02X}>", name, b);
  std::sort(m.user_defined_.begin(), m.user_defined_.end(),
            [](std::string_view a, std::string_view b) { return a.size() > b.size(); });
  m.find_word_split();
  if (m.kind_ == Kind::unigram) {
    std::vector<std::pair<std::string_view, std::int32_t>> keys;
    for (std::size_t i = 0; i < m.pieces_.size(); ++i) {
      auto t = m.types_[i];
      if (t == SpPieceType::normal || t == SpPieceType::user_defined || t == SpPieceType::unused)
        keys.emplace_back(m.pieces_[i], static_cast<std::int32_t>(i));
    }
    m.trie_.build(std::move(keys));
  } else {
    // Ranks: pieces by score, highest first; equal scores share a rank.
    std::vector<TokenId> order(m.pieces_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<TokenId>(i);
    std::stable_sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
      return m.scores_[static_cast<std::size_t>(a)] > m.scores_[static_cast<std::size_t>(b)];
    });
    m.rank_.assign(m.pieces_.size(), 0);
    std::uint32_t r = 0;
    for (std::size_t k = 0; k < order.size(); ++k) {
      if (k > 0 && m.scores_[static_cast<std::size_t>(order[k])] != m.scores_[static_cast<std::size_t>(order[k - 1])]) ++r;
      m.rank_[static_cast<std::size_t>(order[k])] = r;
    }
    for (auto t : m.types_) m.has_unused_ = m.has_unused_ || t == SpPieceType::unused;
    // Every split of a piece into two pieces: merging then looks up a pair of ids
    // instead of hashing the joined text.
    for (std::size_t i = 0; i < m.pieces_.size(); ++i) {
      auto t = m.types_[i];
      if (t != SpPieceType::normal && t != SpPieceType::user_defined && t != SpPieceType::unused) continue;
      std::string_view p = m.pieces_[i];
      for (std::size_t k = utf8_len(p); k > 0 && k < p.size();) {
        TokenId a = m.ids_.find(p.substr(0, k)), b = m.ids_.find(p.substr(k));
        if (a >= 0 && b >= 0) m.pair_merge_.set(pair_key(a, b), PairMerge{m.scores_[i], static_cast<TokenId>(i)});
        std::size_t n = utf8_len(p.substr(k));
        k += n ? n : 1;
      }
    }
  }
  return m;
}

// Every piece of the lattice of `text`, start by start (one character at a time), each
// start's pieces by increasing end: piece(start, end, id) for each piece in the trie
// (unused ones skipped), then unknown(start, end) when no piece covers the character
// alone — the order in which SentencePiece and HF evaluate them, which decides ties.
template <class OnPiece, class OnUnknown>
void SentencePieceModel::walk_lattice(std::string_view text, OnPiece&& piece, OnUnknown&& unknown) const {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t start = 0; start < text.size();) {
    std::size_t mblen = utf8_len(text.substr(start));
    if (mblen == 0) mblen = 1;
    mblen = std::min(mblen, text.size() - start);
    bool single = false;
    std::int32_t node = 0;
    for (std::size_t k = start; k < text.size(); ++k) {
      node = trie_.step(node, bytes[k]);
      if (node < 0) break;
      TokenId id = trie_.value(node);
      if (id < 0 || types_[static_cast<std::size_t>(id)] == SpPieceType::unused) continue;
      piece(start, k + 1, id);
      if (k + 1 - start == mblen) single = true;
    }
    if (!single) unknown(start, start + mblen);
    start += mblen;
  }
}

// Word by word is exact when no piece of the lattice (normal, user-defined, unused) has ▁
// right after another character (SentencePiece's split_by_whitespace; Llama 2 qualifies:
// its pieces of several ▁ are all ▁): no piece then crosses the start of a ▁ run.
void SentencePieceModel::find_word_split() {
  ws_split_ = !norm_.treat_whitespace_as_suffix;
  for (std::size_t i = 0; i < pieces_.size() && ws_split_; ++i) {
    auto t = types_[i];
    if (t != SpPieceType::normal && t != SpPieceType::user_defined && t != SpPieceType::unused) continue;
    std::string_view p = pieces_[i];
    bool prev_other = false;  // the previous character is not ▁
    for (std::size_t k = 0; k < p.size();) {
      bool space = p.compare(k, kSpace.size(), kSpace) == 0;
      if (space && prev_other) {
        ws_split_ = false;
        break;
      }
      prev_other = !space;
      std::size_t n = space ? kSpace.size() : utf8_len(p.substr(k));
      k += n ? n : 1;
    }
  }
}

Result<SentencePieceModel> SentencePieceModel::from_hf_unigram(std::vector<std::pair<std::string, double>> vocab,
                                                              TokenId unk_id, bool byte_fallback,
                                                              const std::string& name) {
  SentencePieceModel m;
  m.hf_ = true;
  m.kind_ = Kind::unigram;
  m.byte_ids_.fill(-1);
  m.byte_fallback_ = byte_fallback;
  m.norm_.add_dummy_prefix = false;  // the Tokenizer normalizes
  m.norm_.remove_extra_whitespaces = false;
  m.norm_.escape_whitespaces = false;
  m.unk_id_ = unk_id;
  if (vocab.empty()) return make_error(Errc::parse, "{}: the Unigram vocabulary is empty", name);
  if (unk_id < 0 || static_cast<std::size_t>(unk_id) >= vocab.size())
    return make_error(Errc::parse, "{}: unk_id {} is outside the vocabulary ({} pieces)", name, unk_id, vocab.size());
  m.min_score64_ = std::numeric_limits<double>::infinity();
  std::vector<std::pair<std::string_view, std::int32_t>> keys;
  m.ids_.reserve(vocab.size());
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    m.pieces_.push_back(std::move(vocab[i].first));
    m.scores64_.push_back(vocab[i].second);
    m.scores_.push_back(static_cast<float>(vocab[i].second));
    m.types_.push_back(static_cast<TokenId>(i) == unk_id ? SpPieceType::unknown : SpPieceType::normal);
    m.min_score64_ = std::min(m.min_score64_, vocab[i].second);
  }
  for (std::size_t i = 0; i < m.pieces_.size(); ++i) {
    const std::string& p = m.pieces_[i];
    if (p.empty()) return make_error(Errc::parse, "{}: piece {} is empty", name, i);
    if (!m.ids_.insert(p, static_cast<TokenId>(i))) continue;  // HF: the later id wins in its map; keep the first
    keys.emplace_back(p, static_cast<std::int32_t>(i));
    if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>') {
      unsigned v = 0;
      bool ok = true;
      for (int k = 3; k < 5; ++k) {
        char c = p[static_cast<std::size_t>(k)];
        if (c >= '0' && c <= '9') v = v * 16 + static_cast<unsigned>(c - '0');
        else if (c >= 'A' && c <= 'F') v = v * 16 + static_cast<unsigned>(c - 'A' + 10);
        else ok = false;
      }
      if (ok) m.byte_ids_[v] = static_cast<TokenId>(i);
    }
  }
  m.trie_.build(std::move(keys));
  m.find_word_split();
  return m;
}

// HF's Unigram::encode_optimized: f64 sums, a later candidate wins only when strictly
// better, a run of unknown characters fused into one piece.
void SentencePieceModel::unigram_hf(std::string_view text, std::vector<std::pair<std::string_view, TokenId>>& out) const {
  struct Node {
    TokenId id = -1;
    double score = 0;
    std::int64_t starts_at = -1;
  };
  const std::size_t size = text.size();
  std::vector<Node> best(size + 1);
  const double unk_score = min_score64_ - static_cast<double>(kUnkPenalty);
  auto relax = [&](std::size_t start, std::size_t end, TokenId id, double score) {
    double cand = score + best[start].score;
    Node& b = best[end];
    if (b.starts_at == -1 || cand > b.score) {
      b.score = cand;
      b.starts_at = static_cast<std::int64_t>(start);
      b.id = id;
    }
  };
  walk_lattice(
      text, [&](std::size_t st, std::size_t e, TokenId id) { relax(st, e, id, scores64_[static_cast<std::size_t>(id)]); },
      [&](std::size_t st, std::size_t e) { relax(st, e, unk_id_, unk_score); });
  std::size_t first = out.size();
  std::size_t unk_end = 0;  // end of the run of unknown pieces being fused (0: none)
  for (std::size_t end = size; end > 0;) {
    const Node& b = best[end];
    auto st = static_cast<std::size_t>(b.starts_at);
    if (b.id == unk_id_) {
      if (unk_end == 0) unk_end = end;
    } else {
      if (unk_end) out.emplace_back(text.substr(end, unk_end - end), unk_id_);
      unk_end = 0;
      out.emplace_back(text.substr(st, end - st), b.id);
    }
    end = st;
  }
  if (unk_end) out.emplace_back(text.substr(0, unk_end), unk_id_);
  std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
}

std::size_t SentencePieceModel::match_user_defined(std::string_view s) const {
  for (std::string_view u : user_defined_)
    if (s.size() >= u.size() && s.compare(0, u.size(), u) == 0) return u.size();
  return 0;
}

void SentencePieceModel::encode(std::string_view text, std::vector<TokenId>& out, ModelScratch& s) const {
  if (hf_) {  // normalized by the Tokenizer
    encode_normalized(text, out, s);
    return;
  }
  norm_.normalize(text, s.sp_text);
  encode_normalized(s.sp_text, out, s);
}

void SentencePieceModel::encode_normalized(std::string_view text, std::vector<TokenId>& out, ModelScratch& s) const {
  if (text.empty()) return;
  auto& pieces = s.sp_pieces;
  pieces.clear();
  const Sampling& drawn = s.bpe.sampling;
  // (a unigram draw from the 1 best, spm's nbest_size 0 or 1, is the best segmentation)
  if (drawn.rng && !(kind_ == Kind::unigram && (drawn.nbest == 0 || drawn.nbest == 1))) {
    // subword regularization: no word cache
    if (kind_ == Kind::unigram) sample(text, drawn.alpha, drawn.nbest, *drawn.rng, pieces);
    else bpe(text, pieces, s);
  } else if (hf_) {
    unigram_hf(text, pieces);
  } else if (kind_ == Kind::unigram) {
    unigram(text, pieces, s.sp_best);
  } else if (!ws_split_) {
    bpe(text, pieces, s);
  } else {
    // No piece has ▁ right after another character, so no merge crosses the start of
    // a word: encode word by word (exactly the same pieces), through a word cache.
    auto& cache = s.sp_cache;
    if (cache.empty()) cache.resize(kSpCacheSize);
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = start;
      while (end < text.size() && text.compare(end, kSpace.size(), kSpace) == 0) end += kSpace.size();
      std::size_t next = text.find(kSpace, end);
      if (next == std::string_view::npos) next = text.size();
      std::string_view word = text.substr(start, next - start);
      auto& e = cache[static_cast<std::size_t>(hash_bytes(word.data(), word.size())) & (kSpCacheSize - 1)];
      if (word.size() <= 64 && e.key == word) {
        std::size_t at = start;
        for (auto [len, id] : e.pieces) {
          pieces.emplace_back(text.substr(at, len), id);
          at += len;
        }
      } else {
        std::size_t first = pieces.size();
        bpe(word, pieces, s);
        if (word.size() <= 64) {
          e.key.assign(word);
          e.pieces.clear();
          for (std::size_t k = first; k < pieces.size(); ++k)
            e.pieces.emplace_back(static_cast<std::uint32_t>(pieces[k].first.size()), pieces[k].second);
        }
      }
      start = next;
    }
  }
  emit(pieces, out, s);
}

void SentencePieceModel::emit(const std::vector<std::pair<std::string_view, TokenId>>& pieces,
                              std::vector<TokenId>& out, ModelScratch& s) const {
  bool prev_unk = false;
  for (auto [piece, id] : pieces) {
    bool unk = id == unk_id_;
    // Byte fallback when every byte has its <0xXX> piece (always, in a .model; an HF
    // vocabulary may lack some, and HF then keeps the unknown piece).
    if (unk && byte_fallback_ &&
        std::all_of(piece.begin(), piece.end(), [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; })) {
      for (char c : piece) out.push_back(byte_ids_[static_cast<unsigned char>(c)]);
      prev_unk = false;
      continue;
    }
    // A run of unknown pieces is one <unk>, as spm_encode emits it.
    if (!(unk && prev_unk)) {
      out.push_back(id);
      if (unk) ++s.unknown;
    }
    prev_unk = unk;
  }
}

// SentencePiece's Viterbi (the lattice-free version of unigram_model.cc): float sums,
// a later candidate replaces the best only when strictly better.
void SentencePieceModel::unigram(std::string_view text, std::vector<std::pair<std::string_view, TokenId>>& out,
                                 std::vector<SpBest>& best) const {
  const std::size_t size = text.size();
  best.assign(size + 1, SpBest{});
  const float unk_score = min_score_ - kUnkPenalty;
  walk_lattice(
      text,
      [&](std::size_t start, std::size_t end, TokenId id) {
        // As SentencePiece computes it: the score is a double (the user-defined bonus is),
        // so the candidate is a double, compared with the stored float best.
        auto t = types_[static_cast<std::size_t>(id)];
        double sc = t == SpPieceType::user_defined
                        ? static_cast<double>(end - start) * static_cast<double>(max_score_) - 0.1
                        : static_cast<double>(scores_[static_cast<std::size_t>(id)]);
        double cand = sc + static_cast<double>(best[start].score);
        SpBest& b = best[end];
        if (b.starts_at == -1 || cand > static_cast<double>(b.score)) {
          b.score = static_cast<float>(cand);
          b.starts_at = static_cast<std::int32_t>(start);
          b.id = id;
        }
      },
      [&](std::size_t start, std::size_t end) {
        float cand = unk_score + best[start].score;  // a float here, as in SentencePiece
        SpBest& b = best[end];
        if (b.starts_at == -1 || cand > b.score) {
          b.score = cand;
          b.starts_at = static_cast<std::int32_t>(start);
          b.id = unk_id_;
        }
      });
  std::size_t first = out.size();
  for (std::size_t end = size; end > 0;) {
    const SpBest& b = best[end];
    auto st = static_cast<std::size_t>(b.starts_at);
    out.emplace_back(text.substr(st, end - st), b.id);
    end = st;
  }
  std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
}

// SentencePiece's BPE (bpe_model.cc): merge the adjacent pair whose concatenation is
// the piece of highest score, leftmost on ties; unused pieces are split back. Scores
// are turned into ranks (equal scores, equal rank), so the agenda is a heap of
// (rank << 32 | left position): integer compares, the leftmost first on ties.
void SentencePieceModel::bpe(std::string_view text, std::vector<std::pair<std::string_view, TokenId>>& out,
                             ModelScratch& s) const {
  const Sampling* drop = s.bpe.sampling.rng ? &s.bpe.sampling : nullptr;
  auto& sym = s.sp_sym;
  sym.clear();
  for (std::size_t i = 0; i < text.size();) {
    std::size_t n = match_user_defined(text.substr(i));
    bool freeze = n > 0;
    if (!n) n = utf8_len(text.substr(i));
    if (!n) n = 1;
    auto k = static_cast<std::int32_t>(sym.size());
    sym.push_back(SpSym{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(n), k - 1, -1,
                        ids_.find(text.substr(i, n)), freeze});
    if (k > 0) sym[static_cast<std::size_t>(k - 1)].next = k;
    i += n;
  }
  auto piece_of = [&](const SpSym& x) { return text.substr(x.begin, x.len); };
  // The merge of symbols l and r (adjacent): (rank, piece id), or rank kNone.
  constexpr std::uint32_t kNone = 0xFFFFFFFFu;
  auto merge_of = [&](std::int32_t l, std::int32_t r) -> std::pair<std::uint32_t, TokenId> {
    const SpSym& a = sym[static_cast<std::size_t>(l)];
    const SpSym& b = sym[static_cast<std::size_t>(r)];
    if (a.freeze || b.freeze) return {kNone, -1};
    TokenId id;
    if (a.id >= 0 && b.id >= 0) {
      const PairMerge* pm = pair_merge_.find(pair_key(a.id, b.id));
      if (!pm) return {kNone, -1};
      id = pm->id;
    } else {  // a character that is not a piece: look the joined text up
      id = ids_.find(text.substr(a.begin, a.len + b.len));
      if (id < 0) return {kNone, -1};
      auto t = types_[static_cast<std::size_t>(id)];
      if (t != SpPieceType::normal && t != SpPieceType::user_defined && t != SpPieceType::unused) return {kNone, -1};
    }
    return {rank_[static_cast<std::size_t>(id)], id};
  };
  auto& heap = s.bpe.heap;
  heap.clear();
  auto push = [&](std::int32_t l) {
    if (l < 0) return;
    std::int32_t r = sym[static_cast<std::size_t>(l)].next;
    if (r < 0) return;
    auto m = merge_of(l, r);
    if (m.first == kNone) return;
    heap.push_back((static_cast<std::uint64_t>(m.first) << 32) | static_cast<std::uint32_t>(l));
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
    auto m = merge_of(static_cast<std::int32_t>(i), static_cast<std::int32_t>(i + 1));
    if (m.first != kNone) heap.push_back((static_cast<std::uint64_t>(m.first) << 32) | i);
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> rev_merge;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    std::uint64_t key = heap.back();
    heap.pop_back();
    auto l = static_cast<std::int32_t>(key & 0xFFFFFFFFu);
    SpSym& a = sym[static_cast<std::size_t>(l)];
    if (a.len == 0 || a.next < 0) continue;
    auto m = merge_of(l, a.next);
    if (m.first != static_cast<std::uint32_t>(key >> 32)) continue;  // stale
    // BPE-dropout as spm's SampleEncode: a live merge is dropped with probability
    // `dropout` (always at 1, never at 0, without a draw), for good: it comes back only
    // if its neighbours change and make the pair anew.
    if (drop && (drop->dropout >= 1 || (drop->dropout > 0 && drop->rng->uniform() < drop->dropout))) continue;
    SpSym& b = sym[static_cast<std::size_t>(a.next)];
    if (has_unused_ && types_[static_cast<std::size_t>(m.second)] == SpPieceType::unused)
      rev_merge[text.substr(a.begin, a.len + b.len)] = {piece_of(a), piece_of(b)};
    a.len += b.len;
    a.id = m.second;
    b.len = 0;
    a.next = b.next;
    if (b.next >= 0) sym[static_cast<std::size_t>(b.next)].prev = l;
    push(a.prev);
    push(l);
  }
  // Map to ids; an unused piece is split into the pieces it was made of.
  std::vector<std::string_view> stack;
  for (std::int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next) {
    const SpSym& x = sym[static_cast<std::size_t>(i)];
    if (!has_unused_) {
      out.emplace_back(piece_of(x), x.id < 0 ? unk_id_ : x.id);
      continue;
    }
    stack.push_back(piece_of(x));
    while (!stack.empty()) {
      std::string_view w = stack.back();
      stack.pop_back();
      TokenId id = ids_.find(w);
      if (id >= 0 && types_[static_cast<std::size_t>(id)] == SpPieceType::unused) {
        auto it = rev_merge.find(w);
        if (it != rev_merge.end()) {
          stack.push_back(it->second.second);
          stack.push_back(it->second.first);
          continue;
        }
      }
      out.emplace_back(w, id < 0 ? unk_id_ : id);
    }
  }
}

void SentencePieceModel::lattice(std::string_view text, std::vector<LatticeEdge>& edges) const {
  edges.clear();
  // (An HF model: its f64 scores, the unknown piece 10 below the lowest, as unigram_hf.)
  const double unk_score =
      hf_ ? min_score64_ - static_cast<double>(kUnkPenalty) : static_cast<double>(min_score_ - kUnkPenalty);
  walk_lattice(
      text,
      [&](std::size_t start, std::size_t end, TokenId id) {
        double sc = hf_ ? scores64_[static_cast<std::size_t>(id)]
                    : types_[static_cast<std::size_t>(id)] == SpPieceType::user_defined
                        ? static_cast<double>(end - start) * static_cast<double>(max_score_) - 0.1
                        : static_cast<double>(scores_[static_cast<std::size_t>(id)]);
        edges.push_back({static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(end), id, sc});
      },
      [&](std::size_t start, std::size_t end) {
        edges.push_back({static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(end), unk_id_, unk_score});
      });
}

// The n best segmentations of one lattice, flat: segmentation r's pieces are
// pieces[start[r], start[r + 1]).
struct SpPathSet {
  std::vector<double> scores;
  std::vector<std::uint32_t> start;
  std::vector<std::pair<std::string_view, TokenId>> pieces;
  void clear() {
    scores.clear();
    start.assign(1, 0);
    pieces.clear();
  }
  std::size_t size() const { return scores.size(); }
};

// A search's buffers, kept by each thread from one text to the next.
struct SpNBestSearch {
  struct Partial {
    double score;
    std::uint32_t edge, back;  // the edge that ends it; its rank among the start's partials
  };
  std::vector<SentencePieceModel::LatticeEdge> edges;
  std::vector<std::uint32_t> by_end, end_at;   // edges by end position: by_end[end_at[e], end_at[e + 1])
  std::vector<std::uint32_t> fill;
  std::vector<Partial> partials, cand;         // each position's n best, in order of position; a position's heap
  std::vector<std::uint32_t> partial_at;       // position e's: partials[partial_at[e], partial_at[e + 1])
  std::vector<SpPathSet> words;                  // each word's n best (nbest_search)
  std::size_t n_words = 0;
  std::vector<std::size_t> cuts;
  BestCombinations best;
};

namespace {
SpNBestSearch& search_buffers() {
  thread_local SpNBestSearch s;
  return s;
}
}  // namespace

void SentencePieceModel::nbest_lattice(std::string_view text, std::size_t n, SpNBestSearch& s, SpPathSet& out) const {
  out.clear();
  if (text.empty()) {
    out.scores.push_back(0.0);
    out.start.push_back(0);
    return;
  }
  lattice(text, s.edges);
  // Edges by end position (a counting sort).
  const std::size_t size = text.size();
  s.end_at.assign(size + 2, 0);
  for (const auto& x : s.edges) ++s.end_at[x.end + 1];
  for (std::size_t e = 1; e < s.end_at.size(); ++e) s.end_at[e] += s.end_at[e - 1];
  s.by_end.resize(s.edges.size());
  s.fill.assign(s.end_at.begin(), s.end_at.end());
  for (std::uint32_t k = 0; k < s.edges.size(); ++k) s.by_end[s.fill[s.edges[k].end]++] = k;
  // For each end position, its n best partial paths, best first.
  s.partials.assign(1, {0.0, 0, 0});
  s.partial_at.assign(size + 2, 0);
  s.partial_at[1] = 1;
  // Each edge ending at e extends its start's partials, best first: a sorted list. The n
  // best of their union come off a heap that holds each list's next candidate (so at most
  // one per edge), in the order (score, then edge, then rank) that breaks ties.
  auto worse = [](const SpNBestSearch::Partial& a, const SpNBestSearch::Partial& b) {
    if (a.score != b.score) return a.score < b.score;
    return a.edge != b.edge ? a.edge > b.edge : a.back > b.back;
  };
  for (std::size_t e = 1; e <= size; ++e) {
    s.cand.clear();
    for (std::uint32_t i = s.end_at[e]; i < s.end_at[e + 1]; ++i) {
      const std::uint32_t k = s.by_end[i];
      const auto& x = s.edges[k];
      const std::uint32_t from = s.partial_at[x.start];
      if (from != s.partial_at[x.start + 1]) s.cand.push_back({s.partials[from].score + x.score, k, 0});
    }
    std::make_heap(s.cand.begin(), s.cand.end(), worse);
    for (std::size_t kept = 0; kept < n && !s.cand.empty(); ++kept) {
      std::pop_heap(s.cand.begin(), s.cand.end(), worse);
      const SpNBestSearch::Partial top = s.cand.back();
      s.partials.push_back(top);
      const auto& x = s.edges[top.edge];
      const std::uint32_t next = s.partial_at[x.start] + top.back + 1;
      if (next < s.partial_at[x.start + 1]) {
        s.cand.back() = {s.partials[next].score + x.score, top.edge, top.back + 1};
        std::push_heap(s.cand.begin(), s.cand.end(), worse);
      } else {
        s.cand.pop_back();
      }
    }
    s.partial_at[e + 1] = static_cast<std::uint32_t>(s.partials.size());
  }
  const std::uint32_t last = s.partial_at[size];
  for (std::uint32_t r = 0; r < s.partial_at[size + 1] - last; ++r) {
    out.scores.push_back(s.partials[last + r].score);
    const std::size_t first = out.pieces.size();
    std::size_t e = size;
    std::uint32_t rank = r;
    while (e > 0) {
      const auto& p = s.partials[s.partial_at[e] + rank];
      const auto& x = s.edges[p.edge];
      out.pieces.emplace_back(text.substr(x.start, x.end - x.start), x.id);
      rank = p.back;
      e = x.start;
    }
    std::reverse(out.pieces.begin() + static_cast<std::ptrdiff_t>(first), out.pieces.end());
    out.start.push_back(static_cast<std::uint32_t>(out.pieces.size()));
  }
}

void SentencePieceModel::nbest_search(std::string_view text, std::size_t n, SpNBestSearch& s) const {
  // Where no piece crosses the start of a ▁ run, the text's n best are its words' n best
  // combined: the same segmentations, with far fewer partial paths than one lattice of
  // the whole text keeps at each position.
  n = std::max<std::size_t>(n, 1);
  s.cuts.clear();
  if (ws_split_ && n > 1) {
    bool prev_other = false;  // the previous character is not ▁
    for (std::size_t k = 0; k < text.size();) {
      const bool space = text.compare(k, kSpace.size(), kSpace) == 0;
      if (space && prev_other) s.cuts.push_back(k);
      prev_other = !space;
      k += space ? kSpace.size() : std::max<std::size_t>(1, utf8_len(text.substr(k)));
    }
  }
  s.n_words = s.cuts.size() + 1;
  if (s.words.size() < s.n_words) s.words.resize(s.n_words);
  s.best.reset(n);
  for (std::size_t w = 0, b = 0; w < s.n_words; ++w) {
    const std::size_t e = w < s.cuts.size() ? s.cuts[w] : text.size();
    nbest_lattice(text.substr(b, e - b), n, s, s.words[w]);
    s.best.add(s.words[w].scores.data(), s.words[w].size());
    b = e;
  }
}

void SentencePieceModel::append_path(const SpNBestSearch& s, std::size_t r,
                                     std::vector<std::pair<std::string_view, TokenId>>& pieces) {
  std::vector<std::uint32_t> alt;
  s.best.choices(r, alt);
  for (std::size_t w = 0; w < s.n_words; ++w) {
    const SpPathSet& p = s.words[w];
    pieces.insert(pieces.end(), p.pieces.begin() + p.start[alt[w]], p.pieces.begin() + p.start[alt[w] + 1]);
  }
}

std::vector<SentencePieceModel::Path> SentencePieceModel::nbest_paths(std::string_view text, std::size_t n) const {
  SpNBestSearch& s = search_buffers();
  nbest_search(text, n, s);
  std::vector<Path> paths(s.best.scores().size());
  for (std::size_t r = 0; r < paths.size(); ++r) {
    paths[r].score = s.best.scores()[r];
    append_path(s, r, paths[r].pieces);
  }
  return paths;
}

void SentencePieceModel::nbest(std::string_view text, std::size_t n, std::vector<Segmentation>& out,
                               ModelScratch& s) const {
  out.clear();
  if (!hf_) {
    norm_.normalize(text, s.sp_text);
    text = s.sp_text;
  }
  for (const Path& path : nbest_paths(text, n)) {
    Segmentation& seg = out.emplace_back();
    seg.score = path.score;
    emit(path.pieces, seg.ids, s);
  }
}

void SentencePieceModel::sample(std::string_view text, double alpha, int nbest, Rng& rng,
                                std::vector<std::pair<std::string_view, TokenId>>& pieces) const {
  if (nbest > 1) {
    // spm's SampleEncode with nbest_size > 1: one of the n best, with probability
    // ∝ exp(alpha · score), the weights taken relative to the best (spm's absolute
    // exp underflows to all zeros on long lines; the ratios are the same).
    SpNBestSearch& s = search_buffers();
    nbest_search(text, static_cast<std::size_t>(nbest), s);
    const std::vector<double>& scores = s.best.scores();
    std::vector<double> weight(scores.size());
    double total = 0;
    for (std::size_t r = 0; r < scores.size(); ++r) total += weight[r] = std::exp(alpha * (scores[r] - scores[0]));
    double u = rng.uniform() * total, acc = 0;
    std::size_t pick = scores.size() - 1;
    for (std::size_t r = 0; r < scores.size(); ++r)
      if (u < (acc += weight[r])) {
        pick = r;
        break;
      }
    append_path(s, pick, pieces);
    return;
  }
  std::vector<LatticeEdge> edges;
  lattice(text, edges);
  // Forward: log of the summed weight of all paths to each position.
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> fwd(text.size() + 1, ninf);
  fwd[0] = 0;
  auto log_add = [](double a, double b) {
    if (a < b) std::swap(a, b);
    return b == -std::numeric_limits<double>::infinity() ? a : a + std::log1p(std::exp(b - a));
  };
  for (const auto& x : edges)  // edges are in order of their start
    if (fwd[x.start] != ninf) fwd[x.end] = log_add(fwd[x.end], fwd[x.start] + alpha * x.score);
  std::vector<std::vector<std::uint32_t>> ending(text.size() + 1);
  for (std::uint32_t k = 0; k < edges.size(); ++k) ending[edges[k].end].push_back(k);
  // Backward: draw the last piece in proportion to its weight, and so on.
  const std::size_t first = pieces.size();
  for (std::size_t e = text.size(); e > 0;) {
    double u = rng.uniform(), acc = 0;
    std::uint32_t pick = ending[e].front();
    for (std::uint32_t k : ending[e]) {
      const auto& x = edges[k];
      if (fwd[x.start] == ninf) continue;
      acc += std::exp(fwd[x.start] + alpha * x.score - fwd[e]);
      pick = k;
      if (u < acc) break;
    }
    const auto& x = edges[pick];
    pieces.emplace_back(text.substr(x.start, x.end - x.start), x.id);
    e = x.start;
  }
  std::reverse(pieces.begin() + static_cast<std::ptrdiff_t>(first), pieces.end());
}

Status SentencePieceModel::decode(const TokenId* ids, std::size_t n, std::string& out) const {
  std::size_t start = out.size();
  for (std::size_t k = 0; k < n; ++k) {
    TokenId id = ids[k];
    if (id < 0 || static_cast<std::size_t>(id) >= pieces_.size())
      return make_error(Errc::out_of_range, "token id {} is not in the vocabulary (size {})", id, pieces_.size());
    switch (types_[static_cast<std::size_t>(id)]) {
      case SpPieceType::control: continue;
      case SpPieceType::unknown: out += unk_surface_; continue;
      case SpPieceType::byte: {
        const std::string& p = pieces_[static_cast<std::size_t>(id)];
        unsigned v = 0;
        for (int j = 3; j < 5; ++j) {
          char c = p[static_cast<std::size_t>(j)];
          v = v * 16 + static_cast<unsigned>(c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 0);
        }
        out += static_cast<char>(v);
        continue;
      }
      default: break;
    }
    std::string_view p = pieces_[static_cast<std::size_t>(id)];
    for (std::size_t i = 0; i < p.size();) {
      if (p.compare(i, kSpace.size(), kSpace) == 0) {
        out += ' ';
        i += kSpace.size();
      } else {
        out += p[i++];
      }
    }
  }
  // The dummy prefix's space.
  if (norm_.add_dummy_prefix && !norm_.treat_whitespace_as_suffix && out.size() > start && out[start] == ' ')
    out.erase(start, 1);
  return {};
}

}  // namespace lmp::tok
