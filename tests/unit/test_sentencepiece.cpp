#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "lmpipe/core/double_array.h"
#include "lmpipe/tok/sentencepiece.h"

using namespace lmp;
using namespace lmp::tok;

namespace {
// A minimal protobuf writer for test models.
void varint(std::string& o, std::uint64_t v) {
  while (v >= 0x80) {
    o += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  o += static_cast<char>(v);
}
void tag(std::string& o, int field, int wire) { varint(o, static_cast<std::uint64_t>(field << 3 | wire)); }
void bytes(std::string& o, int field, std::string_view v) {
  tag(o, field, 2);
  varint(o, v.size());
  o += v;
}
void num(std::string& o, int field, std::uint64_t v) {
  tag(o, field, 0);
  varint(o, v);
}

struct P {
  std::string piece;
  float score;
  int type;  // 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte
};

std::string model_proto(const std::vector<P>& pieces, int model_type, bool byte_fallback, bool remove_extra_ws) {
  std::string o;
  for (const auto& p : pieces) {
    std::string m;
    bytes(m, 1, p.piece);
    tag(m, 2, 5);
    std::uint32_t bits;
    std::memcpy(&bits, &p.score, 4);
    m.append(reinterpret_cast<const char*>(&bits), 4);
    num(m, 3, static_cast<std::uint64_t>(p.type));
    bytes(o, 1, m);
  }
  std::string trainer;
  num(trainer, 3, static_cast<std::uint64_t>(model_type));
  num(trainer, 35, byte_fallback ? 1 : 0);
  bytes(o, 2, trainer);
  std::string norm;
  bytes(norm, 1, "identity");
  num(norm, 3, 1);
  num(norm, 4, remove_extra_ws ? 1 : 0);
  bytes(o, 3, norm);
  return o;
}

std::vector<std::string> encode(const SentencePieceModel& m, std::string_view text) {
  ModelScratch s;
  std::vector<TokenId> ids;
  m.encode(text, ids, s);
  std::vector<std::string> out;
  for (TokenId id : ids) out.emplace_back(m.token_text(id));
  return out;
}

using V = std::vector<std::string>;
const std::string S = "\xE2\x96\x81";  // ▁
}  // namespace

TEST_CASE("double-array trie: every key found, nothing else", "[core][trie][property]") {
  std::mt19937 rng(7);
  std::set<std::string> keys;
  while (keys.size() < 3000) {
    std::string k;
    std::size_t n = 1 + rng() % 6;
    for (std::size_t i = 0; i < n; ++i) k += static_cast<char>('a' + rng() % 5 + (rng() % 40 == 0 ? 150 : 0));
    keys.insert(k);
  }
  std::vector<std::pair<std::string_view, std::int32_t>> kv;
  std::int32_t v = 0;
  for (const auto& k : keys) kv.emplace_back(k, v++);
  DoubleArray da;
  da.build(kv);
  auto lookup = [&](std::string_view s) {
    std::int32_t node = 0;
    for (char c : s) {
      node = da.step(node, static_cast<unsigned char>(c));
      if (node < 0) return -1;
    }
    return da.value(node);
  };
  v = 0;
  for (const auto& k : keys) CHECK(lookup(k) == v++);
  for (int i = 0; i < 3000; ++i) {
    std::string k;
    std::size_t n = 1 + rng() % 7;
    for (std::size_t j = 0; j < n; ++j) k += static_cast<char>('a' + rng() % 6);
    if (!keys.count(k)) CHECK(lookup(k) == -1);
  }
}

TEST_CASE("SentencePiece unigram: the path of highest total score", "[tok][spm]") {
  std::vector<P> pieces = {{"<unk>", 0, 2}, {"<s>", 0, 3}, {S + "a", -1, 1}, {S + "ab", -1.5f, 1},
                           {"b", -2, 1},    {"c", -3, 1}, {S, -4, 1},      {"a", -2, 1}};
  auto m = SentencePieceModel::parse(model_proto(pieces, 1, false, true), "t.model");
  REQUIRE(m.ok());
  CHECK(encode(*m, "ab") == V{S + "ab"});
  CHECK(encode(*m, "abc") == V{S + "ab", "c"});
  CHECK(encode(*m, "ba") == V{S, "b", "a"});
  // Extra whitespace removed; a run of unknown characters is one <unk>.
  CHECK(encode(*m, "  ab   ab ") == V{S + "ab", S + "ab"});
  CHECK(encode(*m, "ab xyz") == V{S + "ab", S, "<unk>"});
  CHECK(m->bos_id() == 1);
}

TEST_CASE("SentencePiece BPE: highest score first, leftmost on ties, byte fallback", "[tok][spm]") {
  std::vector<P> pieces = {{"<unk>", 0, 2}, {S, -10, 1}, {"a", -10, 1}, {"b", -10, 1}, {"ab", -1, 1}, {"ba", -1, 1},
                           {S + "a", -2, 1}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    pieces.push_back({name, 0, 6});
  }
  auto m = SentencePieceModel::parse(model_proto(pieces, 2, true, false), "b.model");
  REQUIRE(m.ok());
  // "▁aba": (a,b) and (b,a) tie at -1, above (▁,a) at -2: the leftmost, "ab", wins, and
  // then no piece joins "▁" + "ab" or "ab" + "a".
  CHECK(encode(*m, "aba") == V{S, "ab", "a"});
  CHECK(encode(*m, "bab") == V{S, "ba", "b"});
  // An unknown character falls back to its UTF-8 bytes.
  CHECK(encode(*m, "aé") == V{S + "a", "<0xC3>", "<0xA9>"});
  std::string text;
  ModelScratch s;
  std::vector<TokenId> ids;
  m->encode("ab aé", ids, s);
  REQUIRE(m->decode(ids.data(), ids.size(), text).ok());
  CHECK(text == "ab aé");
}

TEST_CASE("SentencePiece: malformed model files give located errors", "[tok][spm][errors]") {
  std::vector<P> pieces = {{"<unk>", 0, 2}, {"a", -1, 1}};
  std::string good = model_proto(pieces, 1, false, true);
  REQUIRE(SentencePieceModel::parse(good, "g.model").ok());
  for (std::size_t cut : {std::size_t{3}, good.size() / 2, good.size() - 1}) {
    auto e = SentencePieceModel::parse(std::string_view(good).substr(0, cut), "cut.model");
    REQUIRE_FALSE(e.ok());
    CHECK_THAT(e.error().message, Catch::Contains("cut.model"));
  }
  std::string lying = good;
  lying[1] = static_cast<char>(0x7F);  // the first piece claims 127 bytes
  auto e = SentencePieceModel::parse(lying, "lie.model");
  REQUIRE_FALSE(e.ok());
  CHECK_THAT(e.error().message, Catch::Contains("byte 2"));
  auto none = SentencePieceModel::parse(model_proto({{"a", -1, 1}}, 1, false, true), "nounk.model");
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message, Catch::Contains("no unknown piece"));
  auto fb = SentencePieceModel::parse(model_proto(pieces, 2, true, true), "fb.model");
  REQUIRE_FALSE(fb.ok());
  CHECK_THAT(fb.error().message, Catch::Contains("<0x00>"));
}

// A unigram vocabulary over "abab" with many segmentations of distinct scores.
std::vector<P> abab_pieces() {
  return {{"<unk>", 0, 2}, {S + "a", -1, 1}, {S + "ab", -1.5f, 1}, {"b", -2, 1},
          {"ab", -2.5f, 1}, {"a", -3, 1},    {S, -4, 1},           {S + "abab", -2, 1}};
}

TEST_CASE("SentencePiece unigram: n-best and sampled segmentations", "[tok][spm][property]") {
  auto m = SentencePieceModel::parse(model_proto(abab_pieces(), 1, false, true), "u.model");
  REQUIRE(m.ok());
  ModelScratch s;
  std::vector<SentencePieceModel::Segmentation> segs;
  m->nbest("abab", 50, segs, s);
  REQUIRE(segs.size() >= 4);
  std::vector<std::vector<TokenId>> nb;
  for (const auto& x : segs) nb.push_back(x.ids);
  // Best first, and the first is the Viterbi path.
  std::vector<TokenId> viterbi;
  m->encode("abab", viterbi, s);
  CHECK(nb[0] == viterbi);
  auto total = [&](const std::vector<TokenId>& ids) {
    double t = 0;
    for (TokenId id : ids) t += static_cast<double>(m->score(id));
    return t;
  };
  for (std::size_t k = 1; k < nb.size(); ++k) CHECK(total(nb[k - 1]) >= total(nb[k]));
  for (const auto& x : segs) CHECK(x.score == Approx(total(x.ids)));
  // Every segmentation is distinct and spells the text.
  for (std::size_t k = 0; k < nb.size(); ++k) {
    std::string back;
    REQUIRE(m->decode(nb[k].data(), nb[k].size(), back).ok());
    CHECK(back == "abab");
    for (std::size_t j = 0; j < k; ++j) CHECK(nb[j] != nb[k]);
  }
  // Sampling: reproducible from the seed; a large alpha gives the best path; alpha 0 is
  // uniform over segmentations, so over many draws every one of them turns up.
  auto sample = [&](std::string_view text, double alpha, Rng& rng, std::vector<TokenId>& out, ModelScratch& sc) {
    sc.bpe.sampling = {&rng, 0, alpha};
    m->encode(text, out, sc);
    sc.bpe.sampling = {};
  };
  Rng a(7), b(7);
  std::vector<TokenId> x, y;
  for (int i = 0; i < 20; ++i) {
    x.clear();
    y.clear();
    sample("abab ab", 0.5, a, x, s);
    sample("abab ab", 0.5, b, y, s);
    CHECK(x == y);
  }
  Rng r(1);
  for (int i = 0; i < 20; ++i) {
    x.clear();
    sample("abab", 200.0, r, x, s);
    CHECK(x == viterbi);
  }
  std::set<std::vector<TokenId>> seen;
  for (int i = 0; i < 2000; ++i) {
    x.clear();
    sample("abab", 0.0, r, x, s);
    seen.insert(x);
  }
  CHECK(seen.size() == nb.size());
}

TEST_CASE("SentencePiece unigram: draws among the n best (spm's nbest_size) have exact probabilities",
          "[tok][spm][property]") {
  auto m = SentencePieceModel::parse(model_proto(abab_pieces(), 1, false, true), "u.model");
  REQUIRE(m.ok());
  ModelScratch s;
  std::vector<SentencePieceModel::Segmentation> segs;
  m->nbest("abab", 100, segs, s);  // every segmentation, best first
  std::vector<std::vector<TokenId>> all;
  for (const auto& x : segs) all.push_back(x.ids);
  REQUIRE(all.size() >= 4);
  auto score = [&](const std::vector<TokenId>& ids) {
    double t = 0;
    for (TokenId id : ids) t += static_cast<double>(m->score(id));
    return t;
  };
  // Draw `n` times with this nbest_size and alpha; each segmentation's frequency is within
  // 5 standard deviations of exp(alpha · score) over the n best (or over all, nbest < 0).
  auto check = [&](int nbest, double alpha, std::uint64_t seed) {
    std::size_t kept = nbest < 0 ? all.size() : std::min<std::size_t>(static_cast<std::size_t>(nbest), all.size());
    double z = 0;
    for (std::size_t k = 0; k < kept; ++k) z += std::exp(alpha * score(all[k]));
    std::map<std::vector<TokenId>, int> seen;
    Rng rng(seed);
    const int n = 20000;
    std::vector<TokenId> x;
    for (int i = 0; i < n; ++i) {
      x.clear();
      s.bpe.sampling = {&rng, 0, alpha, nbest};
      m->encode("abab", x, s);
      s.bpe.sampling = {};
      ++seen[x];
    }
    int counted = 0;
    for (std::size_t k = 0; k < kept; ++k) {
      double p = std::exp(alpha * score(all[k])) / z;
      double sd = std::sqrt(n * p * (1 - p));
      INFO("nbest " << nbest << " alpha " << alpha << " segmentation " << k << " p " << p);
      CHECK(std::abs(seen[all[k]] - n * p) <= 5 * sd + 1);
      counted += seen[all[k]];
    }
    CHECK(counted == n);  // nothing outside the n best
  };
  check(2, 1.0, 3);
  check(3, 0.5, 4);
  check(100, 0.3, 5);  // more than there are: all of them, as the full lattice
  check(-1, 0.3, 6);
  // nbest_size 0 and 1: the best segmentation, every time.
  for (int nbest : {0, 1}) {
    Rng rng(9);
    for (int i = 0; i < 50; ++i) {
      std::vector<TokenId> x;
      s.bpe.sampling = {&rng, 0, 0.0, nbest};
      m->encode("abab", x, s);
      s.bpe.sampling = {};
      CHECK(x == all[0]);
    }
  }
}

#include "lmpipe/tok/sp_charsmap.h"
#include "lmpipe/tok/sp_trainer.h"

TEST_CASE("NFKC character map: every character mapped alone", "[tok][spm][charsmap]") {
  SpNormalizer n;
  REQUIRE(n.load_charsmap(build_charsmap(CharsmapRule::nfkc), "nfkc").ok());
  std::string out;
  n.apply_charsmap("a\xC2\xA0\xC2\xA0" "b", out);  // two no-break spaces: two spaces, not one
  CHECK(out == "a  b");
  n.apply_charsmap("\xEF\xAC\x81ne \xEF\xBC\xA6 \xE2\x91\xA0", out);  // ﬁ, full-width F, ①
  CHECK(out == "fine F 1");
  n.apply_charsmap("plain ascii, 中文", out);
  CHECK(out == "plain ascii, 中文");
  n.apply_charsmap("cafe\xCC\x81", out);  // e + combining acute: composed, as NFKC does
  CHECK(out == "caf\xC3\xA9");
  n.apply_charsmap("a\xCD\x80", out);  // a + U+0340 (U+0300's singleton): composed too
  CHECK(out == "\xC3\xA0");
  auto spm_n = make_sp_normalizer("nfkc");  // SentencePiece's longest match: Kelvin sign + acute → Ḱ
  REQUIRE(spm_n.ok());
  sp_normalize_line("\xE2\x84\xAA\xCC\x81", spm_n.value(), out);
  CHECK(out == "▁\xE1\xB8\xB0");
  n.apply_charsmap("a\tb\x01 c\xEF\xBD\x9E", out);  // plain NFKC keeps tabs and control characters
  CHECK(out == "a\tb\x01 c~");
  // nfkc_cf as SentencePiece's: NFKC, then simple case folding (ẞ → ß, ß and İ stay,
  // ᾈ → ᾀ), nothing dropped (U+3164 is NFKC's U+1160, not removed as NFKC_Casefold does).
  SpNormalizer cf;
  REQUIRE(cf.load_charsmap(build_charsmap(CharsmapRule::nfkc_cf), "nfkc_cf").ok());
  cf.apply_charsmap("Straße STRAẞE ΣΑΣ İ ᾈ \xE3\x85\xA4 Ｋ", out);
  CHECK(out == "straße straße σασ İ ᾀ \xE1\x85\xA0 k");
  // A + U+0301: SentencePiece matches the longest rule (composed, then folded); HF's
  // Precompiled takes the shortest rule that starts the cluster (A → a) for all of it.
  auto spm_cf = make_sp_normalizer("nfkc_cf");
  REQUIRE(spm_cf.ok());
  sp_normalize_line("A\xCC\x81", spm_cf.value(), out);
  CHECK(out == "▁\xC3\xA1");
  cf.apply_charsmap("A\xCC\x81", out);
  CHECK(out == "a");
}

TEST_CASE("nmt_nfkc character map: SentencePiece's rules for controls and separators", "[tok][spm][charsmap]") {
  SpNormalizer n;
  REQUIRE(n.load_charsmap(build_charsmap(CharsmapRule::nmt_nfkc), "nmt_nfkc").ok());
  std::string out;
  n.apply_charsmap("a\tb\x01\x1F c\r\x0C", out);  // tab, CR, form feed: a space; controls: dropped
  CHECK(out == "a b c  ");
  n.apply_charsmap("x\xE2\x80\x8By\xEF\xBB\xBFz\xEF\xBF\xBD!", out);  // U+200B, U+FEFF, U+FFFD: a space
  CHECK(out == "x y z !");
  n.apply_charsmap("\xEF\xBD\x9E \xEF\xBC\xA6\xE2\x80\x8D", out);  // full-width tilde kept, Ｆ folded, ZWJ kept
  CHECK(out == "\xEF\xBD\x9E F\xE2\x80\x8D");
  n.apply_charsmap("\xC2\x85\xC2\x80", out);  // NEL and U+0080 are not among its controls
  CHECK(out == "\xC2\x85\xC2\x80");
  SpNormalizer cf;
  REQUIRE(cf.load_charsmap(build_charsmap(CharsmapRule::nmt_nfkc_cf), "nmt_nfkc_cf").ok());
  cf.apply_charsmap("Ａ\tẞ\x7F\xE2\x80\x8C", out);
  CHECK(out == "a ß ");
  CHECK(charsmap_rule("nmt_nfkc") == CharsmapRule::nmt_nfkc);
  CHECK(!charsmap_rule("nfkd").has_value());
}

TEST_CASE("Trained normalizer: remove_extra_whitespaces as spm_train's", "[tok][spm][charsmap]") {
  auto n = make_sp_normalizer("nmt_nfkc", true);
  REQUIRE(n.ok());
  std::string out;
  sp_normalize_line("  a \t b\xE3\x80\x80\xE3\x80\x80" "c  \r\n", n.value(), out);  // ideographic spaces fold to ' '
  CHECK(out == "▁a▁b▁c");
  sp_normalize_line(" \t ", n.value(), out);
  CHECK(out.empty());
  auto keep = make_sp_normalizer("nmt_nfkc", false);
  REQUIRE(keep.ok());
  sp_normalize_line("  a \t b", keep.value(), out);
  CHECK(out == "▁▁▁a▁▁▁b");
  CHECK(!make_sp_normalizer("nfkd").ok());
}

TEST_CASE("NFKC character map: applied per grapheme cluster, as HF's Precompiled normalizer", "[tok][spm][charsmap]") {
  SpNormalizer n;
  REQUIRE(n.load_charsmap(build_charsmap(CharsmapRule::nfkc), "nfkc").ok());
  std::string out;
  std::vector<text::SourceSpan> src;
  // A cluster under 6 bytes that a rule starts is replaced whole: what follows is dropped.
  n.apply_charsmap("\xEF\xAC\x81\xCC\x81x", out, &src);  // ﬁ + U+0301, x
  CHECK(out == "fix");
  REQUIRE(src.size() == 3);
  CHECK((src[0].begin == 0 && src[0].end == 3));  // f from ﬁ
  CHECK((src[1].begin == 3 && src[1].end == 5));  // i from the mark (HF's positional alignment)
  CHECK((src[2].begin == 5 && src[2].end == 6));
  n.apply_charsmap("a\xCC\x81\xCC\xA3", out);  // a + U+0301 + U+0323: the rule a + U+0301 → á
  CHECK(out == "\xC3\xA1");
  // A cluster that no rule starts, or of 6 bytes and more: character by character.
  n.apply_charsmap("x\xCC\x81", out);
  CHECK(out == "x\xCC\x81");
  n.apply_charsmap("a\xCC\x81\xCC\xA3\xCC\x82", out);
  CHECK(out == "a\xCC\x81\xCC\xA3\xCC\x82");
  // Every character its own cluster (CJK, ASCII, Latin-1): the same as mapping each.
  n.apply_charsmap("\xEF\xBC\xA6\xC3\xA9\xE4\xB8\xAD\r\n", out, &src);
  CHECK(out == "F\xC3\xA9\xE4\xB8\xAD\r\n");
  CHECK(src.size() == out.size());
  // Invalid bytes are kept, and cut the text into runs.
  n.apply_charsmap("\xFF" "e\xCC\x81\xFE", out);
  CHECK(out == "\xFF\xC3\xA9\xFE");
}

TEST_CASE("SentencePiece BPE-dropout: a dropped merge is gone (spm's SampleEncode)", "[tok][spm][dropout][property]") {
  // "▁abcd" with the pieces ab (score -1) and cd (-2), no other merge: each is dropped
  // with probability p on its own, so at p = 1/2 the four segmentations come out a quarter
  // of the time each (HF's merge_all would retry a skipped ab after cd: 3/8 for ab|cd).
  std::vector<P> pieces = {{"<unk>", 0, 2}, {S, -10, 1}, {"a", -10, 1}, {"b", -10, 1},
                           {"c", -10, 1},   {"d", -10, 1}, {"ab", -1, 1}, {"cd", -2, 1}};
  auto m = SentencePieceModel::parse(model_proto(pieces, 2, false, false), "d.model");
  REQUIRE(m.ok());
  Rng rng(5);
  ModelScratch s;
  s.bpe.sampling = {&rng, 0.5, 0};
  std::map<std::string, int> seen;
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    std::vector<TokenId> ids;
    m->encode("abcd", ids, s);
    std::string key;
    for (TokenId id : ids) key += (key.empty() ? "" : "|") + std::string(m->token_text(id));
    ++seen[key];
  }
  REQUIRE(seen.size() == 4);
  for (const auto& [key, count] : seen) {
    INFO(key);
    CHECK(std::abs(count / double(n) - 0.25) < 0.012);
  }
  // p = 1: characters; p = 0: the deterministic pieces.
  s.bpe.sampling.dropout = 1;
  CHECK(encode(*m, "abcd") == V{S, "ab", "cd"});
  std::vector<TokenId> ids;
  m->encode("abcd", ids, s);
  CHECK(ids.size() == 5);
}
