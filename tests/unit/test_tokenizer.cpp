#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <unistd.h>

#include "lmpipe/core/json.h"
#include "lmpipe/tok/bpe_trainer.h"
#include "lmpipe/tok/decode_stream.h"
#include "lmpipe/tok/end_ids.h"
#include "lmpipe/tok/byte_level.h"
#include "lmpipe/tok/tokenizer.h"
#include "tok_fixtures.h"

using namespace lmp;
using namespace lmp::tok;

namespace {
std::unique_ptr<Tokenizer> small_tokenizer(const char* pre_name, bool all_bytes) {
  return test::trained_bpe(pre_name, all_bytes,
                           "the quick brown fox jumps over the lazy dog\nthe dog sleeps 12345\n中文字符 中文\n", 320);
}

// A byte-level BPE (cl100k split, every byte in the alphabet) trained on `corpus`, as
// tokenizer.json text.
std::string trained_json(const std::string& corpus, std::size_t vocab_size) {
  return to_tokenizer_json(*test::trained_bpe("cl100k", true, corpus, vocab_size, /*special=*/false));
}

// A SentencePiece-style tokenizer.json (▁ for spaces, no pre-tokenizer, <0xNN> byte
// tokens): ids 2 ▁, 3 a, 4 b, 5 ▁a, 6 ab, 7 <0xC3>, 8 <0xA9> (é is C3 A9).
std::unique_ptr<Tokenizer> metaspace_tokenizer(bool byte_fallback, bool fuse) {
  std::string j = std::string(R"({"added_tokens":[{"id":0,"content":"<unk>","special":true},{"id":1,"content":"<s>","special":true}],)") +
                  R"("normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},)" +
                  R"({"type":"Replace","pattern":{"String":" "},"content":"▁"}]},"pre_tokenizer":null,)" +
                  R"("post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},)" +
                  R"({"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}},)" +
                  R"("decoder":null,"model":{"type":"BPE","unk_token":"<unk>","fuse_unk":)" + (fuse ? "true" : "false") +
                  R"(,"byte_fallback":)" + (byte_fallback ? "true" : "false") +
                  R"(,"vocab":{"<unk>":0,"<s>":1,"▁":2,"a":3,"b":4,"▁a":5,"ab":6,"<0xC3>":7,"<0xA9>":8},)" +
                  R"("merges":["a b","▁ a"]}})";
  auto t = load_tokenizer_json(j, "sp.json");
  REQUIRE(t.ok());
  return std::move(t).value();
}

std::vector<TokenId> encode(const Tokenizer& t, std::string_view s, bool special = true) {
  Session sess(t);
  std::vector<TokenId> ids;
  t.encode(s, ids, sess, special);
  return ids;
}
}  // namespace

TEST_CASE("decode(encode(x)) == x for random bytes", "[tok][property]") {
  for (const char* pre : {"gpt2", "cl100k", "none"}) {
    auto t = small_tokenizer(pre, true);
    std::mt19937 rng(99);
    for (int i = 0; i < 2000; ++i) {
      std::string s;
      std::size_t n = rng() % 64;
      for (std::size_t k = 0; k < n; ++k) s += static_cast<char>(rng() % 4 == 0 ? rng() % 256 : "the dog 中\n"[rng() % 11]);
      auto ids = encode(*t, s, false);
      std::string back;
      REQUIRE(t->decode(ids.data(), ids.size(), back).ok());
      INFO(pre << " case " << i);
      REQUIRE(back == s);
    }
  }
}

TEST_CASE("special tokens are matched in text unless asked not to", "[tok]") {
  auto t = small_tokenizer("gpt2", true);
  auto ids = encode(*t, "dog<|endoftext|>the");
  CHECK(std::count(ids.begin(), ids.end(), 0) == 1);
  auto plain = encode(*t, "dog<|endoftext|>the", false);
  CHECK(std::count(plain.begin(), plain.end(), 0) == 0);
  std::string back;
  REQUIRE(t->decode(ids.data(), ids.size(), back, true).ok());
  CHECK(back == "dogthe");
}

TEST_CASE("a written tokenizer.json loads back and encodes the same", "[tok]") {
  auto t = small_tokenizer("cl100k", false);
  std::string j = to_tokenizer_json(*t);
  auto back = load_tokenizer_json(j, "t.json");
  REQUIRE(back.ok());
  std::string text = "the lazy fox 12345 中文 sleeps";
  CHECK(encode(*back.value(), text) == encode(*t, text));
  CHECK(to_tokenizer_json(*back.value()) == j);
}

TEST_CASE("byte-level tokenizer.json: the post-processor's template and trim_offsets", "[tok][offsets]") {
  auto t = small_tokenizer("cl100k", true);  // with the added token <|endoftext|>
  std::string j = to_tokenizer_json(*t);
  const std::string null_pp = "\"post_processor\":null";
  REQUIRE(j.find(null_pp) != std::string::npos);
  TokenId eot = t->id_of("<|endoftext|>");
  REQUIRE(eot >= 0);
  // Llama 3's form: a Sequence of ByteLevel (trim_offsets) and a TemplateProcessing.
  std::string pp = R"("post_processor":{"type":"Sequence","processors":[{"type":"ByteLevel","add_prefix_space":true,)"
                   R"("trim_offsets":true,"use_regex":true},{"type":"TemplateProcessing","single":[{"SpecialToken":)"
                   R"({"id":"<|endoftext|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":)"
                   R"({"<|endoftext|>":{"id":"<|endoftext|>","ids":[)" + std::to_string(eot) + "],\"tokens\":[\"<|endoftext|>\"]}}}]}";
  std::string j2 = j;
  j2.replace(j2.find(null_pp), null_pp.size(), pp);
  auto back = load_tokenizer_json(j2, "t.json");
  INFO((back.ok() ? std::string() : back.error().message));
  REQUIRE(back.ok());
  CHECK(back.value()->template_prefix() == std::vector<TokenId>{eot});
  CHECK(back.value()->template_suffix().empty());
  // trim_offsets: " dog" covers "dog"; without it, " dog".
  Session s(*back.value()), s0(*t);
  std::vector<TokenId> ids, ids0;
  std::vector<Range> spans, spans0;
  back.value()->encode_with_offsets("the dog", ids, spans, s);
  t->encode_with_offsets("the dog", ids0, spans0, s0);
  REQUIRE(ids == ids0);
  REQUIRE(spans.size() == 2);
  CHECK((spans0[1].begin == 3 && spans0[1].end == 7));
  CHECK((spans[1].begin == 4 && spans[1].end == 7));
}

TEST_CASE("a tokenizer.json loaded on 1-4 threads is the same tokenizer", "[tok][threads]") {
  // A vocabulary large enough that every thread has merges and slots of its own.
  std::mt19937 rng(4);
  std::string corpus;
  for (int i = 0; i < 20000; ++i) corpus += "the quick brown 中文字符 fox jumps 12345 over"[rng() % 45];
  std::string j = trained_json(corpus, 1200);
  auto one = load_tokenizer_json(j, "t.json", 1);
  REQUIRE(one.ok());
  for (int threads = 2; threads <= 4; ++threads) {
    auto many = load_tokenizer_json(j, "t.json", threads);
    REQUIRE(many.ok());
    CHECK(to_tokenizer_json(*many.value()) == j);
    for (int k = 0; k < 200; ++k) {
      std::string s = corpus.substr(rng() % 19000, rng() % 300);
      REQUIRE(encode(*many.value(), s) == encode(*one.value(), s));
    }
  }
  // A broken file names its first error in file order, on any number of threads.
  // (to_tokenizer_json writes merges as ["a","b"] pairs.)
  std::string bad = j;
  auto merges = bad.find("\"merges\":[[\"");
  REQUIRE(merges != std::string::npos);
  std::size_t first_merge = merges + 12;  // the first merge's first token
  std::size_t later = bad.find("],[\"", first_merge + 4000);
  REQUIRE(later != std::string::npos);
  bad.insert(later + 4, "x");           // a later merge names an unknown token...
  bad.insert(first_merge, "nosuch");  // ...and so does the first one
  for (int threads = 1; threads <= 4; ++threads) {
    auto e = load_tokenizer_json(bad, "b.json", threads);
    REQUIRE_FALSE(e.ok());
    INFO(e.error().message);
    CHECK(e.error().message.find("merge 1:") != std::string::npos);
  }
}

// Every key byte-level text: the vocabulary is indexed by its bytes alone. One key that
// is not (here "€", outside the 256 stand-ins) sends the loader down the text index; both
// must give the same ids and the same errors, on any number of threads.
TEST_CASE("byte-level tokenizer.json: the bytes index and the text index agree", "[tok][threads]") {
  auto t = small_tokenizer("gpt2", true);
  const std::string pure = to_tokenizer_json(*t);
  auto vocab = pure.find("\"vocab\":{");
  REQUIRE(vocab != std::string::npos);
  std::string mixed = pure;
  mixed.insert(vocab + 9, "\"\xE2\x82\xAC\":" + std::to_string(t->vocab_size()) + ",");
  std::mt19937 rng(17);
  for (int threads = 1; threads <= 3; ++threads) {
    auto a = load_tokenizer_json(pure, "p.json", threads);
    auto b = load_tokenizer_json(mixed, "m.json", threads);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(b.value()->vocab_size() == a.value()->vocab_size() + 1);
    for (int i = 0; i < 300; ++i) {
      std::string s;
      for (std::size_t k = 0, n = rng() % 40; k < n; ++k)
        s += static_cast<char>(rng() % 5 == 0 ? rng() % 256 : "the lazy dog 中文 12345\n"[rng() % 23]);
      if (s.find("\xE2\x82\xAC") != std::string::npos) continue;  // (the one token they differ in)
      INFO("threads " << threads << " case " << i);
      REQUIRE(encode(*a.value(), s) == encode(*b.value(), s));
    }
  }
  // The same errors either way: a key given twice; a merge naming text that is no token,
  // byte-level text or not.
  auto with = [](std::string j, std::string_view from, std::string_view to) {
    auto at = j.find(from);
    REQUIRE(at != std::string::npos);
    return j.replace(at, from.size(), to);
  };
  for (const std::string* base : {&pure, static_cast<const std::string*>(&mixed)}) {
    const std::string next = std::to_string(t->vocab_size() + 1), after = std::to_string(t->vocab_size() + 2);
    auto dup = load_tokenizer_json(with(*base, "\"vocab\":{", "\"vocab\":{\"the\":" + next + ",\"the\":" + after + ","),
                                   "d.json");
    REQUIRE_FALSE(dup.ok());
    INFO(dup.error().message);
    CHECK(dup.error().message.find("duplicate vocab entry \"the\"") != std::string::npos);
    CHECK(dup.error().message.find("d.json:1:") != std::string::npos);
    auto merges = base->find("\"merges\":[[\"");
    REQUIRE(merges != std::string::npos);
    for (std::string_view unknown : {"\xE2\x82\xAC", "zzzq", "\xC4\xA0zq"}) {
      std::string bad = *base;
      bad.insert(merges + 12, std::string(unknown));
      auto e = load_tokenizer_json(bad, "u.json", 2);
      REQUIRE_FALSE(e.ok());
      INFO(e.error().message);
      CHECK(e.error().message.find("merge 1: token") != std::string::npos);
      CHECK(e.error().message.find("is not in the vocabulary") != std::string::npos);
    }
  }
}

// Merged tokens out of vocabulary order, and two merges making one token: the loader's
// guesses (the token after the previous merge's, then that one) miss, and the index
// answers. The bytes index (every key byte-level text) and the text index agree.
TEST_CASE("byte-level tokenizer.json: merged tokens found out of order", "[tok]") {
  auto make = [](bool mixed) {
    std::string j = R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"ab":3,"bc":4,"abc":5,"\u0120":6,"\u0120a":7)";
    if (mixed) j += R"(,"\u20ac":8)";
    j += R"(},"merges":["b c","a b","ab c","a bc","\u0120 a"]},"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},"decoder":{"type":"ByteLevel"}})";
    auto t = load_tokenizer_json(j, "o.json");
    REQUIRE(t.ok());
    return std::move(t).value();
  };
  auto pure = make(false), mixed = make(true);
  CHECK(encode(*pure, "abc") == std::vector<TokenId>{5});
  CHECK(encode(*pure, "ab ab") == std::vector<TokenId>{3, 6, 3});  // ("a b" ranks before "Ġ a")
  CHECK(encode(*pure, " a") == std::vector<TokenId>{7});
  std::mt19937 rng(5);
  for (int i = 0; i < 500; ++i) {
    std::string s;
    for (std::size_t k = 0, n = rng() % 12; k < n; ++k) s += "abc "[rng() % 4];
    INFO(s);
    REQUIRE(encode(*pure, s) == encode(*mixed, s));
  }
  // A merge whose two tokens make no token of the vocabulary: located, either way.
  for (bool mixed_vocab : {false, true}) {
    std::string j = R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"ab":3)";
    if (mixed_vocab) j += R"(,"\u20ac":4)";
    j += R"(},"merges":["a b","b c"]},"pre_tokenizer":{"type":"ByteLevel"}})";
    auto e = load_tokenizer_json(j, "m.json");
    REQUIRE_FALSE(e.ok());
    INFO(e.error().message);
    CHECK(e.error().message.find("m.json:1:") != std::string::npos);
    CHECK(e.error().message.find("merge 2: merged token is not in the vocabulary") != std::string::npos);
  }
}

TEST_CASE("bytes outside a limited alphabet are dropped and counted", "[tok]") {
  auto t = small_tokenizer("gpt2", false);
  Session s(*t);
  std::vector<TokenId> ids;
  t->encode("the Z", ids, s);
  CHECK(s.dropped_bytes() == 1);
}

TEST_CASE("malformed tokenizer files give located errors", "[tok][errors]") {
  auto e1 = load_tokenizer_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]},\n"
                                "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
                                "x.json");
  REQUIRE_FALSE(e1.ok());
  CHECK(e1.error().message.find("x.json:1:") != std::string::npos);
  CHECK(e1.error().message.find("'b'") == std::string::npos);
  CHECK(e1.error().message.find("\"b\" is not in the vocabulary") != std::string::npos);
  auto e2 = load_tokenizer_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]},"
                                "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
                                "y.json");
  REQUIRE_FALSE(e2.ok());
  CHECK(e2.error().message.find("merged token") != std::string::npos);
  auto e3 = load_tokenizer_json("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "z.json");
  REQUIRE_FALSE(e3.ok());
  CHECK(e3.error().message.find("[UNK]") != std::string::npos);  // an empty WordPiece vocabulary
  auto e4 = load_tokenizer_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}}, \"decoder\": {\"type\": \"ByteLevel\"}}", "w.json");
  REQUIRE_FALSE(e4.ok());
  auto e5 = load_tokenizer_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999}}, \"decoder\": {\"type\": \"ByteLevel\"}}", "s.json");
  REQUIRE_FALSE(e5.ok());  // sparse ids: no 400 MB allocation from a lying file
  auto e6 = load_tokenizer_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"decoder\": {\"type\": \"ByteLevel\"},"
                                "\"added_tokens\": [{\"id\": 2000000000, \"content\": \"<x>\", \"special\": true}]}", "a.json");
  REQUIRE_FALSE(e6.ok());  // an added token's id sizes a table: no 16 GB from a lying file
  CHECK(e6.error().message.find("far beyond the vocabulary") != std::string::npos);
}

// HF's SentencePiece-style BPE: characters, byte fallback, unknown runs fused or not.
TEST_CASE("SentencePiece-style tokenizer.json: byte fallback and fused unknowns", "[tok][metaspace]") {
  auto ids = [](const Tokenizer& t, std::string_view s) {
    Session sess(t);
    std::vector<TokenId> out;
    t.encode(s, out, sess);
    return out;
  };
  auto fb = metaspace_tokenizer(true, true);
  CHECK(ids(*fb, "ab a") == std::vector<TokenId>{2, 6, 5});  // ▁ab: "a b" ranks before "▁ a"
  CHECK(ids(*fb, "é") == std::vector<TokenId>{2, 7, 8});      // é has no token: its bytes
  CHECK(ids(*fb, "<s>a") == std::vector<TokenId>{1, 5});       // specials matched; ▁ prepended after
  CHECK(fb->template_prefix() == std::vector<TokenId>{1});
  std::vector<TokenId> v = {2, 6, 2, 7, 8};
  std::string back;
  REQUIRE(fb->decode(v.data(), v.size(), back).ok());
  CHECK(back == "ab é");
  auto fused = metaspace_tokenizer(false, true);
  CHECK(ids(*fused, "axyzb") == std::vector<TokenId>{5, 0, 4});  // one <unk> for "xyz"
  auto unfused = metaspace_tokenizer(false, false);
  CHECK(ids(*unfused, "axyzb") == std::vector<TokenId>{5, 0, 0, 0, 4});
}

TEST_CASE("SentencePiece-style tokenizer.json: the Metaspace pre-tokenizer's prepend schemes", "[tok][metaspace]") {
  auto load = [](const char* scheme, bool split, const char* decoder) {
    std::string j = std::string(R"({"added_tokens":[{"id":0,"content":"<unk>","special":true},{"id":1,"content":"<s>","special":true}],)") +
                    R"("normalizer":null,"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":")" +
                    scheme + R"(","split":)" + (split ? "true" : "false") + "},\"decoder\":" + decoder +
                    R"(,"model":{"type":"BPE","unk_token":"<unk>","fuse_unk":true,"byte_fallback":true,)" +
                    R"("vocab":{"<unk>":0,"<s>":1,"▁":2,"a":3,"b":4,"▁a":5,"ab":6,"<0xC3>":7,"<0xA9>":8},)" +
                    R"("merges":["a b","▁ a"]}})";
    auto t = load_tokenizer_json(j, "ms.json");
    INFO((t.ok() ? std::string() : t.error().message));
    REQUIRE(t.ok());
    return std::move(t).value();
  };
  const char* strip = R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},)"
                      R"({"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]})";
  using V = std::vector<TokenId>;
  auto always = load("always", false, strip);
  CHECK(encode(*always, "a") == V{5});
  CHECK(encode(*always, "<s>a") == V{1, 5});    // after a special token too
  CHECK(encode(*always, " a") == V{5});         // the text starts with ▁ already: none added
  auto first = load("first", false, strip);
  CHECK(encode(*first, "a") == V{5});
  CHECK(encode(*first, "<s>a") == V{1, 3});     // not at the start of the text: no ▁
  CHECK(encode(*first, "a<s>a") == V{5, 1, 3});
  const char* no_strip = R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},)"
                         R"({"type":"ByteFallback"},{"type":"Fuse"}]})";
  auto never = load("never", false, no_strip);
  CHECK(encode(*never, "a") == V{3});
  CHECK(encode(*never, "b a") == V{4, 5});
  auto split = load("always", true, strip);
  CHECK(encode(*split, "ab ab") == V{2, 6, 2, 6});  // words split at ▁: "▁ab" is no token
  // Decoding: Strip drops the leading space; without it the space stays.
  std::string back;
  V v = {5, 2, 6};
  REQUIRE(always->decode(v.data(), v.size(), back).ok());
  CHECK(back == "a ab");
  back.clear();
  REQUIRE(never->decode(v.data(), v.size(), back).ok());
  CHECK(back == " a ab");
}

// model.merges is read raw, in shares of whole 1024-merge marks per thread: a vocabulary
// of 4,400 merges, written compact, pretty and as pairs, with escaped tokens ('"', '\')
// and tokens too long for the one-pass path, loads as one tokenizer on 1-4 threads; a
// bad merge is named and located to its line and column, the first in file order.
namespace {
struct SynthJson {
  std::vector<std::string> vocab;                        // byte-level text, by id
  std::vector<std::pair<std::string, std::string>> merges;
  std::string write(int style) const {  // 0 compact "a b", 1 pretty "a b", 2 pretty pairs
    std::string j = "{\"model\":{\"type\":\"BPE\",\"vocab\":{";
    for (std::size_t i = 0; i < vocab.size(); ++i) {
      if (i) j += ',';
      json::append_string(j, vocab[i]);
      j += ':' + std::to_string(i);
    }
    j += "},\"merges\":[";
    for (std::size_t r = 0; r < merges.size(); ++r) {
      if (r) j += ',';
      if (style > 0) j += "\n      ";
      if (style == 2) {
        j += "[\n        ";
        json::append_string(j, merges[r].first);
        j += ",\n        ";
        json::append_string(j, merges[r].second);
        j += "\n      ]";
      } else {
        json::append_string(j, merges[r].first + " " + merges[r].second);
      }
    }
    j += style > 0 ? "\n    ]" : "]";
    j += "},\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
         "\"decoder\":{\"type\":\"ByteLevel\"}}";
    return j;
  }
};

SynthJson synth_json() {
  SynthJson s;
  std::string bytes = "\"\\ \xE4";
  for (char c = 'a'; c <= 'z'; ++c) bytes += c;
  for (char c = 'A'; c <= 'Z'; ++c) bytes += c;
  for (char c = '0'; c <= '9'; ++c) bytes += c;
  for (char b : bytes) s.vocab.push_back(bytes_to_byte_level(std::string(1, b)));
  std::size_t n = s.vocab.size();
  for (std::size_t x = 0; x < n; ++x)
    for (std::size_t y = 0; y < n; ++y) {
      s.merges.emplace_back(s.vocab[x], s.vocab[y]);
      s.vocab.push_back(s.vocab[x] + s.vocab[y]);
    }
  std::string t = "aa";  // then "aaaa", ... 128 a's: past the one-pass path's 48 bytes
  while (t.size() < 128) {
    s.merges.emplace_back(t, t);
    t += t;
    s.vocab.push_back(t);
  }
  return s;
}

// "name:line:col" of byte `at` of `text`.
std::string place(const std::string& name, const std::string& text, std::size_t at) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return name + ":" + std::to_string(line) + ":" + std::to_string(col);
}

// The offset of merge r (0-based) in a style-1 file.
std::size_t merge_at(const std::string& j, std::size_t r) {
  std::size_t at = j.find("\"merges\":[");
  for (std::size_t k = 0; k <= r; ++k) at = j.find("\n      ", at + 1);
  return at + 7;
}
}  // namespace

TEST_CASE("tokenizer.json merges: read raw on 1-4 threads, in every form, errors located", "[tok][threads]") {
  const SynthJson s = synth_json();
  REQUIRE(s.merges.size() > 4 * 1024);
  auto ref = load_tokenizer_json(s.write(0), "c.json", 1);
  REQUIRE(ref.ok());
  const std::string written = to_tokenizer_json(*ref.value());
  std::mt19937 rng(23);
  std::vector<std::string> texts;
  const std::string alphabet = "\"\\ \xE4" "abcxyzABCXYZ019";
  for (int k = 0; k < 100; ++k) {
    std::string t;
    for (std::size_t i = rng() % 200; i > 0; --i) t += rng() % 4 == 0 ? 'a' : alphabet[rng() % alphabet.size()];
    texts.push_back(t);
  }
  for (int style = 0; style < 3; ++style)
    for (int threads = 1; threads <= 4; ++threads) {
      INFO("style " << style << ", " << threads << " threads");
      auto t = load_tokenizer_json(s.write(style), "s.json", threads);
      REQUIRE(t.ok());
      CHECK(to_tokenizer_json(*t.value()) == written);
      for (const auto& text : texts) REQUIRE(encode(*t.value(), text) == encode(*ref.value(), text));
    }
  CHECK(encode(*ref.value(), std::string(128, 'a')).size() == 1);

  // Errors: the first in file order, at its place, on any number of threads.
  const std::string good = s.write(1);
  struct Case {
    std::size_t r;             // the merge broken
    std::string with, what;    // its new text; what the error says
  };
  for (const Case& c : {Case{1500, "\"a nosuch\"", "merge 1501: token \"nosuch\" is not in the vocabulary"},
                        Case{2600, "\"a b\" \"c d\"", "expected ',' or ']'"},
                        Case{3999, "17", "merge 4000 must be \"a b\" or [\"a\", \"b\"]"},
                        Case{4100, "[\"a\", \"b\", \"c\"]", "merge 4101 must be"},
                        Case{4200, "\"a\\u00\"", "invalid \\u escape"}}) {
    std::string bad = good;
    std::size_t at = merge_at(bad, c.r);
    std::size_t len = bad.find(',', at) - at;
    bad.replace(at, len, c.with);
    // A later error too, in another thread's share: the earlier one is reported.
    std::size_t later = merge_at(bad, s.merges.size() - 2);
    bad.replace(later, bad.find(',', later) - later, "\"b nosuch2\"");
    for (int threads = 1; threads <= 4; ++threads) {
      auto e = load_tokenizer_json(bad, "b.json", threads);
      REQUIRE_FALSE(e.ok());
      INFO(threads << " threads: " << e.error().message);
      CHECK(e.error().message.find(c.what) != std::string::npos);
      if (c.r != 2600 && c.r != 4200) CHECK(e.error().message.find(place("b.json", bad, at) + ": ") == 0);
    }
  }
  // A trailing comma: one merge more, which is not a merge.
  std::string trailing = good;
  trailing.insert(trailing.find("\n    ]"), ",");
  auto e = load_tokenizer_json(trailing, "t.json", 2);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.find("merge " + std::to_string(s.merges.size() + 1) + " must be") != std::string::npos);
}

// Long Chinese pieces are cut with a trie made by the first piece that needs it; threads
// that meet such a piece meanwhile encode it whole. Either way the ids are the same: four
// threads on a fresh tokenizer against one whose trie is made.
TEST_CASE("long CJK pieces encode the same while the span trie is being made", "[tok][threads]") {
  std::mt19937 rng(8);
  const std::vector<std::string> han = {"中", "文", "字", "符", "的", "是", "人", "大", "国", "语"};
  std::string corpus;
  for (int i = 0; i < 20000; ++i) corpus += i % 9 == 8 ? std::string(" ") : han[rng() % han.size()];
  const std::string j = trained_json(corpus, 600);
  auto ref = load_tokenizer_json(j, "r.json", 1);
  REQUIRE(ref.ok());
  std::vector<std::string> texts;
  for (int k = 0; k < 64; ++k) texts.push_back(corpus.substr(rng() % 40000 / 3 * 3, 300));
  std::vector<std::vector<TokenId>> want;
  for (const auto& t : texts) want.push_back(encode(*ref.value(), t));
  for (int round = 0; round < 5; ++round) {
    auto fresh = load_tokenizer_json(j, "f.json", 2);
    REQUIRE(fresh.ok());
    std::vector<std::vector<std::vector<TokenId>>> got(4, std::vector<std::vector<TokenId>>(texts.size()));
    std::vector<std::thread> workers;
    for (int w = 0; w < 4; ++w)
      workers.emplace_back([&, w] {
        for (std::size_t k = 0; k < texts.size(); ++k) got[static_cast<std::size_t>(w)][k] = encode(*fresh.value(), texts[k]);
      });
    for (auto& t : workers) t.join();
    for (int w = 0; w < 4; ++w)
      for (std::size_t k = 0; k < texts.size(); ++k) REQUIRE(got[static_cast<std::size_t>(w)][k] == want[k]);
  }
}

namespace {
// The stream's pieces, one per id (finish() adds to the last), and their concatenation.
std::vector<std::string> stream(const Tokenizer& t, const std::vector<TokenId>& ids, bool skip_special = true) {
  DecodeStream ds(t, skip_special);
  std::vector<std::string> pieces;
  for (TokenId id : ids) {
    std::string piece;
    REQUIRE(ds.add(id, piece).ok());
    pieces.push_back(piece);
  }
  REQUIRE(ds.finish(pieces.empty() ? pieces.emplace_back() : pieces.back()).ok());
  return pieces;
}
std::string joined(const std::vector<std::string>& pieces) {
  std::string s;
  for (const auto& p : pieces) s += p;
  return s;
}
std::string whole(const Tokenizer& t, const std::vector<TokenId>& ids, bool skip_special = true) {
  std::string s;
  REQUIRE(t.decode(ids.data(), ids.size(), s, skip_special).ok());
  return s;
}
}  // namespace

TEST_CASE("ends_mid_character: incomplete UTF-8 and U+FFFD at the end", "[tok][stream]") {
  CHECK_FALSE(ends_mid_character(""));
  CHECK_FALSE(ends_mid_character("abc"));
  CHECK_FALSE(ends_mid_character("a\xC3\xA9"));          // é, whole
  CHECK(ends_mid_character("a\xC3"));                     // é's first byte
  CHECK(ends_mid_character("\xE4\xB8"));                 // 中 without its last byte
  CHECK_FALSE(ends_mid_character("\xE4\xB8\xAD"));
  CHECK(ends_mid_character("\xF0\x9F\x98"));            // an emoji's first three bytes
  CHECK_FALSE(ends_mid_character("\xF0\x9F\x98\x80"));
  CHECK_FALSE(ends_mid_character("a\x80\x80"));          // stray continuation bytes never complete
  CHECK(ends_mid_character("ab\xEF\xBF\xBD"));          // a decoder's placeholder for pending bytes
}

TEST_CASE("DecodeStream: a character spelled by byte tokens is shown whole, once", "[tok][stream]") {
  // Metaspace decoders write U+FFFD for bytes that are not (yet) a character: the stream
  // must wait for é's second byte rather than show the placeholder.
  auto t = metaspace_tokenizer(true, true);
  auto pieces = stream(*t, {2, 6, 2, 7, 8, 5});
  CHECK(pieces == std::vector<std::string>{"", "ab", " ", "", "\xC3\xA9", " a"});
  CHECK(joined(pieces) == "ab \xC3\xA9 a");
  // A byte that never completes is shown as the decoder gives it, at the next whole text.
  CHECK(joined(stream(*t, {5, 7, 3})) == whole(*t, {5, 7, 3}));
  CHECK(joined(stream(*t, {5, 7})) == "a\xEF\xBF\xBD");  // finish() gives what was held
  // Byte-level BPE: 中 (E4 B8 AD) as three byte tokens.
  auto bl = small_tokenizer("gpt2", true);
  std::vector<TokenId> ids = encode(*bl, "\xE4\xB8\xAD", false);
  REQUIRE(whole(*bl, ids) == "\xE4\xB8\xAD");
  std::vector<TokenId> bytes;
  for (unsigned char c : std::string("a \xE4\xB8\xAD!")) {
    auto one = encode(*bl, std::string(1, static_cast<char>(c)), false);
    REQUIRE(one.size() == 1);
    bytes.push_back(one[0]);
  }
  auto p = stream(*bl, bytes);
  CHECK(p == std::vector<std::string>{"a", " ", "", "", "\xE4\xB8\xAD", "!"});
}

TEST_CASE("DecodeStream: the pieces join to the whole decode (random sequences)", "[tok][stream][property]") {
  std::mt19937 rng(7);
  SECTION("byte-level BPE, specials skipped or kept") {
    auto t = small_tokenizer("gpt2", true);
    const auto n = static_cast<TokenId>(t->vocab_size());
    for (int i = 0; i < 500; ++i) {
      std::vector<TokenId> ids(rng() % 40);
      for (auto& id : ids) id = static_cast<TokenId>(rng() % static_cast<unsigned>(n));
      const bool skip = i % 2 == 0;
      INFO("case " << i);
      REQUIRE(joined(stream(*t, ids, skip)) == whole(*t, ids, skip));
    }
  }
  SECTION("SentencePiece-style, byte fallback") {
    auto t = metaspace_tokenizer(true, true);
    for (int i = 0; i < 2000; ++i) {
      // Runs of byte tokens that are whole characters (é) or a lone byte closed by another
      // token; shorter than kMaxHeld, so that no text is forced out mid-character.
      std::vector<TokenId> ids;
      while (ids.size() + 3 < DecodeStream::kMaxHeld && rng() % 8 != 0) {
        switch (rng() % 4) {
          case 0: ids.insert(ids.end(), {7, 8, static_cast<TokenId>(2 + rng() % 5)}); break;
          case 1: ids.insert(ids.end(), {static_cast<TokenId>(7 + rng() % 2), static_cast<TokenId>(2 + rng() % 5)}); break;
          default: ids.push_back(static_cast<TokenId>(rng() % 7)); break;
        }
      }
      INFO("case " << i);
      REQUIRE(joined(stream(*t, ids)) == whole(*t, ids));
    }
  }
}

TEST_CASE("DecodeStream: a character is shown when whole, though later bytes spoil the run", "[tok][stream]") {
  // A whole decode replaces every byte of a run of byte tokens that is not valid UTF-8
  // (C3 A9 C3 here, as HF's ByteFallback decoder does); the stream has shown é by then,
  // and the byte that spoils the run shows as U+FFFD.
  auto t = metaspace_tokenizer(true, true);
  CHECK(whole(*t, {7, 8, 7, 3}) == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "a");
  CHECK(joined(stream(*t, {7, 8, 7, 3})) == "\xC3\xA9\xEF\xBF\xBD" "a");
}

TEST_CASE("DecodeStream: each step decodes a short window, not the whole text", "[tok][stream]") {
  // 20,000 tokens through a stream: the context it keeps stays small (quadratic work would
  // show as a window that grows with the text; the cost is what this test bounds, not time).
  auto t = small_tokenizer("gpt2", true);
  DecodeStream ds(*t);
  std::mt19937 rng(3);
  std::string all, piece;
  std::vector<TokenId> ids;
  for (int i = 0; i < 20000; ++i) {
    auto id = static_cast<TokenId>(rng() % 200 + 1);
    ids.push_back(id);
    REQUIRE(ds.add(id, all).ok());
    REQUIRE(ds.window() <= DecodeStream::kMaxHeld * 2);
  }
  REQUIRE(ds.finish(all).ok());
  CHECK(all == whole(*t, ids));
}

TEST_CASE("DecodeStream: an id outside the vocabulary is an error", "[tok][stream][errors]") {
  auto t = metaspace_tokenizer(true, true);
  DecodeStream ds(*t);
  std::string out;
  CHECK_FALSE(ds.add(999, out).ok());
}

TEST_CASE("end_of_generation_ids: the configs beside a tokenizer.json, else its end markers", "[tok][end]") {
  const std::string dir = "/tmp/lmp_end_ids_" + std::to_string(::getpid()) + "/";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir + name) << text; };
  write("tokenizer.json", to_tokenizer_json(*small_tokenizer("gpt2", true)));
  auto t = load_tokenizer(dir + "tokenizer.json");
  REQUIRE(t.ok());
  const TokenId eot = (*t)->id_of("<|endoftext|>");
  REQUIRE(eot >= 0);
  auto ends = [&] {
    auto r = end_of_generation_ids(**t, dir + "tokenizer.json");
    REQUIRE(r.ok());
    return *r;
  };
  // No config: the special token that is an end marker.
  CHECK(ends() == std::vector<TokenId>{eot});
  // tokenizer_config.json's eos_token, as a string or as an object.
  write("tokenizer_config.json", R"({"eos_token": {"content": "<|endoftext|>", "special": true}})");
  CHECK(ends() == std::vector<TokenId>{eot});
  // generation_config.json's eos_token_id list adds to it, sorted and unique.
  write("generation_config.json", R"({"eos_token_id": [7, 3, 7]})");
  std::vector<TokenId> want{3, 7, eot};
  std::sort(want.begin(), want.end());
  CHECK(ends() == want);
  // Errors located in the config: an id past the vocabulary, a token it does not have.
  write("generation_config.json", R"({"eos_token_id": 99999})");
  auto bad = end_of_generation_ids(**t, dir + "tokenizer.json");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("generation_config.json:1:"));
  std::filesystem::remove(dir + "generation_config.json");
  write("tokenizer_config.json", R"({"eos_token": "</nope>"})");
  bad = end_of_generation_ids(**t, dir + "tokenizer.json");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("'</nope>' is not a token"));
  std::filesystem::remove_all(dir);
  CHECK(is_end_marker("<|eot_id|>"));
  CHECK_FALSE(is_end_marker("<s>"));
}

TEST_CASE("a model directory stands for the tokenizer file in it", "[tok][dir]") {
  namespace fs = std::filesystem;
  const std::string dir = "/tmp/lmp_tok_dir_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir + "/" + name) << text; };
  auto tok = small_tokenizer("gpt2", true);
  auto found = [](const std::string& d) {
    auto r = tokenizer_file_in(d);
    return r.ok() ? r.value() : "error: " + r.error().message;
  };
  // Nothing to find: the error names the directory and what was looked for.
  auto none = tokenizer_file_in(dir);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message, Catch::Contains(dir + ": a directory with no tokenizer file"));
  CHECK_FALSE(load_tokenizer(dir).ok());
  // vocab.json alone is not enough (its merges are missing); vocab.txt is.
  write("vocab.json", to_vocab_json(*tok));
  CHECK_FALSE(tokenizer_file_in(dir).ok());
  write("vocab.txt", to_vocab_txt(*tok));
  CHECK(found(dir) == dir + "/vocab.txt");
  write("merges.txt", to_merges_txt(*tok));
  CHECK(found(dir) == dir + "/vocab.json");
  // tokenizer.json comes first, with or without a slash after the directory.
  write("tokenizer.json", to_tokenizer_json(*tok));
  CHECK(found(dir) == dir + "/tokenizer.json");
  CHECK(found(dir + "/") == dir + "/tokenizer.json");
  auto from_dir = load_tokenizer(dir);
  REQUIRE(from_dir.ok());
  std::vector<TokenId> a, b;
  Session s1(**from_dir), s2(*tok);
  (*from_dir)->encode("hello world", a, s1);
  tok->encode("hello world", b, s2);
  CHECK(a == b);
  // The end-of-generation ids are looked up in the directory itself.
  write("generation_config.json", R"({"eos_token_id": 5})");
  auto ends = end_of_generation_ids(**from_dir, dir);
  REQUIRE(ends.ok());
  CHECK(*ends == std::vector<TokenId>{5});
  // Two rank files and nothing else: ask which.
  const std::string ranks = dir + "/ranks";
  fs::create_directories(ranks);
  std::ofstream(ranks + "/a.tiktoken") << "YQ== 0\n";
  std::ofstream(ranks + "/b.tiktoken") << "YQ== 0\n";
  auto two = tokenizer_file_in(ranks);
  REQUIRE_FALSE(two.ok());
  CHECK_THAT(two.error().message, Catch::Contains("2 .tiktoken files"));
  fs::remove(ranks + "/b.tiktoken");
  CHECK(found(ranks) == ranks + "/a.tiktoken");
  fs::remove_all(dir);
}

TEST_CASE("tokenizer.json: a Sequence of several Splits applies them in turn and is written back", "[tok][pre]") {
  auto t = small_tokenizer("gpt2", true);
  std::string j = to_tokenizer_json(*t);
  const auto a = j.find(R"("pre_tokenizer":)"), b = j.find(R"(,"post_processor")");
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  // deepseek-coder's kind of list: letters (a space before them), digits one by one, and
  // here a Removed split too.
  const std::string seq =
      R"("pre_tokenizer":{"type":"Sequence","pretokenizers":[)"
      R"({"type":"Split","pattern":{"Regex":"\\s?\\p{L}+"},"behavior":"Isolated","invert":false},)"
      R"({"type":"Split","pattern":{"Regex":"\\p{N}"},"behavior":"Isolated","invert":false},)"
      R"({"type":"Split","pattern":{"String":"|"},"behavior":"Removed","invert":false},)"
      R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]})";
  j.replace(a, b - a, seq);
  auto loaded = load_tokenizer_json(j, "seq.json");
  REQUIRE(loaded.ok());
  const Tokenizer& s = **loaded;
  REQUIRE(s.pre_tokenizer() != nullptr);
  CHECK(s.pre_tokenizer()->steps().size() == 3);
  // Every digit its own piece; the bar removed; the text otherwise kept.
  std::vector<TokenId> ids;
  Session session(s);
  s.encode("ab 123|cd", ids, session);
  std::string back;
  REQUIRE(s.decode(ids.data(), ids.size(), back).ok());
  CHECK(back == "ab 123cd");
  std::size_t digit_tokens = 0;
  for (TokenId id : ids) digit_tokens += s.token_string(id).size() == 1 && std::isdigit(s.token_string(id)[0]);
  CHECK(digit_tokens == 3);
  // Written back with its steps and their behaviors, it loads to the same tokenizer.
  const std::string again = to_tokenizer_json(s);
  CHECK_THAT(again, Catch::Contains(R"("behavior":"Removed")"));
  CHECK_THAT(again, Catch::Contains(R"({"type":"Digits","individual_digits":true})"));  // the \p{N} split
  auto reloaded = load_tokenizer_json(again, "again.json");
  REQUIRE(reloaded.ok());
  CHECK(to_tokenizer_json(**reloaded) == again);
}

TEST_CASE("tokenizer.json: HF's character-class pre-tokenizers load, and bad forms are located errors", "[tok][pre]") {
  auto t = small_tokenizer("gpt2", true);
  const std::string j = to_tokenizer_json(*t);
  const auto a = j.find(R"("pre_tokenizer":)"), b = j.find(R"(,"post_processor")");
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  auto with_pre = [&](const std::string& pre) {
    std::string k = j;
    k.replace(a, b - a, R"("pre_tokenizer":)" + pre);
    return load_tokenizer_json(k, "pre.json");
  };
  const std::string bl = R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";
  auto ids_of = [](const Tokenizer& tk, std::string_view text) {
    std::vector<TokenId> ids;
    Session session(tk);
    tk.encode(text, ids, session);
    return ids;
  };
  // StarCoder's form: every digit a token of its own, and the text decodes back.
  auto star = with_pre(R"({"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},)" + bl + "]}");
  INFO((star.ok() ? std::string() : star.error().message));
  REQUIRE(star.ok());
  auto ids = ids_of(**star, "x 2024 y");
  std::size_t digits = 0;
  for (TokenId id : ids) digits += (*star)->token_string(id).size() == 1 && std::isdigit((*star)->token_string(id)[0]);
  CHECK(digits == 4);
  std::string back;
  REQUIRE((*star)->decode(ids.data(), ids.size(), back).ok());
  CHECK(back == "x 2024 y");
  // Falcon's form loads; its steps after ByteLevel are views of byte-level characters.
  auto falcon = with_pre(R"({"type":"Sequence","pretokenizers":[{"type":"Punctuation","behavior":"Contiguous"},)" + bl +
                         R"(,{"type":"Digits","individual_digits":false},{"type":"Split","pattern":{"Regex":)"
                         R"("[0-9][0-9][0-9]"},"behavior":"Isolated","invert":false}]})");
  REQUIRE(falcon.ok());
  auto steps = (*falcon)->pre_tokenizer()->steps();
  REQUIRE(steps.size() == 4);
  CHECK(steps[0]->name() == "punctuation");
  CHECK(steps[0]->behavior() == SplitBehavior::contiguous);
  CHECK(steps[1]->name() == "gpt2");
  CHECK(steps[2]->name() == "byte-level digits");
  CHECK(steps[3]->name() == "byte-level regex");
  // Written back, the views stay after ByteLevel (with its regex), and it loads the same.
  const std::string falcon_json = to_tokenizer_json(**falcon);
  CHECK_THAT(falcon_json, Catch::Contains(R"({"type":"Punctuation","behavior":"Contiguous"},{"type":"ByteLevel",)"));
  CHECK_THAT(falcon_json, Catch::Contains(R"("use_regex":true},{"type":"Digits","individual_digits":false},{"type":"Split")"));
  auto falcon2 = load_tokenizer_json(falcon_json, "falcon2.json");
  REQUIRE(falcon2.ok());
  CHECK(to_tokenizer_json(**falcon2) == falcon_json);
  CHECK(ids_of(**falcon2, "a,,b 12345 x\xd9\xa1!") == ids_of(**falcon, "a,,b 12345 x\xd9\xa1!"));
  // WhitespaceSplit drops the spaces: no token holds one.
  auto ws = with_pre(R"({"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},)" + bl + "]}");
  REQUIRE(ws.ok());
  for (TokenId id : ids_of(**ws, "a b\tc")) CHECK((*ws)->token_string(id).find("\xc4\xa0") == std::string::npos);
  // Written back, invert and Contiguous survive (as Split steps).
  auto inv = with_pre(R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\d+"},)"
                      R"("behavior":"Contiguous","invert":true},)" + bl + "]}");
  REQUIRE(inv.ok());
  const std::string again = to_tokenizer_json(**inv);
  CHECK_THAT(again, Catch::Contains(R"("behavior":"Contiguous","invert":true)"));
  auto reloaded = load_tokenizer_json(again, "again.json");
  REQUIRE(reloaded.ok());
  CHECK(ids_of(**reloaded, "ab12 cd") == ids_of(**inv, "ab12 cd"));
  auto bert = with_pre(R"({"type":"Sequence","pretokenizers":[{"type":"BertPreTokenizer"},)" + bl + "]}");
  REQUIRE(bert.ok());
  CHECK_THAT(to_tokenizer_json(**bert), Catch::Contains(R"([{"type":"BertPreTokenizer"},{"type":"ByteLevel")"));

  // Errors name the place and the form.
  auto err = [&](const std::string& pre) {
    auto r = with_pre(pre);
    REQUIRE_FALSE(r.ok());
    return r.error().message;
  };
  CHECK_THAT(err(R"({"type":"CharDelimiterSplit","delimiter":"ab"})"),
             Catch::Contains("pre.json:") && Catch::Contains("delimiter of one character"));
  CHECK_THAT(err(R"({"type":"Punctuation","behavior":"Sideways"})"), Catch::Contains("split behavior 'Sideways'"));
  CHECK_THAT(err(R"({"type":"UnicodeScripts"})"),
             Catch::Contains("'UnicodeScripts' is not supported") && Catch::Contains("Digits"));
  CHECK_THAT(err(R"({"type":"Sequence","pretokenizers":[{"type":"Digits"},)"
                 R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true}]})"),
             Catch::Contains("add_prefix_space after another pre-tokenizer"));
  CHECK_THAT(err(R"({"type":"Sequence","pretokenizers":[)" + bl + "," + bl + "]}"),
             Catch::Contains("a second ByteLevel"));
}

namespace {
// A unigram tokenizer.json over a and b with many segmentations per word, an added token
// <sep>, and either a Metaspace pre-tokenizer that splits words (`split`) or none, the ▁
// put in by normalizers (the whole line is one lattice, as spm sees it). No piece has ▁
// inside, so both forms have the same segmentations.
std::string ab_unigram_json(bool split) {
  const std::string vocab =
      R"(["<unk>",0.0],["▁",-4.0],["a",-3.0],["b",-2.0],["ab",-2.5],["▁a",-1.0],["▁ab",-1.5],["▁abab",-2.0],)"
      R"(["ba",-2.25],["aab",-3.5],["▁b",-2.75],["bab",-3.25])";
  const std::string pre =
      split ? R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true})" : "null";
  const std::string norm = split ? "null"
                                 : R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},)"
                                   R"({"type":"Replace","pattern":{"String":" "},"content":"▁"}]})";
  return R"({"version":"1.0","added_tokens":[{"id":12,"content":"<sep>","single_word":false,"lstrip":false,)"
         R"("rstrip":false,"normalized":false,"special":true}],"normalizer":)" +
         norm + R"(,"pre_tokenizer":)" + pre + R"(,"post_processor":null,"decoder":null,)"
         R"("model":{"type":"Unigram","unk_id":0,"byte_fallback":false,"vocab":[)" + vocab + "]}}";
}
}  // namespace

TEST_CASE("Unigram n best: words combined by score equal the whole line's lattice", "[tok][spm][property]") {
  auto split = load_tokenizer_json(ab_unigram_json(true), "split.json");
  auto whole = load_tokenizer_json(ab_unigram_json(false), "whole.json");
  REQUIRE(split.ok());
  REQUIRE(whole.ok());
  Session ss(*split.value()), sw(*whole.value());
  const char* words[] = {"a", "b", "ab", "aab", "abab", "ba", "bab", "abba"};
  std::mt19937 rng(31);
  std::vector<SentencePieceModel::Segmentation> a, b, all;
  for (int round = 0; round < 300; ++round) {
    std::string text;
    int n_words = 1 + static_cast<int>(rng() % 5);
    for (int w = 0; w < n_words; ++w) {
      if (w) text += rng() % 6 == 0 ? "<sep>" : " ";
      text += words[rng() % 8];
    }
    const std::size_t n = 1 + rng() % 40;
    INFO("text '" << text << "', n " << n);
    REQUIRE(split.value()->nbest(text, n, a, ss).ok());
    REQUIRE(whole.value()->nbest(text, n, b, sw).ok());
    REQUIRE(whole.value()->nbest(text, 100000, all, sw).ok());  // every segmentation
    REQUIRE(a.size() == std::min(n, all.size()));
    REQUIRE(b.size() == a.size());
    // The same scores rank by rank, best first; the first is the best segmentation.
    for (std::size_t r = 0; r < a.size(); ++r) {
      CHECK(a[r].score == Approx(b[r].score).margin(1e-9));
      CHECK(a[r].score == Approx(all[r].score).margin(1e-9));
      if (r) CHECK(a[r].score <= a[r - 1].score);
    }
    std::vector<TokenId> best;
    split.value()->encode(text, best, ss);
    CHECK(a[0].ids == best);
    // Every segmentation is one of the whole line's, distinct, with its own score; those
    // that differ from the lattice's own n best are tied at the last score.
    std::map<std::vector<TokenId>, double> score_of;
    for (const auto& x : all) score_of[x.ids] = x.score;
    std::set<std::vector<TokenId>> mine, theirs;
    for (const auto& x : a) {
      REQUIRE(score_of.count(x.ids));
      CHECK(score_of[x.ids] == Approx(x.score).margin(1e-9));
      CHECK(mine.insert(x.ids).second);
    }
    for (const auto& x : b) theirs.insert(x.ids);
    for (const auto& x : a)
      if (!theirs.count(x.ids)) CHECK(x.score == Approx(a.back().score).margin(1e-9));
  }
  // Models without segmentations to choose from say so.
  auto bpe = small_tokenizer("cl100k", false);
  Session sb(*bpe);
  CHECK(!bpe->nbest("ab", 3, a, sb).ok());
  CHECK(!split.value()->nbest("ab", 0, a, ss).ok());
}
