#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "lmpipe/core/io.h"
#include "lmpipe/tensor_io/kquants.h"
#include "lmpipe/tensor_io/npy_stream.h"
#include "lmpipe/tensor_io/tensor_file.h"

using namespace lmp;
using namespace lmp::tensor_io;

namespace {
std::string temp_path(const std::string& name) {
  return "/tmp/lmp_tio_" + std::to_string(::getpid()) + "_" + name;
}
std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = (static_cast<float>(g() % 2000001) / 1000000.0f - 1.0f) * scale;  // same on every platform
  return v;
}
std::vector<std::byte> encode(DType t, const std::vector<float>& v) {
  std::vector<std::byte> out(dtype_bytes(t, v.size()));
  from_f32(t, v.data(), out.data(), v.size());
  return out;
}
std::string bytes_of(const std::string& path) { return io::read_file(path).value(); }
}  // namespace

TEST_CASE("f16: every half value survives f16 -> f32 -> f16", "[tensor_io][dtype]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    auto v = static_cast<std::uint16_t>(h);
    float f = f16_to_f32(v);
    if (std::isnan(f)) {
      CHECK(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    REQUIRE(f32_to_f16(f) == v);
  }
}

TEST_CASE("f16 rounds to nearest even, overflows to infinity, keeps subnormals", "[tensor_io][dtype]") {
  CHECK(f32_to_f16(1.0f) == 0x3C00);
  CHECK(f32_to_f16(65504.0f) == 0x7BFF);
  CHECK(f32_to_f16(65519.0f) == 0x7BFF);
  CHECK(f32_to_f16(65520.0f) == 0x7C00);  // the tie rounds to even: infinity
  CHECK(f32_to_f16(1.0f + 1.0f / 2048) == 0x3C00);  // halfway between 1 and the next half: even (1)
  CHECK(f32_to_f16(1.0f + 3.0f / 2048) == 0x3C02);  // halfway, odd below: up
  CHECK(f32_to_f16(5.9604645e-8f) == 0x0001);       // smallest subnormal
  CHECK(f32_to_f16(-0.0f) == 0x8000);
  CHECK(f16_to_f32(0x0001) == 5.9604645e-8f);
  // The SIMD path agrees with the scalar one.
  auto v = random_floats(1000, 7, 70000.0f);
  std::vector<std::uint16_t> simd(v.size());
  from_f32(DType::f16, v.data(), simd.data(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) REQUIRE(simd[i] == f32_to_f16(v[i]));
  std::vector<float> back(v.size());
  to_f32(DType::f16, simd.data(), back.data(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) REQUIRE((back[i] == f16_to_f32(simd[i]) || std::isinf(back[i])));
}

TEST_CASE("bf16 is the top half of f32, rounded to nearest even", "[tensor_io][dtype]") {
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  CHECK(bf16_to_f32(0x3F80) == 1.0f);
  float x;
  std::uint32_t b = 0x3F808000;  // exactly halfway between 0x3F80 and 0x3F81: even
  std::memcpy(&x, &b, 4);
  CHECK(f32_to_bf16(x) == 0x3F80);
  b = 0x3F818000;  // halfway, odd below: up
  std::memcpy(&x, &b, 4);
  CHECK(f32_to_bf16(x) == 0x3F82);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("q8_0: the reference layout and its error bound", "[tensor_io][dtype]") {
  auto v = random_floats(32 * 64, 11, 3.0f);
  auto q = encode(DType::q8_0, v);
  REQUIRE(q.size() == 64 * 34);
  std::vector<float> back(v.size());
  to_f32(DType::q8_0, q.data(), back.data(), v.size());
  for (std::size_t k = 0; k < 64; ++k) {
    float amax = 0;
    for (std::size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[k * 32 + j]));
    const float d = amax / 127;
    // Rounding error at most d/2, plus the scale's own f16 rounding (relative 2^-11 of 127 d).
    const float bound = d / 2 + 127 * d * (1.0f / 2048) + 1e-7f;
    for (std::size_t j = 0; j < 32; ++j) REQUIRE(std::fabs(back[k * 32 + j] - v[k * 32 + j]) <= bound);
  }
  // Layout: scale first, then the 32 values; the largest maps to ±127.
  std::vector<float> one(32, 0.0f);
  one[5] = -2.54f;
  one[6] = 1.27f;
  auto b = encode(DType::q8_0, one);
  BlockQ8_0 blk;
  std::memcpy(&blk, b.data(), 34);
  CHECK(f16_to_f32(blk.d) == Approx(0.02f).epsilon(1e-3));
  CHECK(blk.qs[5] == -127);
  CHECK(blk.qs[6] == 64);  // 1.27 / 0.02 = 63.5 → 64 (round half away from zero, scale rounded to f16)
}

TEST_CASE("q4_0: signed maximum, nibble order and error bound", "[tensor_io][dtype]") {
  auto v = random_floats(32 * 64, 13, 2.0f);
  auto q = encode(DType::q4_0, v);
  REQUIRE(q.size() == 64 * 18);
  std::vector<float> back(v.size());
  to_f32(DType::q4_0, q.data(), back.data(), v.size());
  for (std::size_t k = 0; k < 64; ++k) {
    float amax = 0;
    for (std::size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[k * 32 + j]));
    const float d = amax / 8;
    // Values on the far side of the signed maximum can reach 7 d instead of 8 d: the error
    // is at most d (clamped at 15), and at most d/2 within range; plus f16 scale rounding.
    const float bound = d + 8 * d * (1.0f / 2048) + 1e-7f;
    for (std::size_t j = 0; j < 32; ++j) REQUIRE(std::fabs(back[k * 32 + j] - v[k * 32 + j]) <= bound);
  }
  std::vector<float> x(32);
  for (std::size_t j = 0; j < 32; ++j) x[j] = static_cast<float>(j) - 8.0f;  // max magnitude 23 at j = 31
  auto b = encode(DType::q4_0, x);
  BlockQ4_0 blk;
  std::memcpy(&blk, b.data(), 18);
  const float d = f16_to_f32(blk.d);
  CHECK(d == Approx(23.0f / -8.0f).epsilon(1e-3));
  // byte j: element j low, element j + 16 high. Element 31 (the maximum) is q = 0.
  CHECK((blk.qs[15] >> 4) == 0);
  CHECK((blk.qs[0] & 0x0F) == std::min(15, static_cast<int>(-8.0f / d + 8.5f)));
}

// The k-quants' layouts, written by hand and read back; their error on random data
// (the conformance test ggml_kquants checks both against GGML's own code).
TEST_CASE("q4_1, q5_0, q5_1, q2_K … q6_K, iq4_nl, iq4_xs: scale packing, number order and error", "[tensor_io][dtype]") {
  CHECK(parse_dtype("Q4_K") == DType::q4_K);
  CHECK(parse_dtype("q5_k") == DType::q5_K);
  CHECK(dtype_name(DType::q6_K) == "q6_K");
  CHECK(dtype_bytes(DType::q4_K, 512) == 288);
  CHECK(!tensor_bytes(DType::q6_K, 288 * 2, 288));  // rows must be whole super-blocks
  CHECK(parse_dtype("Q2_K") == DType::q2_K);
  CHECK(parse_dtype("q3_k") == DType::q3_K);
  CHECK(dtype_bytes(DType::q2_K, 512) == 168);
  CHECK(dtype_bytes(DType::q3_K, 512) == 220);
  // Every 6-bit q3_K scale at every one of the 16 places, packed as kquants.h says.
  for (int j = 0; j < 16; ++j)
    for (int sc = 0; sc < 64; ++sc) {
      BlockQ3_K b{};
      b.d = f32_to_f16(1.0f);
      // all other scales 32 (a factor of 0); every level 5 (q − 4 = 1)
      std::uint8_t six[16];
      for (int i = 0; i < 16; ++i) six[i] = static_cast<std::uint8_t>(i == j ? sc : 32);
      for (int i = 0; i < 16; ++i) {
        b.scales[i % 8] = static_cast<std::uint8_t>(b.scales[i % 8] | (six[i] & 15) << (i < 8 ? 0 : 4));
        b.scales[8 + i % 4] = static_cast<std::uint8_t>(b.scales[8 + i % 4] | (six[i] >> 4) << (2 * (i / 4)));
      }
      std::memset(b.qs, 0x55, sizeof b.qs);
      std::memset(b.hmask, 0xFF, sizeof b.hmask);
      float y[256];
      to_f32(DType::q3_K, &b, y, 256);
      // sub-block j holds numbers 128h + 32g + 16k + l for j = 8h + 2g + k
      const int first = 128 * (j / 8) + 32 * ((j % 8) / 2) + 16 * (j % 2);
      for (int l = 0; l < 256; ++l) {
        INFO("scale " << j << " = " << sc << ", number " << l);
        REQUIRE(y[l] == (l >= first && l < first + 16 ? static_cast<float>(sc - 32) : 0.0f));
      }
    }
  // Every (scale, min) pair of 6 bits, at every one of the 8 places, packed and unpacked.
  for (int j = 0; j < 8; ++j)
    for (int sc = 0; sc < 64; ++sc)
      for (int m = 0; m < 64; m += 3) {
        BlockQ4_K b{};
        b.d = f32_to_f16(1.0f);
        b.dmin = f32_to_f16(0.5f);
        // pack as the format says (kquants.h), q = 1 everywhere
        if (j < 4) {
          b.scales[j] = static_cast<std::uint8_t>(sc);
          b.scales[j + 4] = static_cast<std::uint8_t>(m);
        } else {
          b.scales[j + 4] = static_cast<std::uint8_t>((sc & 15) | (m & 15) << 4);
          b.scales[j - 4] = static_cast<std::uint8_t>((sc >> 4) << 6);
          b.scales[j] = static_cast<std::uint8_t>((m >> 4) << 6);
        }
        std::memset(b.qs, 0x11, sizeof b.qs);
        float y[256];
        to_f32(DType::q4_K, &b, y, 256);
        for (int l = 0; l < 32; ++l) {
          INFO("sub-block " << j << ", scale " << sc << ", min " << m);
          REQUIRE(y[32 * j + l] == static_cast<float>(sc) - 0.5f * static_cast<float>(m));
        }
      }
  // Number order: q4_K byte 32c + l holds number 64c + l low, 64c + 32 + l high; q5_K's
  // fifth bit of number l of sub-block j is bit j of qh[l]; q6_K as kquants.h says.
  {
    BlockQ4_K b{};
    b.d = f32_to_f16(1.0f);
    for (int j = 0; j < 4; ++j) b.scales[j] = 1;
    b.scales[8] = b.scales[9] = b.scales[10] = b.scales[11] = 0x01;  // sc 4..7 = 1, m = 0
    b.qs[32 * 2 + 5] = 0x7A;
    BlockQ5_K c{};
    std::memcpy(&c, &b, 16);  // d, dmin, scales
    c.qs[32 * 2 + 5] = 0x7A;
    c.qh[5] = 1 << 5;  // sub-block 5 = the high nibbles of chunk 2
    float y[256];
    to_f32(DType::q4_K, &b, y, 256);
    CHECK(y[128 + 5] == 10.0f);
    CHECK(y[160 + 5] == 7.0f);
    to_f32(DType::q5_K, &c, y, 256);
    CHECK(y[128 + 5] == 10.0f);
    CHECK(y[160 + 5] == 23.0f);
    BlockQ6_K e{};
    e.d = f32_to_f16(1.0f);
    for (auto& s : e.scales) s = 1;
    e.scales[8 + 2 * 3 + 1] = -2;  // half 1, group 3, numbers 16..31
    e.ql[64 + 32 + 20] = 0x90;     // group 3 takes the high nibble of ql[l + 32]: 9
    e.qh[32 + 20] = 3 << 6;        // its high bits: 3 → q = 9 + 48 = 57, minus 32 = 25
    to_f32(DType::q6_K, &e, y, 256);
    CHECK(y[128 + 96 + 20] == -50.0f);
    CHECK(y[128 + 96 + 19] == -2.0f * -32.0f);  // q = 0 → −32 under scale −2
    CHECK(y[0] == -32.0f);
    // q2_K: number 128h + 32g + l in bits 2g of qs[32h + l], scale byte 8h + 2g + l / 16
    // (the scale in its low nibble, the min in its high one)
    BlockQ2_K f{};
    f.d = f32_to_f16(1.0f);
    f.dmin = f32_to_f16(0.5f);
    f.scales[8 + 2 * 3 + 1] = 0x52;  // half 1, group 3, numbers 16..31: sc 2, m 5
    f.qs[32 + 20] = 3 << 6;
    to_f32(DType::q2_K, &f, y, 256);
    CHECK(y[128 + 96 + 20] == 2.0f * 3 - 2.5f);
    CHECK(y[128 + 96 + 19] == -2.5f);
    CHECK(y[128 + 64 + 20] == 0.0f);
    // q3_K: its third bit from bit 4h + g of hmask[l]; q − 4
    BlockQ3_K h{};
    h.d = f32_to_f16(1.0f);
    h.scales[5] = 13 << 4, h.scales[9] = 2 << 6;  // scale 13 (half 1, group 2, numbers 16..31): 45 − 32
    h.qs[32 + 20] = 1 << 4;
    h.hmask[20] = 1 << 6;  // level 5: q − 4 = 1
    to_f32(DType::q3_K, &h, y, 256);
    CHECK(y[128 + 64 + 20] == 13.0f);
    CHECK(y[128 + 64 + 19] == -52.0f);  // level 0 → −4
    CHECK(y[0] == 128.0f);              // scale 0 → −32, level 0 → −4
    // iq4_nl: q4_0's order of nibbles, the table's values
    BlockIq4Nl n{};
    n.d = f32_to_f16(0.5f);
    n.qs[3] = 0x09;
    to_f32(DType::iq4_nl, &n, y, 32);
    CHECK(y[3] == 6.5f);     // T[9] = 13
    CHECK(y[19] == -63.5f);  // T[0] = −127
    // iq4_xs: sub-block 5's scale 45 (low nibble in the high half of scales_l[2], high
    // bits 10-11 of scales_h): 13 × T[q]; the others 0 → −32
    BlockIq4Xs xs{};
    xs.d = f32_to_f16(1.0f);
    xs.scales_l[2] = 13 << 4;
    xs.scales_h = 2 << 10;
    xs.qs[16 * 5 + 2] = 0x0F;
    to_f32(DType::iq4_xs, &xs, y, 256);
    CHECK(y[160 + 2] == 13.0f * 113);
    CHECK(y[160 + 18] == 13.0f * -127);
    CHECK(y[0] == -32.0f * -127);
    // q4_1: q · d + m; q5_0: (q − 16) · d and q5_1: q · d + m, the fifth bit of number j
    // in bit j of qh
    BlockQ4_1 a1{};
    a1.d = f32_to_f16(2.0f), a1.m = f32_to_f16(0.5f);
    a1.qs[3] = 0x05 | 0x0A << 4;
    to_f32(DType::q4_1, &a1, y, 32);
    CHECK(y[3] == 10.5f);
    CHECK(y[19] == 20.5f);
    BlockQ5_0 a5{};
    a5.d = f32_to_f16(1.0f);
    const std::uint32_t qh = 1u << 3 | 1u << 20;
    std::memcpy(a5.qh, &qh, 4);
    a5.qs[3] = 0x05, a5.qs[4] = 0x70;
    to_f32(DType::q5_0, &a5, y, 32);
    CHECK(y[3] == 5.0f);
    CHECK(y[20] == 7.0f);
    CHECK(y[4] == -16.0f);
    BlockQ5_1 b5{};
    b5.d = f32_to_f16(1.0f), b5.m = f32_to_f16(-1.0f);
    const std::uint32_t top = 1u << 31;
    std::memcpy(b5.qh, &top, 4);
    b5.qs[15] = 0x30;
    to_f32(DType::q5_1, &b5, y, 32);
    CHECK(y[31] == 18.0f);
    CHECK(y[15] == -1.0f);
  }
  // Blocks of random bytes (f16 factors kept finite): the portable loops and the AVX2
  // conversions give the same bits.
  {
    std::mt19937 g(41);
    auto fill = [&](auto& blocks) {
      for (auto& b : blocks) {
        auto* p = reinterpret_cast<std::uint8_t*>(&b);
        for (std::size_t i = 0; i < sizeof b; ++i) p[i] = static_cast<std::uint8_t>(g());
      }
    };
    auto finite = [&](std::uint16_t& h) { h = static_cast<std::uint16_t>(h & 0xBBFF); };  // exponent < 31
    std::vector<BlockQ4_K> b4(64);
    std::vector<BlockQ5_K> b5(64);
    std::vector<BlockQ6_K> b6(64);
    std::vector<BlockQ2_K> b2(64);
    std::vector<BlockQ3_K> b3(64);
    std::vector<BlockIq4Nl> bn(512);
    std::vector<BlockIq4Xs> bx(64);
    fill(b4), fill(b5), fill(b6), fill(b2), fill(b3), fill(bn), fill(bx);
    for (auto& b : bn) finite(b.d);
    for (auto& b : bx) finite(b.d);
    for (auto& b : b2) finite(b.d), finite(b.dmin);
    for (auto& b : b3) finite(b.d);
    for (auto& b : b4) finite(b.d), finite(b.dmin);
    for (auto& b : b5) finite(b.d), finite(b.dmin);
    for (auto& b : b6) finite(b.d);
    std::vector<float> fast(64 * 256), slow(64 * 256);
    auto same = [&](const char* what) {
      INFO(what);
      CHECK(std::memcmp(fast.data(), slow.data(), fast.size() * 4) == 0);
    };
    to_f32(DType::q4_K, b4.data(), fast.data(), fast.size());
    q4_K_to_f32_scalar(b4.data(), slow.data(), 64);
    same("q4_K");
    to_f32(DType::q5_K, b5.data(), fast.data(), fast.size());
    q5_K_to_f32_scalar(b5.data(), slow.data(), 64);
    same("q5_K");
    to_f32(DType::q6_K, b6.data(), fast.data(), fast.size());
    q6_K_to_f32_scalar(b6.data(), slow.data(), 64);
    same("q6_K");
    to_f32(DType::q2_K, b2.data(), fast.data(), fast.size());
    q2_K_to_f32_scalar(b2.data(), slow.data(), 64);
    same("q2_K");
    to_f32(DType::q3_K, b3.data(), fast.data(), fast.size());
    q3_K_to_f32_scalar(b3.data(), slow.data(), 64);
    same("q3_K");
    to_f32(DType::iq4_nl, bn.data(), fast.data(), fast.size());
    iq4_nl_to_f32_scalar(bn.data(), slow.data(), 512);
    same("iq4_nl");
    to_f32(DType::iq4_xs, bx.data(), fast.data(), fast.size());
    iq4_xs_to_f32_scalar(bx.data(), slow.data(), 64);
    same("iq4_xs");
  }
  // Random data: a k-quant's error is a fraction of each 16 or 32 numbers' range.
  for (DType t : {DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K,
                  DType::iq4_nl, DType::iq4_xs}) {
    auto v = random_floats(256 * 16, 17, 1.5f);
    auto q = encode(t, v);
    REQUIRE(q.size() == dtype_bytes(t, 256 * 16));
    std::vector<float> back(v.size());
    to_f32(t, q.data(), back.data(), v.size());
    const int sub = t == DType::q4_K || t == DType::q5_K || is_iq4(t) || is_q45_legacy(t) ? 32 : 16;
    const float levels = t == DType::q2_K   ? 3
                         : t == DType::q3_K ? 7
                         : t == DType::q4_K || t == DType::q4_1 || is_iq4(t) ? 15
                         : t == DType::q5_K || t == DType::q5_0 || t == DType::q5_1 ? 31
                                                                                     : 63;
    double err = 0, total = 0;
    for (std::size_t s = 0; s < v.size(); s += static_cast<std::size_t>(sub)) {
      float lo = 0, hi = 0;
      for (int j = 0; j < sub; ++j) lo = std::min(lo, v[s + j]), hi = std::max(hi, v[s + j]);
      // within a step of the levels over the range (scales of 6 or 8 bits add up to half a step)
      const float step = (hi - lo) / levels;
      for (int j = 0; j < sub; ++j) {
        INFO(dtype_name(t) << " number " << s + j);
        REQUIRE(std::fabs(back[s + j] - v[s + j]) <= 1.5f * step + 1e-6f);
        err += std::pow(back[s + j] - v[s + j], 2);
        total += std::pow(v[s + j], 2);
      }
    }
    const double rel = std::sqrt(err / total);
    INFO(dtype_name(t) << " relative RMS error " << rel);
    CHECK(rel < (t == DType::q4_1 ? 0.07 : t == DType::q5_0 || t == DType::q5_1 ? 0.04 : is_iq4(t) ? 0.07 : t == DType::q2_K ? 0.25 : t == DType::q3_K ? 0.14 : t == DType::q4_K ? 0.09 : t == DType::q5_K ? 0.045 : 0.022));
  }
}

TEST_CASE("every format round-trips byte for byte", "[tensor_io][roundtrip]") {
  auto vals = random_floats(4 * 64, 17);
  SECTION("npy: f32, f16, i32, i8, f64") {
    for (DType t : {DType::f32, DType::f16, DType::i32, DType::i8, DType::f64}) {
      std::vector<std::byte> data(dtype_bytes(t, vals.size()));
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7 + 3);
      std::string p = temp_path(std::string("a.npy"));
      REQUIRE(write_npy(p, TensorOut{"a", t, {4, 64}, data.data()}).ok());
      auto f = TensorFile::open(p);
      REQUIRE(f.ok());
      const auto& ti = (*f)->tensors().at(0);
      CHECK(ti.dtype == t);
      CHECK(ti.shape == std::vector<std::int64_t>{4, 64});
      REQUIRE(ti.nbytes == data.size());
      CHECK(std::memcmp((*f)->data(ti), data.data(), data.size()) == 0);
      std::remove(p.c_str());
    }
    CHECK_FALSE(write_npy(temp_path("b.npy"), TensorOut{"b", DType::q8_0, {1, 32}, nullptr}).ok());
  }
  SECTION("GGUF: every float dtype, metadata of every type, nested arrays, alignment") {
    std::vector<std::vector<std::byte>> blobs;
    std::vector<TensorOut> ts;
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::i32}) {
      if (t == DType::i32) {
        blobs.emplace_back(4 * 64 * 4);
        for (std::size_t i = 0; i < blobs.back().size(); ++i) blobs.back()[i] = static_cast<std::byte>(i);
      } else {
        blobs.push_back(encode(t, vals));
      }
      ts.push_back(TensorOut{std::string("t.") + std::string(dtype_name(t)), t, {4, 64}, blobs.back().data()});
    }
    std::vector<std::pair<std::string, MetaValue>> meta{
        {"general.architecture", MetaValue::of_string("llama")},
        {"general.alignment", MetaValue::of_u32(64)},
        {"x.u64", MetaValue::of_u64(1ull << 40)},
        {"x.i32", MetaValue::of_i32(-7)},
        {"x.f32", MetaValue::of_f32(0.5f)},
        {"x.bool", MetaValue::of_bool(true)},
        {"x.nested", MetaValue::of_array(MetaType::array, {MetaValue::of_array(MetaType::string, {MetaValue::of_string("a"), MetaValue::of_string("")}),
                                                           MetaValue::of_array(MetaType::string, {})})}};
    std::string p = temp_path("m.gguf");
    REQUIRE(write_gguf(p, meta, ts).ok());
    auto f = TensorFile::open(p);
    REQUIRE(f.ok());
    CHECK((*f)->format() == Format::gguf);
    CHECK((*f)->alignment() == 64);
    CHECK((*f)->meta("x.u64")->u == (1ull << 40));
    CHECK((*f)->meta("x.i32")->as_int() == -7);
    CHECK((*f)->meta("x.bool")->u == 1);
    CHECK((*f)->meta("x.nested")->items.at(0).items.at(0).s == "a");
    CHECK((*f)->meta("x.nested")->items.at(1).items.empty());
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const auto* ti = (*f)->find(ts[i].name);
      REQUIRE(ti);
      CHECK(ti->dtype == ts[i].dtype);
      CHECK(ti->shape == ts[i].shape);
      CHECK(ti->offset % 64 == 0);
      REQUIRE(ti->nbytes == blobs[i].size());
      CHECK(std::memcmp((*f)->data(*ti), blobs[i].data(), blobs[i].size()) == 0);
    }
    // Writing what was read gives the same file.
    std::vector<TensorOut> again;
    for (const auto& ti : (*f)->tensors()) again.push_back(TensorOut{ti.name, ti.dtype, ti.shape, (*f)->data(ti)});
    std::string p2 = temp_path("m2.gguf");
    REQUIRE(write_gguf(p2, (*f)->metadata(), again).ok());
    CHECK(bytes_of(p) == bytes_of(p2));
    std::remove(p.c_str());
    std::remove(p2.c_str());
  }
  SECTION("safetensors: f32, f16, bf16, i32 and __metadata__") {
    auto a = encode(DType::f32, vals), b = encode(DType::f16, vals), c = encode(DType::bf16, vals);
    std::vector<TensorOut> ts{{"a", DType::f32, {4, 64}, a.data()}, {"b", DType::f16, {256}, b.data()},
                              {"c", DType::bf16, {2, 2, 64}, c.data()}};
    std::string p = temp_path("m.safetensors");
    REQUIRE(write_safetensors(p, ts, {{"format", "pt"}}).ok());
    auto f = TensorFile::open(p);
    REQUIRE(f.ok());
    CHECK((*f)->format() == Format::safetensors);
    CHECK((*f)->meta("format")->s == "pt");
    std::vector<TensorOut> again;
    for (const auto& t : ts) {
      const auto* ti = (*f)->find(t.name);
      REQUIRE(ti);
      CHECK(ti->shape == t.shape);
      again.push_back(TensorOut{ti->name, ti->dtype, ti->shape, (*f)->data(*ti)});
    }
    std::string p2 = temp_path("m2.safetensors");
    REQUIRE(write_safetensors(p2, again, {{"format", "pt"}}).ok());
    CHECK(bytes_of(p) == bytes_of(p2));
    CHECK_FALSE(write_safetensors(temp_path("q.safetensors"), {{"q", DType::q4_0, {32}, c.data()}}).ok());
    std::remove(p.c_str());
    std::remove(p2.c_str());
  }
}

TEST_CASE("llama2.c checkpoints and tokenizer.bin round-trip", "[tensor_io][llama2c]") {
  // dim 8, hidden 16, 2 layers, 2 heads, 1 kv head, vocab 5, seq 4; own classifier.
  const std::int32_t hdr[7] = {8, 16, 2, 2, 1, -5, 4};
  std::size_t floats = 5 * 8 + 2 * 8 + 2 * 64 + 2 * 32 + 2 * 32 + 2 * 64 + 2 * 8 + 3 * 2 * 128 + 8 + 2 * 4 * 2 + 5 * 8;
  auto w = random_floats(floats, 23);
  std::string blob(reinterpret_cast<const char*>(hdr), 28);
  blob.append(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  std::string p = temp_path("m.bin");
  REQUIRE(io::write_file_atomic(p, blob).ok());
  auto f = TensorFile::open(p);
  REQUIRE(f.ok());
  CHECK((*f)->format() == Format::llama2c);
  REQUIRE((*f)->find("output.weight"));
  CHECK((*f)->find("blk.1.attn_k.weight")->shape == std::vector<std::int64_t>{4, 8});
  CHECK((*f)->find("blk.1.ffn_down.weight")->shape == std::vector<std::int64_t>{8, 16});
  auto cfg = llama2c_config(**f);
  REQUIRE(cfg.ok());
  CHECK_FALSE(cfg->shared_classifier);
  CHECK(cfg->n_kv_heads == 1);
  std::string p2 = temp_path("m2.bin");
  REQUIRE(write_llama2c(p2, **f).ok());
  CHECK(bytes_of(p2) == blob);
  // One float short: the header's sizes no longer match, a located error.
  REQUIRE(io::write_file_atomic(p2, blob.substr(0, blob.size() - 4)).ok());
  auto bad = TensorFile::open(p2);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("announces") && Catch::Contains("but the file has"));

  Llama2cVocab v{7, {"<unk>", "a", "▁b", "", "cd"}, {0, -1, -2, -3, -4}};
  std::string tp = temp_path("tok.bin");
  REQUIRE(write_llama2c_tokenizer(tp, v).ok());
  auto r = read_llama2c_tokenizer(tp, 5);
  REQUIRE(r.ok());
  CHECK(r->tokens == v.tokens);
  CHECK(r->scores == v.scores);
  CHECK(r->max_token_length == 7);
  CHECK_FALSE(read_llama2c_tokenizer(tp, 6).ok());  // fewer tokens than the model's vocabulary
  CHECK_FALSE(read_llama2c_tokenizer(tp, 4).ok());  // bytes left over
  for (auto* q : {&p, &p2, &tp}) std::remove(q->c_str());
}

TEST_CASE("a tensor file read into memory puts the most tensor bytes on cache lines", "[tensor_io][mmap]") {
  auto on_line = [](const std::byte* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; };
  auto vals = random_floats(256, 31);
  // GGUF's default alignment of 32, a data section on a cache line (a name of the length
  // that puts it there), and a 32-byte tensor that moves the two after it to the middle of
  // a line: 2048 bytes there against 1056 at the data section's start, so the copy moves.
  std::string p = temp_path("a32.gguf");
  bool placed = false;
  for (std::size_t pad = 0; pad < 64 && !placed; ++pad) {
    REQUIRE(write_gguf(p, {{"general.name", MetaValue::of_string(std::string(pad, 'x'))}},
                       {{"a", DType::f32, {4, 64}, vals.data()},
                        {"norm", DType::f32, {8}, vals.data()},
                        {"b", DType::f32, {4, 64}, vals.data()},
                        {"c", DType::f32, {4, 64}, vals.data()}})
                .ok());
    auto f = TensorFile::open(p);
    REQUIRE(f.ok());
    placed = (*f)->find("a")->offset % 64 == 0;
  }
  REQUIRE(placed);
  auto mapped = TensorFile::open(p);
  auto copied = TensorFile::open(p, MappedFile::Load::copy);
  REQUIRE(mapped.ok());
  REQUIRE(copied.ok());
  CHECK((*copied)->tensors().size() == 4);
  CHECK_FALSE(on_line((*mapped)->data(*(*mapped)->find("b"))));  // where the file puts it
  CHECK(on_line((*copied)->data(*(*copied)->find("b"))));
  CHECK(on_line((*copied)->data(*(*copied)->find("c"))));
  CHECK_FALSE(on_line((*copied)->data(*(*copied)->find("a"))));
  for (const auto& t : (*mapped)->tensors()) {
    const auto* u = (*copied)->find(t.name);
    REQUIRE(u);
    CHECK(u->offset == t.offset);
    CHECK(std::memcmp((*copied)->data(*u), (*mapped)->data(t), t.nbytes) == 0);
  }
  CHECK((*copied)->meta("general.name")->s == (*mapped)->meta("general.name")->s);

  // llama2.c: the arrays start at byte 28, all of them 4 bytes past a multiple of 64 here.
  const std::int32_t hdr[7] = {16, 32, 1, 2, 2, 4, 4};
  std::size_t floats = 4 * 16 + 16 + 4 * 256 + 16 + 3 * 512 + 16 + 2 * 4 * 4;
  auto w = random_floats(floats, 37);
  std::string blob(reinterpret_cast<const char*>(hdr), 28);
  blob.append(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  std::string q = temp_path("a.bin");
  REQUIRE(io::write_file_atomic(q, blob).ok());
  auto l2c = TensorFile::open(q, MappedFile::Load::copy);
  REQUIRE(l2c.ok());
  CHECK((*l2c)->format() == Format::llama2c);
  for (const auto& t : (*l2c)->tensors()) {
    CHECK(on_line((*l2c)->data(t)));
    CHECK(std::memcmp((*l2c)->data(t), blob.data() + t.offset, t.nbytes) == 0);
  }
  std::remove(p.c_str());
  std::remove(q.c_str());
}

TEST_CASE("lying and truncated headers give located errors, never a crash or a huge allocation",
          "[tensor_io][bad]") {
  auto vals = random_floats(64, 29);
  std::string p = temp_path("g.gguf");
  REQUIRE(write_gguf(p, {{"general.architecture", MetaValue::of_string("llama")},
                         {"tokenizer.ggml.tokens", MetaValue::of_array(MetaType::string, {MetaValue::of_string("x")})}},
                     {{"w", DType::f32, {2, 32}, vals.data()}})
              .ok());
  std::string good = bytes_of(p);
  auto open_bytes = [&](const std::string& b) {
    REQUIRE(io::write_file_atomic(p, b).ok());
    return TensorFile::open(p);
  };
  // Every truncation fails cleanly.
  for (std::size_t n = 0; n < good.size(); ++n) {
    auto f = open_bytes(good.substr(0, n));
    REQUIRE_FALSE(f.ok());
    REQUIRE_FALSE(f.error().message.empty());
  }
  // A huge tensor count, a huge array length, a huge string length.
  std::string b = good;
  std::uint64_t huge = 1ull << 60;
  std::memcpy(b.data() + 8, &huge, 8);
  auto f = open_bytes(b);
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.error().message, Catch::Contains("byte 8") && Catch::Contains("cannot fit"));
  b = good;
  std::size_t at = b.find("tokenizer.ggml.tokens") + 21 + 4 + 4;  // key, value type, element type
  std::memcpy(b.data() + at, &huge, 8);
  f = open_bytes(b);
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.error().message, Catch::Contains("array of") && Catch::Contains("cannot fit"));
  // A data offset beyond the end.
  b = good;
  at = b.find(std::string("\x01\x00\x00\x00\x00\x00\x00\x00w", 9)) + 9 + 4 + 16 + 4;  // name, n_dims, dims, type
  std::uint64_t far = 1 << 20;
  std::memcpy(b.data() + at, &far, 8);
  f = open_bytes(b);
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.error().message, Catch::Contains("tensor 'w'"));
  // A ggml type lmpipe does not read (iq2_xxs), named; a k-quant whose rows (32 numbers)
  // are not whole super-blocks of 256.
  const std::size_t type_at = good.find(std::string("\x01\x00\x00\x00\x00\x00\x00\x00w", 9)) + 9 + 4 + 16;
  for (auto [type, what] : {std::pair{16u, "ggml type 16 (iq2_xxs) is not supported"}, std::pair{12u, "rows of 32 elements are not whole 256-element blocks of q4_K"}}) {
    b = good;
    std::memcpy(b.data() + type_at, &type, 4);
    f = open_bytes(b);
    REQUIRE_FALSE(f.ok());
    INFO(f.error().message);
    CHECK_THAT(f.error().message, Catch::Contains(what));
  }
  // safetensors: a header longer than the file; offsets that disagree with the shape; a hole.
  auto st = [&](const std::string& json, std::size_t data) {
    std::string s(8, '\0');
    std::uint64_t n = json.size();
    std::memcpy(s.data(), &n, 8);
    return open_bytes(s + json + std::string(data, '\0'));
  };
  CHECK_FALSE(st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", 12).ok());
  CHECK_FALSE(st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4).ok());
  CHECK_FALSE(st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8).ok());
  CHECK(st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8).ok());
  std::string s(8, '\0');
  std::uint64_t n = 1ull << 62;
  std::memcpy(s.data(), &n, 8);
  f = open_bytes(s + "{}");
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.error().message, Catch::Contains("header of"));
  // .npy announcing more data than it has.
  std::string npy;
  {
    std::string q = temp_path("x.npy");
    REQUIRE(write_npy(q, TensorOut{"x", DType::f32, {2, 32}, vals.data()}).ok());
    npy = bytes_of(q);
    std::remove(q.c_str());
  }
  f = open_bytes(npy.substr(0, npy.size() - 1));
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.error().message, Catch::Contains("announces"));
  std::remove(p.c_str());
}

TEST_CASE("a stream of .npy arrays: read one by one, a lying header ends in a located error", "[tensor_io][npy]") {
  auto vals = random_floats(64, 31);
  std::string stream;
  for (int k = 0; k < 3; ++k) {
    auto b = npy_bytes(TensorOut{"x", k == 1 ? DType::f16 : DType::f32, {2, 8 * (k + 1)}, vals.data()});
    REQUIRE(b.ok());
    stream += *b;
  }
  std::string p = temp_path("s.npy");
  REQUIRE(io::write_file_atomic(p, stream).ok());
  auto r = NpyStreamReader::open(p);
  REQUIRE(r.ok());
  NpyArray a;
  for (int k = 0; k < 3; ++k) {
    auto got = (*r)->next(a);
    REQUIRE(got.ok());
    REQUIRE(*got);
    CHECK(a.index == static_cast<std::size_t>(k + 1));
    CHECK(a.shape == std::vector<std::int64_t>{2, 8 * (k + 1)});
    CHECK(a.dtype == (k == 1 ? DType::f16 : DType::f32));
    if (k != 1) CHECK(std::memcmp(a.data.data(), vals.data(), a.data.size()) == 0);
  }
  auto end = (*r)->next(a);
  REQUIRE(end.ok());
  CHECK_FALSE(*end);
  // The same stream opened as a tensor file: three tensors.
  auto f = TensorFile::open(p);
  REQUIRE(f.ok());
  REQUIRE((*f)->tensors().size() == 3);
  CHECK((*f)->find("array.2")->shape == std::vector<std::int64_t>{2, 24});
  // A header announcing far more data than follows: an error naming the array, no allocation.
  std::string lie = npy_bytes(TensorOut{"x", DType::f32, {1, 16}, vals.data()}).value();
  auto pos = lie.find("(1, 16)");
  REQUIRE(pos != std::string::npos);
  lie.replace(pos, 7, "(99999999999, 16)");
  auto nl = lie.find('\n');
  lie.erase(nl - 10, 10);  // keep the header length: ten spaces of the padding go
  REQUIRE(io::write_file_atomic(p, stream + lie).ok());
  r = NpyStreamReader::open(p);
  REQUIRE(r.ok());
  for (int k = 0; k < 3; ++k) REQUIRE((*r)->next(a).ok());
  auto bad = (*r)->next(a);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("truncated") && Catch::Contains(std::to_string(stream.size())));
  // Trailing bytes that are no array.
  REQUIRE(io::write_file_atomic(p, stream + "junk").ok());
  auto tf = TensorFile::open(p);
  REQUIRE_FALSE(tf.ok());
  CHECK_THAT(tf.error().message, Catch::Contains("4 bytes after the last array"));
  std::remove(p.c_str());
}
