// Tokenizer::encode_with_offsets and the aligned normalizers behind it: the same ids as
// encode, spans in order inside the text, and the spans HF tokenizers gives on cases
// checked by hand (the conformance test hf_offsets compares whole corpora with HF).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "lmpipe/tok/bpe_trainer.h"
#include "lmpipe/tok/sp_trainer.h"
#include "lmpipe/tok/tokenizer.h"
#include "lmpipe/tok/wordpiece.h"
#include "lmpipe/tok/wordpiece_trainer.h"
#include "tok_fixtures.h"

using namespace lmp;
using namespace lmp::tok;

namespace {

const char* kCorpus =
    "the quick brown fox jumps over the lazy dog\n"
    "The Dog sleeps 12345 times, café naïve ﬁne Ｆｕｌｌ\n"
    "中文字符 中文 日本語のテキスト 한국어\n";

// Random text from pieces that exercise the normalizers: ASCII, precomposed and
// decomposed accents, marks out of canonical order, ligatures, full-width letters,
// jamo, CJK, emoji, controls and bytes that are not UTF-8.
std::string random_text(std::mt19937& rng) {
  static const char* parts[] = {"a", "b", " ", "  ", "the", "dog", "\t", "é", "e\xCC\x81", "a\xCC\x81\xCC\xA3",
                                "a\xCC\xA3\xCC\x81", "\xEF\xAC\x81", "\xEF\xBC\xA6", "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB",
                                "中", "文", "😀", "\x01", "\xFF", "\xC3", "Ä", "İ", "ß", "\xC2\xA0", "1", "23", ",", "<|endoftext|>"};
  std::uniform_int_distribution<std::size_t> pick(0, std::size(parts) - 1), len(0, 12);
  std::string s;
  for (std::size_t n = len(rng); n > 0; --n) s += parts[pick(rng)];
  return s;
}

// The spans are in order, inside the text, and (where `tiles`) cover it exactly.
void check_spans(const Tokenizer& t, const std::string& text, bool tiles) {
  Session s1(t), s2(t);
  std::vector<TokenId> ids, ids2;
  std::vector<Range> spans;
  t.encode(text, ids, s1);
  t.encode_with_offsets(text, ids2, spans, s2);
  INFO("text: " << text);
  REQUIRE(ids2 == ids);
  REQUIRE(spans.size() == ids.size());
  std::uint32_t prev = 0, covered = 0;
  for (const Range& r : spans) {
    CHECK(r.begin <= r.end);
    CHECK(r.end <= text.size());
    CHECK(r.begin >= prev);
    prev = r.begin;
    if (tiles) {
      CHECK(r.begin == covered);
      covered = r.end;
    }
  }
  if (tiles) CHECK(covered == text.size());
}

std::unique_ptr<Tokenizer> byte_level_bpe(bool all_bytes) { return test::trained_bpe("cl100k", all_bytes, kCorpus, 330); }

std::unique_ptr<Tokenizer> wordpiece() {
  auto pre = make_pre_tokenizer("bert");
  REQUIRE(pre.ok());
  WordPieceTrainerConfig cfg;
  cfg.vocab_size = 200;
  cfg.special_tokens = {"[UNK]"};
  WordCounter wc(*pre.value(), 1, cfg.normalization);
  wc.add(kCorpus);
  TrainReport rep;
  auto t = train_wordpiece(wc.take(), cfg, rep);
  REQUIRE(t.ok());
  return std::move(t).value();
}

// A SentencePiece BPE (NFKC map, byte fallback) as a .model and as HF's tokenizer.json.
std::pair<std::unique_ptr<Tokenizer>, std::unique_ptr<Tokenizer>> sentencepiece(bool unigram) {
  auto norm = make_sp_normalizer("nfkc");
  REQUIRE(norm.ok());
  WordCountMap counts;
  std::string line, normalized;
  for (std::string_view c = kCorpus; !c.empty();) {
    std::size_t nl = c.find('\n');
    sp_normalize_line(c.substr(0, nl), norm.value(), normalized);
    sp_count_words(normalized, SpBpeTrainerConfig{}, counts);
    c.remove_prefix(nl + 1);
  }
  UnigramTrainerConfig cfg;
  cfg.normalizer = norm.value();
  cfg.vocab_size = unigram ? 360 : 380;
  SpTrainReport rep;
  std::string json;
  auto proto = unigram ? train_sp_unigram(counts, cfg, rep, {}, &json) : train_sp_bpe(counts, cfg, rep, {}, &json);
  INFO((proto.ok() ? std::string() : proto.error().message));
  REQUIRE(proto.ok());
  auto path = std::filesystem::temp_directory_path() / ("lmpipe_offsets_" + std::to_string(::getpid()) + ".model");
  std::ofstream(path, std::ios::binary) << proto.value();
  auto model = load_tokenizer(path.string());
  std::filesystem::remove(path);
  REQUIRE(model.ok());
  auto hf = load_tokenizer_json(json, "sp.json");
  REQUIRE(hf.ok());
  return {std::move(model).value(), std::move(hf).value()};
}

std::vector<std::pair<std::uint32_t, std::uint32_t>> offsets(const Tokenizer& t, std::string_view text) {
  Session s(t);
  std::vector<TokenId> ids;
  std::vector<Range> spans;
  t.encode_with_offsets(text, ids, spans, s);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  for (const Range& r : spans) out.emplace_back(r.begin, r.end);
  return out;
}

using Spans = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

}  // namespace

TEST_CASE("normalize_aligned: normalize's text, each byte from a character of the input", "[offsets][property]") {
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    std::string s = random_text(rng);
    INFO("text: " << s);
    for (auto form : {text::NormalForm::nfc, text::NormalForm::nfkc}) {
      std::string out;
      std::vector<text::SourceSpan> src;
      text::normalize_aligned(s, form, out, src);
      REQUIRE(out == text::normalize(s, form));
      REQUIRE(src.size() == out.size());
      std::uint32_t prev = 0;
      for (auto x : src) {
        CHECK(x.begin < x.end);
        CHECK(x.end <= s.size());
        CHECK(x.begin >= prev);
        prev = x.begin;
      }
    }
    std::string bert, out;
    std::vector<text::SourceSpan> src;
    text::bert_normalize(s, {}, bert);
    text::bert_normalize_aligned(s, {}, out, src);
    REQUIRE(out == bert);
    REQUIRE(src.size() == out.size());
  }
}

TEST_CASE("normalize_aligned: decompositions, removed marks and compositions", "[offsets]") {
  std::string out;
  std::vector<text::SourceSpan> src;
  using V = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
  auto spans = [&] {
    V v;
    for (auto x : src) v.emplace_back(x.begin, x.end);
    return v;
  };
  text::normalize_aligned("x\xEF\xAC\x81", text::NormalForm::nfkc, out, src);  // x ﬁ → x f i
  CHECK(out == "xfi");
  CHECK(spans() == V{{0, 1}, {1, 4}, {1, 4}});
  text::normalize_aligned("e\xCC\x81!", text::NormalForm::nfc, out, src);  // e + U+0301 → é, from the e
  CHECK(out == "\xC3\xA9!");
  CHECK(spans() == V{{0, 1}, {0, 1}, {3, 4}});
  // a U+0301 U+0323 → ạ U+0301: ạ from the a; the mark from the third position (HF's
  // alignment follows positions, not the reordered marks)
  text::normalize_aligned("a\xCC\x81\xCC\xA3", text::NormalForm::nfc, out, src);
  CHECK(out == "\xE1\xBA\xA1\xCC\x81");
  CHECK(spans() == V{{0, 1}, {0, 1}, {0, 1}, {3, 5}, {3, 5}});
  text::BertNormalization bert;
  text::bert_normalize_aligned("Ce\xCC\x81", bert, out, src);  // lowercased, the accent dropped
  CHECK(out == "ce");
  CHECK(spans() == V{{0, 1}, {1, 2}});
}

TEST_CASE("encode_with_offsets: the ids of encode, spans in order (random text)", "[offsets][property]") {
  auto full = byte_level_bpe(true);
  auto limited = byte_level_bpe(false);
  auto wp = wordpiece();
  auto [sp_model, sp_json] = sentencepiece(false);
  auto [uni_model, uni_json] = sentencepiece(true);
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    std::string s = random_text(rng);
    check_spans(*full, s, /*tiles=*/true);  // byte-level, every byte a token: the spans tile the text
    check_spans(*limited, s, false);
    check_spans(*wp, s, false);
    check_spans(*sp_model, s, false);
    check_spans(*sp_json, s, false);
    check_spans(*uni_model, s, false);
    check_spans(*uni_json, s, false);
  }
}

TEST_CASE("encode_with_offsets: spans as HF gives them", "[offsets]") {
  auto bl = byte_level_bpe(true);
  // Byte-level: the spans tile the bytes; an added token is its own match.
  auto o = offsets(*bl, "the dog<|endoftext|>中");
  REQUIRE(o.size() >= 4);
  CHECK(o.front() == std::pair<std::uint32_t, std::uint32_t>{0, 3});
  CHECK(std::find(o.begin(), o.end(), std::pair<std::uint32_t, std::uint32_t>{7, 20}) != o.end());
  CHECK(o.back().second == 23);

  // WordPiece: lowercased and accent-stripped words point at the original; [UNK] at its word.
  auto wp = wordpiece();
  Session s(*wp);
  std::vector<TokenId> ids;
  std::vector<Range> spans;
  wp->encode_with_offsets("The  DOG \xE2\x98\x83", ids, spans, s);  // ☃ is not in the vocabulary
  REQUIRE(ids.size() == 3);
  CHECK(spans[0].begin == 0);
  CHECK(spans[0].end == 3);
  CHECK(spans[1].begin == 5);
  CHECK(spans[1].end == 8);
  CHECK(ids[2] == static_cast<const WordPieceModel&>(wp->model()).unk_id());
  CHECK(spans[2].begin == 9);
  CHECK(spans[2].end == 12);

  // SentencePiece: the dummy prefix ▁ belongs to the first character; NFKC's "fi" points at ﬁ.
  auto [model, json] = sentencepiece(false);
  for (const Tokenizer* t : {model.get(), json.get()}) {
    auto p = offsets(*t, "\xEF\xAC\x81ne dog");
    REQUIRE(!p.empty());
    CHECK(p.front().first == 0);
    CHECK(p.back() == std::pair<std::uint32_t, std::uint32_t>{5, 9});  // "▁dog" ← " dog"
  }
}

namespace {
// A character-level BPE tokenizer.json over words (Whitespace), with `model` fields and a
// decoder spliced in.
std::unique_ptr<Tokenizer> char_bpe(const std::string& vocab, const std::string& merges, const std::string& model,
                                    const std::string& decoder, const std::string& pre = R"({"type":"Whitespace"})") {
  std::string j = R"({"version":"1.0","added_tokens":[],"normalizer":null,"pre_tokenizer":)" + pre +
                  R"(,"post_processor":null,"decoder":)" + decoder + R"(,"model":{"type":"BPE",)" + model +
                  R"("vocab":)" + vocab + R"(,"merges":)" + merges + "}}";
  auto t = load_tokenizer_json(j, "char_bpe.json");
  INFO((t.ok() ? std::string() : t.error().message));
  REQUIRE(t.ok());
  return std::move(t).value();
}

using Spans = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
struct Encoded {
  std::vector<TokenId> ids;
  Spans spans;
  std::string text;  // decoded
};

Encoded run(const Tokenizer& t, std::string_view text) {
  Encoded e;
  Session s(t);
  std::vector<Range> spans;
  t.encode_with_offsets(text, e.ids, spans, s);
  for (Range r : spans) e.spans.emplace_back(r.begin, r.end);
  REQUIRE(t.decode(e.ids.data(), e.ids.size(), e.text).ok());
  return e;
}
}  // namespace

TEST_CASE("character-level BPE: the end-of-word suffix, the unknown token, BPEDecoder", "[offsets][bpe]") {
  auto t = char_bpe(
      R"({"<unk>":0,"l":1,"o":2,"w":3,"e":4,"r":5,"lo":6,"low":7,"r</w>":8,"er</w>":9,"w</w>":10,"low</w>":11})",
      R"(["l o","lo w","e r</w>","lo w</w>"])", R"("unk_token":"<unk>","end_of_word_suffix":"</w>",)",
      R"({"type":"BPEDecoder","suffix":"</w>"})");
  // low: l o w</w> → lo w</w> → low</w>; lower: … w e r</w> → low er</w>; lo (a word of
  // its own before ☃): o</w> is unknown, and so is ☃</w> (HF's ids).
  Encoded e = run(*t, "low lower lo\xE2\x98\x83");
  CHECK(e.ids == std::vector<TokenId>{11, 7, 9, 1, 0, 0});
  CHECK(e.spans == Spans{{0, 3}, {4, 7}, {7, 9}, {10, 11}, {11, 12}, {12, 15}});
  CHECK(e.text == "low lower l<unk><unk>");  // the suffix becomes a space, but in the last token
}

TEST_CASE("character-level BPE: a continuing prefix, fused unknowns, the WordPiece decoder", "[offsets][bpe]") {
  auto t = char_bpe(R"({"[UNK]":0,"h":1,"##u":2,"##g":3,"##ug":4,"hug":5,"u":6})", R"(["##u ##g","h ##ug"])",
                    R"("unk_token":"[UNK]","continuing_subword_prefix":"##","fuse_unk":true,)",
                    R"({"type":"WordPiece","prefix":"##","cleanup":true})");
  // hug: h ##u ##g → h ##ug → hug (merge h + ##ug drops the prefix); ug: u ##g, no merge.
  Encoded e = run(*t, "hug ug \xE2\x98\x83\xE2\x98\x83");
  CHECK(e.ids == std::vector<TokenId>{5, 6, 3, 0});
  CHECK(e.spans == Spans{{0, 3}, {4, 5}, {5, 6}, {7, 13}});
  CHECK(e.text == "hug ug [UNK]");
  // A merge whose right token is shorter than the prefix cannot drop it: a located error.
  std::string j = R"({"model":{"type":"BPE","continuing_subword_prefix":"##","vocab":{"h":0,"u":1,"hu":2},)"
                  R"("merges":["h u"]},"pre_tokenizer":{"type":"Whitespace"},"decoder":null})";
  auto bad = load_tokenizer_json(j, "short.json");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("short.json") && Catch::Contains("merge 1") &&
                                      Catch::Contains("continuing_subword_prefix"));
}

TEST_CASE("character-level BPE: no unknown token, no decoder, a decoder chain", "[offsets][bpe]") {
  // A character without a token is left out; the spans after it stay on their characters
  // (HF's shift left by its length). Without a decoder the tokens are joined by spaces.
  auto t = char_bpe(R"({"a":0,"b":1,"ab":2})", R"([["a","b"]])", "", "null", "null");
  Encoded e = run(*t, "b\xE2\x98\x83" "ab");
  CHECK(e.ids == std::vector<TokenId>{1, 2});
  CHECK(e.spans == Spans{{0, 1}, {4, 6}});
  CHECK(e.text == "b ab");
  // ByteFallback, Replace, Strip, Fuse, as HF applies them token by token.
  auto c = char_bpe(R"({"<0xE2>":0,"<0x98>":1,"<0x83>":2,"x":3,"y":4,"xy":5})", R"(["x y"])", R"("byte_fallback":true,)",
                    R"({"type":"Sequence","decoders":[{"type":"ByteFallback"},)"
                    R"({"type":"Replace","pattern":{"String":"y"},"content":"Y"},)"
                    R"({"type":"Strip","content":"x","start":1,"stop":1},{"type":"Fuse"}]})");
  e = run(*c, "xy \xE2\x98\x83 x y");
  CHECK(e.ids == std::vector<TokenId>{5, 0, 1, 2, 3, 4});
  CHECK(e.text == "Y\xE2\x98\x83Y");  // xy → xY → Y; ☃; x → ""; y → Y
  // A decoder lmpipe does not read is a located error.
  std::string j = R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Whitespace"},)"
                  R"("decoder":{"type":"CTC"}})";
  auto bad = load_tokenizer_json(j, "ctc.json");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("ctc.json") && Catch::Contains("CTC"));
}

TEST_CASE("SentencePiece-style files: a normalized added token is matched in the normalized text, ▁ and all",
          "[offsets][bpe]") {
  // A BPE over ▁ text; "COVID" added, normalized or not. With the Prepend and Replace
  // normalizers HF normalizes "a COVID b" whole to "▁a▁COVID▁b" and the token's content to
  // "▁COVID": the token takes the ▁ of the space before it, and the parts keep theirs. Not
  // normalized, it is matched in the input, and each part gets a ▁ in front of its own.
  const std::string vocab = R"({"<unk>":0,"▁":1,"a":2,"b":3,"▁a":4,"▁b":5})";
  const std::string merges = R"([["▁","a"],["▁","b"]])";
  auto file = [&](bool normalized, const std::string& front) {
    return R"({"version":"1.0","added_tokens":[{"id":6,"content":"COVID","single_word":false,"lstrip":false,)"
           R"("rstrip":false,"normalized":)" + std::string(normalized ? "true" : "false") + R"(,"special":false}],)" +
           front + R"(,"post_processor":null,"decoder":null,"model":{"type":"BPE","unk_token":"<unk>",)"
           R"("byte_fallback":false,"vocab":)" + vocab + R"(,"merges":)" + merges + "}}";
  };
  const std::string prepend_replace =
      R"("normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},)"
      R"({"type":"Replace","pattern":{"String":" "},"content":"▁"}]},"pre_tokenizer":null)";
  const std::string metaspace_pre =
      R"("normalizer":{"type":"Lowercase"},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":false})";
  auto ids = [](const std::string& json, std::string_view text) {
    auto t = load_tokenizer_json(json, "sp.json");
    INFO((t.ok() ? std::string() : t.error().message));
    REQUIRE(t.ok());
    Session s(*t.value());
    std::vector<TokenId> out, with;
    std::vector<Range> spans;
    t.value()->encode(text, out, s);
    t.value()->encode_with_offsets(text, with, spans, s);
    CHECK(with == out);
    return out;
  };
  CHECK(ids(file(true, prepend_replace), "a COVID b") == std::vector<TokenId>{4, 6, 5});
  CHECK(ids(file(false, prepend_replace), "a COVID b") == std::vector<TokenId>{4, 1, 6, 1, 5});
  // At the start the normalized token takes the ▁ the Prepend put there.
  CHECK(ids(file(true, prepend_replace), "COVID b") == std::vector<TokenId>{6, 5});
  // Inside a word there is no ▁ before it: no match, every letter unknown but a and b.
  CHECK(ids(file(true, prepend_replace), "aCOVID") == std::vector<TokenId>{4, 0, 0, 0, 0, 0});
  // With the ▁ from the Metaspace pre-tokenizer, the normalizer (Lowercase) runs first: the
  // content "covid" is matched in the lowercased text; then each part gets its ▁ (" b"
  // has one already: the space). Not normalized, "COVID" is not in "a CoViD b".
  CHECK(ids(file(true, metaspace_pre), "a CoViD b") == std::vector<TokenId>{4, 1, 6, 5});
  CHECK(ids(file(false, metaspace_pre), "a CoViD b") == std::vector<TokenId>{4, 1, 0, 0, 0, 0, 0, 5});
}
