#include <catch2/catch.hpp>

#include "lmpipe/text/unicode.h"
#include "lmpipe/tok/pre_tokenizer.h"
#include "lmpipe/tok/tokenizer.h"
#include "lmpipe/tok/wordpiece.h"

using namespace lmp;
using namespace lmp::tok;

namespace {
std::vector<std::string> pieces(const WordPieceModel& m, std::string_view word) {
  ModelScratch s;
  std::vector<TokenId> ids;
  m.encode(word, ids, s);
  std::vector<std::string> out;
  for (TokenId id : ids) out.emplace_back(m.token_text(id));
  return out;
}

WordPieceModel model(std::vector<std::string> vocab, std::size_t max_chars = 100) {
  WordPieceOptions o;
  o.max_chars = max_chars;
  auto m = WordPieceModel::build(std::move(vocab), o);
  REQUIRE(m.ok());
  return std::move(m).value();
}

std::string bert(std::string_view s, text::BertNormalization o) {
  std::string out;
  text::bert_normalize(s, o, out);
  return out;
}

using V = std::vector<std::string>;
}  // namespace

TEST_CASE("WordPiece: greedy longest match first, ## for continuations", "[tok][wordpiece]") {
  auto m = model({"[UNK]", "un", "##aff", "##able", "aff", "##a", "a", "##ff", "##f", "中", "##文"});
  CHECK(pieces(m, "unaffable") == V{"un", "##aff", "##able"});
  CHECK(pieces(m, "affable") == V{"aff", "##able"});
  CHECK(pieces(m, "aa") == V{"a", "##a"});
  CHECK(pieces(m, "中文") == V{"中", "##文"});
  // Longest first, not best overall: "##aff" is taken although "##a" + "##ff" exist too.
  CHECK(pieces(m, "aaff") == V{"a", "##aff"});
}

TEST_CASE("WordPiece: any unmatched position makes the whole word one [UNK]", "[tok][wordpiece]") {
  auto m = model({"[UNK]", "un", "##aff", "##able"});
  CHECK(pieces(m, "unaffablex") == V{"[UNK]"});
  CHECK(pieces(m, "xunaff") == V{"[UNK]"});
  CHECK(pieces(m, "文") == V{"[UNK]"});
}

TEST_CASE("WordPiece: words over max_input_chars_per_word are [UNK]", "[tok][wordpiece]") {
  auto m = model({"[UNK]", "a", "##a"}, 4);
  CHECK(pieces(m, "aaaa") == V{"a", "##a", "##a", "##a"});
  CHECK(pieces(m, "aaaaa") == V{"[UNK]"});
  // Characters, not bytes: four 3-byte characters are within the limit.
  auto h = model({"[UNK]", "中", "##中"}, 4);
  CHECK(pieces(h, "中中中中").size() == 4);
}

TEST_CASE("WordPiece: the unknown token must be in the vocabulary", "[tok][wordpiece]") {
  auto m = WordPieceModel::build({"a", "##b"}, WordPieceOptions{});
  REQUIRE(!m.ok());
  CHECK_THAT(m.error().message, Catch::Contains("[UNK]"));
}

// The cases of HF tokenizers' own BertNormalizer tests.
TEST_CASE("BERT normalization matches HF's BertNormalizer", "[text][bert]") {
  text::BertNormalization all;  // clean, chinese, strip accents, lowercase
  CHECK(bert("Héllo World", all) == "hello world");
  CHECK(bert("中文字", all) == " 中  文  字 ");
  CHECK(bert("a中b文c", all) == "a 中 b 文 c");
  CHECK(bert("\tTab\n\r", all) == " tab  ");
  CHECK(bert("MiXeD Café", all) == "mixed cafe");
  CHECK(bert("e\u0301", all) == "e");
  CHECK(bert("\uFB01ligature", all) == "\uFB01ligature");
  CHECK(bert(std::string_view("null\0here", 9), all) == "nullhere");
  CHECK(bert("repl\uFFFDchar", all) == "replchar");
  CHECK(bert("ctrl\achar", all) == "ctrlchar");
  CHECK(bert("\u01C5", all) == "\u01C6");
  CHECK(bert("\u0130stanbul", all) == "istanbul");
  CHECK(bert("stra\u00DFe", all) == "stra\u00DFe");
  text::BertNormalization lower_only{false, false, false, true};
  CHECK(bert("\u0130stanbul", lower_only) == "i\u0307stanbul");
  CHECK(bert("MiXeD Café", lower_only) == "mixed café");
  text::BertNormalization strip_only{false, false, true, false};
  CHECK(bert("\u0130stanbul", strip_only) == "Istanbul");
  CHECK(bert("MiXeD Café", strip_only) == "MiXeD Cafe");
  text::BertNormalization none{false, false, false, false};
  CHECK(bert("\tTab\n\r", none) == "\tTab\n\r");
  // Invalid UTF-8 counts as U+FFFD: cleaned away.
  CHECK(bert("a\xFF" "b", all) == "ab");
}

TEST_CASE("BERT pre-tokenizer: whitespace removed, punctuation isolated", "[tok][bert]") {
  auto pre = make_pre_tokenizer("bert");
  REQUIRE(pre.ok());
  std::string s = "Hey friend!     How are you?!? $5+x";
  std::vector<Range> r;
  (*pre)->split(s, r);
  std::vector<std::string> got;
  for (auto x : r) got.push_back(s.substr(x.begin, x.end - x.begin));
  CHECK(got == V{"Hey", "friend", "!", "How", "are", "you", "?", "!", "?", "$", "5", "+", "x"});
}

TEST_CASE("WordPiece tokenizer: template, decode with cleanup", "[tok][wordpiece]") {
  auto built = WordPieceModel::build({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "##s", ",", "world", "!", "don",
                                      "'", "t"},
                                     WordPieceOptions{});
  REQUIRE(built.ok());
  TokenizerSpec spec;
  spec.bert = text::BertNormalization{};
  spec.pre = std::move(make_pre_tokenizer("bert")).value();
  spec.decoder = Decoder::wordpiece;
  spec.template_prefix = {2};
  spec.template_suffix = {3};
  std::vector<AddedToken> added = {{"[CLS]", 2, true, false, false, false, false},
                                   {"[SEP]", 3, true, false, false, false, false}};
  Tokenizer t(std::make_unique<WordPieceModel>(std::move(built).value()), std::move(spec), std::move(added),
              TokenizerInfo{});
  Session s(t);
  std::vector<TokenId> ids;
  t.encode("Hellos, World! Don't", ids, s);
  CHECK(ids == std::vector<TokenId>{4, 5, 6, 7, 8, 9, 10, 11});
  std::string text;
  REQUIRE(t.decode(ids.data(), ids.size(), text).ok());
  CHECK(text == "hellos, world! don ' t");  // HF cleans each token alone: " ' " never matches
  std::vector<TokenId> with = {2, 4, 3};
  text.clear();
  REQUIRE(t.decode(with.data(), with.size(), text, true).ok());
  CHECK(text == "hello");
  CHECK(t.token_string(5) == "##s");
  CHECK(s.unknown_words() == 0);
  ids.clear();
  t.encode("hello xyz", ids, s);
  CHECK(ids == std::vector<TokenId>{4, 1});
  CHECK(s.unknown_words() == 1);
}

// ---- Training ----------------------------------------------------------------------

#include "lmpipe/tok/wordpiece_trainer.h"

namespace {
std::vector<std::string> train_vocab(const WordCountMap& wc, WordPieceAlgo algo, std::uint64_t min_freq = 0,
                                     std::size_t vocab = 100) {
  WordPieceTrainerConfig cfg;
  cfg.special_tokens = {"[UNK]"};
  cfg.algo = algo;
  cfg.min_frequency = min_freq;
  cfg.vocab_size = vocab;
  TrainReport rep;
  auto t = train_wordpiece(wc, cfg, rep);
  REQUIRE(t.ok());
  std::vector<std::string> v;
  for (std::size_t i = 0; i < (*t)->model().vocab_size(); ++i) v.emplace_back((*t)->model().token_text(static_cast<TokenId>(i)));
  return v;
}
}  // namespace

TEST_CASE("WordPiece training (hf): specials, alphabet, ## continuations, merges by count", "[tok][wordpiece][train]") {
  WordCountMap wc = {{"ab", 5}, {"abc", 3}};
  // Words in byte order: "ab" → a ##b, "abc" → a ##b ##c; (a, ##b) 8 times, then (ab, ##c).
  CHECK(train_vocab(wc, WordPieceAlgo::hf) == V{"[UNK]", "a", "b", "c", "##b", "##c", "ab", "abc"});
}

TEST_CASE("WordPiece training: likelihood prefers pairs whose parts are rare", "[tok][wordpiece][train]") {
  WordCountMap wc = {{"ab", 10}, {"ac", 10}, {"ad", 10}, {"ef", 3}};
  // score(a, ##b) = 10 / (30 · 10); score(e, ##f) = 3 / (3 · 3): "ef" first.
  auto lk = train_vocab(wc, WordPieceAlgo::likelihood, 0, 12);
  auto hf = train_vocab(wc, WordPieceAlgo::hf, 0, 12);
  REQUIRE(lk.size() == 12);
  REQUIRE(hf.size() == 12);
  CHECK(lk[11] == "ef");
  CHECK(hf[11] == "ab");  // by count: (a, ##b) 10 times, the smallest pair of the tie
  // min_frequency is a floor on the pair count: "ef" (3) is never merged.
  auto floor = train_vocab(wc, WordPieceAlgo::likelihood, 5);
  CHECK(std::find(floor.begin(), floor.end(), "ef") == floor.end());
  CHECK(std::find(floor.begin(), floor.end(), "ab") != floor.end());
}

TEST_CASE("WordPiece training needs the unknown token among the specials", "[tok][wordpiece][train]") {
  WordPieceTrainerConfig cfg;
  cfg.special_tokens = {"[PAD]"};
  TrainReport rep;
  auto t = train_wordpiece(WordCountMap{{"ab", 1}}, cfg, rep);
  REQUIRE(!t.ok());
  CHECK_THAT(t.error().message, Catch::Contains("-S '[UNK]'"));
}

TEST_CASE("WordPiece training: the trained tokenizer encodes its own words", "[tok][wordpiece][train][property]") {
  WordCountMap wc = {{"tokenizer", 7}, {"token", 9}, {"tokens", 4}, {"izer", 2}, {"中文", 3}};
  for (auto algo : {WordPieceAlgo::likelihood, WordPieceAlgo::hf}) {
    WordPieceTrainerConfig cfg;
    cfg.special_tokens = {"[UNK]", "[CLS]", "[SEP]"};
    cfg.algo = algo;
    cfg.vocab_size = 60;
    TrainReport rep;
    auto t = train_wordpiece(wc, cfg, rep);
    REQUIRE(t.ok());
    Session s(**t);
    std::vector<TokenId> ids;
    (*t)->encode("tokenizer tokens 中文", ids, s);
    std::string back;
    REQUIRE((*t)->decode(ids.data(), ids.size(), back).ok());
    CHECK(back == "tokenizer tokens 中 文");  // CJK ideographs are words of their own
    CHECK(s.unknown_words() == 0);
    CHECK((*t)->template_prefix() == std::vector<TokenId>{1});
  }
}
