// Tokenizer files: HF tokenizer.json, GPT-2 vocab.json + merges.txt, tiktoken ranks.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <unordered_map>

#include "lmpipe/core/base64.h"
#include "lmpipe/core/io.h"
#include "lmpipe/core/json.h"
#include "lmpipe/core/mmap.h"
#include "lmpipe/core/string_map.h"
#include "lmpipe/text/unicode.h"
#include "lmpipe/tok/byte_level.h"
#include "lmpipe/tok/tokenizer.h"
#include "lmpipe/tensor_io/tensor_file.h"
#include "lmpipe/tok/gguf_tokenizer.h"
#include "lmpipe/tok/sentencepiece.h"
#include "lmpipe/tok/wordpiece.h"

namespace lmp::tok {

namespace {

std::string basename_of(const std::string& path) {
  auto p = path.find_last_of('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}

std::string quote(std::string_view s) {
  std::string out;
  json::append_string(out, s);
  return out;
}

// The lines of a text file, numbered from 1, each without its "\n" or "\r\n".
class Lines {
 public:
  explicit Lines(std::string_view text) : text_(text) {}
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    std::size_t nl = text_.find('\n', pos_);
    if (nl == std::string_view::npos) nl = text_.size();
    line = text_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    ++number_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return true;
  }
  std::size_t number() const { return number_; }

 private:
  std::string_view text_;
  std::size_t pos_ = 0, number_ = 0;
};

// Byte-level vocabulary text → raw bytes; text outside the 256 characters stays as is
// (HF's ByteLevel decoder does the same).
void vocab_bytes(std::string_view text, std::string& out) {
  if (!byte_level_to_bytes(text, out)) out.assign(text);
}

// ---- tokenizer.json ---------------------------------------------------------------

struct PreSpec {
  std::unique_ptr<PreTokenizer> pre;
  bool prefix_space = false;
  bool byte_level = false;        // a ByteLevel step was read (later steps see its characters)
  bool allow_byte_level = true;   // false for WordPiece
};

Result<SplitBehavior> parse_behavior(json::Value v) {
  std::string_view b = v.is_string() ? v.str() : "Isolated";
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  return make_error(Errc::unsupported, "{}: split behavior '{}' is not supported", v.where(), b);
}

std::string regex_quote(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

Status parse_pre_step(json::Value v, PreSpec& spec) {
  if (v.is_null()) return {};
  if (!v.is_object()) return make_error(Errc::parse, "{}: pre_tokenizer must be an object", v.where());
  std::string_view type = v.get("type").str();
  // Splits in a Sequence apply in turn, each to the pieces of the one before; those after
  // a ByteLevel step see the byte-level characters it made.
  auto set_split = [&](std::unique_ptr<PreTokenizer> p) -> Status {
    if (spec.byte_level) p = make_byte_level_view(std::move(p));
    if (spec.pre) {
      std::vector<std::unique_ptr<PreTokenizer>> steps;
      steps.push_back(std::move(spec.pre));
      steps.push_back(std::move(p));
      spec.pre = make_sequence_pre_tokenizer(std::move(steps));
    } else {
      spec.pre = std::move(p);
    }
    return {};
  };
  auto char_split = [&](CharSplit kind, SplitBehavior b, char32_t delimiter = 0) {
    return set_split(make_char_split_pre_tokenizer(kind, b, delimiter));
  };
  if (type == "Sequence") {
    json::Value list = v.get("pretokenizers");
    if (!list.is_array()) return make_error(Errc::parse, "{}: Sequence without pretokenizers", v.where());
    for (std::size_t i = 0; i < list.size(); ++i) LMP_TRY(parse_pre_step(list[i], spec));
    return {};
  }
  if (type == "ByteLevel") {
    if (!spec.allow_byte_level)
      return make_error(Errc::unsupported, "{}: a ByteLevel pre-tokenizer in a WordPiece tokenizer", v.where());
    if (spec.byte_level) return make_error(Errc::unsupported, "{}: a second ByteLevel pre-tokenizer", v.where());
    json::Value aps = v.get("add_prefix_space");
    spec.prefix_space = aps.is_bool() ? aps.boolean() : true;
    // HF adds the space to every piece the steps before made, lmpipe once per text.
    if (spec.prefix_space && spec.pre)
      return make_error(Errc::unsupported,
                        "{}: ByteLevel with add_prefix_space after another pre-tokenizer (a space before every "
                        "piece) is not supported",
                        v.where());
    json::Value ur = v.get("use_regex");
    bool use_regex = ur.is_bool() ? ur.boolean() : true;
    if (use_regex) {
      LMP_ASSIGN(auto p, make_pre_tokenizer("gpt2"));
      LMP_TRY(set_split(std::move(p)));
    }
    spec.byte_level = true;
    return {};
  }
  if (type == "Split") {
    json::Value pat = v.get("pattern");
    json::Value inv = v.get("invert");
    bool invert = inv.is_bool() && inv.boolean();
    LMP_ASSIGN(SplitBehavior beh, parse_behavior(v.get("behavior")));
    std::string regex;
    if (pat.get("Regex").is_string()) regex = std::string(pat.get("Regex").str());
    else if (pat.get("String").is_string()) regex = regex_quote(pat.get("String").str());
    else return make_error(Errc::parse, "{}: Split pattern needs a Regex or a String", v.where());
    auto p = make_regex_pre_tokenizer(regex, beh, invert);
    if (!p.ok()) return with_context(std::move(p).error(), v.where());
    return set_split(std::move(p).value());
  }
  if (type == "Whitespace") {
    LMP_ASSIGN(auto p, make_pre_tokenizer("whitespace"));
    return set_split(std::move(p));
  }
  if (type == "BertPreTokenizer") {
    LMP_ASSIGN(auto p, make_pre_tokenizer("bert"));
    return set_split(std::move(p));
  }
  if (type == "WhitespaceSplit") return char_split(CharSplit::whitespace, SplitBehavior::removed);
  if (type == "Punctuation") {
    LMP_ASSIGN(SplitBehavior beh, parse_behavior(v.get("behavior")));
    return char_split(CharSplit::punctuation, beh);
  }
  if (type == "Digits") {
    json::Value ind = v.get("individual_digits");
    bool individual = ind.is_bool() && ind.boolean();
    return char_split(CharSplit::numeric, individual ? SplitBehavior::isolated : SplitBehavior::contiguous);
  }
  if (type == "CharDelimiterSplit") {
    json::Value d = v.get("delimiter");
    std::string_view ds = d.is_string() ? d.str() : std::string_view();
    text::CodePoint c{0, 0};
    if (!ds.empty()) c = text::decode_utf8(reinterpret_cast<const unsigned char*>(ds.data()), ds.size(), 0);
    if (ds.empty() || c.len != ds.size() || c.cp >= text::kInvalidBase)
      return make_error(Errc::parse, "{}: CharDelimiterSplit needs a delimiter of one character", v.where());
    return char_split(CharSplit::delimiter, SplitBehavior::removed, static_cast<char32_t>(c.cp));
  }
  return make_error(Errc::unsupported,
                    "{}: pre-tokenizer type '{}' is not supported here (ByteLevel, Split, Whitespace, "
                    "WhitespaceSplit, BertPreTokenizer, Punctuation, Digits, CharDelimiterSplit and Sequences "
                    "of them are)",
                    v.where(), type);
}

text::BertNormalization parse_bert_normalizer(json::Value v) {
  text::BertNormalization b;
  auto flag = [&](const char* k, bool dflt) { return v.get(k).is_bool() ? v.get(k).boolean() : dflt; };
  b.clean_text = flag("clean_text", true);
  b.chinese_chars = flag("handle_chinese_chars", true);
  b.lowercase = flag("lowercase", true);
  b.strip_accents = flag("strip_accents", b.lowercase);  // null: follows lowercase
  return b;
}

// The steps of a normalizer, a Sequence flattened.
Status normalizer_steps(json::Value v, std::vector<NormStep>& out) {
  if (v.is_null()) return {};
  if (!v.is_object()) return make_error(Errc::parse, "{}: a normalizer must be an object", v.where());
  std::string_view type = v.get("type").str();
  using K = NormStep::Kind;
  NormStep st;
  auto flag = [&](const char* k, bool dflt) { return v.get(k).is_bool() ? v.get(k).boolean() : dflt; };
  auto string_of = [&](const char* k) -> Result<std::string> {
    if (!v.get(k).is_string()) return make_error(Errc::parse, "{}: {} needs a string '{}'", v.where(), type, k);
    return std::string(v.get(k).str());
  };
  if (type == "Sequence") {
    json::Value list = v.get("normalizers");
    if (!list.is_array()) return make_error(Errc::parse, "{}: a Sequence needs a 'normalizers' array", v.where());
    for (std::size_t i = 0; i < list.size(); ++i) LMP_TRY(normalizer_steps(list[i], out));
    return {};
  }
  if (auto form = unicode_form_step(type)) st.kind = *form;
  else if (type == "Lowercase") st.kind = K::lowercase;
  else if (type == "StripAccents") st.kind = K::strip_accents;
  else if (type == "Strip") {
    st.kind = K::strip;
    st.left = flag("strip_left", true);
    st.right = flag("strip_right", true);
  } else if (type == "Prepend") {
    st.kind = K::prepend;
    LMP_ASSIGN(st.content, string_of("prepend"));
  } else if (type == "Replace") {
    st.kind = K::replace;
    json::Value pat = v.get("pattern");
    if (pat.get("String").is_string()) {
      st.pattern = std::string(pat.get("String").str());
    } else if (pat.get("Regex").is_string()) {
      st.pattern = std::string(pat.get("Regex").str());
      st.regex = true;
    } else {
      return make_error(Errc::parse, "{}: Replace needs a pattern {{\"String\": …}} or {{\"Regex\": …}}", v.where());
    }
    LMP_ASSIGN(st.content, string_of("content"));
  } else if (type == "BertNormalizer") {
    st.kind = K::bert;
    st.bert = parse_bert_normalizer(v);
  } else if (type == "Precompiled") {
    st.kind = K::precompiled;
    LMP_ASSIGN(std::string text, string_of("precompiled_charsmap"));
    std::string blob;
    if (!base64_decode(text, blob)) return make_error(Errc::parse, "{}: precompiled_charsmap is not base64", v.where());
    auto cm = std::make_shared<SpNormalizer>();
    LMP_TRY(cm->load_charsmap(blob, v.where()));
    st.charsmap = std::move(cm);
  } else {
    return make_error(Errc::unsupported,
                      "{}: normalizer type '{}' is not supported here (NFC, NFD, NFKC, NFKD, Lowercase, "
                      "StripAccents, Strip, Replace, Prepend, BertNormalizer, Precompiled and Sequence are)",
                      v.where(), type);
  }
  out.push_back(std::move(st));
  return {};
}

// The normalizer of a byte-level BPE or WordPiece file into `spec`: one Unicode form or a
// BertNormalizer alone as before (their own fast paths), any other chain as a Normalizer.
Status parse_normalizer(json::Value v, TokenizerSpec& spec) {
  std::vector<NormStep> steps;
  LMP_TRY(normalizer_steps(v, steps));
  if (steps.empty()) return {};
  if (steps.size() == 1 && steps[0].kind == NormStep::Kind::nfc) spec.norm = Normalization::nfc;
  else if (steps.size() == 1 && steps[0].kind == NormStep::Kind::nfkc) spec.norm = Normalization::nfkc;
  else if (steps.size() == 1 && steps[0].kind == NormStep::Kind::bert) spec.bert = steps[0].bert;
  else {
    auto n = Normalizer::create(std::move(steps));
    if (!n.ok()) return with_context(std::move(n).error(), v.where());
    spec.normalizer = std::move(n).value();
  }
  return {};
}

Result<std::vector<AddedToken>> parse_added(json::Value list) {
  std::vector<AddedToken> out;
  if (list.is_null()) return out;
  if (!list.is_array()) return make_error(Errc::parse, "{}: added_tokens must be an array", list.where());
  for (std::size_t i = 0; i < list.size(); ++i) {
    json::Value a = list[i];
    AddedToken t;
    auto id = a.get("id").integer();
    if (!id || *id < 0 || *id > 0x7FFFFFFF || !a.get("content").is_string())
      return make_error(Errc::parse, "{}: added token needs an id and a content", a.where());
    t.id = static_cast<TokenId>(*id);
    t.content = std::string(a.get("content").str());
    auto flag = [&](const char* k) { return a.get(k).is_bool() && a.get(k).boolean(); };
    t.special = flag("special");
    t.single_word = flag("single_word");
    t.lstrip = flag("lstrip");
    t.rstrip = flag("rstrip");
    t.normalized = flag("normalized");
    out.push_back(std::move(t));
  }
  return out;
}

// A token → id object (model.vocab, vocab.json): `tokens[id]` holds the raw bytes,
// `text_ids` maps the file's token text to its id. Entries for which `special(id, text)`
// holds are added tokens, matched in text before the model; they keep their bytes in
// the model only when their text is byte-level text (as HF's vocabulary lookup would
// find them: a merge can produce such a token). Ids are checked before anything is
// allocated: a lying file cannot make us allocate in proportion to its largest id.
//
// A byte-level vocabulary whose every key is the byte-level text of some bytes (GPT-2,
// Llama-3, Qwen: all of them) is indexed once, by bytes: that text and the bytes are one
// to one, so an index of the bytes answers every lookup of a key's text exactly (a text
// that is not byte-level text is no key), and the model reuses it. Otherwise the keys
// are indexed as text, and the model indexes its bytes again.
struct Vocab {
  std::vector<std::string> tokens;
  StringIdMap text_ids;   // when !by_bytes
  StringIdMap byte_ids;   // when by_bytes: views into tokens
  bool by_bytes = false;
};

template <class Special>
Status parse_vocab(json::Value vocab, Vocab& v, Special&& special, bool byte_level = true, int threads = 1,
                   bool allow_by_bytes = false) {
  const std::size_t n = vocab.size();
  std::vector<TokenId> ids(n);
  std::int64_t max_id = -1;
  for (std::size_t i = 0; i < n; ++i) {
    auto id = vocab.val(i).integer();
    if (!id || *id < 0 || *id >= (std::int64_t{1} << 31) - 1)
      return make_error(Errc::parse, "{}: id of {} must be a non-negative integer", vocab.val(i).where(),
                        quote(vocab.key(i).str()));
    max_id = std::max(max_id, *id);
    ids[i] = static_cast<TokenId>(*id);
  }
  if (max_id >= static_cast<std::int64_t>(n) * 4 + 1024)
    return make_error(Errc::parse, "{}: vocab ids are too sparse (largest id {} for {} tokens)", vocab.where(),
                      max_id, n);
  // The first entry in file order that repeats an id or a key is the error.
  std::size_t bad = n;
  std::vector<bool> used(static_cast<std::size_t>(max_id + 1), false);
  for (std::size_t i = 0; i < n && bad == n; ++i) {
    if (used[static_cast<std::size_t>(ids[i])]) bad = i;
    used[static_cast<std::size_t>(ids[i])] = true;
  }
  std::vector<std::string_view> keys(n);
  for (std::size_t i = 0; i < n; ++i) keys[i] = vocab.key(i).str();
  v.tokens.assign(static_cast<std::size_t>(max_id + 1), std::string());
  std::vector<std::uint8_t> inserted;
  if (allow_by_bytes && byte_level && bad == n) {
    // Every key byte-level text (and not empty)? Then the bytes are the index. (`special`
    // is not asked: a special token's bytes are its byte-level text's too.)
    std::atomic<bool> pure{true};
    parallel_ranges(n, threads, [&](std::size_t b, std::size_t e, std::size_t) {
      bool ok = true;
      for (std::size_t i = b; i < e && ok; ++i)  // (ids are distinct: each thread fills its own tokens)
        ok = !keys[i].empty() && byte_level_to_bytes(keys[i], v.tokens[static_cast<std::size_t>(ids[i])]);
      if (!ok) pure.store(false, std::memory_order_relaxed);
    });
    if (pure.load()) {
      for (std::size_t i = 0; i < n; ++i) keys[i] = v.tokens[static_cast<std::size_t>(ids[i])];  // (reused)
      v.byte_ids.insert_all(keys, ids.data(), inserted, threads);
      for (std::size_t i = 0; i < n; ++i)
        if (!inserted[i]) {  // equal bytes: equal keys
          return make_error(Errc::parse, "{}: duplicate vocab entry {}", vocab.key(i).where(),
                            quote(vocab.key(i).str()));
        }
      v.by_bytes = true;
      return {};
    }
  }
  v.text_ids.insert_all(keys, ids.data(), inserted, threads);
  for (std::size_t i = 0; i < bad; ++i)
    if (!inserted[i]) {
      return make_error(Errc::parse, "{}: duplicate vocab entry {}", vocab.key(i).where(), quote(keys[i]));
    }
  if (bad < n) return make_error(Errc::parse, "{}: id {} is given to two tokens", vocab.val(bad).where(), ids[bad]);
  parallel_ranges(n, threads, [&](std::size_t b, std::size_t e, std::size_t) {
    for (std::size_t i = b; i < e; ++i) {  // (ids are distinct: each thread fills its own tokens)
      std::string& bytes = v.tokens[static_cast<std::size_t>(ids[i])];
      if (!byte_level) bytes.assign(keys[i]);
      else if (!special(ids[i], keys[i])) vocab_bytes(keys[i], bytes);
      else if (!byte_level_to_bytes(keys[i], bytes)) bytes.clear();
    }
  });
  return {};
}

// Added tokens may take ids past the model's (Llama-3: 128000..128255), but not far past:
// the tokenizer keeps a table as long as the largest id.
Status check_added_ids(const std::vector<AddedToken>& added, std::size_t n_model, std::string_view where) {
  std::size_t limit = n_model + added.size() + 1024;
  for (const auto& a : added)
    if (static_cast<std::size_t>(a.id) >= limit)
      return make_error(Errc::parse, "{}: added token {} has id {}, far beyond the vocabulary ({} tokens)", where,
                        quote(a.content), a.id, n_model);
  return {};
}

// One merge given as the text of two tokens: their ids, or an error located by
// `where()` — called only on error (locating a JSON node scans the file up to it).
template <class Where>
Result<std::pair<TokenId, TokenId>> resolve_merge(const StringIdMap& ids, std::string_view a, std::string_view b,
                                                  Where&& where, std::size_t rank) {
  TokenId ia = ids.find(a), ib = ids.find(b);
  if (ia < 0) return make_error(Errc::parse, "{}: merge {}: token {} is not in the vocabulary", where(), rank, quote(a));
  if (ib < 0) return make_error(Errc::parse, "{}: merge {}: token {} is not in the vocabulary", where(), rank, quote(b));
  return std::pair<TokenId, TokenId>{ia, ib};
}

// "a b" → (a, b); nullopt unless exactly one space separates two non-empty tokens.
std::optional<std::pair<std::string_view, std::string_view>> split_merge(std::string_view s) {
  std::size_t sp = std::string_view::npos;
  for (std::size_t i = 0; i < s.size(); ++i)  // (merges are short: one pass, no calls)
    if (s[i] == ' ') {
      if (sp != std::string_view::npos) return std::nullopt;
      sp = i;
    }
  if (sp == std::string_view::npos || sp == 0 || sp + 1 == s.size()) return std::nullopt;
  return std::pair{s.substr(0, sp), s.substr(sp + 1)};
}

// The parser keeps model.merges as raw text, read in place by MergeReader: no DOM node
// for each of Llama-3's 280k merges, and threads read their shares in parallel.
const json::ParseOptions kTokenizerJsonOptions{{"model", "merges"}};

// Reads the elements of a raw model.merges array in order, from element `r` on.
class MergeReader {
 public:
  MergeReader(const json::Document& doc, const json::RawValue& raw, std::size_t r)
      : doc_(doc), raw_(raw), c_(doc, raw.count ? raw.marks[r / json::RawValue::kMarkEvery] : raw.end, raw.end),
        r_(r / json::RawValue::kMarkEvery * json::RawValue::kMarkEvery) {
    std::string sa, sb;
    std::string_view a, b;
    while (r_ < r && next(a, b, sa, sb).ok()) {}  // (from the mark before r)
  }
  // The next merge's two tokens as text: views into the source, or into `sa` and `sb`
  // when escaped. `at` gets the merge's byte offset. A shape other than "a b" or
  // ["a", "b"] is an error naming the merge; bad JSON, one naming the place.
  Status next(std::string_view& a, std::string_view& b, std::string& sa, std::string& sb, std::size_t* at = nullptr) {
    c_.skip_ws();
    std::size_t start = c_.offset();
    if (at) *at = start;
    bool ok = false;
    if (c_.peek() == '"') {
      std::string_view s;
      LMP_TRY(c_.string(s, sa));
      if (auto ab = split_merge(s)) {
        std::tie(a, b) = *ab;
        ok = true;
      }
    } else if (c_.eat('[')) {
      c_.skip_ws();
      if (c_.peek() == '"') {
        LMP_TRY(c_.string(a, sa));
        if (c_.eat(',')) {
          c_.skip_ws();
          if (c_.peek() == '"') {
            LMP_TRY(c_.string(b, sb));
            ok = c_.eat(']');
          }
        }
      }
    }
    if (!ok) return make_error(Errc::parse, "{}: merge {} must be \"a b\" or [\"a\", \"b\"]", where(start), r_ + 1);
    ++r_;
    bool last = r_ == raw_.count;
    if (!c_.eat(last ? ']' : ',')) return c_.error(last ? "expected ']' after the last merge" : "expected ',' or ']'");
    return {};
  }
  // next() for the usual merge of a byte-level vocabulary, "a b" free of escapes, in
  // one pass: the merge is found, split and converted to bytes together (four passes
  // over the text otherwise: a fifth of loading Llama-3). Each token's bytes go to
  // out[t] (room for `room` bytes). False, with nothing read, for any other merge, for
  // a text that stands for no bytes, and at a fault: next() reads it and says what
  // is wrong.
  bool next_plain_bytes(std::string_view text[2], char* out[2], std::size_t len[2], std::size_t room,
                        std::size_t& at) {
    static const std::int16_t* const from = byte_level_decode_table();
    c_.skip_ws();
    const char* s = doc_.source().data();
    const std::size_t end = c_.end();
    std::size_t q = c_.offset();
    if (q >= end || s[q] != '"') return false;
    const std::size_t open = q++;
    std::size_t start = q, t = 0;
    char* o = out[0];
    char* lim = o + room;
    for (;; ++q) {
      if (q >= end) return false;
      auto c = static_cast<unsigned char>(s[q]);
      if (c - 0x21u < 0x5Eu) {  // '!'..'~': itself
        if (c == '"') break;
        if (c == '\\' || o == lim) return false;
        *o++ = static_cast<char>(c);
      } else if (c == ' ') {  // (no byte's stand-in is a space)
        if (t == 1 || q == start) return false;
        text[0] = std::string_view(s + start, q - start);
        len[0] = static_cast<std::size_t>(o - out[0]);
        t = 1;
        o = out[1];
        lim = o + room;
        start = q + 1;
      } else {  // two bytes, U+0080..U+01FF
        if (c < 0xC2 || c > 0xC7 || q + 1 >= end || o == lim) return false;
        auto c2 = static_cast<unsigned char>(s[q + 1]);
        std::int16_t v = (c2 & 0xC0) == 0x80 ? from[((c & 0x1F) << 6) | (c2 & 0x3F)] : -1;
        if (v < 0) return false;
        *o++ = static_cast<char>(v);
        ++q;
      }
    }
    if (t != 1 || q == start) return false;
    text[1] = std::string_view(s + start, q - start);
    len[1] = static_cast<std::size_t>(o - out[1]);
    bool last = r_ + 1 == raw_.count;
    c_.seek(q + 1);
    if (!c_.eat(last ? ']' : ',')) {
      c_.seek(open);
      return false;
    }
    at = open;
    ++r_;
    return true;
  }
  std::string where(std::size_t offset) const { return doc_.location(static_cast<std::uint32_t>(offset)); }

 private:
  const json::Document& doc_;
  const json::RawValue& raw_;
  json::Cursor c_;
  std::size_t r_;
};

// "name:line:col" of merge r (0-based) of a raw merges array.
std::string merge_where(const json::Document& doc, const json::RawValue& raw, std::size_t r) {
  if (r >= raw.count) return doc.location(raw.begin);
  MergeReader reader(doc, raw, r);
  std::string sa, sb;
  std::string_view a, b;
  std::size_t at = raw.begin;
  (void)reader.next(a, b, sa, sb, &at);
  return doc.location(static_cast<std::uint32_t>(at));
}

// model.merges (raw: "a b" strings or ["a", "b"] pairs) as pairs of ids, in order, on
// `threads` threads; the error is the first bad merge in file order. `ids` maps the
// vocabulary's text; or, when the tokens' bytes are given (`tokens`, `merged`), their
// bytes (Vocab::byte_ids): each token's text is then looked up as the bytes it stands
// for, a text that stands for no bytes is no token, and `merged` gets the token each
// merge makes (for BpeModel::build_indexed), found while the two tokens' bytes are at
// hand (BpeModel::merged_token).
Status parse_merges(const json::Document& doc, json::Value merges, const StringIdMap& ids,
                    std::vector<std::pair<TokenId, TokenId>>& pairs, int threads = 1,
                    const std::vector<std::string>* tokens = nullptr, std::vector<TokenId>* merged = nullptr) {
  const json::RawValue* raw = merges.raw();
  if (raw == nullptr || !raw->array) return make_error(Errc::parse, "{}: model.merges must be an array", merges.where());
  const bool by_bytes = tokens != nullptr && merged != nullptr;
  const std::size_t n = raw->count;
  if (by_bytes) merged->assign(n, -1);
  pairs.assign(n, {-1, -1});
  // Each thread takes a run of whole mark intervals (a reader starts at a mark).
  const std::size_t n_marks = raw->marks.size();
  auto parts = static_cast<std::size_t>(std::clamp<std::size_t>(static_cast<std::size_t>(threads < 1 ? 1 : threads), 1,
                                                                 std::max<std::size_t>(1, n_marks)));
  std::vector<std::size_t> first_bad(parts, n);
  std::vector<Error> errors(parts);
  // Blocks of merges, two in flight: one is read, converted, hashed and its slots
  // prefetched while the one before it is looked up. (A profile put a third of the
  // lookups on slot loads right after their prefetches; a block later, they have had
  // time.)
  constexpr std::size_t kBlock = 16;
  constexpr std::size_t kShort = 48;  // bytes of a short token's text, converted in place
  struct Block {
    std::size_t r0 = 0, r1 = 0, read_bad = 0;
    Error error;                       // (read_bad's)
    std::size_t at[kBlock];            // byte offsets of the merges
    std::string_view text[2 * kBlock];
    std::string esc[2 * kBlock];       // (an escaped text's)
    std::string_view key[2 * kBlock];  // what is looked up: the text, or its bytes
    char buf[2 * kBlock][kShort];
    std::string bytes[2 * kBlock];     // (a longer one's)
    bool valid[2 * kBlock];
    std::uint64_t hash[2 * kBlock];
  };
  run_parallel(parts, [&](std::size_t part) {
    const std::size_t b = std::min(n, n_marks * part / parts * json::RawValue::kMarkEvery);
    const std::size_t e = std::min(n, n_marks * (part + 1) / parts * json::RawValue::kMarkEvery);
    if (b >= e) return;
    MergeReader reader(doc, *raw, b);
    auto blocks = std::make_unique<Block[]>(2);
    TokenId prev = -1;  // the token the previous merge made
    std::string joined;
    const std::vector<bool> none_shadowed;  // (a bytes index has no two tokens alike)
    // Read merges [r0, min(e, r0 + kBlock)) and prefetch their slots; a merge that does
    // not read ends the block there (read_bad).
    auto prepare = [&](Block& k, std::size_t r0) {
      k.r0 = r0;
      k.r1 = std::min(e, r0 + kBlock);
      k.read_bad = n;
      for (std::size_t r = r0; r < k.r1; ++r) {
        std::size_t i = 2 * (r - r0);
        if (by_bytes) {
          char* out[2] = {k.buf[i], k.buf[i + 1]};
          std::size_t len[2];
          if (reader.next_plain_bytes(&k.text[i], out, len, kShort, k.at[r - r0])) {
            for (std::size_t t = 0; t < 2; ++t) {
              k.key[i + t] = std::string_view(out[t], len[t]);
              k.valid[i + t] = true;
              k.hash[i + t] = hash_bytes(out[t], len[t]);
              ids.prefetch(k.hash[i + t]);
            }
            continue;
          }
        }
        Status st = reader.next(k.text[i], k.text[i + 1], k.esc[i], k.esc[i + 1], &k.at[r - r0]);
        if (!st.ok()) {
          k.read_bad = r;
          k.error = std::move(st).error();
          k.r1 = r;  // look up the ones before it: an earlier error comes first
          break;
        }
        for (std::size_t q = i; q < i + 2; ++q) {
          k.key[q] = k.text[q];
          k.valid[q] = true;
          if (by_bytes && k.text[q].size() <= kShort) {
            std::ptrdiff_t len = byte_level_to_bytes(k.text[q], k.buf[q]);
            k.valid[q] = len >= 0;
            k.key[q] = std::string_view(k.buf[q], k.valid[q] ? static_cast<std::size_t>(len) : 0);
          } else if (by_bytes) {
            k.valid[q] = byte_level_to_bytes(k.text[q], k.bytes[q]);
            k.key[q] = k.bytes[q];
          }
          k.hash[q] = hash_bytes(k.key[q].data(), k.key[q].size());
          ids.prefetch(k.hash[q]);
        }
      }
    };
    prepare(blocks[0], b);
    for (std::size_t cur = 0;; cur ^= 1) {
      Block& k = blocks[cur];
      bool last = k.read_bad < n || k.r0 + kBlock >= e;
      if (!last) prepare(blocks[cur ^ 1], k.r0 + kBlock);
      for (std::size_t r = k.r0; r < k.r1; ++r) {
        std::size_t i = 2 * (r - k.r0);
        TokenId ia = k.valid[i] ? ids.find(k.key[i], k.hash[i]) : -1;
        TokenId ib = k.valid[i + 1] ? ids.find(k.key[i + 1], k.hash[i + 1]) : -1;
        if (ia < 0 || ib < 0) {
          first_bad[part] = r;
          errors[part] = make_error(Errc::parse, "{}: merge {}: token {} is not in the vocabulary",
                                    reader.where(k.at[r - k.r0]), r + 1, quote(ia < 0 ? k.text[i] : k.text[i + 1]));
          return;
        }
        pairs[r] = {ia, ib};
        if (by_bytes) {
          TokenId id = BpeModel::merged_token(*tokens, ids, none_shadowed, prev, k.key[i], k.key[i + 1], joined);
          if (id < 0) {
            first_bad[part] = r;
            errors[part] = make_error(Errc::parse, "{}: merge {}: merged token is not in the vocabulary",
                                      reader.where(k.at[r - k.r0]), r + 1);
            return;
          }
          (*merged)[r] = id;
          prev = id;
        }
      }
      if (k.read_bad < n) {
        first_bad[part] = k.read_bad;
        errors[part] = std::move(k.error);
        return;
      }
      if (last) break;
    }
  });
  for (std::size_t p = 0; p < parts; ++p)
    if (first_bad[p] < n) return errors[p];  // (the parts are in file order)
  return {};
}

// BpeModel::build reports "merge N: ..."; put the place of merge N in front.
template <class Where>
Error locate_merge_error(Error e, std::size_t n_merges, Where&& where) {
  std::size_t r = 0;
  if (std::sscanf(e.message.c_str(), "merge %zu:", &r) == 1 && r >= 1 && r <= n_merges)
    e.message = fmt::format("{}: {}", where(r - 1), e.message);
  return e;
}

Result<std::unique_ptr<Tokenizer>> load_wordpiece_json(json::Value root, const std::string& name);
Status parse_template(json::Value pp, TokenizerSpec& spec);
Result<std::unique_ptr<Tokenizer>> load_unigram_json(json::Value root, const std::string& name);


// A Metaspace step's prepend_scheme: always (the default), first or never; the older
// add_prefix_space false means never.
std::string_view metaspace_scheme(json::Value m) {
  if (m.get("add_prefix_space").is_bool() && !m.get("add_prefix_space").boolean()) return "never";
  return m.get("prepend_scheme").is_string() ? m.get("prepend_scheme").str() : "always";
}

// HF's Metaspace pre-tokenizer (alone, or the one step of a Sequence): spaces become ▁,
// a ▁ is prepended by prepend_scheme (always: unless the segment starts with one; first:
// the same, and only at the start of the text; never; the older add_prefix_space), and
// with `split` every ▁ starts a word. Sets the metaspace fields of `spec`.
Status parse_metaspace_pre(json::Value pre, TokenizerSpec& spec, bool& split) {
  if (pre.get("type").str() == "Sequence" && pre.get("pretokenizers").size() == 1) pre = pre.get("pretokenizers")[0];
  if (pre.get("replacement").is_string() && pre.get("replacement").str() != kMetaspace)
    return make_error(Errc::unsupported, "{}: a Metaspace replacement other than ▁", pre.where());
  std::string_view scheme = metaspace_scheme(pre);
  if (scheme != "always" && scheme != "first" && scheme != "never")
    return make_error(Errc::unsupported, "{}: Metaspace prepend_scheme '{}' is not one of always, first, never",
                      pre.where(), scheme);
  spec.metaspace = true;
  spec.metaspace_if_missing = true;
  spec.metaspace_first = scheme == "first";
  spec.metaspace_never = scheme == "never";
  split = !pre.get("split").is_bool() || pre.get("split").boolean();
  return {};
}

bool is_metaspace_pre(json::Value pre) {
  if (pre.get("type").str() == "Sequence" && pre.get("pretokenizers").size() == 1) pre = pre.get("pretokenizers")[0];
  return pre.get("type").str() == "Metaspace";
}

// The normalizer and pre-tokenizer of a SentencePiece-style file (a Unigram model, or BPE
// over ▁ text) into `spec`; `split` when a Metaspace pre-tokenizer splits words at ▁.
// SentencePiece's own forms keep their fast paths: a Precompiled map (or none) with the
// Metaspace pre-tokenizer, or with Prepend "▁" and Replace " " → "▁" and no
// pre-tokenizer. Any other chain (transformers' current conversions: Precompiled, Strip
// right, Replace " {2,}"; ALBERT's and XLNet's quotes, NFKD, StripAccents, Lowercase)
// runs as a Normalizer, before the Metaspace pre-tokenizer or with none, where the model
// reads the chain's text as it is.
Status parse_sp_style_front(json::Value root, TokenizerSpec& spec, bool& split, std::string_view what) {
  json::Value pre = root.get("pre_tokenizer");
  std::vector<NormStep> steps;
  LMP_TRY(normalizer_steps(root.get("normalizer"), steps));
  using K = NormStep::Kind;
  const bool precompiled = !steps.empty() && steps[0].kind == K::precompiled;
  std::size_t k = precompiled ? 1 : 0;
  // tok-train's remove_extra_whitespaces (SentencePiece's): Replace `\A +| +\z` → "", then
  // ` {2,}` → " ", right after the map.
  auto is_regex = [](const NormStep& st, std::string_view pattern, std::string_view content) {
    return st.kind == K::replace && st.regex && st.pattern == pattern && st.content == content;
  };
  const bool squeeze = steps.size() >= k + 2 && is_regex(steps[k], kHfTrimSpaces, "") &&
                       is_regex(steps[k + 1], kHfSqueezeSpaces, " ");
  auto is_prepend = [](const NormStep& st) { return st.kind == K::prepend && st.content == kMetaspace; };
  auto is_replace = [](const NormStep& st) {
    return st.kind == K::replace && !st.regex && st.pattern == " " && st.content == kMetaspace;
  };
  split = false;
  const std::size_t m = k + (squeeze ? 2 : 0);
  if (pre.is_null() && steps.size() == m + 2 &&
      ((is_prepend(steps[m]) && is_replace(steps[m + 1])) || (is_replace(steps[m]) && is_prepend(steps[m + 1])))) {
    if (precompiled) spec.charsmap = steps[0].charsmap;
    spec.squeeze_spaces = squeeze;
    spec.metaspace = true;
    return {};
  }
  if (!pre.is_null() && !is_metaspace_pre(pre))
    return make_error(Errc::unsupported, "{}: a {} tokenizer.json needs the Metaspace pre-tokenizer or none",
                      pre.where(), what);
  if (!pre.is_null()) LMP_TRY(parse_metaspace_pre(pre, spec, split));
  if (spec.metaspace && steps.size() == k) {
    if (k) spec.charsmap = steps[0].charsmap;
  } else if (!steps.empty()) {
    auto n = Normalizer::create(std::move(steps));
    if (!n.ok()) return with_context(std::move(n).error(), root.get("normalizer").where());
    spec.normalizer = std::move(n).value();
  }
  return {};
}

// A BPE model's dropout: null (or absent, or 0) for none, else a probability, which HF
// applies to every encoding; HF refuses a file with any other value.
Result<double> parse_dropout(json::Value model) {
  json::Value d = model.get("dropout");
  if (!d.valid() || d.is_null()) return 0.0;
  if (!d.is_number() || !(d.num() >= 0 && d.num() <= 1))
    return make_error(Errc::parse, "{}: BPE dropout must be null or a probability from 0 to 1", d.where());
  return d.num();
}

// HF's decoder as a chain of steps (Decoder::chain): a Sequence flattened; null gives no
// step (HF then joins the tokens with spaces).
Status parse_decode_steps(json::Value dec, std::vector<DecodeStep>& out) {
  if (dec.is_null() || !dec.valid()) return {};
  if (!dec.is_object()) return make_error(Errc::parse, "{}: decoder must be an object", dec.where());
  std::string_view type = dec.get("type").str();
  using K = DecodeStep::Kind;
  DecodeStep st;
  auto text = [&](const char* key, std::string_view dflt) -> Result<std::string> {
    json::Value v = dec.get(key);
    if (!v.valid() || v.is_null()) return std::string(dflt);
    if (!v.is_string()) return make_error(Errc::parse, "{}: {} decoder: {} must be a string", v.where(), type, key);
    return std::string(v.str());
  };
  auto one_char = [&](std::string_view c, const char* key) -> Status {
    if (c.empty() || text::decode_utf8(reinterpret_cast<const unsigned char*>(c.data()), c.size(), 0).len != c.size())
      return make_error(Errc::parse, "{}: {} decoder: {} must be one character", dec.where(), type, key);
    return {};
  };
  if (type == "Sequence") {
    json::Value list = dec.get("decoders");
    if (!list.is_array()) return make_error(Errc::parse, "{}: Sequence without decoders", dec.where());
    for (std::size_t i = 0; i < list.size(); ++i) LMP_TRY(parse_decode_steps(list[i], out));
    return {};
  }
  if (type == "ByteFallback") {
    st.kind = K::byte_fallback;
  } else if (type == "Fuse") {
    st.kind = K::fuse;
  } else if (type == "Replace") {
    st.kind = K::replace;
    json::Value pat = dec.get("pattern");
    if (!pat.get("String").is_string() || pat.get("String").str().empty())
      return make_error(Errc::unsupported, "{}: a Replace decoder needs a non-empty String pattern (a Regex is not supported)",
                        dec.where());
    st.from = std::string(pat.get("String").str());
    LMP_ASSIGN(st.to, text("content", ""));
  } else if (type == "Strip") {
    st.kind = K::strip;
    LMP_ASSIGN(st.from, text("content", " "));
    LMP_TRY(one_char(st.from, "content"));
    auto count = [&](const char* key) -> Result<std::size_t> {
      json::Value v = dec.get(key);
      if (!v.valid() || v.is_null()) return std::size_t{0};
      auto n = v.integer();
      if (!n || *n < 0) return make_error(Errc::parse, "{}: Strip decoder: {} must be a count", v.where(), key);
      return static_cast<std::size_t>(std::min<std::int64_t>(*n, 1 << 30));
    };
    LMP_ASSIGN(st.start, count("start"));
    LMP_ASSIGN(st.stop, count("stop"));
  } else if (type == "BPEDecoder") {
    st.kind = K::bpe;
    LMP_ASSIGN(st.from, text("suffix", "</w>"));
    if (st.from.empty()) return make_error(Errc::unsupported, "{}: a BPEDecoder with an empty suffix", dec.where());
  } else if (type == "WordPiece") {
    st.kind = K::wordpiece;
    LMP_ASSIGN(st.from, text("prefix", "##"));
    st.flag = !dec.get("cleanup").is_bool() || dec.get("cleanup").boolean();
  } else if (type == "Metaspace") {
    st.kind = K::metaspace;
    LMP_ASSIGN(st.from, text("replacement", kMetaspace));
    LMP_TRY(one_char(st.from, "replacement"));
    std::string_view scheme = metaspace_scheme(dec);
    st.flag = scheme != "never";
  } else {
    return make_error(Errc::unsupported,
                      "{}: decoder type '{}' is not supported here (ByteFallback, Fuse, Replace, Strip, BPEDecoder, "
                      "WordPiece, Metaspace and Sequences of them are)",
                      dec.where(), type);
  }
  out.push_back(std::move(st));
  return {};
}

// Whether the decoder strips the leading space the metaspace normalization put there:
// a Strip step (HF's SentencePiece-style chain), or a Metaspace decoder that prepends.
// Without a decoder, as before: yes.
bool metaspace_decoder_strips(json::Value dec) {
  if (!dec.is_object()) return true;
  std::vector<json::Value> steps;
  if (dec.get("type").str() == "Sequence")
    for (std::size_t i = 0; i < dec.get("decoders").size(); ++i) steps.push_back(dec.get("decoders")[i]);
  else
    steps.push_back(dec);
  for (json::Value d : steps) {
    std::string_view t = d.get("type").str();
    if (t == "Strip" && d.get("start").is_number() && d.get("start").num() >= 1) return true;
    if (t == "Metaspace") {
      std::string_view scheme = metaspace_scheme(d);
      return scheme != "never";
    }
  }
  return false;
}

// HF's SentencePiece-style BPE (Mistral, converted Llama 2): byte fallback, a normalizer
// that prepends ▁ or replaces with it, or the Metaspace pre-tokenizer.
bool is_metaspace_bpe(json::Value root) {
  json::Value model = root.get("model");
  // (byte fallback over words, after another pre-tokenizer, is a character-level BPE of its own)
  if (model.get("byte_fallback").is_bool() && model.get("byte_fallback").boolean() &&
      (root.get("pre_tokenizer").is_null() || is_metaspace_pre(root.get("pre_tokenizer"))))
    return true;
  json::Value norm = root.get("normalizer");
  std::vector<json::Value> list;
  if (norm.get("type").str() == "Sequence")
    for (std::size_t i = 0; i < norm.get("normalizers").size(); ++i) list.push_back(norm.get("normalizers")[i]);
  else
    list.push_back(norm);
  // (A Replace by ▁ alone marks one only with no pre-tokenizer: a byte-level file has ByteLevel.)
  const bool bare = root.get("pre_tokenizer").is_null() && root.get("decoder").get("type").str() != "ByteLevel";
  for (json::Value n : list) {
    if (n.get("type").str() == "Prepend" && n.get("prepend").str() == kMetaspace) return true;
    if (bare && n.get("type").str() == "Replace" && n.get("content").str() == kMetaspace) return true;
  }
  return is_metaspace_pre(root.get("pre_tokenizer"));
}

Result<std::unique_ptr<Tokenizer>> load_metaspace_bpe_json(const json::Document& doc, const std::string& name) {
  json::Value root = doc.root();
  json::Value model = root.get("model");
  TokenizerSpec spec;
  bool split = false;
  LMP_TRY(parse_sp_style_front(root, spec, split, "SentencePiece-style BPE"));
  spec.metaspace_strip = metaspace_decoder_strips(root.get("decoder"));
  json::Value vocab = model.get("vocab");
  if (!vocab.is_object()) return make_error(Errc::parse, "{}: model.vocab must be an object", model.where());
  Vocab v;
  LMP_TRY(parse_vocab(vocab, v, [](TokenId, std::string_view) { return false; }, /*byte_level=*/false));
  LMP_ASSIGN(auto added, parse_added(root.get("added_tokens")));
  LMP_TRY(check_added_ids(added, v.tokens.size(), root.get("added_tokens").where()));
  json::Value merges = model.get("merges");
  std::vector<std::pair<TokenId, TokenId>> pairs;
  if (!merges.valid()) return make_error(Errc::parse, "{}: model.merges must be an array", model.where());
  LMP_TRY(parse_merges(doc, merges, v.text_ids, pairs));
  TokenId unk = -1;
  if (model.get("unk_token").is_string()) {
    unk = v.text_ids.find(model.get("unk_token").str());
    if (unk < 0)
      return make_error(Errc::parse, "{}: unk_token '{}' is not in the vocabulary", model.where(), model.get("unk_token").str());
  }
  std::size_t n_merges = pairs.size();
  json::Value im = model.get("ignore_merges");
  auto built = BpeModel::build(std::move(v.tokens), std::move(pairs), im.is_bool() && im.boolean());
  if (!built.ok())
    return locate_merge_error(std::move(built).error(), n_merges,
                              [&](std::size_t i) { return merge_where(doc, *merges.raw(), i); });
  auto bpe = std::make_unique<BpeModel>(std::move(built).value());
  auto flag = [&](const char* k) { return model.get(k).is_bool() && model.get(k).boolean(); };
  bpe->set_char_level(unk, flag("byte_fallback"), flag("fuse_unk"));
  LMP_ASSIGN(double dropout, parse_dropout(model));
  bpe->set_dropout(dropout);
  // HF has no pre-tokenizer here: a line is one word. When no token holds ▁ after
  // another character, no merge crosses the start of a word, and encoding word by word
  // (through the piece cache) gives the same tokens.
  bool words_independent = true;
  for (std::size_t id = 0; id < bpe->vocab_size() && words_independent; ++id) {
    std::string_view t = bpe->token_text(static_cast<TokenId>(id));
    for (std::size_t k = t.find(kMetaspace, 1); k != std::string_view::npos; k = t.find(kMetaspace, k + 1))
      if (k < kMetaspace.size() || t.compare(k - kMetaspace.size(), kMetaspace.size(), kMetaspace) != 0) {
        words_independent = false;
        break;
      }
  }
  if (split) {  // Metaspace with split: every ▁ starts a word
    LMP_ASSIGN(spec.pre, make_pre_tokenizer("metaspace"));
  } else if (words_independent) {
    LMP_ASSIGN(spec.pre, make_pre_tokenizer("metaspace-words"));
    spec.pre_shortcut = true;
  }
  spec.decoder = Decoder::metaspace;
  LMP_TRY(parse_template(root.get("post_processor"), spec));
  TokenizerInfo info{name, "tokenizer.json", split ? "metaspace" : "none"};
  return std::make_unique<Tokenizer>(std::move(bpe), std::move(spec), std::move(added), std::move(info));
}

// Character-level BPE over words: the original GPT's and HerBERT's (BertPreTokenizer, the
// "</w>" suffix, BPEDecoder), HF's quicktour BPE (Whitespace, [UNK], no decoder), or a
// continuing_subword_prefix ("##", with the WordPiece decoder). Any normalizer and
// pre-tokenizer lmpipe reads; the decoder as its steps.
Result<std::unique_ptr<Tokenizer>> load_char_bpe_json(const json::Document& doc, const std::string& name, PreSpec pre,
                                                      int threads) {
  json::Value root = doc.root();
  json::Value model = root.get("model");
  TokenizerSpec spec;
  LMP_TRY(parse_normalizer(root.get("normalizer"), spec));
  spec.pre = std::move(pre.pre);
  LMP_TRY(parse_decode_steps(root.get("decoder"), spec.decode_steps));
  spec.decoder = Decoder::chain;
  LMP_TRY(parse_template(root.get("post_processor"), spec));
  LMP_ASSIGN(auto added, parse_added(root.get("added_tokens")));
  json::Value vocab = model.get("vocab");
  if (!vocab.is_object()) return make_error(Errc::parse, "{}: model.vocab must be an object", model.where());
  Vocab v;
  LMP_TRY(parse_vocab(vocab, v, [](TokenId, std::string_view) { return false; }, /*byte_level=*/false, threads));
  LMP_TRY(check_added_ids(added, v.tokens.size(), root.get("added_tokens").where()));
  json::Value merges = model.get("merges");
  std::vector<std::pair<TokenId, TokenId>> pairs;
  if (merges.valid() && !merges.is_null()) LMP_TRY(parse_merges(doc, merges, v.text_ids, pairs, threads));
  // An unk_token missing from the vocabulary (HF's trainer keeps the model's unk_token but
  // adds it only when it is among the special tokens) is as none: a character without a
  // token is dropped and counted, where HF fails the whole encoding.
  TokenId unk = model.get("unk_token").is_string() ? v.text_ids.find(model.get("unk_token").str()) : -1;
  auto affix = [&](const char* key) {
    json::Value a = model.get(key);
    return a.is_string() ? std::string(a.str()) : std::string();
  };
  std::string prefix = affix("continuing_subword_prefix"), suffix = affix("end_of_word_suffix");
  auto flag = [&](const char* k) { return model.get(k).is_bool() && model.get(k).boolean(); };
  std::size_t n_merges = pairs.size();
  auto built = BpeModel::build(std::move(v.tokens), std::move(pairs), flag("ignore_merges"), threads, prefix);
  if (!built.ok())
    return locate_merge_error(std::move(built).error(), n_merges,
                              [&](std::size_t i) { return merge_where(doc, *merges.raw(), i); });
  auto bpe = std::make_unique<BpeModel>(std::move(built).value());
  bpe->set_char_level(unk, flag("byte_fallback"), flag("fuse_unk"));
  LMP_TRY(bpe->set_end_of_word_suffix(std::move(suffix)));
  LMP_ASSIGN(double dropout, parse_dropout(model));
  bpe->set_dropout(dropout);
  TokenizerInfo info{name, "tokenizer.json", spec.pre ? std::string(spec.pre->name()) : "none"};
  return std::make_unique<Tokenizer>(std::move(bpe), std::move(spec), std::move(added), std::move(info));
}

// A parsed tokenizer.json (from a string or a mapped file).
Result<std::unique_ptr<Tokenizer>> load_tokenizer_doc(std::unique_ptr<json::Document> doc, const std::string& name,
                                                      int threads) {
  json::Value root = doc->root();
  if (!root.is_object()) return make_error(Errc::parse, "{}: not a tokenizer.json (top level is not an object)", name);
  json::Value model = root.get("model");
  if (!model.is_object()) return make_error(Errc::parse, "{}: not a tokenizer.json (no \"model\")", name);
  std::string_view type = model.get("type").str();
  if (type.empty() && model.get("merges").valid()) type = "BPE";
  if (type == "WordPiece") return load_wordpiece_json(root, name);
  if (type == "Unigram") return load_unigram_json(root, name);
  if (type == "BPE" && is_metaspace_bpe(root)) return load_metaspace_bpe_json(*doc, name);
  if (type != "BPE")
    return make_error(Errc::unsupported, "{}: model type '{}' is not supported (byte-level BPE and WordPiece are)",
                      model.where(), type);
  PreSpec spec;
  LMP_TRY(parse_pre_step(root.get("pre_tokenizer"), spec));
  json::Value dec = root.get("decoder");
  bool byte_level = spec.byte_level || (dec.is_object() && dec.get("type").str() == "ByteLevel");
  if (!byte_level) return load_char_bpe_json(*doc, name, std::move(spec), threads);
  if (model.get("byte_fallback").is_bool() && model.get("byte_fallback").boolean())
    return make_error(Errc::unsupported, "{}: byte_fallback in a byte-level BPE (every byte has a token already)",
                      model.get("byte_fallback").where());
  TokenizerSpec tspec;  // the normalizer, the post-processor: template (--add-special) and trim_offsets
  LMP_TRY(parse_normalizer(root.get("normalizer"), tspec));
  LMP_ASSIGN(auto added, parse_added(root.get("added_tokens")));
  LMP_TRY(parse_template(root.get("post_processor"), tspec));

  json::Value vocab = model.get("vocab");
  if (!vocab.is_object()) return make_error(Errc::parse, "{}: model.vocab must be an object", model.where());
  std::vector<bool> special_ids;  // by id; ids past what parse_vocab accepts cannot collide
  for (const auto& a : added)
    if (a.special && static_cast<std::size_t>(a.id) < vocab.size() * 4 + 1024) {
      auto i = static_cast<std::size_t>(a.id);
      if (i >= special_ids.size()) special_ids.resize(i + 1, false);
      special_ids[i] = true;
    }
  Vocab v;
  LMP_TRY(parse_vocab(vocab, v, [&](TokenId id, std::string_view) {
    return static_cast<std::size_t>(id) < special_ids.size() && special_ids[static_cast<std::size_t>(id)];
  }, /*byte_level=*/true, threads, /*allow_by_bytes=*/true));
  LMP_TRY(check_added_ids(added, v.tokens.size(), root.get("added_tokens").where()));

  json::Value merges = model.get("merges");
  std::vector<std::pair<TokenId, TokenId>> pairs;
  std::vector<TokenId> merged;  // (by_bytes: the token each merge makes)
  if (merges.valid() && !merges.is_null()) {
    if (v.by_bytes) LMP_TRY(parse_merges(*doc, merges, v.byte_ids, pairs, threads, &v.tokens, &merged));
    else LMP_TRY(parse_merges(*doc, merges, v.text_ids, pairs, threads));
  }
  json::Value im = model.get("ignore_merges");
  bool ignore_merges = im.is_bool() && im.boolean();
  LMP_ASSIGN(double dropout, parse_dropout(model));
  // end_of_word_suffix (CLIP's "</w>") marks the last symbol of a word; a
  // continuing_subword_prefix ("##" on every symbol but the first) is not supported.
  std::string suffix;
  if (model.get("end_of_word_suffix").is_string()) suffix = std::string(model.get("end_of_word_suffix").str());
  if (model.get("continuing_subword_prefix").is_string() && !model.get("continuing_subword_prefix").str().empty())
    return make_error(Errc::unsupported, "{}: a BPE continuing_subword_prefix ('{}') is not supported",
                      model.get("continuing_subword_prefix").where(), model.get("continuing_subword_prefix").str());
  std::size_t n_merges = pairs.size();
  // With the bytes index nothing below reads the document (the merges were checked as
  // they were resolved): its pages (12 MB for Llama-3) go back before the merge table
  // takes fresh ones.
  if (v.by_bytes) doc.reset();
  auto built = v.by_bytes ? BpeModel::build_indexed(std::move(v.tokens), std::move(v.byte_ids), std::move(pairs),
                                                     ignore_merges, threads, std::move(merged))
                          : BpeModel::build(std::move(v.tokens), std::move(pairs), ignore_merges, threads);
  if (!built.ok()) {
    if (v.by_bytes) return std::move(built).error();  // (the document is gone: no place to name)
    return locate_merge_error(std::move(built).error(), n_merges,
                              [&](std::size_t i) { return merge_where(*doc, *merges.raw(), i); });
  }
  auto bpe = std::make_unique<BpeModel>(std::move(built).value());
  LMP_TRY(bpe->set_end_of_word_suffix(std::move(suffix)));
  bpe->set_dropout(dropout);
  TokenizerInfo info{name, "tokenizer.json", spec.pre ? std::string(spec.pre->name()) : "none"};
  tspec.pre = std::move(spec.pre);
  tspec.prefix_space = spec.prefix_space;
  return std::make_unique<Tokenizer>(std::move(bpe), std::move(tspec), std::move(added), std::move(info));
}
}  // namespace

Result<std::unique_ptr<Tokenizer>> load_tokenizer_json(std::string text, const std::string& name, int threads) {
  LMP_ASSIGN(auto doc, json::Document::parse(std::move(text), name, kTokenizerJsonOptions));
  return load_tokenizer_doc(std::move(doc), name, threads);
}

// ---- WordPiece (BERT) ----------------------------------------------------------------

namespace {

// BERT's special tokens, which HF's BertTokenizerFast makes added tokens.
constexpr std::string_view kBertSpecials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

// [CLS] … [SEP] as the template, when both are in the vocabulary.
void bert_template(const WordPieceModel& m, TokenizerSpec& spec) {
  TokenId cls = m.find("[CLS]"), sep = m.find("[SEP]");
  if (cls >= 0 && sep >= 0) {
    spec.template_prefix = {cls};
    spec.template_suffix = {sep};
  }
}

// The sequence template of a post_processor (TemplateProcessing or BertProcessing).
Status parse_template(json::Value pp, TokenizerSpec& spec) {
  if (!pp.is_object()) return {};
  std::string_view type = pp.get("type").str();
  if (type == "Sequence") {  // (Llama 3: ByteLevel, then TemplateProcessing)
    json::Value list = pp.get("processors");
    for (std::size_t i = 0; i < list.size(); ++i) LMP_TRY(parse_template(list[i], spec));
    return {};
  }
  auto flag = [&](const char* k, bool dflt) { return pp.get(k).is_bool() ? pp.get(k).boolean() : dflt; };
  if (type == "ByteLevel" || type == "RobertaProcessing") {
    spec.trim_offsets = flag("trim_offsets", true);
    spec.trim_prefix_space = flag("add_prefix_space", true);
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto id_of = [&](const char* k) -> Result<TokenId> {
      json::Value a = pp.get(k);
      if (!a.is_array() || a.size() != 2 || !a[1].integer())
        return make_error(Errc::parse, "{}: {}: expected [token, id]", pp.where(), k);
      return static_cast<TokenId>(*a[1].integer());
    };
    LMP_ASSIGN(TokenId cls, id_of("cls"));
    LMP_ASSIGN(TokenId sep, id_of("sep"));
    spec.template_prefix = {cls};
    spec.template_suffix = {sep};
    return {};
  }
  if (type != "TemplateProcessing") return {};
  json::Value single = pp.get("single"), specials = pp.get("special_tokens");
  if (!single.is_array()) return make_error(Errc::parse, "{}: TemplateProcessing without \"single\"", pp.where());
  bool after = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    json::Value item = single[i];
    if (item.get("Sequence").valid()) {
      after = true;
      continue;
    }
    json::Value st = item.get("SpecialToken");
    std::string_view name = st.get("id").str();
    json::Value ids = specials.get(name).get("ids");
    if (!ids.is_array())
      return make_error(Errc::parse, "{}: special token '{}' of the template has no ids", item.where(), name);
    for (std::size_t k = 0; k < ids.size(); ++k) {
      auto id = ids[k].integer();
      if (!id || *id < 0 || *id > 0x7FFFFFFF) return make_error(Errc::parse, "{}: invalid id", ids[k].where());
      (after ? spec.template_suffix : spec.template_prefix).push_back(static_cast<TokenId>(*id));
    }
  }
  return {};
}

Result<std::unique_ptr<Tokenizer>> load_wordpiece_json(json::Value root, const std::string& name) {
  json::Value model = root.get("model");
  json::Value vocab = model.get("vocab");
  if (!vocab.is_object()) return make_error(Errc::parse, "{}: model.vocab must be an object", model.where());
  Vocab v;
  LMP_TRY(parse_vocab(vocab, v, [](TokenId, std::string_view) { return false; }, /*byte_level=*/false));
  WordPieceOptions o;
  if (model.get("unk_token").is_string()) o.unk_token = std::string(model.get("unk_token").str());
  if (model.get("continuing_subword_prefix").is_string())
    o.prefix = std::string(model.get("continuing_subword_prefix").str());
  if (auto m = model.get("max_input_chars_per_word").integer(); m && *m > 0) o.max_chars = static_cast<std::size_t>(*m);
  auto built = WordPieceModel::build(std::move(v.tokens), o);
  if (!built.ok()) return with_context(std::move(built).error(), model.where());
  auto wp = std::make_unique<WordPieceModel>(std::move(built).value());

  TokenizerSpec spec;
  LMP_TRY(parse_normalizer(root.get("normalizer"), spec));
  PreSpec pre;
  pre.allow_byte_level = false;
  LMP_TRY(parse_pre_step(root.get("pre_tokenizer"), pre));
  spec.pre = std::move(pre.pre);
  spec.decoder = Decoder::wordpiece;
  LMP_TRY(parse_template(root.get("post_processor"), spec));
  LMP_ASSIGN(auto added, parse_added(root.get("added_tokens")));
  LMP_TRY(check_added_ids(added, wp->vocab_size(), root.get("added_tokens").where()));
  TokenizerInfo info{name, "tokenizer.json", spec.pre ? std::string(spec.pre->name()) : "none"};
  return std::make_unique<Tokenizer>(std::move(wp), std::move(spec), std::move(added), std::move(info));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_vocab_txt(const std::string& path, const LoadOptions& opts) {
  LMP_ASSIGN(std::string text, io::read_file(path));
  std::vector<std::string> tokens;
  Lines lines(text);
  for (std::string_view line; lines.next(line);) {
    if (line.empty())
      return make_error(Errc::parse, "{}:{}: empty line in a vocab.txt (every line is a token)", path, lines.number());
    if (!text::is_valid_utf8(line)) return make_error(Errc::parse, "{}:{}: token is not valid UTF-8", path, lines.number());
    tokens.emplace_back(line);
  }
  if (tokens.empty()) return make_error(Errc::parse, "{}: empty vocabulary", path);
  // Uncased vocabularies (bert-base-uncased, bert-base-chinese) have no capital letters
  // outside the [SPECIAL] tokens; a cased one (bert-base-cased) has thousands.
  bool lowercase = true;
  if (opts.lowercase) {
    lowercase = *opts.lowercase;
  } else {
    for (const auto& t : tokens) {
      if (t.size() >= 2 && t.front() == '[' && t.back() == ']') continue;
      if (std::any_of(t.begin(), t.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) {
        lowercase = false;
        break;
      }
    }
  }
  std::vector<AddedToken> added;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (std::string_view s : kBertSpecials)
      if (tokens[i] == s) added.push_back(AddedToken{tokens[i], static_cast<TokenId>(i), true, false, false, false, false});
  auto built = WordPieceModel::build(std::move(tokens), WordPieceOptions{});
  if (!built.ok()) return with_context(std::move(built).error(), path);
  auto wp = std::make_unique<WordPieceModel>(std::move(built).value());
  TokenizerSpec spec;
  spec.bert = text::BertNormalization{true, true, lowercase, lowercase};
  LMP_ASSIGN(spec.pre, make_pre_tokenizer("bert"));
  spec.decoder = Decoder::wordpiece;
  bert_template(*wp, spec);
  TokenizerInfo info{path, "vocab.txt", "bert"};
  return std::make_unique<Tokenizer>(std::move(wp), std::move(spec), std::move(added), std::move(info));
}

// ---- SentencePiece .model -------------------------------------------------------------

Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& path) {
  LMP_ASSIGN(std::string bytes, io::read_file(path));
  LMP_ASSIGN(auto m, SentencePieceModel::parse(bytes, path));
  auto sp = std::make_unique<SentencePieceModel>(std::move(m));
  TokenizerSpec spec;  // no pre-tokenizer: the model normalizes and encodes raw text
  spec.decoder = Decoder::sentencepiece;
  if (sp->bos_id() >= 0) spec.template_prefix = {sp->bos_id()};
  TokenizerInfo info{path, "sentencepiece", "none"};
  const TokenId eos = sp->eos_id();
  auto t = std::make_unique<Tokenizer>(std::move(sp), std::move(spec), std::vector<AddedToken>{}, std::move(info));
  if (eos >= 0) t->set_end_ids({eos});
  return t;
}

// ---- HF Unigram tokenizer.json --------------------------------------------------------

namespace {

Result<std::unique_ptr<Tokenizer>> load_unigram_json(json::Value root, const std::string& name) {
  json::Value model = root.get("model");
  json::Value vocab = model.get("vocab");
  if (!vocab.is_array()) return make_error(Errc::parse, "{}: a Unigram vocab must be an array of [piece, score]", model.where());
  std::vector<std::pair<std::string, double>> pieces;
  pieces.reserve(vocab.size());
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    json::Value e = vocab[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
      return make_error(Errc::parse, "{}: vocab entry {} must be [piece, score]", e.where(), i);
    pieces.emplace_back(std::string(e[0].str()), e[1].num());
  }
  auto unk = model.get("unk_id").integer();
  if (!unk) return make_error(Errc::unsupported, "{}: a Unigram model without unk_id is not supported", model.where());
  bool byte_fallback = model.get("byte_fallback").is_bool() && model.get("byte_fallback").boolean();
  LMP_ASSIGN(auto m, SentencePieceModel::from_hf_unigram(std::move(pieces), static_cast<TokenId>(*unk), byte_fallback, name));
  auto sp = std::make_unique<SentencePieceModel>(std::move(m));

  TokenizerSpec spec;
  bool split = false;
  LMP_TRY(parse_sp_style_front(root, spec, split, "Unigram"));
  spec.metaspace_strip = metaspace_decoder_strips(root.get("decoder"));
  if (split) {
    LMP_ASSIGN(spec.pre, make_pre_tokenizer("metaspace"));
  }
  spec.decoder = Decoder::metaspace;
  LMP_TRY(parse_template(root.get("post_processor"), spec));
  LMP_ASSIGN(auto added, parse_added(root.get("added_tokens")));
  LMP_TRY(check_added_ids(added, sp->vocab_size(), root.get("added_tokens").where()));
  TokenizerInfo info{name, "tokenizer.json", split ? "metaspace" : "none"};
  return std::make_unique<Tokenizer>(std::move(sp), std::move(spec), std::move(added), std::move(info));
}

}  // namespace

// ---- GPT-2 vocab.json + merges.txt ------------------------------------------------

Result<std::unique_ptr<Tokenizer>> load_gpt2_files(const std::string& vocab_path,
                                                   const std::string& merges_path) {
  LMP_ASSIGN(std::string vtext, io::read_file(vocab_path));
  LMP_ASSIGN(auto doc, json::Document::parse(std::move(vtext), vocab_path));
  json::Value vocab = doc->root();
  if (!vocab.is_object()) return make_error(Errc::parse, "{}: vocab.json must be an object of token → id", vocab_path);
  // GPT-2's <|endoftext|> (and any <|...|>) is a special token, matched in text.
  std::vector<AddedToken> added;
  Vocab v;
  LMP_TRY(parse_vocab(vocab, v, [&](TokenId id, std::string_view key) {
    if (key.size() <= 4 || key.substr(0, 2) != "<|" || key.substr(key.size() - 2) != "|>") return false;
    added.push_back(AddedToken{std::string(key), id, true, false, false, false, false});
    return true;
  }));
  LMP_ASSIGN(std::string mtext, io::read_file(merges_path));
  std::vector<std::pair<TokenId, TokenId>> pairs;
  std::vector<std::size_t> merge_lines;  // (n_merges) line of each merge in merges.txt
  Lines lines(mtext);
  for (std::string_view line; lines.next(line);) {
    std::size_t line_no = lines.number();
    if (line.empty() || (line_no == 1 && line.substr(0, 9) == "#version:")) continue;
    auto ab = split_merge(line);
    if (!ab) return make_error(Errc::parse, "{}:{}: expected two tokens separated by one space", merges_path, line_no);
    LMP_ASSIGN(auto pair, resolve_merge(v.text_ids, ab->first, ab->second,
                                        [&] { return fmt::format("{}:{}", merges_path, line_no); }, pairs.size() + 1));
    pairs.push_back(pair);
    merge_lines.push_back(line_no);
  }
  auto built = BpeModel::build(std::move(v.tokens), pairs, false);
  if (!built.ok())
    return locate_merge_error(std::move(built).error(), pairs.size(),
                              [&](std::size_t i) { return fmt::format("{}:{}", merges_path, merge_lines[i]); });
  LMP_ASSIGN(auto pre, make_pre_tokenizer("gpt2"));
  TokenizerInfo info{vocab_path, "gpt2", "gpt2"};
  return std::make_unique<Tokenizer>(std::move(built).value(), std::move(pre), Normalization::none, false,
                                     std::move(added), std::move(info));
}

// ---- tiktoken ---------------------------------------------------------------------

namespace {

struct KnownEncoding {
  const char* name;
  const char* pre;
  std::vector<std::pair<std::string, TokenId>> specials;
};

const std::vector<KnownEncoding>& known_encodings() {
  static const std::vector<KnownEncoding> k = {
      {"cl100k_base", "cl100k",
       {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}}},
      {"o200k_base", "o200k", {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
      {"p50k_base", "gpt2", {{"<|endoftext|>", 50256}}},
      {"r50k_base", "gpt2", {{"<|endoftext|>", 50256}}},
      {"gpt2", "gpt2", {{"<|endoftext|>", 50256}}},
  };
  return k;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_tiktoken(const std::string& path, const LoadOptions& opts) {
  LMP_ASSIGN(std::string text, io::read_file(path));
  std::vector<std::string> tokens;
  std::string bytes;
  Lines lines(text);
  for (std::string_view line; lines.next(line);) {
    std::size_t line_no = lines.number();
    if (line.empty()) continue;
    auto sp = line.find(' ');
    if (sp == std::string_view::npos)
      return make_error(Errc::parse, "{}:{}: expected 'base64 rank'", path, line_no);
    if (!base64_decode(line.substr(0, sp), bytes) || bytes.empty())
      return make_error(Errc::parse, "{}:{}: invalid base64 token", path, line_no);
    std::string_view rs = line.substr(sp + 1);
    std::int64_t rank = 0;
    if (rs.empty() || rs.size() > 10) return make_error(Errc::parse, "{}:{}: invalid rank", path, line_no);
    for (char c : rs) {
      if (c < '0' || c > '9') return make_error(Errc::parse, "{}:{}: invalid rank", path, line_no);
      rank = rank * 10 + (c - '0');
    }
    if (rank >= (std::int64_t{1} << 31) - 1 || rank > static_cast<std::int64_t>(line_no) * 4 + 1024)
      return make_error(Errc::parse, "{}:{}: rank {} out of range", path, line_no, rank);
    auto r = static_cast<std::size_t>(rank);
    if (r >= tokens.size()) tokens.resize(r + 1);
    if (!tokens[r].empty()) return make_error(Errc::parse, "{}:{}: rank {} given twice", path, line_no, rank);
    tokens[r] = bytes;
  }
  if (tokens.empty()) return make_error(Errc::parse, "{}: no ranks in the file", path);
  std::string base = basename_of(path);
  std::string pre_name = opts.pre_tokenizer;
  std::vector<std::pair<std::string, TokenId>> specials = opts.special_tokens;
  for (const auto& k : known_encodings()) {
    if (base.find(k.name) == std::string::npos) continue;
    if (pre_name.empty()) pre_name = k.pre;
    if (specials.empty()) specials = k.specials;
    break;
  }
  if (pre_name.empty())
    return make_error(Errc::invalid_argument,
                      "{}: cannot tell the encoding from the file name; give the pre-tokenizer "
                      "(cl100k, o200k, gpt2, ...)",
                      path);
  LMP_ASSIGN(auto pre, make_pre_tokenizer(pre_name));
  std::vector<AddedToken> added;
  for (auto& [content, id] : specials) {
    if (id < 0) return make_error(Errc::invalid_argument, "special token {} has a negative id", quote(content));
    added.push_back(AddedToken{content, id, true, false, false, false, false});
  }
  LMP_TRY(check_added_ids(added, tokens.size(), path));
  auto built = BpeModel::build_from_ranks(std::move(tokens));
  if (!built.ok()) return with_context(std::move(built).error(), path);
  TokenizerInfo info{path, "tiktoken", pre_name};
  return std::make_unique<Tokenizer>(std::move(built).value(), std::move(pre), Normalization::none, false,
                                     std::move(added), std::move(info));
}

namespace {
// A tokenizer.json has "model": { ... }; a GPT-2 vocab.json may have a token "model",
// but its value is a number.
bool looks_like_tokenizer_json(std::string_view text) {
  for (std::size_t p = text.find("\"model\""); p != std::string_view::npos; p = text.find("\"model\"", p + 1)) {
    std::size_t i = p + 7;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) ++i;
    if (i >= text.size() || text[i] != ':') continue;
    ++i;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) ++i;
    if (i < text.size() && text[i] == '{') return true;
  }
  return false;
}
}  // namespace

Result<std::string> tokenizer_file_in(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string d = !dir.empty() && dir.back() == '/' ? dir : dir + "/";
  auto is_file = [&](const std::string& p) { return fs::is_regular_file(p, ec); };
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (is_file(d + name)) return d + name;
  if (is_file(d + "vocab.json") && is_file(d + "merges.txt")) return d + "vocab.json";
  for (const char* name : {"vocab.txt", "tokenizer.bin"})
    if (is_file(d + name)) return d + name;
  std::vector<std::string> ranks;
  for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.size() > 9 && n.compare(n.size() - 9, 9, ".tiktoken") == 0 && is_file(d + n)) ranks.push_back(n);
  }
  if (ec) return make_error(Errc::io, "{}: cannot list the directory: {}", dir, ec.message());
  std::sort(ranks.begin(), ranks.end());
  if (ranks.size() == 1) return d + ranks[0];
  if (ranks.size() > 1)
    return make_error(Errc::invalid_argument, "{}: {} .tiktoken files ({}, ...): name one", dir, ranks.size(),
                      ranks[0]);
  return make_error(Errc::io,
                    "{}: a directory with no tokenizer file in it (looked for tokenizer.json, "
                    "tokenizer.model, vocab.json with merges.txt, vocab.txt, tokenizer.bin, *.tiktoken)",
                    dir);
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path, const LoadOptions& opts) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    LMP_ASSIGN(std::string file, tokenizer_file_in(path));
    return load_tokenizer(file, opts);
  }
  // "vocab.json:merges.txt" names the GPT-2 pair explicitly.
  auto colon = path.find(':');
  if (colon != std::string::npos && path.size() > 5 && path.substr(colon - 5, 5) == ".json")
    return load_gpt2_files(path.substr(0, colon), path.substr(colon + 1));
  std::string base = basename_of(path);
  if (base.size() > 9 && base.substr(base.size() - 9) == ".tiktoken") return load_tiktoken(path, opts);
  if (base.size() > 6 && base.substr(base.size() - 6) == ".model") return load_sentencepiece(path);
  if (base.size() > 4 && base.substr(base.size() - 4) == ".bin") return load_llama2c_tokenizer(path);
  {  // A GGUF file (a model, or llama.cpp's vocabulary-only files): its tokenizer.ggml.* keys.
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    if (in && in.read(magic, 4) && std::string_view(magic, 4) == "GGUF") {
      LMP_ASSIGN(auto f, tensor_io::TensorFile::open(path));
      return load_gguf_tokenizer(*f);
    }
  }
  // Mapped, not read: a 9 MB tokenizer.json is parsed in place.
  LMP_ASSIGN(MappedFile file, MappedFile::open(path));
  std::string_view text = file.view();
  std::size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) ++i;
  if (i < text.size() && text[i] == '{') {
    // A tokenizer.json has a "model"; a GPT-2 vocab.json maps tokens to ids.
    if (looks_like_tokenizer_json(text)) {
      LMP_ASSIGN(auto doc, json::Document::parse(std::move(file), path, kTokenizerJsonOptions));
      return load_tokenizer_doc(std::move(doc), path, opts.threads);
    }
    std::string dir = path.substr(0, path.size() - base.size());
    return load_gpt2_files(path, dir + "merges.txt");
  }
  // base64 + space + digits on the first line: a tiktoken file.
  auto nl = text.find('\n');
  std::string_view first(text.data(), nl == std::string::npos ? text.size() : nl);
  auto sp = first.find(' ');
  if (sp != std::string_view::npos && sp > 0 &&
      first.find_first_not_of("0123456789", sp + 1) == std::string_view::npos)
    return load_tiktoken(path, opts);
  // One token per line, no spaces: a BERT vocab.txt.
  if ((base.size() >= 4 && base.substr(base.size() - 4) == ".txt") && text.find(' ') == std::string::npos)
    return load_vocab_txt(path, opts);
  return make_error(Errc::parse,
                    "{}: not a tokenizer file (expected an HF tokenizer.json, a GPT-2 vocab.json, a "
                    "tiktoken rank file or a BERT vocab.txt)",
                    path);
}

// ---- Writers ----------------------------------------------------------------------

namespace {

// One split step as HF's pre-tokenizer type (a view of byte-level text as the split it
// applies); false, writing nothing, for "none".
bool append_split_json(std::string& o, const PreTokenizer& step) {
  std::string_view n = step.name();
  if (n.substr(0, 11) == "byte-level ") n.remove_prefix(11);
  if (n == "none") return false;
  static constexpr const char* kBehavior[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                                              "Contiguous"};
  const char* behavior = kBehavior[static_cast<int>(step.behavior())];
  if (n == "whitespace") {
    o += R"({"type":"Whitespace"})";
  } else if (n == "bert") {
    o += R"({"type":"BertPreTokenizer"})";
  } else if (n == "whitespace-split" && step.behavior() == SplitBehavior::removed) {
    o += R"({"type":"WhitespaceSplit"})";
  } else if (n == "punctuation") {
    o += fmt::format(R"({{"type":"Punctuation","behavior":"{}"}})", behavior);
  } else if (n == "digits" && !step.invert() &&
             (step.behavior() == SplitBehavior::isolated || step.behavior() == SplitBehavior::contiguous)) {
    o += fmt::format(R"({{"type":"Digits","individual_digits":{}}})", step.behavior() == SplitBehavior::isolated);
  } else {
    o += R"({"type":"Split","pattern":{"Regex":)";
    json::append_string(o, step.pattern());
    o += fmt::format(R"(}},"behavior":"{}","invert":{}}})", behavior, step.invert());
  }
  return true;
}

// The normalizer: a chain, a BertNormalizer, one Unicode form or null.
void append_normalizer_json(std::string& o, const Tokenizer& t) {
  if (const Normalizer* n = t.normalizer()) {
    o += n->to_json();
  } else if (const auto& b = t.bert_normalization()) {
    o += fmt::format(R"({{"type":"BertNormalizer","clean_text":{},"handle_chinese_chars":{},"strip_accents":{},"lowercase":{}}})",
                     b->clean_text, b->chinese_chars, b->strip_accents, b->lowercase);
  } else if (t.normalization() == Normalization::nfc) {
    o += R"({"type":"NFC"})";
  } else if (t.normalization() == Normalization::nfkc) {
    o += R"({"type":"NFKC"})";
  } else {
    o += "null";
  }
}

void append_pre_json(std::string& o, const Tokenizer& t) {
  const PreTokenizer* p = t.pre_tokenizer();
  std::string_view name = p ? p->name() : "none";
  auto byte_level = [&](bool use_regex) {
    o += R"({"type":"ByteLevel","add_prefix_space":)";
    o += t.prefix_space() ? "true" : "false";
    o += R"(,"trim_offsets":true,"use_regex":)";
    o += use_regex ? "true" : "false";
    o += "}";
  };
  if (name == "gpt2") {
    byte_level(true);
    return;
  }
  if (name == "none") {
    byte_level(false);
    return;
  }
  // A gpt2 split just before the views of byte-level text (or last) is ByteLevel's own
  // regex; the views go after ByteLevel; "none" adds no step.
  std::vector<const PreTokenizer*> steps = p->steps();
  auto view = [](const PreTokenizer* q) { return q->name().substr(0, 11) == "byte-level "; };
  std::size_t n_before = 0;
  while (n_before < steps.size() && !view(steps[n_before])) ++n_before;
  bool use_regex = n_before > 0 && steps[n_before - 1]->name() == "gpt2";
  auto step_json = [&](const PreTokenizer* step) {
    if (append_split_json(o, *step)) o += ",";
  };
  o += R"({"type":"Sequence","pretokenizers":[)";
  for (std::size_t i = 0; i + (use_regex ? 1 : 0) < n_before; ++i) step_json(steps[i]);
  byte_level(use_regex);
  if (n_before < steps.size()) {
    o += ",";
    for (std::size_t i = n_before; i < steps.size(); ++i) step_json(steps[i]);
    o.pop_back();  // the last comma
  }
  o += "]}";
}

std::string token_text(const Tokenizer& t, TokenId id) { return t.token_string(id); }

// The start of a tokenizer.json: version, truncation, padding, the added tokens by id and
// the normalizer (the caller continues with the pre-tokenizer's value).
void append_json_head(std::string& o, const Tokenizer& t) {
  o += R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[)";
  std::vector<AddedToken> added = t.added_tokens();
  std::sort(added.begin(), added.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  for (std::size_t i = 0; i < added.size(); ++i) {
    const auto& a = added[i];
    if (i) o += ",";
    o += fmt::format(R"({{"id":{},"content":)", a.id);
    json::append_string(o, a.content);
    o += fmt::format(R"(,"single_word":{},"lstrip":{},"rstrip":{},"normalized":{},"special":{}}})", a.single_word,
                     a.lstrip, a.rstrip, a.normalized, a.special);
  }
  o += R"(],"normalizer":)";
  append_normalizer_json(o, t);
  o += R"(,"pre_tokenizer":)";
}

// The pre-tokenizer of a tokenizer that is not byte-level: its split steps, one, a
// Sequence, or null.
void append_split_steps_json(std::string& o, const Tokenizer& t) {
  std::vector<const PreTokenizer*> steps;
  if (t.pre_tokenizer()) steps = t.pre_tokenizer()->steps();
  std::string parts;
  std::size_t n_parts = 0;
  for (const PreTokenizer* step : steps)
    if (append_split_json(parts, *step)) {
      parts += ",";
      ++n_parts;
    }
  if (!parts.empty()) parts.pop_back();
  o += n_parts == 0 ? "null" : n_parts == 1 ? parts : R"({"type":"Sequence","pretokenizers":[)" + parts + "]}";
}

// HF's decoder for a chain of steps: one, a Sequence, or null.
void append_decoder_json(std::string& o, const std::vector<DecodeStep>& steps) {
  using K = DecodeStep::Kind;
  auto str = [](const std::string& v) {
    std::string q;
    json::append_string(q, v);
    return q;
  };
  std::vector<std::string> parts;
  for (const DecodeStep& st : steps) {
    switch (st.kind) {
      case K::byte_fallback: parts.push_back(R"({"type":"ByteFallback"})"); break;
      case K::fuse: parts.push_back(R"({"type":"Fuse"})"); break;
      case K::replace:
        parts.push_back(fmt::format(R"({{"type":"Replace","pattern":{{"String":{}}},"content":{}}})", str(st.from),
                                    str(st.to)));
        break;
      case K::strip:
        parts.push_back(fmt::format(R"({{"type":"Strip","content":{},"start":{},"stop":{}}})", str(st.from), st.start,
                                    st.stop));
        break;
      case K::bpe: parts.push_back(fmt::format(R"({{"type":"BPEDecoder","suffix":{}}})", str(st.from))); break;
      case K::wordpiece:
        parts.push_back(fmt::format(R"({{"type":"WordPiece","prefix":{},"cleanup":{}}})", str(st.from), st.flag));
        break;
      case K::metaspace:
        parts.push_back(fmt::format(R"({{"type":"Metaspace","replacement":{},"prepend_scheme":"{}","split":true}})",
                                    str(st.from), st.flag ? "always" : "never"));
        break;
    }
  }
  if (parts.empty()) {
    o += "null";
  } else if (parts.size() == 1) {
    o += parts[0];
  } else {
    o += R"({"type":"Sequence","decoders":[)";
    for (std::size_t i = 0; i < parts.size(); ++i) o += (i ? "," : "") + parts[i];
    o += "]}";
  }
}

std::string wordpiece_tokenizer_json(const Tokenizer& t) {
  const auto& wp = static_cast<const WordPieceModel&>(t.model());
  std::string o;
  o.reserve(t.vocab_size() * 24);
  append_json_head(o, t);
  append_split_steps_json(o, t);
  o += R"(,"post_processor":)";
  if (t.template_prefix().size() == 1 && t.template_suffix().size() == 1) {
    std::string cls = t.token_string(t.template_prefix()[0]), sep = t.token_string(t.template_suffix()[0]);
    auto special = [&](const std::string& name, TokenId id) {
      std::string s;
      json::append_string(s, name);
      std::string out = s + R"(:{"id":)" + s + R"(,"ids":[)" + std::to_string(id) + R"(],"tokens":[)" + s + "]}";
      return out;
    };
    std::string qc, qs;
    json::append_string(qc, cls);
    json::append_string(qs, sep);
    o += R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":)" + qc +
         R"(,"type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":)" + qs +
         R"(,"type_id":0}}],"pair":[{"SpecialToken":{"id":)" + qc +
         R"(,"type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":)" + qs +
         R"(,"type_id":0}},{"Sequence":{"id":"B","type_id":1}},{"SpecialToken":{"id":)" + qs +
         R"(,"type_id":1}}],"special_tokens":{)" + special(cls, t.template_prefix()[0]) + "," +
         special(sep, t.template_suffix()[0]) + "}}";
  } else {
    o += "null";
  }
  o += R"(,"decoder":{"type":"WordPiece","prefix":)";
  json::append_string(o, wp.options().prefix);
  o += R"(,"cleanup":true},"model":{"type":"WordPiece","unk_token":)";
  json::append_string(o, wp.options().unk_token);
  o += R"(,"continuing_subword_prefix":)";
  json::append_string(o, wp.options().prefix);
  o += fmt::format(R"(,"max_input_chars_per_word":{},"vocab":{{)", wp.options().max_chars);
  bool first = true;
  for (std::size_t id = 0; id < wp.vocab_size(); ++id) {
    std::string_view text = wp.token_text(static_cast<TokenId>(id));
    if (text.empty()) continue;
    if (!first) o += ",";
    first = false;
    json::append_string(o, text);
    o += ":" + std::to_string(id);
  }
  o += "}}}";
  return o;
}


}  // namespace

std::string to_tokenizer_json(const Tokenizer& t) {
  if (!t.bpe()) return wordpiece_tokenizer_json(t);
  // Byte-level BPE (tokens in byte-level text, the ByteLevel pre-tokenizer and decoder), or
  // character-level BPE over words (tok-train -m char-bpe: tokens as text, its split steps
  // and decoder chain). (SentencePiece-style tokenizers are written by their trainer.)
  const BpeModel& bpe = *t.bpe();
  const bool chars = bpe.char_level();
  LMP_ASSERT(!chars || t.decoder() == Decoder::chain);
  std::string o;
  o.reserve(t.vocab_size() * 40);
  append_json_head(o, t);
  if (chars) append_split_steps_json(o, t);
  else append_pre_json(o, t);
  o += R"(,"post_processor":null,"decoder":)";
  if (chars) append_decoder_json(o, t.decode_steps());
  else o += R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})";
  auto text_or_null = [&](const std::string& v) {
    if (v.empty()) o += "null";
    else json::append_string(o, v);
  };
  o += R"(,"model":{"type":"BPE","dropout":)";
  o += bpe.dropout() > 0 ? fmt::format("{}", bpe.dropout()) : std::string("null");
  o += R"(,"unk_token":)";
  text_or_null(bpe.unk_id() >= 0 ? bpe.token(bpe.unk_id()) : std::string());
  o += R"(,"continuing_subword_prefix":)";
  text_or_null(bpe.continuing_subword_prefix());
  o += R"(,"end_of_word_suffix":)";
  text_or_null(bpe.end_of_word_suffix());
  o += fmt::format(R"(,"fuse_unk":{},"byte_fallback":{},"ignore_merges":{},"vocab":{{)", bpe.fuse_unk(),
                   bpe.byte_fallback(), bpe.ignore_merges() && !bpe.ranks_from_tokens());
  bool first = true;
  for (std::size_t id = 0; id < t.vocab_size(); ++id) {
    auto p = t.piece(static_cast<TokenId>(id));
    if (!p) continue;
    if (!first) o += ",";
    first = false;
    json::append_string(o, token_text(t, static_cast<TokenId>(id)));
    o += ":";
    o += std::to_string(id);
  }
  o += R"(},"merges":[)";
  const auto& ml = bpe.merge_list();
  auto merge_part = [&](TokenId id) {
    json::append_string(o, chars ? bpe.token(id) : bytes_to_byte_level(bpe.token(id)));
  };
  for (std::size_t i = 0; i < ml.size(); ++i) {
    o += i ? ",[" : "[";
    merge_part(ml[i].first);
    o += ",";
    merge_part(ml[i].second);
    o += "]";
  }
  o += "]}}";
  return o;
}

std::string to_vocab_json(const Tokenizer& t) {
  std::string o = "{";
  bool first = true;
  for (std::size_t id = 0; id < t.vocab_size(); ++id) {
    if (!t.piece(static_cast<TokenId>(id))) continue;
    if (!first) o += ",";
    first = false;
    json::append_string(o, token_text(t, static_cast<TokenId>(id)));
    o += ":" + std::to_string(id);
  }
  o += "}\n";
  return o;
}

std::string to_vocab_txt(const Tokenizer& t) {
  std::string o;
  for (std::size_t id = 0; id < t.model().vocab_size(); ++id) {
    o += t.model().token_text(static_cast<TokenId>(id));
    o += '\n';
  }
  return o;
}

std::string to_merges_txt(const Tokenizer& t) {
  LMP_ASSERT(t.bpe() != nullptr);
  const BpeModel& bpe = *t.bpe();
  std::string o = "#version: 0.2\n";
  for (auto [a, b] : bpe.merge_list()) {
    o += bytes_to_byte_level(bpe.token(a));
    o += ' ';
    o += bytes_to_byte_level(bpe.token(b));
    o += '\n';
  }
  return o;
}

}  // namespace lmp::tok
