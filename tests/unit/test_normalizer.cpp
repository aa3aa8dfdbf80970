// HF's normalizers as a chain (lmpipe/tok/normalizer.h): outputs checked by hand against
// HF tokenizers' own normalizeString (node binding 0.6.0), the source of every output
// byte, and tokenizer.json files that carry a chain.
#include <catch2/catch.hpp>

#include "lmpipe/tok/normalizer.h"
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
