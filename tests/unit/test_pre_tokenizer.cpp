#include <catch2/catch.hpp>

#include <random>

#include "lmpipe/tok/gguf_tokenizer.h"
#include "lmpipe/tok/pre_tokenizer.h"

using namespace lmp;
using namespace lmp::tok;

namespace {
std::vector<std::string> pieces(const PreTokenizer& p, std::string_view s) {
  std::vector<Range> r;
  p.split(s, r);
  std::vector<std::string> out;
  for (auto x : r) out.emplace_back(s.substr(x.begin, x.end - x.begin));
  return out;
}

// Random text from characters that exercise every branch of the split regexes.
std::string random_text(std::mt19937& rng, std::size_t n) {
  static const std::vector<std::string> alphabet = {
      "a", "Z", "e", "s", "t", "'", "'", " ", " ", " ", "\t", "\n", "\r", "\r\n", "1", "23", "\xd9\xa3" /*٣*/,
      "\xc2\xbd" /*½*/, ".", ",", "!", "-", "(", "/", "\xc3\xa9", "\xe4\xb8\xad" /*中*/, "\xe6\x96\x87",
      "\xcc\x81" /*combining acute*/, "\xc2\xa0" /*nbsp*/, "\xc2\x85" /*NEL*/, "\x0b", "\xe2\x80\x83" /*em space*/,
      "\xf0\x9f\x98\x80" /*emoji*/, "S", "LL", "RE", "ve", "\xe3\x81\x82" /*hiragana*/, "_", "\xd0\x96" /*Ж*/};
  std::string s;
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
  for (std::size_t i = 0; i < n; ++i) s += alphabet[pick(rng)];
  return s;
}
}  // namespace

TEST_CASE("gpt2 split matches GPT-2's regex on hand-checked cases", "[tok][pre]") {
  auto p = make_pre_tokenizer("gpt2");
  REQUIRE(p.ok());
  CHECK(pieces(*p.value(), "Hello world") == std::vector<std::string>{"Hello", " world"});
  CHECK(pieces(*p.value(), "I'm  here!!\n") == std::vector<std::string>{"I", "'m", " ", " here", "!!", "\n"});
  CHECK(pieces(*p.value(), "a   b") == std::vector<std::string>{"a", "  ", " b"});
  CHECK(pieces(*p.value(), "x123 45") == std::vector<std::string>{"x", "123", " 45"});
  CHECK(pieces(*p.value(), "end  ") == std::vector<std::string>{"end", "  "});
}

TEST_CASE("cl100k split: digits in threes, apostrophes case-insensitive, newlines", "[tok][pre]") {
  auto p = make_pre_tokenizer("cl100k");
  REQUIRE(p.ok());
  CHECK(pieces(*p.value(), "1234567") == std::vector<std::string>{"123", "456", "7"});
  CHECK(pieces(*p.value(), "I'M (ok)") == std::vector<std::string>{"I", "'M", " (", "ok", ")"});
  CHECK(pieces(*p.value(), "a\n\n  b") == std::vector<std::string>{"a", "\n\n", " ", " b"});
  CHECK(pieces(*p.value(), "x  \n y") == std::vector<std::string>{"x", "  \n", " y"});
}

TEST_CASE("hand-written scanners agree with the ICU regex engine", "[tok][pre][property]") {
  for (auto [name, pattern] : {std::pair<const char*, std::string_view>{"gpt2", kGpt2Pattern},
                               std::pair<const char*, std::string_view>{"cl100k", kCl100kPattern}}) {
    auto fast = make_pre_tokenizer(name);
    auto slow = make_icu_regex_pre_tokenizer(pattern);
    REQUIRE(fast.ok());
    REQUIRE(slow.ok());
    std::mt19937 rng(1234);
    for (int i = 0; i < 3000; ++i) {
      std::string s = random_text(rng, 1 + static_cast<std::size_t>(i % 40));
      INFO(name << " case " << i << ": '" << s << "'");
      REQUIRE(pieces(*fast.value(), s) == pieces(*slow.value(), s));
    }
  }
}

TEST_CASE("whitespace pre-tokenizer keeps words and punctuation runs", "[tok][pre]") {
  auto p = make_pre_tokenizer("whitespace");
  REQUIRE(p.ok());
  CHECK(pieces(*p.value(), "Hello, world!!  ok_1") == std::vector<std::string>{"Hello", ",", "world", "!!", "ok_1"});
}

TEST_CASE("pre-tokenizers cover invalid UTF-8 without losing bytes", "[tok][pre]") {
  for (const char* name : {"gpt2", "cl100k", "none"}) {
    auto p = make_pre_tokenizer(name);
    REQUIRE(p.ok());
    std::string s = "ab\xff\xfe cd\xc3 \x80\xe4\xb8";
    std::string joined;
    for (auto& x : pieces(*p.value(), s)) joined += x;
    CHECK(joined == s);
  }
  CHECK_FALSE(make_pre_tokenizer("nope").ok());
  CHECK_FALSE(make_icu_regex_pre_tokenizer("(unclosed").ok());
}

TEST_CASE("a sequence of splits: each applied to the pieces of the one before", "[tok][pre]") {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  auto digits = make_regex_pre_tokenizer(R"(\p{N})");
  auto letters = make_regex_pre_tokenizer(R"(\s?\p{L}+)");
  REQUIRE(digits.ok());
  REQUIRE(letters.ok());
  steps.push_back(std::move(*letters));
  steps.push_back(std::move(*digits));
  auto seq = make_sequence_pre_tokenizer(std::move(steps));
  // Letters first (with a space before them), then every digit apart, within the gaps too.
  CHECK(pieces(*seq, "ab 12cd 3") == std::vector<std::string>{"ab", " ", "1", "2", "cd", " ", "3"});
  CHECK(seq->steps().size() == 2);
  CHECK(seq->steps()[1]->pattern() == R"(\p{N})");
  // A sequence nested in a sequence lists its steps flat; one step is itself.
  std::vector<std::unique_ptr<PreTokenizer>> outer;
  outer.push_back(std::move(seq));
  auto removed = make_regex_pre_tokenizer("-", SplitBehavior::removed);
  REQUIRE(removed.ok());
  CHECK((*removed)->behavior() == SplitBehavior::removed);
  outer.push_back(std::move(*removed));
  auto all = make_sequence_pre_tokenizer(std::move(outer));
  CHECK(all->steps().size() == 3);
  CHECK(pieces(*all, "a-b 1-2") == std::vector<std::string>{"a", "b", " ", "1", "2"});
  std::vector<std::unique_ptr<PreTokenizer>> one;
  auto gpt2 = make_pre_tokenizer("gpt2");
  REQUIRE(gpt2.ok());
  one.push_back(std::move(*gpt2));
  auto single = make_sequence_pre_tokenizer(std::move(one));
  CHECK(single->name() == "gpt2");
}

TEST_CASE("GGUF tokenizer.ggml.pre names: every split compiles, and hand-checked pieces", "[tok][pre][gguf]") {
  for (std::string_view name : gguf_pre_names()) {
    CAPTURE(name);
    auto p = gguf_pre_tokenizer(name);
    REQUIRE(p.ok());
    // Every split keeps every byte (all behave as Isolated).
    const std::string text = "Hello, world! 12345 中文 l'été\n\tx";
    std::string joined;
    for (const auto& piece : pieces(**p, text)) joined += piece;
    CHECK(joined == text);
  }
  auto split = [](std::string_view name, std::string_view text) {
    auto p = gguf_pre_tokenizer(name);
    REQUIRE(p.ok());
    return pieces(**p, text);
  };
  using V = std::vector<std::string>;
  // GPT-2: digits in one run, a space before words.
  CHECK(split("gpt-2", "ab 1234") == V{"ab", " 1234"});
  // Llama 3 (and its aliases): digits in threes.
  CHECK(split("llama-bpe", "ab 1234") == V{"ab", " ", "123", "4"});
  // Qwen2: every digit alone.
  CHECK(split("qwen2", "ab 1234") == V{"ab", " ", "1", "2", "3", "4"});
  // StarCoder: digits alone first, then GPT-2's split of the rest.
  CHECK(split("starcoder", "x 12") == V{"x", " ", "1", "2"});
  // DeepSeek-V3: digits in threes, kana and Han runs apart, punctuation before letters.
  CHECK(split("deepseek-v3", "1234ひらがな.foo") == V{"123", "4", "ひらがな", ".foo"});
  // Falcon: punctuation runs first, then GPT-2's words, then digits in threes.
  CHECK(split("falcon", "a,b 12345") == V{"a", ",", "b", " ", "123", "45"});
  // llama.cpp's default: the same, with digit runs apart from the space before them.
  CHECK(split("default", "a,b 12345") == V{"a", ",", "b", " ", "123", "45"});
  auto unknown = gguf_pre_tokenizer("no-such-pre");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.error().message, Catch::Contains("'no-such-pre' is not supported"));
}

namespace {
// Hand-checked against HF tokenizers' own pre-tokenizers (node binding 0.6.0,
// preTokenizeString) on this text.
constexpr std::string_view kPunctText = "a,b!!c -- x$y+z \xc2\xabq\xc2\xbb 1.5\xc2\xa0t\xe3\x80\x80u\vv\xc2\x85w";
constexpr std::string_view kPunctTail = "5\xc2\xa0t\xe3\x80\x80u\vv\xc2\x85w";
using Pieces = std::vector<std::string>;
}  // namespace

TEST_CASE("Punctuation: every split behaviour as HF applies it", "[tok][pre]") {
  auto p = [](SplitBehavior b) { return pieces(*make_char_split_pre_tokenizer(CharSplit::punctuation, b), kPunctText); };
  const std::string tail(kPunctTail);
  CHECK(p(SplitBehavior::removed) == Pieces{"a", "b", "c ", " x", "y", "z ", "q", " 1", tail});
  CHECK(p(SplitBehavior::isolated) == Pieces{"a", ",", "b", "!", "!", "c ", "-", "-", " x", "$", "y", "+", "z ",
                                             "\xc2\xab", "q", "\xc2\xbb", " 1", ".", tail});
  CHECK(p(SplitBehavior::merged_with_previous) ==
        Pieces{"a,", "b!", "!", "c -", "-", " x$", "y+", "z \xc2\xab", "q\xc2\xbb", " 1.", tail});
  CHECK(p(SplitBehavior::merged_with_next) ==
        Pieces{"a", ",b", "!", "!c ", "-", "- x", "$y", "+z ", "\xc2\xabq", "\xc2\xbb 1", "." + tail});
  CHECK(p(SplitBehavior::contiguous) == Pieces{"a", ",", "b", "!!", "c ", "--", " x", "$", "y", "+", "z ",
                                               "\xc2\xab", "q", "\xc2\xbb", " 1", ".", tail});
}

TEST_CASE("WhitespaceSplit, CharDelimiterSplit and Digits as HF splits them", "[tok][pre]") {
  auto ws = make_char_split_pre_tokenizer(CharSplit::whitespace, SplitBehavior::removed);
  CHECK(pieces(*ws, kPunctText) == Pieces{"a,b!!c", "--", "x$y+z", "\xc2\xabq\xc2\xbb", "1.5", "t", "u", "v", "w"});
  auto delim = make_char_split_pre_tokenizer(CharSplit::delimiter, SplitBehavior::removed, U'b');
  CHECK(pieces(*delim, "abcbba") == Pieces{"a", "c", "a"});
  auto nbsp = make_char_split_pre_tokenizer(CharSplit::delimiter, SplitBehavior::removed, U'\u00a0');
  CHECK(pieces(*nbsp, "x\xc2\xa0y") == Pieces{"x", "y"});
  // \p{N} (Rust's char::is_numeric): Arabic-Indic digits, ½ and ² are digits too.
  auto runs = make_char_split_pre_tokenizer(CharSplit::numeric, SplitBehavior::contiguous);
  CHECK(pieces(*runs, "ab12\xc2\xbd" "c3") == Pieces{"ab", "12\xc2\xbd", "c", "3"});
  auto each = make_char_split_pre_tokenizer(CharSplit::numeric, SplitBehavior::isolated);
  CHECK(pieces(*each, "a\xd9\xa1\xd9\xa2" "b12\xc2\xbdx\xc2\xb2") ==
        Pieces{"a", "\xd9\xa1", "\xd9\xa2", "b", "1", "2", "\xc2\xbd", "x", "\xc2\xb2"});
}

TEST_CASE("character-class splits agree with the ICU engine on their pattern, every behaviour",
          "[tok][pre][property]") {
  const SplitBehavior all[] = {SplitBehavior::isolated, SplitBehavior::removed, SplitBehavior::merged_with_previous,
                               SplitBehavior::merged_with_next, SplitBehavior::contiguous};
  std::mt19937 rng(99);
  for (CharSplit kind : {CharSplit::punctuation, CharSplit::numeric, CharSplit::whitespace, CharSplit::delimiter}) {
    for (SplitBehavior b : all) {
      auto fast = make_char_split_pre_tokenizer(kind, b, U'\'');
      auto slow = make_icu_regex_pre_tokenizer(fast->pattern(), b);
      REQUIRE(slow.ok());
      for (int i = 0; i < 400; ++i) {
        std::string s = random_text(rng, 1 + static_cast<std::size_t>(i % 30));
        INFO(fast->name() << " behaviour " << static_cast<int>(b) << " case " << i << ": '" << s << "'");
        REQUIRE(pieces(*fast, s) == pieces(*slow.value(), s));
      }
    }
  }
}

TEST_CASE("Split with invert: what the regex does not match is the delimiter", "[tok][pre]") {
  // HF: Split(\d+, Removed, invert) keeps the numbers only.
  auto keep_numbers = make_regex_pre_tokenizer(R"(\d+)", SplitBehavior::removed, true);
  REQUIRE(keep_numbers.ok());
  CHECK((*keep_numbers)->invert());
  CHECK(pieces(**keep_numbers, "a,b!!c 12345 x 6") == Pieces{"12345", "6"});
  // Isolated keeps every segment, whichever side matched.
  auto iso = make_regex_pre_tokenizer("-", SplitBehavior::isolated, true);
  REQUIRE(iso.ok());
  CHECK(pieces(**iso, "ab-cd--e") == Pieces{"ab", "-", "cd", "-", "-", "e"});
  // Merged with the previous piece: the non-matches join the '-' before them.
  auto prev = make_regex_pre_tokenizer("-", SplitBehavior::merged_with_previous, true);
  REQUIRE(prev.ok());
  CHECK(pieces(**prev, "ab-cd--e") == Pieces{"ab", "-cd", "-", "-e"});
}

TEST_CASE("a split after ByteLevel sees byte-level characters", "[tok][pre]") {
  // ١ is D9 A1: byte-level "Ù¡", and ¡ is punctuation; ¢ (A2) and £ (A3) are not.
  auto punct = make_byte_level_view(make_char_split_pre_tokenizer(CharSplit::punctuation, SplitBehavior::isolated));
  CHECK(pieces(*punct, "\xd9\xa1\xd9\xa2\xd9\xa3") == Pieces{"\xd9", "\xa1", "\xd9\xa2\xd9\xa3"});
  CHECK(pieces(*punct, "a,b") == Pieces{"a", ",", "b"});  // ASCII: its own view
  CHECK(punct->name() == "byte-level punctuation");
  // A space is Ġ there: \s no longer matches it, and the pieces keep their bytes.
  auto ws = make_regex_pre_tokenizer(R"(\s)", SplitBehavior::isolated);
  REQUIRE(ws.ok());
  auto view = make_byte_level_view(std::move(*ws));
  CHECK(pieces(*view, "a b\xc3\xa9") == Pieces{"a b\xc3\xa9"});
  auto digits = make_byte_level_view(make_char_split_pre_tokenizer(CharSplit::numeric, SplitBehavior::isolated));
  CHECK(pieces(*digits, "x 12\xc3\xa9") == Pieces{"x ", "1", "2", "\xc3\xa9"});
}

TEST_CASE("NAME+digits: every digit split off first, then the named split", "[tok][pre]") {
  auto p = make_pre_tokenizer("gpt2+digits");
  REQUIRE(p.ok());
  // Digits first: the space before a number is left alone, as StarCoder's Sequence has it.
  CHECK(pieces(**p, "in 2024, x42") == Pieces{"in", " ", "2", "0", "2", "4", ",", " x", "4", "2"});
  REQUIRE((*p)->steps().size() == 2);
  CHECK((*p)->steps()[0]->name() == "digits");
  CHECK((*p)->steps()[1]->name() == "gpt2");
  CHECK(make_pre_tokenizer("llama3+digits").ok());
  auto bad = make_pre_tokenizer("nope+digits");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("unknown pre-tokenizer 'nope'"));
  // The digits split written back as a Split on \p{N} loads to the fast scanner again.
  auto again = make_regex_pre_tokenizer(R"(\p{N})", SplitBehavior::contiguous);
  REQUIRE(again.ok());
  CHECK((*again)->name() == "digits");
}

TEST_CASE("a view of a sequence is a sequence of views, and ASCII pieces skip the mapping only where it cannot matter",
          "[tok][pre]") {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  steps.push_back(make_char_split_pre_tokenizer(CharSplit::punctuation, SplitBehavior::isolated));
  steps.push_back(make_char_split_pre_tokenizer(CharSplit::whitespace, SplitBehavior::removed));
  auto view = make_byte_level_view(make_sequence_pre_tokenizer(std::move(steps)));
  auto names = view->steps();
  REQUIRE(names.size() == 2);
  CHECK(names[0]->name() == "byte-level punctuation");
  CHECK(names[1]->name() == "byte-level whitespace-split");
  // ASCII with spaces: punctuation splits as on the raw text, but the space is Ġ, no
  // whitespace, so it is kept.
  CHECK(pieces(*view, "a, b") == Pieces{"a", ",", " b"});
  CHECK(pieces(*view, "x\xc2\xa1y") == Pieces{"x\xc2", "\xa1", "y"});  // ¡ (C2 A1): Â then ¡
}
