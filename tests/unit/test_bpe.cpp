#include <catch2/catch.hpp>

#include <random>

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
