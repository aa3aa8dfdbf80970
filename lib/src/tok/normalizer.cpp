#include "lmpipe/tok/normalizer.h"

#include <fmt/format.h>

#include "lmpipe/core/base64.h"
#include "lmpipe/core/json.h"
#include "lmpipe/tok/pre_tokenizer.h"
#include "lmpipe/tok/sentencepiece.h"

namespace lmp::tok {

using text::SourceSpan;

namespace {

// One step's output and, per output byte, its source in the step's input.
struct StepOut {
  std::string text;
  std::vector<SourceSpan> src;
  void add(std::string_view bytes, SourceSpan from) {
    text.append(bytes);
    src.resize(text.size(), from);
  }
  void copy(std::string_view in, std::size_t b, std::size_t e) {  // bytes passed through
    text.append(in.substr(b, e - b));
    for (std::size_t k = b; k < e; ++k)
      src.push_back({static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k + 1)});
  }
};

SourceSpan span(std::size_t b, std::size_t e) {
  return {static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(e)};
}

template <class F>
void for_each_char(std::string_view s, F f) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (std::size_t i = 0; i < s.size();) {
    auto c = text::decode_utf8(p, s.size(), i);
    f(c.cp, i, i + c.len);
    i += c.len;
  }
}

bool is_space(std::uint32_t cp) { return cp < text::kInvalidBase && (text::char_class(cp) & text::kSpace); }

// Rust's char::to_lowercase per character, as HF's Lowercase: every output byte
// points at the character it came from.
void lowercase(std::string_view in, StepOut& o) {
  std::string buf;
  for_each_char(in, [&](std::uint32_t cp, std::size_t b, std::size_t e) {
    bool changes = cp < 0x80 ? cp >= 'A' && cp <= 'Z' : cp < text::kInvalidBase && (text::char_class(cp) & text::kLowerChanges);
    if (!changes) {
      o.copy(in, b, e);
      return;
    }
    buf.clear();
    text::append_lower(buf, cp);
    o.add(buf, span(b, e));
  });
}

// HF's StripAccents: every combining mark (\p{M}: Mn, Mc and Me) goes. (BertNormalizer's
// strip_accents drops only Mn.)
void strip_accents(std::string_view in, StepOut& o) {
  for_each_char(in, [&](std::uint32_t cp, std::size_t b, std::size_t e) {
    if (cp >= 0x80 && cp < text::kInvalidBase && (text::char_class(cp) & text::kMark)) return;
    o.copy(in, b, e);
  });
}

void strip(std::string_view in, bool left, bool right, StepOut& o) {
  // [b, e): from the first character that is not White_Space to the end of the last.
  std::size_t b = in.size(), e = 0;
  for_each_char(in, [&](std::uint32_t cp, std::size_t cb, std::size_t ce) {
    if (is_space(cp)) return;
    b = std::min(b, cb);
    e = ce;
  });
  if (b >= e) b = e = left ? in.size() : 0;  // all White_Space
  if (!left) b = 0;
  if (!right) e = in.size();
  o.copy(in, b, std::max(b, e));
}

// The last character of in[b, e): where HF's alignments put text that replaced it.
SourceSpan last_char(std::string_view in, std::size_t b, std::size_t e) {
  std::size_t k = e - 1;
  while (k > b && (static_cast<unsigned char>(in[k]) & 0xC0) == 0x80) --k;
  return span(k, e);
}

void replace(std::string_view in, const NormStep& st, const PreTokenizer* finder, StepOut& o) {
  std::size_t pos = 0;
  auto put = [&](std::size_t b, std::size_t e) {
    o.copy(in, pos, b);
    if (!st.content.empty()) o.add(st.content, last_char(in, b, e));
    pos = e;
  };
  if (finder) {
    thread_local std::vector<Range> matches;
    matches.clear();
    finder->split(in, matches);  // (removed + invert: the matches themselves)
    for (const Range r : matches)
      if (r.end > r.begin) put(r.begin, r.end);
  } else {
    for (std::size_t k = in.find(st.pattern); k != std::string_view::npos; k = in.find(st.pattern, pos))
      put(k, k + st.pattern.size());
  }
  o.copy(in, pos, in.size());
}

void prepend(std::string_view in, const std::string& prefix, StepOut& o) {
  if (in.empty()) return;
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  o.add(prefix, span(0, text::decode_utf8(p, in.size(), 0).len));
  o.copy(in, 0, in.size());
}

// The four Unicode forms: their step kind, their form and their name in tokenizer.json.
struct FormEntry {
  NormStep::Kind kind;
  text::NormalForm form;
  std::string_view name;
};
constexpr FormEntry kForms[] = {
    {NormStep::Kind::nfc, text::NormalForm::nfc, "NFC"},
    {NormStep::Kind::nfd, text::NormalForm::nfd, "NFD"},
    {NormStep::Kind::nfkc, text::NormalForm::nfkc, "NFKC"},
    {NormStep::Kind::nfkd, text::NormalForm::nfkd, "NFKD"},
};

const FormEntry& form_of(NormStep::Kind k) {
  for (const FormEntry& f : kForms)
    if (f.kind == k) return f;
  return kForms[0];  // (callers pass one of the four kinds)
}

}  // namespace

Normalizer::~Normalizer() = default;

Result<std::shared_ptr<const Normalizer>> Normalizer::create(std::vector<NormStep> steps) {
  std::shared_ptr<Normalizer> n(new Normalizer());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const NormStep& st = steps[i];
    std::unique_ptr<PreTokenizer> finder;
    if (st.kind == NormStep::Kind::replace) {
      if (st.pattern.empty()) return make_error(Errc::parse, "normalizer step {}: Replace of an empty pattern", i);
      if (st.regex) {
        auto f = make_regex_pre_tokenizer(st.pattern, SplitBehavior::removed, /*invert=*/true);
        if (!f.ok()) return make_error(Errc::parse, "normalizer step {}: {}", i, f.error().message);
        finder = std::move(f).value();
      }
    }
    if (st.kind == NormStep::Kind::precompiled && !st.charsmap)
      return make_error(Errc::parse, "normalizer step {}: Precompiled without a character map", i);
    n->finders_.push_back(std::move(finder));
  }
  n->steps_ = std::move(steps);
  return std::shared_ptr<const Normalizer>(std::move(n));
}

void Normalizer::apply(std::string_view in, std::string& out, std::vector<SourceSpan>* src) const {
  thread_local StepOut o;
  thread_local std::string cur;
  thread_local std::vector<SourceSpan> cur_src;
  cur.assign(in);
  if (src) {
    cur_src.resize(in.size());
    for (std::size_t k = 0; k < in.size(); ++k) cur_src[k] = span(k, k + 1);
  }
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    const NormStep& st = steps_[i];
    o.text.clear();
    o.src.clear();
    switch (st.kind) {
      case NormStep::Kind::nfc:
      case NormStep::Kind::nfd:
      case NormStep::Kind::nfkc:
      case NormStep::Kind::nfkd: {
        const text::NormalForm form = form_of(st.kind).form;
        if (src) text::normalize_aligned(cur, form, o.text, o.src);
        else o.text = text::normalize(cur, form);
        break;
      }
      case NormStep::Kind::bert:
        if (src) text::bert_normalize_aligned(cur, st.bert, o.text, o.src);
        else text::bert_normalize(cur, st.bert, o.text);
        break;
      case NormStep::Kind::lowercase: lowercase(cur, o); break;
      case NormStep::Kind::strip_accents: strip_accents(cur, o); break;
      case NormStep::Kind::strip: strip(cur, st.left, st.right, o); break;
      case NormStep::Kind::replace: replace(cur, st, finders_[i].get(), o); break;
      case NormStep::Kind::prepend: prepend(cur, st.content, o); break;
      case NormStep::Kind::precompiled: st.charsmap->apply_charsmap(cur, o.text, src ? &o.src : nullptr); break;
    }
    if (src) {  // compose: a byte from cur[b, e) came from the sources of those bytes
      for (auto& s : o.src) s = text::source_of(cur_src, s.begin, s.end);
      cur_src.swap(o.src);
    }
    cur.swap(o.text);
  }
  out.swap(cur);  // (cur and cur_src are refilled on the next call)
  if (src) src->swap(cur_src);
}

std::optional<NormStep::Kind> unicode_form_step(std::string_view hf_type) {
  for (const FormEntry& f : kForms)
    if (f.name == hf_type) return f.kind;
  return std::nullopt;
}

std::string Normalizer::to_json() const {
  std::vector<std::string> parts;
  for (const NormStep& st : steps_) {
    std::string o;
    switch (st.kind) {
      case NormStep::Kind::nfc:
      case NormStep::Kind::nfd:
      case NormStep::Kind::nfkc:
      case NormStep::Kind::nfkd: o = fmt::format(R"({{"type":"{}"}})", form_of(st.kind).name); break;
      case NormStep::Kind::lowercase: o = R"({"type":"Lowercase"})"; break;
      case NormStep::Kind::strip_accents: o = R"({"type":"StripAccents"})"; break;
      case NormStep::Kind::strip: o = fmt::format(R"({{"type":"Strip","strip_left":{},"strip_right":{}}})", st.left, st.right); break;
      case NormStep::Kind::replace:
        o = st.regex ? R"({"type":"Replace","pattern":{"Regex":)" : R"({"type":"Replace","pattern":{"String":)";
        json::append_string(o, st.pattern);
        o += R"(},"content":)";
        json::append_string(o, st.content);
        o += "}";
        break;
      case NormStep::Kind::prepend:
        o = R"({"type":"Prepend","prepend":)";
        json::append_string(o, st.content);
        o += "}";
        break;
      case NormStep::Kind::bert:
        o = fmt::format(
            R"({{"type":"BertNormalizer","clean_text":{},"handle_chinese_chars":{},"strip_accents":{},"lowercase":{}}})",
            st.bert.clean_text, st.bert.chinese_chars, st.bert.strip_accents, st.bert.lowercase);
        break;
      case NormStep::Kind::precompiled:
        o = R"({"type":"Precompiled","precompiled_charsmap":)";
        json::append_string(o, base64_encode(st.charsmap->charsmap));
        o += "}";
        break;
    }
    parts.push_back(std::move(o));
  }
  if (parts.size() == 1) return parts[0];
  return fmt::format(R"({{"type":"Sequence","normalizers":[{}]}})", fmt::join(parts, ","));
}

}  // namespace lmp::tok
