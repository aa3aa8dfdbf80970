#include <catch2/catch.hpp>

#include <random>

#include "lmpipe/tok/bpe_trainer.h"
#include "lmpipe/tok/sp_trainer.h"
#include "lmpipe/tok/wordpiece_trainer.h"

using namespace lmp;
using namespace lmp::tok;

namespace {
std::unique_ptr<Tokenizer> train(const WordCountMap& wc, BpeTrainerConfig cfg, TrainReport* rep = nullptr) {
  TrainReport r;
  auto pre = make_pre_tokenizer("gpt2");
  auto t = train_bpe(wc, cfg, std::move(pre).value(), r);
  REQUIRE(t.ok());
  if (rep) *rep = r;
  return std::move(t).value();
}

std::string corpus(std::uint32_t seed, std::size_t lines) {
  std::mt19937 rng(seed);
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "away", "中文", "字符",
                         "1999", "it's", "x+y", "(ok)", "naïve", "über"};
  std::string s;
  for (std::size_t i = 0; i < lines; ++i) {
    std::size_t n = 1 + rng() % 12;
    for (std::size_t k = 0; k < n; ++k) {
      if (k) s += ' ';
      s += words[rng() % (sizeof(words) / sizeof(words[0]))];
    }
    s += '\n';
  }
  return s;
}
}  // namespace

// The case of HF tokenizers' own trainer test: the same vocabulary, ids and merges.
TEST_CASE("BPE trainer reproduces HF's BpeTrainer on its own test case", "[tok][train]") {
  WordCountMap wc = {{"roses", 1}, {"are", 2}, {"red", 1}, {"voilets", 1}, {"blue", 1}, {"BERT", 1},
                     {"is", 2},    {"big", 1}, {"and", 1}, {"so", 1},      {"GPT-2", 1}};
  BpeTrainerConfig cfg;
  cfg.min_frequency = 2;
  TrainReport rep;
  auto t = train(wc, cfg, &rep);
  const char* expected = "-2BEGPRTabdegilnorstuv";
  REQUIRE(t->vocab_size() == 25);
  for (int i = 0; i < 22; ++i) CHECK(*t->piece(i) == std::string(1, expected[i]));
  CHECK(*t->piece(22) == "re");
  CHECK(*t->piece(23) == "are");
  CHECK(*t->piece(24) == "is");
  auto& m = t->bpe()->merge_list();
  REQUIRE(m.size() == 3);
  CHECK(m[0] == std::pair<TokenId, TokenId>{17, 11});
  CHECK(m[1] == std::pair<TokenId, TokenId>{8, 22});
  CHECK(m[2] == std::pair<TokenId, TokenId>{13, 18});
  CHECK(rep.stop == StopReason::min_frequency);
  CHECK(rep.stop_count == 1);
}

TEST_CASE("max_token_length limits merges as HF does", "[tok][train]") {
  WordCountMap wc = {{"sin", 2}, {"Sin", 2}, {"Lon", 2}, {"Ano", 2}, {"so", 2}, {"GP", 2}};
  BpeTrainerConfig cfg;
  cfg.max_token_length = 2;
  auto t = train(wc, cfg);
  for (std::size_t i = 0; i < t->vocab_size(); ++i) CHECK(t->piece(static_cast<TokenId>(i))->size() <= 2);
}

TEST_CASE("min_frequency: no merge below the threshold", "[tok][train][property]") {
  auto pre = make_pre_tokenizer("gpt2");
  REQUIRE(pre.ok());
  for (std::uint64_t f : {2u, 5u, 20u}) {
    WordCounter wc(*pre.value(), 1);
    wc.add(corpus(static_cast<std::uint32_t>(f), 300));
    auto counts = wc.take();
    BpeTrainerConfig cfg;
    cfg.vocab_size = 100000;
    cfg.min_frequency = f;
    TrainReport rep;
    auto t = train(counts, cfg, &rep);
    CHECK(rep.stop != StopReason::vocab_full);
    if (rep.stop == StopReason::min_frequency) CHECK(rep.stop_count < f);
    // Every merge's pair occurred at least f times when it was made: re-count on the
    // corpus encoded up to that merge is costly; check the weaker, exact end condition:
    // training with f-1 never yields fewer merges.
    BpeTrainerConfig lower = cfg;
    lower.min_frequency = f - 1;
    TrainReport rep2;
    train(counts, lower, &rep2);
    CHECK(rep2.merges >= rep.merges);
  }
}

TEST_CASE("training is identical across thread counts", "[tok][train][property]") {
  auto pre = make_pre_tokenizer("gpt2");
  REQUIRE(pre.ok());
  std::string text = corpus(42, 20000);
  std::string first;
  for (int threads : {1, 2, 4}) {
    WordCounter wc(*pre.value(), threads);
    wc.add(text);
    auto counts = wc.take();
    BpeTrainerConfig cfg;
    cfg.vocab_size = 400;
    auto t = train(counts, cfg);
    std::string j = to_tokenizer_json(*t);
    if (first.empty()) first = j;
    CHECK(j == first);
  }
}

TEST_CASE("count files round-trip and add up", "[tok][train]") {
  WordCountMap wc = {{"hello", 3}, {" world\n", 2}, {std::string("\x00\xff", 2), 1}};
  std::string text = format_counts(wc, "gpt2");
  WordCountMap back;
  std::string pre;
  REQUIRE(read_counts(text, "c", back, pre).ok());
  REQUIRE(read_counts(text, "c", back, pre).ok());
  CHECK(pre == "gpt2");
  CHECK(back.size() == 3);
  CHECK(back["hello"] == 6);
  CHECK(back[std::string("\x00\xff", 2)] == 2);
  std::string other = "gpt2";
  std::string wrong = "#lmpipe-counts v1 pre_tokenizer=cl100k\n";
  CHECK_FALSE(read_counts(wrong, "w", back, other).ok());
  CHECK_FALSE(read_counts("1\thello\n", "w", back, other).ok());
  CHECK_FALSE(read_counts("#lmpipe-counts v1 pre_tokenizer=gpt2\nx\thello\n", "w", back, other).ok());
  // One word's count summed over its lines must fit in 64 bits.
  WordCountMap big;
  auto twice = read_counts("#lmpipe-counts v1 pre_tokenizer=gpt2\n18446744073709551615\thi\n1\thi\n", "b", big, other);
  REQUIRE_FALSE(twice.ok());
  CHECK(big["hi"] == 18446744073709551615ull);
  CHECK_FALSE(read_counts("#lmpipe-counts v1 pre_tokenizer=gpt2\n18446744073709551616\thi\n", "b", big, other).ok());
  CHECK_THAT(twice.error().message, Catch::Contains("b:3:") && Catch::Contains("overflows 64 bits"));
}

// Pair counts are int64 sums of count x occurrences: counts whose total could overflow
// them are refused by every merge trainer (a fuzzer found the overflow).
TEST_CASE("word counts too large for the merge loops are refused, not overflowed", "[tok][train]") {
  WordCountMap wc;
  for (int i = 0; i < 40; ++i) wc["ab" + std::to_string(i)] = 288888888888888888ull;
  BpeTrainerConfig cfg;
  cfg.vocab_size = 300;
  TrainReport rep;
  auto pre = make_pre_tokenizer("gpt2");
  REQUIRE(pre.ok());
  auto t = train_bpe(wc, cfg, std::move(pre).value(), rep);
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.error().message, Catch::Contains("word counts too large"));
  WordPieceTrainerConfig wcfg;
  wcfg.vocab_size = 300;
  wcfg.special_tokens = {"[UNK]"};
  for (auto algo : {WordPieceAlgo::hf, WordPieceAlgo::likelihood}) {
    wcfg.algo = algo;
    auto w = train_wordpiece(wc, wcfg, rep);
    REQUIRE_FALSE(w.ok());
    CHECK_THAT(w.error().message, Catch::Contains("word counts too large"));
  }
  SpBpeTrainerConfig scfg;
  scfg.vocab_size = 300;
  SpTrainReport srep;
  auto s = train_sp_bpe(wc, scfg, srep, {});
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.error().message, Catch::Contains("word counts too large"));
  // The same words at counts that fit train.
  for (auto& kv : wc) kv.second = 1000;
  pre = make_pre_tokenizer("gpt2");
  REQUIRE(pre.ok());
  CHECK(train_bpe(wc, cfg, std::move(pre).value(), rep).ok());
  CHECK(train_wordpiece(wc, wcfg, rep).ok());
  CHECK(train_sp_bpe(wc, scfg, srep, {}).ok());
}

// HF keys its vocabulary by token text: a merge that builds the bytes of a special
// token whose text is byte-level text gets the special's id (and no new entry), while a
// special with a space in it (byte-level text has none) is never built by merges.
TEST_CASE("a merge that builds a special token's text reuses its id, as in HF", "[tok][train]") {
  WordCountMap wc = {{"<s>", 5}, {"a b", 5}};
  BpeTrainerConfig cfg;
  cfg.special_tokens = {"<s>", "a b"};
  auto t = train(wc, cfg);
  const auto& merges = t->bpe()->merge_list();
  bool built_special = false;
  for (const auto& [a, b] : merges) {
    const MergeInfo* m = t->bpe()->merge(a, b);
    REQUIRE(m != nullptr);
    if (m->id == 0) built_special = true;
    CHECK(m->id != 1);
  }
  CHECK(built_special);
  CHECK(t->bpe()->find("a b") != 1);
  // The special matched in text and the same bytes built by the model's merges give one id.
  Session sess(*t);
  std::vector<TokenId> enc;
  t->encode("<s>", enc, sess);
  CHECK(enc == std::vector<TokenId>{0});
  enc.clear();
  BpeScratch scratch;
  t->bpe()->encode("<s>", enc, scratch);
  CHECK(enc == std::vector<TokenId>{0});
}

// ---- Character-level BPE over words (tok-train -m char-bpe) ----------------------------

namespace {
std::unique_ptr<Tokenizer> train_chars(const WordCountMap& wc, CharBpeTrainerConfig cfg, const char* pre = "whitespace-split") {
  TrainReport r;
  auto t = train_char_bpe(wc, cfg, make_pre_tokenizer(pre).value(), r);
  INFO((t.ok() ? std::string() : t.error().message));
  REQUIRE(t.ok());
  return std::move(t).value();
}

std::vector<std::string> vocab_of(const Tokenizer& t) {
  std::vector<std::string> v;
  for (std::size_t id = 0; id < t.vocab_size(); ++id) v.push_back(t.token_string(static_cast<TokenId>(id)));
  return v;
}

std::vector<TokenId> ids_of(const Tokenizer& t, std::string_view text) {
  Session s(t);
  std::vector<TokenId> ids;
  t.encode(text, ids, s);
  return ids;
}

std::string decoded(const Tokenizer& t, const std::vector<TokenId>& ids) {
  std::string out;
  REQUIRE(t.decode(ids.data(), ids.size(), out).ok());
  return out;
}
}  // namespace

TEST_CASE("char-bpe: the suffix on a word's last character, merges by count then smallest ids", "[tok][train]") {
  CharBpeTrainerConfig cfg;
  cfg.special_tokens = {"<unk>"};
  cfg.unk_token = "<unk>";
  cfg.suffix = "</w>";
  cfg.vocab_size = 7;
  // "ab" (5): a b</w>; "abb" (2): a b b</w>. (a, b</w>) 5 times first; then (a, b) and
  // (b, b</w>) 2 times each: the smaller pair of ids, (a, b); then (ab, b</w>).
  auto t = train_chars(WordCountMap{{"ab", 5}, {"abb", 2}}, cfg);
  CHECK(vocab_of(*t) == std::vector<std::string>{"<unk>", "a", "b", "b</w>", "ab</w>", "ab", "abb</w>"});
  // "ba": b, then "a</w>", which has no token: the unknown token.
  CHECK(ids_of(*t, "ab abb ba") == std::vector<TokenId>{4, 6, 2, 0});
  CHECK(decoded(*t, {4, 6, 2, 3}) == "ab abb bb");  // BPEDecoder: the suffix is a space, none at the end
  // Written and read back (HF's tokenizer.json): the same tokenizer.
  auto back = load_tokenizer_json(to_tokenizer_json(*t), "char.json");
  REQUIRE(back.ok());
  CHECK(vocab_of(*back.value()) == vocab_of(*t));
  CHECK(ids_of(*back.value(), "ab abb ba abba") == ids_of(*t, "ab abb ba abba"));
  CHECK(decoded(*back.value(), {4, 6, 2, 3}) == "ab abb bb");
}

TEST_CASE("char-bpe: prefix and suffix, and max_token_length counts characters, not affixes", "[tok][train]") {
  CharBpeTrainerConfig cfg;
  cfg.prefix = "##";
  cfg.suffix = "</w>";
  cfg.max_token_length = 4;
  // "abc": a ##b ##c</w>; (a, ##b) and (##b, ##c</w>) tie: (a, ##b) has the smaller ids.
  // The merge drops ##b's prefix. A pair a merge forms counts when its length is under the
  // limit, as in HF: (ab, ##c</w>) is 2 + 1 characters < 4 (with the affixes, 2 + 7).
  auto t = train_chars(WordCountMap{{"abc", 3}}, cfg);
  CHECK(vocab_of(*t) == std::vector<std::string>{"a", "b", "c", "##b", "##c</w>", "ab", "abc</w>"});
  CHECK(ids_of(*t, "abc") == std::vector<TokenId>{6});
  cfg.max_token_length = 3;
  t = train_chars(WordCountMap{{"abc", 3}}, cfg);
  CHECK(vocab_of(*t) == std::vector<std::string>{"a", "b", "c", "##b", "##c</w>", "ab"});
  CHECK(ids_of(*t, "abc") == std::vector<TokenId>{5, 4});
  CHECK(decoded(*t, {5, 4, 5, 4}) == "abc abc");  // Replace "##" → "", then BPEDecoder
}

TEST_CASE("char-bpe: a character cut from the alphabet leaves its neighbours' affixes by position", "[tok][train]") {
  CharBpeTrainerConfig cfg;
  cfg.prefix = "##";
  cfg.suffix = "</w>";
  cfg.limit_alphabet = 2;  // x (once) goes
  cfg.vocab_size = 4;      // no merges: the start
  auto t = train_chars(WordCountMap{{"ab", 5}, {"abx", 1}}, cfg);
  // "ab": a ##b</w>; "abx": a ##b (not the last character: x was).
  CHECK(vocab_of(*t) == std::vector<std::string>{"a", "b", "##b</w>", "##b"});
}

TEST_CASE("char-bpe: a prefix alone decodes with the WordPiece decoder, and no affixes join by spaces", "[tok][train]") {
  CharBpeTrainerConfig cfg;
  cfg.prefix = "##";
  cfg.vocab_size = 5;
  auto t = train_chars(WordCountMap{{"ab", 4}}, cfg);
  CHECK(vocab_of(*t) == std::vector<std::string>{"a", "b", "##b", "ab"});
  CHECK(decoded(*t, {0, 2, 3}) == "ab ab");
  CharBpeTrainerConfig plain;
  plain.vocab_size = 3;
  t = train_chars(WordCountMap{{"ab", 4}}, plain);
  CHECK(vocab_of(*t) == std::vector<std::string>{"a", "b", "ab"});
  CHECK(decoded(*t, {2, 0, 1}) == "ab a b");  // HF without a decoder
}

TEST_CASE("char-bpe: the unknown token must be among the specials", "[tok][train]") {
  CharBpeTrainerConfig cfg;
  cfg.special_tokens = {"[PAD]"};
  cfg.unk_token = "<unk>";
  TrainReport rep;
  auto t = train_char_bpe(WordCountMap{{"ab", 1}}, cfg, make_pre_tokenizer("bert").value(), rep);
  REQUIRE(!t.ok());
  CHECK_THAT(t.error().message, Catch::Contains("-S '<unk>'"));
}

TEST_CASE("char-bpe: every trained word decodes back, across seeds and affixes", "[tok][train][property]") {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    std::string text = corpus(seed, 200);
    WordCountMap wc;
    auto pre = make_pre_tokenizer("whitespace-split").value();
    WordCounter counter(*pre, 1);
    counter.add(text);
    wc = counter.take();
    for (const char* suffix : {"</w>", ""}) {
      CharBpeTrainerConfig cfg;
      cfg.suffix = suffix;
      cfg.prefix = seed == 2 ? "##" : "";
      cfg.vocab_size = 40 + seed * 10;
      auto t = train_chars(wc, cfg);
      std::size_t line_start = 0;
      for (int n = 0; n < 20; ++n) {
        std::size_t nl = text.find('\n', line_start);
        std::string_view line(text.data() + line_start, nl - line_start);
        line_start = nl + 1;
        auto ids = ids_of(*t, line);
        std::string back = decoded(*t, ids);
        INFO("seed " << seed << " suffix '" << suffix << "' line '" << line << "'");
        if (*suffix) CHECK(back == line);  // (the words are split on single spaces)
        else CHECK(back.size() >= line.size());  // tokens joined by spaces
      }
    }
  }
}

namespace {
// The words sp_count_words makes of one normalized line, in order of first appearance
// (counts aside), joined by '|'.
std::string sp_words(std::string_view line, const SpBpeTrainerConfig& cfg) {
  WordCountMap wc;
  sp_count_words(line, cfg, wc);
  // Recover the order: scan the line for each word in turn.
  std::string out;
  std::size_t at = 0;
  while (at < line.size()) {
    std::size_t best = 0;
    for (const auto& kv : wc)
      if (kv.first.size() > best && line.compare(at, kv.first.size(), kv.first) == 0) best = kv.first.size();
    if (!best) return out + "<gap>";
    if (!out.empty()) out += '|';
    out.append(line.substr(at, best));
    at += best;
  }
  return out;
}
}  // namespace

TEST_CASE("SentencePiece training words: split as spm_train splits them", "[tok][train]") {
  SpBpeTrainerConfig cfg;
  cfg.allow_whitespace_only_pieces = false;  // spm_train's default: each ▁ starts a word
  CHECK(sp_words("▁▁▁def▁f(x):", cfg) == "▁|▁|▁def|▁f|(|x|):");
  CHECK(sp_words("▁a[0]▁=▁1,", cfg) == "▁a|[0]|▁=|▁1,");      // digits are Common, as punctuation
  CHECK(sp_words("▁abc中文▁▁", cfg) == "▁abc|中文|▁|▁");
  cfg.split_digits = true;
  CHECK(sp_words("▁x12▁3,", cfg) == "▁x|1|2|▁|3|,");            // each digit alone, without its ▁
  cfg.split_digits = false;
  cfg.allow_whitespace_only_pieces = true;                     // a run of ▁ stays one word
  CHECK(sp_words("▁▁▁def▁f▁▁", cfg) == "▁▁▁def|▁f|▁▁");
  cfg.allow_whitespace_only_pieces = false;
  cfg.split_by_whitespace = false;                             // words span spaces, not scripts
  CHECK(sp_words("▁of▁the▁中文▁▁x▁", cfg) == "▁of▁the|▁中文|▁▁x|▁");
}

TEST_CASE("SentencePiece piece rules for ▁, as spm's IsValidSentencePiece", "[tok][train]") {
  SpBpeTrainerConfig cfg;
  cfg.allow_whitespace_only_pieces = false;
  auto valid = [&](std::string_view p) { return sp_whitespace_valid(p, cfg); };
  CHECK(valid("▁"));
  CHECK(valid("▁the"));
  CHECK(valid("the"));
  CHECK_FALSE(valid("▁▁"));
  CHECK_FALSE(valid("▁of▁the"));
  CHECK_FALSE(valid("of▁"));
  cfg.allow_whitespace_only_pieces = true;
  CHECK(valid("▁▁▁▁"));
  CHECK_FALSE(valid("▁▁def"));
  CHECK_FALSE(valid("of▁"));
  cfg.allow_whitespace_only_pieces = false;
  cfg.split_by_whitespace = false;
  CHECK(valid("▁of▁the"));
  CHECK(valid("of▁the"));
  CHECK(valid("▁"));
  CHECK_FALSE(valid("of▁"));
  CHECK_FALSE(valid("▁▁"));
  cfg.allow_whitespace_only_pieces = true;
  CHECK(valid("▁▁"));
  CHECK_FALSE(valid("▁a▁"));
}

TEST_CASE("SentencePiece trainers keep the ▁ rules in every piece (seeded)", "[tok][train]") {
  std::mt19937 rng(43);
  const char* parts[] = {"▁", "▁▁", "▁▁▁▁", "def", "x", "(", ")", "0", "12", "self", "中", "=", ","};
  std::vector<std::string> lines;
  for (int l = 0; l < 300; ++l) {
    std::string s = "▁";
    for (int k = 0, n = 3 + static_cast<int>(rng() % 12); k < n; ++k) s += parts[rng() % std::size(parts)];
    lines.push_back(s);
  }
  for (int mode = 0; mode < 3; ++mode) {
    for (bool unigram : {false, true}) {
      UnigramTrainerConfig cfg;
      cfg.vocab_size = 400;
      cfg.allow_whitespace_only_pieces = mode == 1;
      cfg.split_by_whitespace = mode != 2;
      auto norm = make_sp_normalizer("identity");
      REQUIRE(norm.ok());
      cfg.normalizer = std::move(norm).value();
      WordCountMap wc;
      for (const auto& l : lines) sp_count_words(l, cfg, wc);
      SpTrainReport rep;
      auto model = unigram ? train_sp_unigram(wc, cfg, rep, {}) : train_sp_bpe(wc, cfg, rep, {});
      REQUIRE(model.ok());
      auto sp = SentencePieceModel::parse(model.value(), "trained");
      REQUIRE(sp.ok());
      std::size_t inner = 0;  // pieces with ▁ after their first character
      for (std::size_t id = 0; id < sp.value().vocab_size(); ++id) {
        std::string_view t = sp.value().token_text(static_cast<TokenId>(id));
        if (t.substr(0, 3) == "<0x" || t.front() == '<') continue;
        INFO("mode " << mode << (unigram ? " unigram " : " bpe ") << "piece " << std::string(t));
        CHECK(sp_whitespace_valid(t, cfg));
        if (t.find("▁", 1) != std::string_view::npos) ++inner;
      }
      // Each mode shows its own pieces: none with ▁ inside by default, runs of ▁ with
      // whitespace-only pieces, pieces across words without the split.
      INFO("mode " << mode << (unigram ? " unigram" : " bpe"));
      if (mode == 0) CHECK(inner == 0);
      else CHECK(inner > 0);
    }
  }
}

TEST_CASE("SentencePiece training words cover each line once and end no word in ▁ (seeded)", "[tok][train]") {
  std::mt19937 rng(4343);
  const char* parts[] = {"▁", "▁", "▁▁", "a", "Z", "7", "0", "[", ",", "中", "の", "α", "é", "<u>", "\t"};
  for (int mode = 0; mode < 6; ++mode) {
    SpBpeTrainerConfig cfg;
    cfg.allow_whitespace_only_pieces = mode % 3 != 0;
    cfg.split_by_whitespace = mode % 3 != 2;
    cfg.split_digits = mode >= 3;
    cfg.user_defined = {"<u>"};
    for (int l = 0; l < 400; ++l) {
      std::string s;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 20); k < n; ++k) s += parts[rng() % std::size(parts)];
      WordCountMap wc;
      sp_count_words(s, cfg, wc);
      std::size_t bytes = 0;
      for (const auto& [w, c] : wc) {
        INFO("mode " << mode << " line '" << s << "' word '" << w << "'");
        bytes += w.size() * c;
        CHECK(s.find(w) != std::string::npos);
        CHECK(w.find("<u>") == std::string::npos);
        // No word ends in ▁ after another character (no piece could), and with the split
        // no ▁ follows another character inside a word.
        const bool ends_ws = w.size() >= 3 && w.compare(w.size() - 3, 3, "▁") == 0;
        const bool all_ws = w.find_first_not_of("\xE2\x96\x81") == std::string::npos;
        CHECK((!ends_ws || all_ws));
        if (cfg.split_by_whitespace) {
          const std::size_t first_other = w.find_first_not_of("\xE2\x96\x81");
          if (first_other != std::string::npos) CHECK(w.find("▁", first_other) == std::string::npos);
          if (!cfg.allow_whitespace_only_pieces) CHECK(w.find("▁▁") == std::string::npos);
        }
        if (cfg.split_digits && w.find_first_of("0123456789") != std::string::npos) CHECK(w.size() == 1);
      }
      // Every byte but the user-defined symbols' in exactly one word.
      std::size_t ud = 0;
      for (std::size_t p = s.find("<u>"); p != std::string::npos; p = s.find("<u>", p + 3)) ud += 3;
      CHECK(bytes == s.size() - ud);
    }
  }
}

TEST_CASE("Unigram training: the lattices kept across an EM round change nothing (seeded)", "[tok][train][property]") {
  // Emoji make edges of more than 64 bytes with 20-character pieces: the chunks that hold
  // them walk the trie instead; the result must be the same either way, on any threads.
  const char* parts[] = {"the", "▁", "▁", "cache", "k", "中文", "模型", "\xF0\x9F\x98\x80", "\xF0\x9F\x98\x81", "7", ","};
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    WordCountMap wc;
    UnigramTrainerConfig base;
    base.vocab_size = 300 + 50 * seed;
    base.max_piece_chars = seed == 3 ? 20 : 16;
    auto norm = make_sp_normalizer("identity");
    REQUIRE(norm.ok());
    base.normalizer = std::move(norm).value();
    for (int l = 0; l < 600; ++l) {
      std::string s = "▁";
      for (int k = 0, n = 2 + static_cast<int>(rng() % 25); k < n; ++k) s += parts[rng() % std::size(parts)];
      sp_count_words(s, base, wc);
    }
    std::string reference;
    for (bool reuse : {false, true})
      for (int threads : {1, 2}) {
        UnigramTrainerConfig cfg = base;
        cfg.reuse_lattices = reuse;
        cfg.threads = threads;
        SpTrainReport rep;
        auto model = train_sp_unigram(wc, cfg, rep, {});
        REQUIRE(model.ok());
        INFO("seed " << seed << " reuse " << reuse << " threads " << threads);
        if (reference.empty()) reference = model.value();
        CHECK(model.value() == reference);
      }
  }
}
