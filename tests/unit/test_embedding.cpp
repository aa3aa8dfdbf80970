#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "lmpipe/embed/inspect.h"

using namespace lmp;
using namespace lmp::embed;

namespace {
std::vector<float> matrix(std::int64_t v, std::int64_t d, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<float> m(static_cast<std::size_t>(v * d));
  for (auto& x : m) x = static_cast<float>(g() % 20001) / 10000.0f - 1.0f;
  return m;
}
}  // namespace

TEST_CASE("lookup and project agree with the naive sums, for every dtype", "[embed]") {
  const std::int64_t V = 300, D = 64;
  auto m = matrix(V, D, 3);
  auto h = matrix(1, D, 5);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0}) {
    auto e = Embedding::from_f32(m, V, D, t);
    REQUIRE(e.ok());
    std::vector<float> rows(static_cast<std::size_t>(2 * D)), logits(static_cast<std::size_t>(V));
    std::vector<TokenId> ids{7, 299};
    REQUIRE(e->lookup(ids, rows.data()).ok());
    e->project(h.data(), logits.data(), 2);
    // Against the rows as stored (dequantized): the projection is exact up to f32 sums.
    for (std::int64_t r = 0; r < V; ++r) {
      std::vector<float> row(static_cast<std::size_t>(D));
      e->row(static_cast<TokenId>(r), row.data());
      double want = 0;
      for (std::int64_t j = 0; j < D; ++j) want += static_cast<double>(row[static_cast<std::size_t>(j)]) * static_cast<double>(h[static_cast<std::size_t>(j)]);
      REQUIRE(static_cast<double>(logits[static_cast<std::size_t>(r)]) == Approx(want).margin(1e-4));
      if (r == 7)
        for (std::int64_t j = 0; j < D; ++j) REQUIRE(rows[static_cast<std::size_t>(j)] == row[static_cast<std::size_t>(j)]);
    }
    // Out-of-range ids are errors that name the id and its position.
    std::vector<TokenId> bad{1, 300};
    auto st = e->lookup(bad, rows.data());
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Catch::Contains("300") && Catch::Contains("position 2"));
  }
}

TEST_CASE("a tied model uses one matrix for lookup and projection", "[embed]") {
  const std::int64_t V = 50, D = 32;
  auto m = matrix(V, D, 9);
  auto e = Embedding::view(DType::f32, m.data(), V, D);
  REQUIRE(e.ok());
  CHECK(e->data() == reinterpret_cast<const std::byte*>(m.data()));  // a view, no copy
  std::vector<float> x(static_cast<std::size_t>(D)), logits(static_cast<std::size_t>(V));
  REQUIRE(e->lookup(std::vector<TokenId>{12}, x.data()).ok());
  e->project(x.data(), logits.data());
  // A row's logit against itself is its squared norm, the largest for this matrix.
  double n2 = 0;
  for (float v : x) n2 += static_cast<double>(v) * static_cast<double>(v);
  CHECK(static_cast<double>(logits[12]) == Approx(n2).epsilon(1e-5));
}

TEST_CASE("nearest neighbours by cosine, and one pass of dots and norms", "[embed]") {
  const std::int64_t V = 2000, D = 48;
  auto m = matrix(V, D, 21);
  // Row 1500 is row 3 scaled: cosine 1; row 700 is row 3 negated: cosine −1.
  for (std::int64_t j = 0; j < D; ++j) {
    m[static_cast<std::size_t>(1500 * D + j)] = 3 * m[static_cast<std::size_t>(3 * D + j)];
    m[static_cast<std::size_t>(700 * D + j)] = -m[static_cast<std::size_t>(3 * D + j)];
  }
  auto e = Embedding::view(DType::f32, m.data(), V, D);
  REQUIRE(e.ok());
  std::vector<float> q(m.begin() + 3 * D, m.begin() + 4 * D);
  for (int threads : {1, 2, 3}) {
    auto nb = nearest(*e, q.data(), 5, 3, threads);
    REQUIRE(nb.size() == 5);
    CHECK(nb[0].id == 1500);
    CHECK(nb[0].cosine == Approx(1.0f).epsilon(1e-5));
    for (std::size_t i = 1; i < nb.size(); ++i) CHECK(nb[i - 1].cosine >= nb[i].cosine);
    auto all = nearest(*e, q.data(), static_cast<std::size_t>(V), -1, threads);
    CHECK(all.back().id == 700);
  }
}

TEST_CASE("row statistics find zero, small, duplicate and parallel rows", "[embed]") {
  const std::int64_t V = 400, D = 32;
  auto m = matrix(V, D, 33);
  auto row = [&](std::int64_t r) { return m.begin() + r * D; };
  std::fill(row(5), row(6), 0.0f);                              // never trained
  std::copy(row(10), row(11), row(11));                         // duplicate
  for (std::int64_t j = 0; j < D; ++j) m[static_cast<std::size_t>(20 * D + j)] *= 0.01f;  // tiny
  for (std::int64_t r : {30, 31, 32}) std::transform(row(40), row(41), row(r), [&](float x) { return x * static_cast<float>(r); });
  auto e = Embedding::view(DType::f32, m.data(), V, D);
  REQUIRE(e.ok());
  auto s = row_stats(*e, 10, 2);
  CHECK(s.n_zero == 1);
  REQUIRE(s.smallest.size() >= 2);
  CHECK(s.smallest[0].first == 5);
  CHECK(s.smallest[1].first == 20);
  REQUIRE(s.n_duplicate_groups == 1);
  CHECK(s.duplicates[0] == std::vector<TokenId>{10, 11});
  REQUIRE_FALSE(s.parallel.empty());
  CHECK(s.parallel[0] == std::vector<TokenId>{30, 31, 32, 40});
  CHECK(s.min == 0.0f);
  CHECK(s.median > 0.0f);
}

TEST_CASE("what-if arithmetic: 32K → 64K at hidden 4096 costs 2 GB with Adam", "[embed]") {
  auto a = vocab_cost(32000, 4096, DType::f32), b = vocab_cost(64000, 4096, DType::f32);
  CHECK(b.params - a.params == 131072000u);
  CHECK(a.adam_bytes_per_param == 16.0);
  CHECK(b.adam_tied - a.adam_tied == Approx(2.097152e9));
  auto h = vocab_cost(32000, 4096, DType::bf16);
  CHECK(h.bytes_per_param == 2.0);
  CHECK(h.adam_bytes_per_param == 16.0);  // bf16 weights and gradients, f32 moments and master copy
  CHECK(vocab_cost(32000, 4096, DType::q4_0).bytes_per_param == Approx(0.5625));
}
