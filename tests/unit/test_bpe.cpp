#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "lmpipe/core/rng.h"
#include "lmpipe/tok/bpe.h"

using namespace lmp;
using namespace lmp::tok;

namespace {
// All 256 bytes, then the given multi-byte tokens.
std::vector<std::string> byte_vocab(std::vector<std::string> extra) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
  for (auto& e : extra) v.push_back(std::move(e));
  return v;
}

std::vector<std::string> as_strings(const BpeModel& m, const std::vector<TokenId>& ids) {
  std::vector<std::string> out;
  for (TokenId id : ids) out.push_back(m.token(id));
  return out;
}

// The definition: repeatedly merge the leftmost lowest-ranked adjacent pair.
std::vector<TokenId> reference_encode(const BpeModel& m, std::string_view s) {
  std::vector<TokenId> sym;
  for (char c : s) sym.push_back(m.byte_token(static_cast<unsigned char>(c)));
  for (;;) {
    std::size_t best = sym.size();
    std::uint32_t br = 0xFFFFFFFFu;
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      const MergeInfo* mi = m.merge(sym[i], sym[i + 1]);
      if (mi && mi->rank < br) {
        br = mi->rank;
        best = i;
      }
    }
    if (best == sym.size()) return sym;
    sym[best] = m.merge(sym[best], sym[best + 1])->id;
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}
}  // namespace

TEST_CASE("BPE applies merges by rank: abcd -> ab|cd -> abcd", "[tok][bpe]") {
  auto v = byte_vocab({"ab", "cd", "abcd", "bc"});
  TokenId a = 'a', b = 'b', c = 'c', d = 'd', ab = 256, cd = 257, bc = 259;
  auto m = BpeModel::build(v, {{a, b}, {c, d}, {ab, cd}, {b, c}}, false);
  REQUIRE(m.ok());
  BpeScratch s;
  std::vector<TokenId> out;
  m.value().encode("abcd", out, s);
  CHECK(as_strings(m.value(), out) == std::vector<std::string>{"abcd"});
  out.clear();
  m.value().encode("bcd", out, s);  // (c,d) outranks (b,c)
  CHECK(as_strings(m.value(), out) == std::vector<std::string>{"b", "cd"});
  (void)bc;
}

TEST_CASE("BPE rejects merges whose result is not a token", "[tok][bpe]") {
  auto v = byte_vocab({});
  auto m = BpeModel::build(v, {{'x', 'y'}}, false);
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().message.find("merge 1") != std::string::npos);
}

TEST_CASE("tiktoken ranks: the rank of the concatenation is the priority", "[tok][bpe]") {
  auto v = byte_vocab({"ab", "bc", "abc"});
  auto m = BpeModel::build_from_ranks(v);
  REQUIRE(m.ok());
  BpeScratch s;
  std::vector<TokenId> out;
  m.value().encode("abc", out, s);  // whole piece is a token
  CHECK(as_strings(m.value(), out) == std::vector<std::string>{"abc"});
  out.clear();
  m.value().encode("abcb", out, s);  // ab (256) before bc (257), then abc (258)
  CHECK(as_strings(m.value(), out) == std::vector<std::string>{"abc", "b"});
}

TEST_CASE("long pieces (heap path) encode as the definition says", "[tok][bpe][property]") {
  auto v = byte_vocab({"aa", "ab", "ba", "aaaa", "abab", "aab", "bb"});
  auto id = [&](const char* t) {
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] == t) return static_cast<TokenId>(i);
    return TokenId{-1};
  };
  std::vector<std::pair<TokenId, TokenId>> merges = {{id("a"), id("b")},  {id("a"), id("a")},
                                                     {id("ab"), id("ab")}, {id("aa"), id("aa")},
                                                     {id("b"), id("a")},  {id("aa"), id("b")},
                                                     {id("b"), id("b")}};
  auto m = BpeModel::build(v, merges, false);
  REQUIRE(m.ok());
  std::mt19937 rng(7);
  BpeScratch s;
  for (int t = 0; t < 500; ++t) {
    std::string w;
    std::size_t n = 1 + static_cast<std::size_t>(rng() % 300);
    for (std::size_t i = 0; i < n; ++i) w += "ab"[rng() % 2];
    std::vector<TokenId> out;
    m.value().encode(w, out, s);
    INFO("input " << w);
    REQUIRE(out == reference_encode(m.value(), w));
  }
}

namespace {
// A random byte-level BPE over a small alphabet of ASCII and non-ASCII bytes: each merge
// joins two existing tokens, so tokens span "characters" at random, as byte-level
// tokens of CJK text do.
struct RandomBpe {
  std::vector<std::string> vocab = byte_vocab({});
  std::vector<std::pair<TokenId, TokenId>> merges;
  std::string alphabet;
  RandomBpe(std::mt19937& rng, std::size_t n_merges) {
    alphabet = {'a', 'b', ' ', '\xE4', '\xB8', '\x80', '\xE7'};
    std::vector<TokenId> pool;
    for (char c : alphabet) pool.push_back(static_cast<unsigned char>(c));
    while (merges.size() < n_merges) {
      TokenId a = pool[rng() % pool.size()], b = pool[rng() % pool.size()];
      std::string t = vocab[static_cast<std::size_t>(a)] + vocab[static_cast<std::size_t>(b)];
      if (t.size() > 9) continue;
      bool seen = false;
      for (auto [x, y] : merges) seen = seen || (x == a && y == b);
      if (seen) continue;
      TokenId id = -1;
      for (std::size_t i = 256; i < vocab.size(); ++i)
        if (vocab[i] == t) id = static_cast<TokenId>(i);
      if (id < 0) {
        id = static_cast<TokenId>(vocab.size());
        vocab.push_back(t);
        pool.push_back(id);
      }
      merges.emplace_back(a, b);
    }
  }
  std::string text(std::mt19937& rng, std::size_t n) const {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    return s;
  }
};
}  // namespace

TEST_CASE("long non-ASCII pieces, cut where no token spans, encode as the definition says",
          "[tok][bpe][property]") {
  std::mt19937 rng(11);
  for (int round = 0; round < 40; ++round) {
    RandomBpe r(rng, 20 + rng() % 60);
    for (bool ignore : {false, true}) {
      auto m = BpeModel::build(r.vocab, r.merges, ignore);
      REQUIRE(m.ok());
      REQUIRE(m.value().segments(std::string(8, '\xE4')));
      BpeScratch s;
      for (int t = 0; t < 200; ++t) {
        std::string w = r.text(rng, 1 + rng() % 40);
        std::vector<TokenId> out;
        m.value().encode(w, out, s);
        std::vector<TokenId> want = reference_encode(m.value(), w);
        if (ignore && m.value().find(w) >= 0) want = {m.value().find(w)};
        INFO("round " << round << " ignore_merges " << ignore << " input of " << w.size() << " bytes");
        REQUIRE(out == want);
        out.clear();
        m.value().encode(w, out, s);  // a second time: from the segment cache
        REQUIRE(out == want);
      }
    }
  }
}

TEST_CASE("tiktoken ranks: long non-ASCII pieces encode as the definition says", "[tok][bpe][property]") {
  std::mt19937 rng(5);
  for (int round = 0; round < 40; ++round) {
    RandomBpe r(rng, 20 + rng() % 60);
    auto m = BpeModel::build_from_ranks(r.vocab);
    REQUIRE(m.ok());
    BpeScratch s;
    for (int t = 0; t < 200; ++t) {
      std::string w = r.text(rng, 1 + rng() % 40);
      std::vector<TokenId> out;
      m.value().encode(w, out, s);
      // tiktoken's definition: the piece itself when it is a token, else merge the
      // adjacent pair whose concatenation has the lowest rank (id), leftmost first.
      std::vector<TokenId> want;
      if (TokenId id = m.value().find(w); id >= 0) {
        want = {id};
      } else {
        for (char c : w) want.push_back(static_cast<unsigned char>(c));
        for (;;) {
          std::size_t best = want.size();
          TokenId br = 0;
          for (std::size_t i = 0; i + 1 < want.size(); ++i) {
            TokenId j = m.value().find(m.value().token(want[i]) + m.value().token(want[i + 1]));
            if (j >= 0 && (best == want.size() || j < br)) {
              br = j;
              best = i;
            }
          }
          if (best == want.size()) break;
          want[best] = br;
          want.erase(want.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        }
      }
      INFO("round " << round << " input of " << w.size() << " bytes");
      REQUIRE(out == want);
    }
  }
}

TEST_CASE("BPE end_of_word_suffix: the last byte of a piece carries the suffix", "[tok][bpe]") {
  // 256 bytes, then a</w> b</w> (256, 257), ab</w> (258) and ba (259).
  auto v = byte_vocab({"a</w>", "b</w>", "ab</w>", "ba"});
  TokenId a = 'a', b = 'b', b_end = 257, ab_end = 258;
  auto m = BpeModel::build(v, {{a, b_end}, {b, a}}, false);
  REQUIRE(m.ok());
  REQUIRE(m.value().set_end_of_word_suffix("</w>").ok());
  BpeScratch s;
  std::vector<TokenId> out;
  m.value().encode("ab", out, s);  // a + b</w> → ab</w>
  CHECK(out == std::vector<TokenId>{ab_end});
  out.clear();
  m.value().encode("bab", out, s);  // b a b</w>: (a, b</w>) outranks (b, a)
  CHECK(as_strings(m.value(), out) == std::vector<std::string>{"b", "ab</w>"});
  out.clear();
  m.value().encode("ba", out, s);  // b a</w>: no merge of (b, a</w>)
  CHECK(as_strings(m.value(), out) == std::vector<std::string>{"b", "a</w>"});
  out.clear();
  m.value().encode("x", out, s);  // no x</w>: the byte is dropped, as one without a token
  CHECK(out.empty());
  CHECK(s.dropped_bytes == 1);
  // Without the suffix the same model merges (b, a) instead.
  REQUIRE(m.value().set_end_of_word_suffix("").ok());
  out.clear();
  m.value().encode("ba", out, s);
  CHECK(as_strings(m.value(), out) == std::vector<std::string>{"ba"});
}

namespace {
// `n` draws of BPE-dropout on `text`: how often each segmentation came out (as its
// tokens joined by '|').
std::map<std::string, int> dropout_draws(const BpeModel& m, std::string_view text, double p, int n, std::uint64_t seed) {
  Rng rng(seed);
  BpeScratch s;
  s.sampling = {&rng, p, 0};
  std::map<std::string, int> seen;
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) {
    out.clear();
    m.encode(text, out, s);
    std::string key;
    for (TokenId id : out) key += (key.empty() ? "" : "|") + m.token(id);
    ++seen[key];
  }
  return seen;
}
}  // namespace

TEST_CASE("BPE-dropout: HF's merge_all, a merge that is not skipped puts the skipped ones back",
          "[tok][bpe][dropout][property]") {
  // abcd with the merges (a,b) and then (c,d). Each merge taken from the heap is skipped
  // with probability p. Skip (a,b), take (c,d): (a,b) is back, and is drawn again; skip
  // both: the heap is empty and the piece ends. By hand, at p = 1/2:
  //   ab|cd  (1-p)² + p(1-p)² = 0.375     ab|c|d  (1-p)p = 0.25
  //   a|b|cd p(1-p)p = 0.125               a|b|c|d p² = 0.25
  // (SentencePiece drops a skipped merge for good: 0.25 each; next test.)
  auto v = byte_vocab({"ab", "cd"});
  auto m = BpeModel::build(v, {{'a', 'b'}, {'c', 'd'}}, false);
  REQUIRE(m.ok());
  const int n = 40000;
  auto seen = dropout_draws(m.value(), "abcd", 0.5, n, 11);
  CHECK(seen.size() == 4);
  const std::map<std::string, double> expected = {
      {"ab|cd", 0.375}, {"ab|c|d", 0.25}, {"a|b|cd", 0.125}, {"a|b|c|d", 0.25}};
  for (const auto& [key, prob] : expected) {
    INFO(key);
    CHECK(std::abs(seen[key] / double(n) - prob) < 0.012);  // (σ ≤ 0.0025)
  }
  // p = 0 is the deterministic encoding, p = 1 makes no merge; the same seed, the same draws.
  CHECK(dropout_draws(m.value(), "abcd", 0.0, 50, 1) == std::map<std::string, int>{{"ab|cd", 50}});
  CHECK(dropout_draws(m.value(), "abcd", 1.0, 50, 1) == std::map<std::string, int>{{"a|b|c|d", 50}});
  CHECK(dropout_draws(m.value(), "abcdab", 0.3, 500, 7) == dropout_draws(m.value(), "abcdab", 0.3, 500, 7));
  // HF's ignore_merges lookup is on its cached path only: with dropout, a piece that is a
  // token is merged (or not) like any other.
  auto im = BpeModel::build(byte_vocab({"ab", "cd", "abcd"}), {{'a', 'b'}, {'c', 'd'}, {256, 257}}, true);
  REQUIRE(im.ok());
  CHECK(dropout_draws(im.value(), "abcd", 1.0, 20, 1) == std::map<std::string, int>{{"a|b|c|d", 20}});
  CHECK(dropout_draws(im.value(), "abcd", 0.0, 20, 1) == std::map<std::string, int>{{"abcd", 20}});
}

TEST_CASE("BPE-dropout: every draw spells the piece, fewer merges as p grows", "[tok][bpe][dropout][property]") {
  // Random merges over a small alphabet (each merged token made of two tokens before it).
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    std::mt19937 gen(static_cast<unsigned>(seed));
    std::vector<std::string> extra;
    std::vector<std::pair<TokenId, TokenId>> merges;
    std::vector<TokenId> pool = {'a', 'b', 'c', 'd'};
    std::set<std::string> made = {"a", "b", "c", "d"};
    auto text_of = [&](TokenId id) { return id < 256 ? std::string(1, static_cast<char>(id)) : extra[id - 256]; };
    while (extra.size() < 60) {
      TokenId l = pool[gen() % pool.size()], r = pool[gen() % pool.size()];
      std::string t = text_of(l) + text_of(r);
      if (t.size() > 8 || !made.insert(t).second) continue;
      extra.push_back(t);
      merges.emplace_back(l, r);
      pool.push_back(static_cast<TokenId>(255 + extra.size()));
    }
    auto m = BpeModel::build(byte_vocab(extra), merges, false);
    REQUIRE(m.ok());
    std::string text;
    for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + gen() % 4);
    double prev = 0;
    for (double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {
      Rng rng(seed);
      BpeScratch s;
      s.sampling = {&rng, p, 0};
      std::size_t total = 0;
      for (int k = 0; k < 50; ++k) {
        std::vector<TokenId> out;
        m.value().encode(text, out, s);
        std::string back;
        for (TokenId id : out) back += m.value().token(id);
        REQUIRE(back == text);
        total += out.size();
        if (p == 0.0) {
          std::vector<TokenId> det;
          BpeScratch plain;
          m.value().encode(text, det, plain);
          CHECK(out == det);
        }
      }
      INFO("seed " << seed << " p " << p);
      CHECK(static_cast<double>(total) >= prev);
      if (p == 1.0) CHECK(total == 50 * text.size());
      prev = static_cast<double>(total);
    }
  }
}
