#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "lmpipe/sample/sampler.h"

using namespace lmp;
using namespace lmp::sample;

namespace {
const std::vector<float> kRow = {1.0f, 2.0f, 3.0f, 0.5f, -1.0f, 3.0f};

std::set<TokenId> run(const std::vector<float>& row, const Config& cfg) {
  auto ch = Chain::make(cfg);
  REQUIRE(ch.ok());
  Candidates c;
  REQUIRE(c.load(row.data(), row.size()).ok());
  ch->apply(c);
  std::set<TokenId> ids;
  for (const auto& x : c.items) ids.insert(x.id);
  return ids;
}
Config with(std::function<void(Config&)> f) {
  Config c;
  f(c);
  return c;
}

// The reference: the truncated, renormalised distribution computed the plain way (a full
// sort, in double), stage by stage, in the given order.
std::map<TokenId, double> reference(const std::vector<float>& row, const Config& cfg) {
  std::vector<std::pair<double, TokenId>> v;  // (logit, id)
  for (std::size_t i = 0; i < row.size(); ++i) v.emplace_back(row[i], static_cast<TokenId>(i));
  auto probs = [&] {
    double m = -1e300, z = 0;
    for (auto& x : v) m = std::max(m, x.first);
    std::vector<double> p;
    for (auto& x : v) z += std::exp(x.first - m);
    for (auto& x : v) p.push_back(std::exp(x.first - m) / z);
    return p;
  };
  auto sort_desc = [&] { std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; }); };
  std::vector<std::string> order = cfg.order == "llama" ? std::vector<std::string>{"top-k", "typical", "top-p", "min-p", "temperature"}
                                                        : std::vector<std::string>{"temperature", "top-k", "top-p", "min-p", "typical"};
  for (const auto& s : order) {
    if (s == "temperature" && cfg.temperature != 1.0f)
      for (auto& x : v) x.first /= static_cast<double>(cfg.temperature);
    if (s == "top-k" && cfg.top_k > 0 && static_cast<std::size_t>(cfg.top_k) < v.size()) {
      sort_desc();
      double kth = v[static_cast<std::size_t>(cfg.top_k) - 1].first;
      std::size_t n = static_cast<std::size_t>(cfg.top_k);
      if (cfg.order != "llama") while (n < v.size() && v[n].first == kth) ++n;
      v.resize(n);
    }
    if (s == "top-p" && cfg.top_p < 1.0f) {
      sort_desc();
      auto p = probs();
      double cum = 0;
      std::size_t n = 0;
      while (n < v.size() && cum < static_cast<double>(cfg.top_p)) cum += p[n++];
      v.resize(std::max<std::size_t>(n, 1));
    }
    if (s == "typical" && cfg.typical < 1.0f) {
      auto p = probs();
      double h = 0;
      for (double x : p) h -= x * std::log(x);
      std::vector<std::size_t> idx(v.size());
      for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
      std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
        double da = std::fabs(-std::log(p[a]) - h), db = std::fabs(-std::log(p[b]) - h);
        return da != db ? da < db : v[a].second < v[b].second;
      });
      double cum = 0;
      std::vector<std::pair<double, TokenId>> k;
      for (std::size_t i : idx) {
        if (cum > static_cast<double>(cfg.typical)) break;
        k.push_back(v[i]);
        cum += p[i];
      }
      v = k;
    }
    if (s == "min-p" && cfg.min_p > 0) {
      auto p = probs();
      double top = *std::max_element(p.begin(), p.end());
      std::vector<std::pair<double, TokenId>> k;
      for (std::size_t i = 0; i < v.size(); ++i)
        if (p[i] >= static_cast<double>(cfg.min_p) * top * (1 - 1e-6)) k.push_back(v[i]);
      v = k;
    }
  }
  auto p = probs();
  std::map<TokenId, double> out;
  for (std::size_t i = 0; i < v.size(); ++i) out[v[i].second] = p[i];
  return out;
}
}  // namespace

TEST_CASE("each stage against hand-computed sets", "[sample]") {
  // softmax(kRow) = 0.0520 0.1413 0.3841 0.0315 0.0070 0.3841
  CHECK(run(kRow, with([](Config& c) { c.top_k = 2; })) == std::set<TokenId>{2, 5});
  CHECK(run(kRow, with([](Config& c) { c.top_k = 3; })) == std::set<TokenId>{1, 2, 5});
  CHECK(run(kRow, with([](Config& c) { c.top_p = 0.5f; })) == std::set<TokenId>{2, 5});
  CHECK(run(kRow, with([](Config& c) { c.top_p = 0.77f; })) == std::set<TokenId>{1, 2, 5});
  CHECK(run(kRow, with([](Config& c) { c.top_p = 0.0f; })) == std::set<TokenId>{2});  // keeps the top token
  CHECK(run(kRow, with([](Config& c) { c.min_p = 0.3f; })) == std::set<TokenId>{1, 2, 5});
  CHECK(run(kRow, with([](Config& c) { c.min_p = 0.5f; })) == std::set<TokenId>{2, 5});
  CHECK(run(kRow, with([](Config& c) { c.typical = 0.5f; })) == std::set<TokenId>{2, 5});
  CHECK(run(kRow, with([](Config& c) { c.temperature = 0.0f; })) == std::set<TokenId>{2});  // first maximum
  CHECK(run(kRow, with([](Config& c) { c.top_k = 100; })).size() == 6);  // k >= vocab: nothing cut
  CHECK(run(kRow, with([](Config& c) { c.top_p = 0.5f; c.min_keep = 4; })) == std::set<TokenId>{0, 1, 2, 5});
}

TEST_CASE("ties at the top-k boundary: kept (HF) or cut by lowest id (llama.cpp)", "[sample]") {
  const std::vector<float> row = {3, 1, 3, 3, 0};
  CHECK(run(row, with([](Config& c) { c.top_k = 2; })) == std::set<TokenId>{0, 2, 3});
  CHECK(run(row, with([](Config& c) { c.top_k = 2; c.ties = Ties::cut; })) == std::set<TokenId>{0, 2});
  CHECK(run(row, with([](Config& c) { c.top_k = 2; c.order = "llama"; })) == std::set<TokenId>{0, 2});
}

TEST_CASE("penalties lower the logits of recent tokens, whatever their sign", "[sample]") {
  auto ch = Chain::make(with([](Config& c) { c.repeat_penalty = 2.0f; c.frequency_penalty = 0.5f; c.presence_penalty = 0.25f; }));
  REQUIRE(ch.ok());
  ch->accept(2);
  ch->accept(4);
  ch->accept(4);
  Candidates c;
  REQUIRE(c.load(kRow.data(), kRow.size()).ok());
  ch->apply(c);
  CHECK(c.items[2].logit == Approx(3.0 / 2 - 0.5 - 0.25));
  CHECK(c.items[4].logit == Approx(-1.0 * 2 - 2 * 0.5 - 0.25));
  CHECK(c.items[0].logit == 1.0f);
}

TEST_CASE("NaN and +inf are errors, -inf masks, an all-masked row is an error", "[sample]") {
  const float inf = std::numeric_limits<float>::infinity();
  Candidates c;
  std::vector<float> row = {1, std::nanf(""), 2};
  auto st = c.load(row.data(), row.size());
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Catch::Contains("token 1") && Catch::Contains("NaN"));
  row = {1, inf, 2};
  CHECK_FALSE(c.load(row.data(), row.size()).ok());
  row = {-inf, 1, -inf};
  REQUIRE(c.load(row.data(), row.size()).ok());
  REQUIRE(c.items.size() == 1);
  CHECK(c.items[0].id == 1);
  row = {-inf, -inf};
  st = c.load(row.data(), row.size());
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Catch::Contains("masked"));
}

TEST_CASE("bad configurations are refused", "[sample]") {
  CHECK_FALSE(Chain::make(with([](Config& c) { c.order = "top-k,bogus"; })).ok());
  CHECK_FALSE(Chain::make(with([](Config& c) { c.order = "top-k,top-k"; })).ok());
  CHECK_FALSE(Chain::make(with([](Config& c) { c.temperature = -1; })).ok());
  CHECK_FALSE(Chain::make(with([](Config& c) { c.min_p = 2; })).ok());
}

TEST_CASE("200,000 draws fit the truncated distribution (chi-square, p > 0.001)", "[sample][statistical]") {
  std::vector<float> row(50);
  for (std::size_t i = 0; i < row.size(); ++i) row[i] = static_cast<float>(std::sin(static_cast<double>(i) * 1.7) * 3);
  std::vector<Config> cfgs;
  for (std::string order : {"hf", "llama"}) {
    cfgs.push_back(with([&](Config& c) { c.order = order; c.temperature = 0.7f; }));
    cfgs.push_back(with([&](Config& c) { c.order = order; c.top_k = 5; }));
    cfgs.push_back(with([&](Config& c) { c.order = order; c.top_p = 0.8f; }));
    cfgs.push_back(with([&](Config& c) { c.order = order; c.min_p = 0.2f; }));
    cfgs.push_back(with([&](Config& c) { c.order = order; c.typical = 0.7f; }));
    cfgs.push_back(with([&](Config& c) { c.order = order; c.temperature = 1.5f; c.top_k = 20; c.top_p = 0.9f; c.min_p = 0.05f; }));
  }
  std::uint64_t seed = 1;
  for (const auto& cfg : cfgs) {
    auto ch = Chain::make(cfg);
    REQUIRE(ch.ok());
    Candidates c;
    REQUIRE(c.load(row.data(), row.size()).ok());
    ch->apply(c);
    auto want = reference(row, cfg);
    std::set<TokenId> got_set;
    for (const auto& x : c.items) got_set.insert(x.id);
    std::set<TokenId> want_set;
    for (const auto& [id, p] : want) want_set.insert(id);
    REQUIRE(got_set == want_set);
    Rng rng(seed++);
    const int n = 200000;
    std::map<TokenId, int> hits;
    for (int k = 0; k < n; ++k) ++hits[ch->draw(c, rng)];
    double chi = 0;
    for (const auto& [id, p] : want) {
      double e = p * n;
      chi += (hits[id] - e) * (hits[id] - e) / e;
    }
    for (const auto& [id, h] : hits) REQUIRE(want.count(id));  // nothing outside the set
    double pv = want.size() > 1 ? chi_square_p(chi, static_cast<double>(want.size() - 1)) : 1.0;
    INFO("order " << cfg.order << " T " << cfg.temperature << " k " << cfg.top_k << " p " << cfg.top_p << " min-p " << cfg.min_p
                  << ": chi-square " << chi << ", p " << pv);
    CHECK(pv > 0.001);
  }
}

TEST_CASE("the chi-square p-value matches known quantiles", "[sample]") {
  CHECK(chi_square_p(3.841, 1) == Approx(0.05).margin(1e-3));
  CHECK(chi_square_p(18.307, 10) == Approx(0.05).margin(1e-3));
  CHECK(chi_square_p(10.0, 10) == Approx(0.4405).margin(1e-3));
  CHECK(chi_square_p(149.449, 100) == Approx(0.001).margin(2e-4));
}

TEST_CASE("properties: top-k 1 and temperature -> 0 are greedy, pruned sets equal full sorts, seeds repeat",
          "[sample][property]") {
  Rng gen(42);
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t n = trial < 10 ? 1000 : 100000;
    std::vector<float> row(n);
    for (auto& x : row) x = static_cast<float>((gen.uniform() - 0.5) * (trial % 3 == 0 ? 40 : 8));
    Candidates full;
    REQUIRE(full.load(row.data(), n).ok());
    TokenId greedy = full.items[argmax(full)].id;
    CHECK(run(row, with([](Config& c) { c.top_k = 1; })) == std::set<TokenId>{greedy});
    auto cold = Chain::make(with([](Config& c) { c.temperature = 1e-7f; }));  // gaps between the top two are ~1e-4 here
    Candidates c2;
    REQUIRE(c2.load(row.data(), n).ok());
    cold->apply(c2);
    Rng r(trial);
    CHECK(cold->draw(c2, r) == greedy);
    for (float p : {0.1f, 0.5f, 0.9f, 0.99f}) {
      Config cfg = with([&](Config& c) { c.top_p = p; });
      std::set<TokenId> want;
      for (const auto& [id, q] : reference(row, cfg)) want.insert(id);
      REQUIRE(run(row, cfg) == want);
    }
    Config mk = with([&](Config& c) { c.min_p = 0.1f; c.top_k = 50; });
    std::set<TokenId> want;
    for (const auto& [id, q] : reference(row, mk)) want.insert(id);
    CHECK(run(row, mk) == want);
  }
  // The same seed draws the same stream.
  auto ch = Chain::make(with([](Config& c) { c.top_p = 0.9f; }));
  Candidates c;
  REQUIRE(c.load(kRow.data(), kRow.size()).ok());
  ch->apply(c);
  Rng a(7), b(7);
  for (int k = 0; k < 1000; ++k) REQUIRE(ch->draw(c, a) == ch->draw(c, b));
}
