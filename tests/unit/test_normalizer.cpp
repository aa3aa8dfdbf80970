// HF's normalizers as a chain (lmpipe/tok/normalizer.h): outputs checked by hand against
// HF tokenizers' own normalizeString (node binding 0.6.0), the source of every output
// byte, and tokenizer.json files that carry a chain (byte-level BPE, WordPiece, Unigram).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "lmpipe/core/base64.h"
#include "lmpipe/core/rng.h"
#include "lmpipe/tok/normalizer.h"
#include "lmpipe/tok/sp_charsmap.h"
#include "lmpipe/tok/tokenizer.h"
#include "lmpipe/tok/wordpiece_trainer.h"
#include "tok_fixtures.h"

using namespace lmp;
using namespace lmp::tok;
using K = NormStep::Kind;

namespace {
NormStep step(K k) {
  NormStep s;
  s.kind = k;
  return s;
}
NormStep replace(std::string pattern, std::string content, bool regex = false) {
  NormStep s = step(K::replace);
  s.pattern = std::move(pattern);
  s.content = std::move(content);
  s.regex = regex;
  return s;
}
std::string run(std::vector<NormStep> steps, std::string_view in, std::vector<text::SourceSpan>* src = nullptr) {
  auto n = Normalizer::create(std::move(steps));
  REQUIRE(n.ok());
  std::string out;
  n.value()->apply(in, out, src);
  return out;
}
}  // namespace

TEST_CASE("normalizer chain: the outputs of HF's normalizers", "[tok][normalizer]") {
  // (HF: sequenceNormalizer([NFD, Lowercase, StripAccents]).normalizeString(...))
  CHECK(run({step(K::nfd), step(K::lowercase), step(K::strip_accents)}, "Émigré ÇA Straße क्षि") ==
        "emigre ca straße कष");  // StripAccents drops Mc (ि) as well as Mn
  // Lowercase is per character: İ gets its dot, a final Σ is σ.
  CHECK(run({step(K::lowercase)}, "İ ΣΑΣ ǅ") == "i\xCC\x87 σασ ǆ");
  NormStep left = step(K::strip);
  left.left = true;
  CHECK(run({left}, " \t a b \n") == "a b \n");
  NormStep both = left;
  both.right = true;
  CHECK(run({both}, " \t a b \n") == "a b");
  CHECK(run({both}, " \t\n") == "");
  NormStep pre = step(K::prepend);
  pre.content = ">";
  CHECK(run({pre, replace("ab", "X")}, "abcab") == ">XcX");
  CHECK(run({pre}, "") == "");  // nothing to prepend to
  CHECK(run({replace("\\s+", " ", true)}, "a \t\n b  c") == "a b c");
  CHECK(run({replace("e", "")}, "eerie") == "ri");
  NormStep bert = step(K::bert);
  bert.bert.lowercase = false;
  bert.bert.strip_accents = false;
  CHECK(run({bert, step(K::lowercase)}, "Ａ中b") == "ａ 中 b");
}

TEST_CASE("normalizer chain: every output byte points at its source", "[tok][normalizer][offsets]") {
  std::vector<text::SourceSpan> src;
  // A replacement points at the last character it replaced (HF's alignments), a prefix at
  // the first character; bytes passed through point at themselves.
  NormStep pre = step(K::prepend);
  pre.content = "__";
  std::string out = run({replace("ab", "XYZ"), pre}, "abé", &src);
  REQUIRE(out == "__XYZé");
  REQUIRE(src.size() == out.size());
  for (int k : {0, 1}) CHECK((src[k].begin == 1 && src[k].end == 2));  // "__" → the first char now: X ← b
  for (int k : {2, 3, 4}) CHECK((src[k].begin == 1 && src[k].end == 2));
  CHECK((src[5].begin == 2 && src[5].end == 3));
  CHECK((src[6].begin == 3 && src[6].end == 4));
  // Through two steps: ﬁ (3 bytes) → NFKC "fi" → Lowercase: both letters point at ﬁ.
  out = run({step(K::nfkc), step(K::lowercase)}, "Aﬁ", &src);
  REQUIRE(out == "afi");
  CHECK((src[0].begin == 0 && src[0].end == 1));
  CHECK((src[1].begin == 1 && src[1].end == 4));
  CHECK((src[2].begin == 1 && src[2].end == 4));
  // Removed text leaves no byte; what follows keeps its own source.
  out = run({replace("-", "")}, "a-b", &src);
  REQUIRE(out == "ab");
  CHECK((src[1].begin == 2 && src[1].end == 3));
}

TEST_CASE("normalizer chain: invalid steps are refused", "[tok][normalizer]") {
  CHECK_FALSE(Normalizer::create({replace("", "x")}).ok());
  auto bad = Normalizer::create({replace("(", "x", true)});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("normalizer step 0") && Catch::Contains("invalid regex"));
}

TEST_CASE("tokenizer.json: a normalizer chain loads, encodes and is written back", "[tok][normalizer]") {
  auto t = test::trained_bpe("gpt2", true, "the quick brown fox jumps over the lazy dog\ncafé naïve\n", 300);
  std::string j = to_tokenizer_json(*t);
  auto with_norm = [&](const std::string& norm) {
    std::string k = j;
    auto at = k.find(R"("normalizer":null)");
    REQUIRE(at != std::string::npos);
    k.replace(at, 17, R"("normalizer":)" + norm);
    return k;
  };
  const std::string chain =
      R"({"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"Lowercase"},{"type":"StripAccents"},)"
      R"({"type":"Replace","pattern":{"Regex":"\\s+"},"content":" "},{"type":"Strip","strip_left":true,"strip_right":false}]})";
  auto loaded = load_tokenizer_json(with_norm(chain), "n.json");
  REQUIRE(loaded.ok());
  const Tokenizer& n = *loaded.value();
  REQUIRE(n.normalizer() != nullptr);
  CHECK(n.normalizer()->steps().size() == 5);
  Session s1(n), s2(*t);
  std::vector<TokenId> a, b;
  n.encode("  CAFÉ   Naïve", a, s1, false);
  t->encode("cafe naive", b, s2, false);  // (accents stripped, spaces folded, left stripped)
  CHECK(a == b);
  // Written back as the same chain, which loads to the same tokenizer.
  std::string w = to_tokenizer_json(n);
  CHECK(w.find(R"("normalizer":)" + chain) != std::string::npos);
  auto again = load_tokenizer_json(w, "w.json");
  REQUIRE(again.ok());
  CHECK(to_tokenizer_json(*again.value()) == w);
  // One form alone keeps its fast path; a BertNormalizer in a byte-level file loads.
  auto nfc = load_tokenizer_json(with_norm(R"({"type":"Sequence","normalizers":[{"type":"NFC"}]})"), "c.json");
  REQUIRE(nfc.ok());
  CHECK(nfc.value()->normalizer() == nullptr);
  CHECK(nfc.value()->normalization() == Normalization::nfc);
  CHECK(load_tokenizer_json(with_norm(R"({"type":"BertNormalizer"})"), "b.json").ok());
  // Errors name the place in the file.
  auto unknown = load_tokenizer_json(with_norm(R"({"type":"Sequence","normalizers":[{"type":"NMT"}]})"), "u.json");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.error().message, Catch::Contains("u.json") && Catch::Contains("'NMT' is not supported"));
  auto nopat = load_tokenizer_json(with_norm(R"({"type":"Replace","pattern":{},"content":"x"})"), "p.json");
  REQUIRE_FALSE(nopat.ok());
  CHECK_THAT(nopat.error().message, Catch::Contains("p.json") && Catch::Contains("Replace needs a pattern"));
  auto badre = load_tokenizer_json(with_norm(R"({"type":"Replace","pattern":{"Regex":"("},"content":"x"})"), "r.json");
  REQUIRE_FALSE(badre.ok());
  CHECK_THAT(badre.error().message, Catch::Contains("r.json") && Catch::Contains("invalid regex"));
}

TEST_CASE("WordPiece tokenizer.json: its normalizer and pre-tokenizer steps are written back", "[tok][normalizer][wordpiece]") {
  WordPieceTrainerConfig cfg;
  cfg.special_tokens = {"[UNK]", "[CLS]", "[SEP]"};
  cfg.vocab_size = 120;
  TrainReport rep;
  auto trained = train_wordpiece(WordCountMap{{"hello", 5}, {"world", 4}, {"12", 3}, {",", 2}}, cfg, rep);
  REQUIRE(trained.ok());
  std::string j = to_tokenizer_json(*trained.value());
  // The value of "key", up to the key written after it.
  auto swap_in = [&](const std::string& key, const std::string& next, const std::string& value) {
    auto at = j.find("\"" + key + "\":");
    auto end = j.find(",\"" + next + "\":");
    REQUIRE((at != std::string::npos && end != std::string::npos));
    auto v = at + key.size() + 3;
    j.replace(v, end - v, value);
  };
  const std::string norm = R"({"type":"Sequence","normalizers":[{"type":"NFKC"},{"type":"Lowercase"}]})";
  const std::string pre =
      R"({"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},{"type":"Punctuation","behavior":"Isolated"},)"
      R"({"type":"Digits","individual_digits":true}]})";
  swap_in("normalizer", "pre_tokenizer", norm);
  swap_in("pre_tokenizer", "post_processor", pre);
  auto loaded = load_tokenizer_json(j, "wp.json");
  REQUIRE(loaded.ok());
  std::string w = to_tokenizer_json(*loaded.value());
  CHECK(w.find(R"("normalizer":)" + norm) != std::string::npos);
  CHECK(w.find(R"("pre_tokenizer":)" + pre) != std::string::npos);
  auto again = load_tokenizer_json(w, "w.json");
  REQUIRE(again.ok());
  Session s1(*loaded.value()), s2(*again.value());
  std::vector<TokenId> a, b;
  loaded.value()->encode("ＨＥＬＬＯ, world 12", a, s1, false);
  again.value()->encode("ＨＥＬＬＯ, world 12", b, s2, false);
  CHECK(a == b);
  CHECK(a.size() == 5);  // hello , world 1 2
}

namespace {
// A small HF Unigram tokenizer.json with byte fallback, with the normalizer and
// pre-tokenizer given as JSON.
std::string unigram_json(const std::string& normalizer, const std::string& pre) {
  std::string vocab = R"(["<unk>",0.0],["▁",-2.0],["a",-3.0],["b",-3.0],["f",-3.0],["i",-3.0],["▁fi",-1.0],)"
                      R"(["ab",-1.5],["▁ab",-1.0],["▁a",-2.0])";
  for (int b = 0; b < 256; ++b) vocab += fmt::format(R"(,["<0x{:02X}>",-10.0])", b);
  return R"({"version":"1.0","added_tokens":[],"normalizer":)" + normalizer + R"(,"pre_tokenizer":)" + pre +
         R"(,"post_processor":null,"decoder":{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true},)"
         R"("model":{"type":"Unigram","unk_id":0,"byte_fallback":true,"vocab":[)" + vocab + "]}}";
}
std::vector<TokenId> ids_of(const Tokenizer& t, std::string_view text) {
  Session s(t);
  std::vector<TokenId> out;
  t.encode(text, out, s, false);
  return out;
}
}  // namespace

TEST_CASE("Unigram tokenizer.json: transformers' chains with a Precompiled step", "[tok][normalizer][spm]") {
  const std::string map = R"({"type":"Precompiled","precompiled_charsmap":")" + base64_encode(build_charsmap(CharsmapRule::nfkc)) + R"("})";
  const std::string meta = R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true})";
  auto plain = load_tokenizer_json(unigram_json("null", meta), "plain.json");
  REQUIRE(plain.ok());
  // transformers' SpmConverter: Precompiled, Strip right, Replace " {2,}" by ▁.
  const std::string spm = R"({"type":"Sequence","normalizers":[)" + map +
                          R"(,{"type":"Strip","strip_left":false,"strip_right":true},)"
                          R"({"type":"Replace","pattern":{"Regex":" {2,}"},"content":"▁"}]})";
  auto t = load_tokenizer_json(unigram_json(spm, meta), "spm.json");
  REQUIRE(t.ok());
  REQUIRE(t.value()->normalizer() != nullptr);
  REQUIRE(t.value()->normalizer()->steps().size() == 3);
  CHECK(t.value()->normalizer()->steps()[0].kind == K::precompiled);
  // "ﬁ  ab  " → "fi  ab" → "fi▁ab" → "▁fi▁ab", as the plain file reads "fi ab".
  CHECK(ids_of(*t.value(), "\xEF\xAC\x81  ab  ") == ids_of(*plain.value(), "fi ab"));
  CHECK(ids_of(*t.value(), "\xEF\xAC\x81  ab  ") == std::vector<TokenId>{6, 8});
  // The chain goes out as it came in, Precompiled map included.
  CHECK(t.value()->normalizer()->to_json() == spm);
  // No pre-tokenizer: the model reads the chain's text (here spaces, as bytes).
  auto raw = load_tokenizer_json(unigram_json(map, "null"), "raw.json");
  REQUIRE(raw.ok());
  CHECK(ids_of(*raw.value(), "\xEF\xAC\x81 ab") == std::vector<TokenId>{4, 5, 10 + 0x20, 7});
  // Transformers' form with no converter: Precompiled, Replace " " by ▁, nothing prepended.
  const std::string bare = R"({"type":"Sequence","normalizers":[)" + map +
                           R"(,{"type":"Replace","pattern":{"String":" "},"content":"▁"}]})";
  auto b = load_tokenizer_json(unigram_json(bare, "null"), "bare.json");
  REQUIRE(b.ok());
  CHECK(ids_of(*b.value(), "ab ab") == std::vector<TokenId>{7, 8});
  // SentencePiece's own forms keep their fast paths (no chain).
  auto fast = load_tokenizer_json(unigram_json(map, meta), "fast.json");
  REQUIRE(fast.ok());
  CHECK(fast.value()->normalizer() == nullptr);
  // Errors: another pre-tokenizer, a map that is not base64, a broken map; each located.
  auto other = load_tokenizer_json(unigram_json(map, R"({"type":"Whitespace"})"), "w.json");
  REQUIRE_FALSE(other.ok());
  CHECK_THAT(other.error().message, Catch::Contains("w.json") && Catch::Contains("needs the Metaspace pre-tokenizer or none"));
  auto not64 = load_tokenizer_json(
      unigram_json(R"({"type":"Sequence","normalizers":[{"type":"Lowercase"},{"type":"Precompiled","precompiled_charsmap":"@@"}]})", meta),
      "b64.json");
  REQUIRE_FALSE(not64.ok());
  CHECK_THAT(not64.error().message, Catch::Contains("b64.json") && Catch::Contains("not base64"));
  auto short_map = load_tokenizer_json(
      unigram_json(R"({"type":"Sequence","normalizers":[{"type":"NFKC"},{"type":"Precompiled","precompiled_charsmap":"AAE="}]})", meta),
      "short.json");
  REQUIRE_FALSE(short_map.ok());
  CHECK_THAT(short_map.error().message, Catch::Contains("short.json") && Catch::Contains("shorter than its header"));
}

TEST_CASE("Unigram byte fallback: every byte of an unknown run spans the run, as HF's offsets", "[tok][offsets][spm]") {
  auto t = load_tokenizer_json(unigram_json("null", "null"), "raw.json");
  REQUIRE(t.ok());
  Session s(*t.value());
  std::vector<TokenId> ids;
  std::vector<Range> spans;
  t.value()->encode_with_offsets("ab  \xE4\xB8\xAD" "ab", ids, spans, s, false);  // two spaces and 中: one unknown run
  REQUIRE(ids == std::vector<TokenId>{7, 10 + 0x20, 10 + 0x20, 10 + 0xE4, 10 + 0xB8, 10 + 0xAD, 7});
  CHECK((spans[0].begin == 0 && spans[0].end == 2));
  for (std::size_t k = 1; k <= 5; ++k) CHECK((spans[k].begin == 2 && spans[k].end == 7));
  CHECK((spans[6].begin == 7 && spans[6].end == 9));
}

TEST_CASE("base64: encode and decode are inverse", "[core][property]") {
  Rng rng(7);
  for (int n = 0; n < 64; ++n) {
    std::string bytes(static_cast<std::size_t>(n), '\0');
    for (char& c : bytes) c = static_cast<char>(rng.next() & 0xFF);
    std::string text = base64_encode(bytes), back;
    CHECK(text.size() == (bytes.size() + 2) / 3 * 4);
    REQUIRE(base64_decode(text, back));
    CHECK(back == bytes);
  }
  CHECK(base64_encode("fo") == "Zm8=");
  std::string out;
  CHECK_FALSE(base64_decode("Zm=8", out));
  CHECK_FALSE(base64_decode("Z!8=", out));
}

TEST_CASE("added tokens: normalized ones matched in normalized text, stripped space in their offsets",
          "[tok][normalizer][offsets]") {
  auto t = test::trained_bpe("gpt2", true, "the quick brown fox jumps over the lazy dog\ncafé naïve\n", 300, false);
  std::string j = to_tokenizer_json(*t);
  const TokenId n = static_cast<TokenId>(t->vocab_size());
  auto tok = [](const char* content, TokenId id, bool normalized, bool lstrip = false, bool rstrip = false) {
    return fmt::format(R"({{"id":{},"content":"{}","single_word":false,"lstrip":{},"rstrip":{},"normalized":{},"special":false}})",
                       id, content, lstrip, rstrip, normalized);
  };
  j.replace(j.find(R"("added_tokens":[])"), 17,
            R"("added_tokens":[)" + tok("HeLLo", n, true) + "," + tok("CAFÉ", n + 1, false) + "," +
                tok("Wide", n + 2, true, true, true) + "]");
  j.replace(j.find(R"("normalizer":null)"), 17, R"("normalizer":{"type":"Sequence","normalizers":[{"type":"Lowercase"}]})");
  auto loaded = load_tokenizer_json(j, "added.json");
  REQUIRE(loaded.ok());
  const Tokenizer& a = *loaded.value();
  Session s(a);
  std::vector<TokenId> ids;
  std::vector<Range> spans;
  // "HeLLo" is normalized to "hello" and matched after lowercasing: "hello", "HELLO" too.
  // "CAFÉ" is not normalized: matched in the input only as written.
  a.encode_with_offsets("hello HELLO CAFÉ café", ids, spans, s);
  REQUIRE(ids.size() >= 4);
  CHECK(ids[0] == n);
  CHECK((spans[0].begin == 0 && spans[0].end == 5));
  CHECK(std::count(ids.begin(), ids.end(), n) == 2);
  CHECK(std::count(ids.begin(), ids.end(), n + 1) == 1);
  // lstrip and rstrip: the white space beside the token is part of it, offsets included.
  ids.clear();
  spans.clear();
  a.encode_with_offsets("x  WIDE \ty", ids, spans, s);
  auto at = std::find(ids.begin(), ids.end(), n + 2);
  REQUIRE(at != ids.end());
  const Range w = spans[static_cast<std::size_t>(at - ids.begin())];
  CHECK((w.begin == 1 && w.end == 9));
  std::vector<TokenId> plain;
  a.encode("x  WIDE \ty", plain, s);
  CHECK(plain == ids);
  // Without parsing special text, nothing is matched.
  plain.clear();
  a.encode("hello", plain, s, false);
  CHECK(std::count(plain.begin(), plain.end(), n) == 0);
}

TEST_CASE("encode's piece records outlive the segments they came from", "[tok][normalizer]") {
  auto t = test::trained_bpe("gpt2", true, "the quick brown fox jumps over the lazy dog\n", 300);
  std::string j = to_tokenizer_json(*t);
  j.replace(j.find(R"("normalizer":null)"), 17, R"("normalizer":{"type":"Sequence","normalizers":[{"type":"Lowercase"}]})");
  auto loaded = load_tokenizer_json(j, "lower.json");
  REQUIRE(loaded.ok());
  Session s(*loaded.value());
  std::vector<PieceCount> pieces;
  s.pieces = &pieces;
  std::vector<TokenId> ids;
  // Three segments around two special tokens, each normalized into the Session in turn.
  loaded.value()->encode("THE Quick<|endoftext|>BROWN fox<|endoftext|>LAZY dog", ids, s);
  std::vector<std::string> texts;
  for (const PieceCount& p : pieces) texts.emplace_back(p.text);
  CHECK(texts == std::vector<std::string>{"the", " quick", "<|endoftext|>", "brown", " fox", "<|endoftext|>", "lazy", " dog"});
}

TEST_CASE("tokenizer.json: BPE end_of_word_suffix is read and written back, a subword prefix refused",
          "[tok][bpe]") {
  auto t = test::trained_bpe("gpt2", true, "the quick brown fox\n", 280, false);
  std::string j = to_tokenizer_json(*t);
  const std::string none = R"("end_of_word_suffix":null)";
  REQUIRE(j.find(none) != std::string::npos);
  std::string with = j;
  with.replace(with.find(none), none.size(), R"("end_of_word_suffix":"</w>")");
  auto loaded = load_tokenizer_json(with, "suffix.json");
  REQUIRE(loaded.ok());
  REQUIRE(loaded.value()->bpe() != nullptr);
  CHECK(loaded.value()->bpe()->end_of_word_suffix() == "</w>");
  CHECK(to_tokenizer_json(*loaded.value()).find(R"("end_of_word_suffix":"</w>")") != std::string::npos);
  std::string prefix = j;
  const std::string p = R"("continuing_subword_prefix":null)";
  REQUIRE(prefix.find(p) != std::string::npos);
  prefix.replace(prefix.find(p), p.size(), R"("continuing_subword_prefix":"##")");
  auto refused = load_tokenizer_json(prefix, "prefix.json");
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("prefix.json") && Catch::Contains("continuing_subword_prefix"));
}
