#include "lmpipe/tok/pre_tokenizer.h"
#include "lmpipe/tok/types.h"

#include <unicode/uregex.h>
#include <unicode/utext.h>

#include <algorithm>
#include <array>
#include <mutex>

#include <fmt/format.h>

#include "lmpipe/tok/byte_level.h"

#include "lmpipe/text/unicode.h"

namespace lmp::tok {

namespace {

using text::char_class;
using text::decode_utf8;

// One decoded position: its class bits, code point and byte length.
struct At {
  std::uint16_t cls;
  std::uint32_t cp;
  std::uint32_t len;
};

const std::array<std::uint16_t, 128>& ascii_classes() {
  static const std::array<std::uint16_t, 128> t = [] {
    std::array<std::uint16_t, 128> a{};
    for (std::uint32_t c = 0; c < 128; ++c) a[c] = char_class(c);
    return a;
  }();
  return t;
}

class Text {
 public:
  explicit Text(std::string_view s)
      : s_(reinterpret_cast<const unsigned char*>(s.data())), n_(s.size()), ascii_(ascii_classes()) {}
  std::size_t size() const { return n_; }
  At at(std::size_t i) const {
    unsigned c = s_[i];
    if (c < 0x80) return {ascii_[c], c, 1};
    auto d = decode_utf8(s_, n_, i);
    return {char_class(d.cp), d.cp, d.len};
  }
  unsigned char byte(std::size_t i) const { return s_[i]; }
  // End of the run of characters whose class has any bit of `any` and none of `none`.
  std::size_t run(std::size_t i, std::uint16_t any, std::uint16_t none = 0) const {
    while (i < n_) {
      At a = at(i);
      if (!(a.cls & any) || (a.cls & none)) break;
      i += a.len;
    }
    return i;
  }
  // End of the run of "other" characters: not whitespace, not a letter, not a number.
  std::size_t run_other(std::size_t i) const {
    while (i < n_) {
      At a = at(i);
      if (a.cls & (text::kSpace | text::kLetter | text::kNumber)) break;
      i += a.len;
    }
    return i;
  }
  // The contraction after an apostrophe at i: 's 't 're 've 'm 'll 'd. Returns the end or 0.
  std::size_t contraction(std::size_t i, bool ignore_case) const {
    auto lc = [&](std::size_t k) -> unsigned {
      if (k >= n_) return 0;
      unsigned c = s_[k];
      if (ignore_case && c >= 'A' && c <= 'Z') c += 32;
      return c;
    };
    unsigned a = lc(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    unsigned b = lc(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
  }
  // Whitespace run from i: its end and the start of its last character.
  void ws_run(std::size_t i, std::size_t& end, std::size_t& last_start, std::size_t& last_nl_end) const {
    last_start = i;
    last_nl_end = 0;
    while (i < n_) {
      At a = at(i);
      if (!(a.cls & text::kSpace)) break;
      last_start = i;
      i += a.len;
      if (a.cls & text::kCR_LF) last_nl_end = i;
    }
    end = i;
  }

 private:
  const unsigned char* s_;
  std::size_t n_;
  const std::array<std::uint16_t, 128>& ascii_;
};

constexpr std::uint16_t kL = text::kLetter, kN = text::kNumber, kS = text::kSpace;

// `\s+(?!\S)|\s+` at a whitespace character i.
std::size_t match_trailing_ws(const Text& t, std::size_t i) {
  std::size_t end, last, nl;
  t.ws_run(i, end, last, nl);
  if (end == t.size()) return end;
  return last > i ? last : end;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::size_t match_gpt2(const Text& t, std::size_t i) {
  At a = t.at(i);
  if (a.cp == '\'') {
    if (std::size_t e = t.contraction(i, false)) return e;
  }
  if (a.cp == ' ' && i + 1 < t.size()) {
    At b = t.at(i + 1);
    if (b.cls & kL) return t.run(i + 1, kL);
    if (b.cls & kN) return t.run(i + 1, kN);
    if (!(b.cls & (kS | kL | kN))) return t.run_other(i + 1);
  }
  if (a.cls & kL) return t.run(i, kL);
  if (a.cls & kN) return t.run(i, kN);
  if (!(a.cls & (kS | kL | kN))) return t.run_other(i);
  return match_trailing_ws(t, i);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
std::size_t match_cl100k(const Text& t, std::size_t i) {
  At a = t.at(i);
  if (a.cp == '\'') {
    if (std::size_t e = t.contraction(i, true)) return e;
  }
  if (!(a.cls & (text::kCR_LF | kL | kN)) && i + a.len < t.size()) {
    At b = t.at(i + a.len);
    if (b.cls & kL) return t.run(i + a.len, kL);
  }
  if (a.cls & kL) return t.run(i, kL);
  if (a.cls & kN) {
    std::size_t e = i;
    for (int k = 0; k < 3 && e < t.size(); ++k) {
      At d = t.at(e);
      if (!(d.cls & kN)) break;
      e += d.len;
    }
    return e;
  }
  std::size_t j = i;
  if (a.cp == ' ' && i + 1 < t.size() && !(t.at(i + 1).cls & (kS | kL | kN))) j = i + 1;
  if (j > i || !(a.cls & (kS | kL | kN))) {
    std::size_t e = t.run_other(j);
    while (e < t.size() && (t.byte(e) == '\r' || t.byte(e) == '\n')) ++e;
    return e;
  }
  std::size_t end, last, nl;
  t.ws_run(i, end, last, nl);
  if (nl) return nl;
  if (end == t.size()) return end;
  return last > i ? last : end;
}

// \w+|[^\w\s]+ keeping the matches (HF's Whitespace pre-tokenizer); \w = L, M, Nd, Pc.
constexpr std::uint16_t kWord = text::kLetter | text::kMark | text::kDigit | text::kConnector;

using Matcher = std::size_t (*)(const Text&, std::size_t);

class ScannerPreTokenizer final : public PreTokenizer {
 public:
  ScannerPreTokenizer(std::string name, std::string pattern, Matcher m)
      : name_(std::move(name)), pattern_(std::move(pattern)), m_(m) {}
  void split(std::string_view s, std::vector<Range>& out) const override {
    Text t(s);
    std::size_t i = 0;
    while (i < t.size()) {
      std::size_t e = m_(t, i);
      LMP_ASSERT(e > i);
      out.push_back({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(e)});
      i = e;
    }
  }
  std::string_view name() const override { return name_; }
  std::string_view pattern() const override { return pattern_; }

 private:
  std::string name_, pattern_;
  Matcher m_;
};

class WhitespacePreTokenizer final : public PreTokenizer {
 public:
  void split(std::string_view s, std::vector<Range>& out) const override {
    Text t(s);
    std::size_t i = 0;
    while (i < t.size()) {
      At a = t.at(i);
      std::size_t e;
      if (a.cls & kWord) {
        e = t.run(i, kWord);
      } else if (a.cls & kS) {
        i += a.len;
        continue;
      } else {
        e = i;
        while (e < t.size()) {
          At b = t.at(e);
          if (b.cls & (kWord | kS)) break;
          e += b.len;
        }
      }
      out.push_back({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(e)});
      i = e;
    }
  }
  std::string_view name() const override { return "whitespace"; }
  std::string_view pattern() const override { return kWhitespacePattern; }
};

// HF's punctuation (BertPreTokenizer, Punctuation): ASCII punctuation as Rust's
// is_ascii_punctuation has it (symbols such as $ + < = > ^ ` | ~ too), or \p{P}.
bool is_hf_punct(At a) {
  if (a.cp >= 0x80) return (a.cls & text::kPunct) != 0;
  const std::uint32_t c = a.cp;
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}

// HF's BertPreTokenizer: whitespace (White_Space) separates and is dropped; each
// punctuation character — ASCII punctuation (symbols such as $ + < = > ^ ` | ~
// included) or \p{P} — is a piece of its own.
class BertPreTokenizer final : public PreTokenizer {
 public:
  void split(std::string_view s, std::vector<Range>& out) const override {
    Text t(s);
    std::size_t i = 0, start = 0;
    auto flush = [&](std::size_t end) {
      if (end > start) out.push_back({static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(end)});
    };
    while (i < t.size()) {
      At a = t.at(i);
      bool punct = is_hf_punct(a);
      if (a.cls & kS) {
        flush(i);
        start = i + a.len;
      } else if (punct) {
        flush(i);
        out.push_back({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + a.len)});
        start = i + a.len;
      }
      i += a.len;
    }
    flush(t.size());
  }
  std::string_view name() const override { return "bert"; }
  std::string_view pattern() const override { return ""; }
};

// Words of SentencePiece-style text: a new piece starts at each ▁ (U+2581) that follows
// another character. Not HF's Metaspace pre-tokenizer: used only where no token holds
// ▁ after another character, so that BPE gives the same tokens word by word.
class MetaspaceWords final : public PreTokenizer {
 public:
  void split(std::string_view s, std::vector<Range>& out) const override {
    std::size_t start = 0, i = 0;
    bool prev_other = false;
    while (i < s.size()) {
      if (s.compare(i, kMetaspace.size(), kMetaspace) == 0) {
        if (prev_other && i > start) {
          out.push_back({static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(i)});
          start = i;
        }
        prev_other = false;
        i += kMetaspace.size();
      } else {
        prev_other = true;
        ++i;
      }
    }
    if (s.size() > start) out.push_back({static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(s.size())});
  }
  std::string_view name() const override { return "metaspace-words"; }
  std::string_view pattern() const override { return ""; }
};

// HF's Metaspace pre-tokenizer with split: every ▁ starts a new piece (MergedWithNext).
class MetaspaceSplit final : public PreTokenizer {
 public:
  void split(std::string_view s, std::vector<Range>& out) const override {
    std::size_t start = 0;
    for (std::size_t i = s.find(kMetaspace, 1); i != std::string_view::npos; i = s.find(kMetaspace, i + 1)) {
      if (i > start) out.push_back({static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(i)});
      start = i;
    }
    if (s.size() > start) out.push_back({static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(s.size())});
  }
  std::string_view name() const override { return "metaspace"; }
  std::string_view pattern() const override { return ""; }
};

class NoPreTokenizer final : public PreTokenizer {
 public:
  void split(std::string_view s, std::vector<Range>& out) const override {
    if (!s.empty()) out.push_back({0, static_cast<std::uint32_t>(s.size())});
  }
  std::string_view name() const override { return "none"; }
  std::string_view pattern() const override { return ""; }
};

// ---- splits by matches: HF's NormalizedString::split -------------------------------

// A stretch of the text and whether the pattern matched it. A split's segments cover the
// text in order; each match is one segment, the text between two matches another.
struct Segment {
  std::uint32_t begin, end;
  bool match;
};

// The pieces HF keeps of `segs` under `b` (empty pieces dropped, as HF drops them):
//   isolated: every segment;  removed: the non-matches;
//   merged_with_previous: a match joins the segment before it, unless that is a match;
//   merged_with_next: a match joins the segment after it, unless that is a match;
//   contiguous: each run of matches, and of non-matches, is one piece.
void emit_segments(const std::vector<Segment>& segs, SplitBehavior b, std::vector<Range>& out) {
  const std::size_t first = out.size();
  auto push = [&](std::uint32_t begin, std::uint32_t end) { out.push_back({begin, end}); };
  bool prev = false;  // whether the segment before (after, for merged_with_next) matched
  switch (b) {
    case SplitBehavior::isolated:
      for (const Segment& g : segs) push(g.begin, g.end);
      break;
    case SplitBehavior::removed:
      for (const Segment& g : segs)
        if (!g.match) push(g.begin, g.end);
      break;
    case SplitBehavior::merged_with_previous:
      for (const Segment& g : segs) {
        if (g.match && !prev && out.size() > first) out.back().end = g.end;
        else push(g.begin, g.end);
        prev = g.match;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (std::size_t k = segs.size(); k-- > 0;) {
        const Segment& g = segs[k];
        if (g.match && !prev && out.size() > first) out.back().begin = g.begin;
        else push(g.begin, g.end);
        prev = g.match;
      }
      std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
      break;
    case SplitBehavior::contiguous:
      for (const Segment& g : segs) {
        if (g.match == prev && out.size() > first) out.back().end = g.end;
        else push(g.begin, g.end);
        prev = g.match;
      }
      break;
  }
  out.erase(std::remove_if(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
                           [](const Range& r) { return r.end == r.begin; }),
            out.end());
}

// HF's pre-tokenizers that split by a character class (make_char_split_pre_tokenizer).
class CharSplitPreTokenizer final : public PreTokenizer {
 public:
  CharSplitPreTokenizer(CharSplit kind, SplitBehavior b, char32_t delimiter)
      : kind_(kind), behavior_(b), delimiter_(delimiter) {
    // Name and the same split as a regex, by kind (the delimiter's regex is its code point).
    static constexpr std::pair<const char*, const char*> kNames[] = {
        {"punctuation", R"([\p{P}\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}])"},
        {"digits", R"(\p{N})"},
        {"whitespace-split", R"(\s)"},
        {"char-delimiter", ""}};
    const auto& [name, pattern] = kNames[static_cast<int>(kind)];
    name_ = name;
    pattern_ = kind == CharSplit::delimiter ? fmt::format(R"(\x{{{:X}}})", static_cast<std::uint32_t>(delimiter))
                                            : std::string(pattern);
  }
  void split(std::string_view s, std::vector<Range>& out) const override {
    Text t(s);
    thread_local std::vector<Segment> segs;  // (a leaf split: never re-entered)
    segs.clear();
    std::uint32_t pos = 0;  // start of the run of non-matching characters
    for (std::size_t i = 0; i < t.size();) {
      At a = t.at(i);
      auto b = static_cast<std::uint32_t>(i), e = static_cast<std::uint32_t>(i + a.len);
      if (holds(a)) {
        if (b > pos) segs.push_back({pos, b, false});
        segs.push_back({b, e, true});
        pos = e;
      }
      i = e;
    }
    if (pos < t.size()) segs.push_back({pos, static_cast<std::uint32_t>(t.size()), false});
    emit_segments(segs, behavior_, out);
  }
  std::string_view name() const override { return name_; }
  std::string_view pattern() const override { return pattern_; }
  SplitBehavior behavior() const override { return behavior_; }
  CharSplit kind() const { return kind_; }

 private:
  bool holds(At a) const {
    switch (kind_) {
      case CharSplit::punctuation: return is_hf_punct(a);
      case CharSplit::numeric: return (a.cls & text::kNumber) != 0;
      case CharSplit::whitespace: return (a.cls & text::kSpace) != 0;
      case CharSplit::delimiter: return a.cp == delimiter_;
    }
    return false;
  }

  CharSplit kind_;
  SplitBehavior behavior_;
  char32_t delimiter_;
  std::string name_, pattern_;
};

// A split placed after HF's ByteLevel: it sees each byte as its byte-level character.
class ByteLevelView final : public PreTokenizer {
 public:
  explicit ByteLevelView(std::unique_ptr<PreTokenizer> inner)
      : inner_(std::move(inner)), name_("byte-level " + std::string(inner_->name())) {
    auto* c = dynamic_cast<const CharSplitPreTokenizer*>(inner_.get());
    ascii_same_ = c && (c->kind() == CharSplit::numeric || c->kind() == CharSplit::punctuation);
  }
  void split(std::string_view s, std::vector<Range>& out) const override {
    // Bytes '!'..'~' are their own characters: such a piece is its own view. For digits
    // and punctuation any ASCII piece is: the other ASCII bytes (space, controls) become
    // letters (Ā … Ġ, ġ), no more digits or punctuation than they were.
    bool same = true;
    if (ascii_same_) {
      for (unsigned char c : s) same = same && c < 0x80;
    } else {
      for (unsigned char c : s) same = same && c >= 0x21 && c <= 0x7E;
    }
    if (same) {
      inner_->split(s, out);
      return;
    }
    // (Its inner split is a leaf, so these are never in use twice on a thread.)
    thread_local std::string view;
    thread_local std::vector<std::uint32_t> back;  // view offset → offset in s, at each character start
    thread_local std::vector<Range> part;
    view.clear();
    back.clear();
    part.clear();
    for (std::size_t i = 0; i < s.size(); ++i) {
      std::uint32_t cp = byte_to_unicode(static_cast<unsigned char>(s[i]));
      std::size_t at = view.size();
      text::append_utf8(view, cp);
      back.resize(view.size(), 0);
      back[at] = static_cast<std::uint32_t>(i);
    }
    back.push_back(static_cast<std::uint32_t>(s.size()));
    inner_->split(view, part);
    for (const Range r : part) out.push_back({back[r.begin], back[r.end]});
  }
  std::string_view name() const override { return name_; }
  std::string_view pattern() const override { return inner_->pattern(); }
  SplitBehavior behavior() const override { return inner_->behavior(); }
  bool invert() const override { return inner_->invert(); }

 private:
  std::unique_ptr<PreTokenizer> inner_;
  std::string name_;
  bool ascii_same_ = false;
};

// ---- ICU regex engine ------------------------------------------------------------

// Rewrite \s and \S to White_Space, the meaning Oniguruma and Rust's regex give them
// (ICU's \s omits U+000B and U+0085).
std::string to_icu_pattern(std::string_view p) {
  std::string out;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      char c = p[i + 1];
      if (c == 's') out += "\\p{White_Space}";
      else if (c == 'S') out += "\\P{White_Space}";
      else {
        out += p[i];
        out += c;
      }
      ++i;
    } else {
      out += p[i];
    }
  }
  return out;
}

class IcuRegexPreTokenizer final : public PreTokenizer {
 public:
  static Result<std::unique_ptr<PreTokenizer>> create(std::string_view pattern, SplitBehavior b, bool invert) {
    std::string icu = to_icu_pattern(pattern);
    UErrorCode st = U_ZERO_ERROR;
    UParseError pe{};
    UText* pt = utext_openUTF8(nullptr, icu.data(), static_cast<int64_t>(icu.size()), &st);
    URegularExpression* re = uregex_openUText(pt, 0, &pe, &st);
    utext_close(pt);
    if (U_FAILURE(st))
      return make_error(Errc::parse, "invalid regex '{}' (at offset {}): {}", pattern, pe.offset,
                        u_errorName(st));
    std::unique_ptr<IcuRegexPreTokenizer> p(new IcuRegexPreTokenizer());
    p->proto_ = re;
    p->pattern_ = std::string(pattern);
    p->behavior_ = b;
    p->invert_ = invert;
    return std::unique_ptr<PreTokenizer>(std::move(p));
  }
  ~IcuRegexPreTokenizer() override {
    for (URegularExpression* c : pool_) uregex_close(c);
    uregex_close(proto_);
  }

  void split(std::string_view s, std::vector<Range>& out) const override {
    if (s.empty()) return;
    URegularExpression* re = acquire();
    UErrorCode st = U_ZERO_ERROR;
    UText* ut = utext_openUTF8(nullptr, s.data(), static_cast<int64_t>(s.size()), &st);
    uregex_setUText(re, ut, &st);
    LMP_ASSERT(U_SUCCESS(st));
    // The matches and the text between them, as HF's find_matches gives them.
    thread_local std::vector<Segment> segs;  // (a leaf split: never re-entered)
    segs.clear();
    std::uint32_t pos = 0;
    while (uregex_findNext(re, &st)) {
      auto b = static_cast<std::uint32_t>(uregex_start64(re, 0, &st));
      auto e = static_cast<std::uint32_t>(uregex_end64(re, 0, &st));
      if (e == b) continue;
      if (b > pos) segs.push_back({pos, b, invert_});
      segs.push_back({b, e, !invert_});
      pos = e;
    }
    utext_close(ut);
    release(re);
    if (pos < s.size()) segs.push_back({pos, static_cast<std::uint32_t>(s.size()), invert_});
    emit_segments(segs, behavior_, out);
  }
  std::string_view name() const override { return "regex"; }
  std::string_view pattern() const override { return pattern_; }
  SplitBehavior behavior() const override { return behavior_; }
  bool invert() const override { return invert_; }

 private:
  IcuRegexPreTokenizer() = default;

  // A URegularExpression is not thread-safe: each call borrows a clone from a pool.
  URegularExpression* acquire() const {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!pool_.empty()) {
        URegularExpression* c = pool_.back();
        pool_.pop_back();
        return c;
      }
    }
    UErrorCode st = U_ZERO_ERROR;
    URegularExpression* c = uregex_clone(proto_, &st);
    LMP_ASSERT(U_SUCCESS(st));
    return c;
  }
  void release(URegularExpression* c) const {
    std::lock_guard<std::mutex> lock(mu_);
    pool_.push_back(c);
  }

  URegularExpression* proto_ = nullptr;
  mutable std::mutex mu_;
  mutable std::vector<URegularExpression*> pool_;
  std::string pattern_;
  SplitBehavior behavior_ = SplitBehavior::isolated;
  bool invert_ = false;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void split(std::string_view text, std::vector<Range>& out) const override {
    // Steps are leaves (make_sequence_pre_tokenizer flattens), so a thread's buffers are
    // never in use twice.
    thread_local std::vector<Range> cur, next, part;
    cur.clear();
    steps_[0]->split(text, cur);
    for (std::size_t k = 1; k < steps_.size(); ++k) {
      next.clear();
      for (const Range r : cur) {
        part.clear();
        steps_[k]->split(text.substr(r.begin, r.end - r.begin), part);
        for (const Range q : part) next.push_back({r.begin + q.begin, r.begin + q.end});
      }
      cur.swap(next);
    }
    out.insert(out.end(), cur.begin(), cur.end());
  }
  std::string_view name() const override { return "sequence"; }
  std::string_view pattern() const override { return ""; }
  std::vector<const PreTokenizer*> steps() const override {
    std::vector<const PreTokenizer*> v;
    for (const auto& s : steps_) v.push_back(s.get());
    return v;
  }
  std::vector<std::unique_ptr<PreTokenizer>> take_steps() { return std::move(steps_); }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) {
  LMP_ASSERT(!steps.empty());
  // Flat: a sequence among the steps gives its own steps.
  std::vector<std::unique_ptr<PreTokenizer>> flat;
  for (auto& step : steps) {
    if (auto* seq = dynamic_cast<SequencePreTokenizer*>(step.get())) {
      for (auto& inner : seq->take_steps()) flat.push_back(std::move(inner));
    } else {
      flat.push_back(std::move(step));
    }
  }
  if (flat.size() == 1) return std::move(flat[0]);
  return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(flat)));
}

Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(std::string_view name) {
  constexpr std::string_view kDigits = "+digits";
  if (name.size() > kDigits.size() && name.substr(name.size() - kDigits.size()) == kDigits) {
    LMP_ASSIGN(auto base, make_pre_tokenizer(name.substr(0, name.size() - kDigits.size())));
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    steps.push_back(make_char_split_pre_tokenizer(CharSplit::numeric, SplitBehavior::isolated));
    steps.push_back(std::move(base));
    return make_sequence_pre_tokenizer(std::move(steps));
  }
  if (name == "gpt2")
    return std::unique_ptr<PreTokenizer>(
        new ScannerPreTokenizer("gpt2", std::string(kGpt2Pattern), match_gpt2));
  if (name == "cl100k" || name == "llama3")
    return std::unique_ptr<PreTokenizer>(
        new ScannerPreTokenizer(std::string(name), std::string(kCl100kPattern), match_cl100k));
  if (name == "o200k") return make_icu_regex_pre_tokenizer(kO200kPattern);
  if (name == "whitespace") return std::unique_ptr<PreTokenizer>(new WhitespacePreTokenizer());
  if (name == "whitespace-split") return make_char_split_pre_tokenizer(CharSplit::whitespace, SplitBehavior::removed);
  if (name == "none") return std::unique_ptr<PreTokenizer>(new NoPreTokenizer());
  if (name == "bert") return std::unique_ptr<PreTokenizer>(new BertPreTokenizer());
  if (name == "metaspace-words") return std::unique_ptr<PreTokenizer>(new MetaspaceWords());
  if (name == "metaspace") return std::unique_ptr<PreTokenizer>(new MetaspaceSplit());
  return make_error(Errc::invalid_argument,
                    "unknown pre-tokenizer '{}' (known: gpt2, cl100k, llama3, o200k, whitespace, whitespace-split, bert, none, "
                    "each with +digits)",
                    name);
}

std::unique_ptr<PreTokenizer> make_char_split_pre_tokenizer(CharSplit kind, SplitBehavior behavior,
                                                            char32_t delimiter) {
  return std::unique_ptr<PreTokenizer>(new CharSplitPreTokenizer(kind, behavior, delimiter));
}

std::unique_ptr<PreTokenizer> make_byte_level_view(std::unique_ptr<PreTokenizer> inner) {
  if (auto* seq = dynamic_cast<SequencePreTokenizer*>(inner.get())) {  // views of its steps
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (auto& step : seq->take_steps()) steps.push_back(make_byte_level_view(std::move(step)));
    return make_sequence_pre_tokenizer(std::move(steps));
  }
  LMP_ASSERT(dynamic_cast<ByteLevelView*>(inner.get()) == nullptr);  // (no view of a view)
  return std::unique_ptr<PreTokenizer>(new ByteLevelView(std::move(inner)));
}

Result<std::unique_ptr<PreTokenizer>> make_regex_pre_tokenizer(std::string_view pattern,
                                                               SplitBehavior behavior, bool invert) {
  if (!invert && pattern == R"(\p{N})")  // lmpipe's own digits split, written back
    return make_char_split_pre_tokenizer(CharSplit::numeric, behavior);
  if (behavior == SplitBehavior::isolated && !invert) {
    if (pattern == kGpt2Pattern) return make_pre_tokenizer("gpt2");
    if (pattern == kCl100kPattern) return make_pre_tokenizer("cl100k");
  }
  return make_icu_regex_pre_tokenizer(pattern, behavior, invert);
}

Result<std::unique_ptr<PreTokenizer>> make_icu_regex_pre_tokenizer(std::string_view pattern,
                                                                   SplitBehavior behavior, bool invert) {
  return IcuRegexPreTokenizer::create(pattern, behavior, invert);
}

}  // namespace lmp::tok
