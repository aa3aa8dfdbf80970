#include "lmpipe/tensor_io/kquants.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "lmpipe/core/cpu.h"
#include "lmpipe/tensor_io/dtype.h"

namespace lmp {

namespace {

int nearest(float v) { return static_cast<int>(std::lround(v)); }

// The scale a and offset b (x ≈ a·q − b, b ≥ 0, q in 0..Q) of n numbers: from their range
// (the minimum taken as at most 0, as the format's offset subtracts), then scales a little
// above and below it, each followed by a least-squares fit of a and b to the integers it
// chose; the pair with the least squared error wins.
struct Affine {
  float a, b;
};
Affine fit_affine(const float* x, int n, int Q) {
  float lo = 0, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (hi <= lo) return {0, -lo};
  Affine best{(hi - lo) / static_cast<float>(Q), -lo};
  auto error = [&](Affine f) {
    float e = 0;
    const float inv = f.a != 0 ? 1.0f / f.a : 0.0f;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(nearest((x[i] + f.b) * inv), 0, Q);
      const float r = f.a * static_cast<float>(q) - f.b - x[i];
      e += r * r;
    }
    return e;
  };
  float best_err = error(best);
  for (int step = -4; step <= 4; ++step) {
    const float a0 = (hi - lo) / (static_cast<float>(Q) + 0.25f * static_cast<float>(step));
    if (a0 <= 0) continue;
    // The integers this scale gives, then the least-squares a, b for them.
    float sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      const auto q = static_cast<float>(std::clamp(nearest((x[i] - lo) / a0), 0, Q));
      sq += q;
      sqq += q * q;
      sx += x[i];
      sqx += q * x[i];
    }
    const float det = static_cast<float>(n) * sqq - sq * sq;
    Affine f{a0, -lo};
    if (det > 0) {
      f.a = (static_cast<float>(n) * sqx - sq * sx) / det;
      f.b = -(sx - f.a * sq) / static_cast<float>(n);
      if (f.b < 0) {  // the offset must subtract: refit the scale alone with b = 0
        f.b = 0;
        f.a = sqq > 0 ? sqx / sqq : 0;
      }
    }
    if (f.a <= 0) continue;
    const float e = error(f);
    if (e < best_err) best_err = e, best = f;
  }
  return best;
}

// The 8 sub-blocks' (a, b) of a q4_K or q5_K super-block as 6-bit integers under two f16
// factors; writes d, dmin and the 12 scale bytes, returns the effective scales and offsets.
template <typename Block>
void pack_k_scales(const Affine f[8], Block& y, float eff_a[8], float eff_b[8]) {
  float max_a = 0, max_b = 0;
  for (int j = 0; j < 8; ++j) max_a = std::max(max_a, f[j].a), max_b = std::max(max_b, f[j].b);
  y.d = f32_to_f16(max_a / 63.0f);
  y.dmin = f32_to_f16(max_b / 63.0f);
  const float d = f16_to_f32(y.d), dmin = f16_to_f32(y.dmin);
  std::uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<std::uint8_t>(d > 0 ? std::clamp(nearest(f[j].a / d), 0, 63) : 0);
    m[j] = static_cast<std::uint8_t>(dmin > 0 ? std::clamp(nearest(f[j].b / dmin), 0, 63) : 0);
    eff_a[j] = d * sc[j];
    eff_b[j] = dmin * m[j];
  }
  for (int j = 0; j < 4; ++j) {
    y.scales[j] = static_cast<std::uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    y.scales[j + 4] = static_cast<std::uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    y.scales[j + 8] = static_cast<std::uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// q of each number of a q4_K or q5_K super-block under the packed scales.
void k_levels(const float* x, const float eff_a[8], const float eff_b[8], int Q, std::uint8_t q[256]) {
  for (int j = 0; j < 8; ++j) {
    const float inv = eff_a[j] > 0 ? 1.0f / eff_a[j] : 0.0f;
    for (int l = 0; l < 32; ++l) q[32 * j + l] = static_cast<std::uint8_t>(std::clamp(nearest((x[32 * j + l] + eff_b[j]) * inv), 0, Q));
  }
}

// The scale s (x ≈ s·q, q in −(Q + 1)..Q) of 16 numbers: the one that maps the number of
// largest magnitude to −(Q + 1), and nearby ones (steps of a quarter level, 6 each way for
// q6_K's 64 levels, 3 for q3_K's 8, each of these also refitted by least squares to the
// levels it chose); least squared error. (For q3_K, steps of a tenth, 10 each way, gave
// the same error on the conformance matrices in 2.3× the time.)
template <int Q>
float fit_symmetric(const float* x) {
  float amax = 0, max = 0;
  for (int i = 0; i < 16; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax == 0) return 0;
  constexpr float kStep = 0.25f;
  constexpr int kSteps = Q >= 31 ? 6 : 3;
  const auto error = [&](float s) {
    float e = 0;
    for (int i = 0; i < 16; ++i) {
      const float r = s * static_cast<float>(std::clamp(nearest(x[i] / s), -(Q + 1), Q)) - x[i];
      e += r * r;
    }
    return e;
  };
  float best = max / -static_cast<float>(Q + 1), best_err = -1;
  for (int step = -kSteps; step <= kSteps; ++step) {
    const float s = max / (-static_cast<float>(Q + 1) + kStep * static_cast<float>(step));
    float e = error(s);
    if (best_err < 0 || e < best_err) best_err = e, best = s;
    if constexpr (Q < 31) {
      float sqx = 0, sqq = 0;
      for (int i = 0; i < 16; ++i) {
        const auto q = static_cast<float>(std::clamp(nearest(x[i] / s), -(Q + 1), Q));
        sqx += q * x[i];
        sqq += q * q;
      }
      if (sqq > 0 && sqx != 0) {
        const float ls = sqx / sqq;
        e = error(ls);
        if (e < best_err) best_err = e, best = ls;
      }
    }
  }
  return best;
}

// The conversions in 256-bit registers: the scalar loops' arithmetic (a product, then a
// difference: no fused multiply-add, so the same bits as the scalar code and as GGML's).
__attribute__((target("avx2"))) inline void store_levels(float* y, __m256i bytes, __m256 a, __m256 b) {
  // 32 unsigned levels (one per byte) → y[0..32) = a·q − b
  const __m128i lo = _mm256_castsi256_si128(bytes), hi = _mm256_extracti128_si256(bytes, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k)
    _mm256_storeu_ps(y + 8 * k, _mm256_sub_ps(_mm256_mul_ps(a, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]))), b));
}

template <bool Q5>
__attribute__((target("avx2,f16c"))) void q45_K_to_f32_avx2(const void* blocks, float* y, std::size_t nb) {
  using Block = std::conditional_t<Q5, BlockQ5_K, BlockQ4_K>;
  const auto* b = static_cast<const Block*>(blocks);
  for (std::size_t k = 0; k < nb; ++k, y += 256) {
    const float d = _cvtsh_ss(b[k].d), dmin = _cvtsh_ss(b[k].dmin);
    std::uint8_t sc[8], m[8];
    unpack_k_scales(b[k].scales, sc, m);
    for (int c = 0; c < 4; ++c) {
      __m256i q0, q1;
      k_levels_avx2(b[k], c, q0, q1);
      store_levels(y + 64 * c, q0, _mm256_set1_ps(d * sc[2 * c]), _mm256_set1_ps(dmin * m[2 * c]));
      store_levels(y + 64 * c + 32, q1, _mm256_set1_ps(d * sc[2 * c + 1]), _mm256_set1_ps(dmin * m[2 * c + 1]));
    }
  }
}

__attribute__((target("avx2,f16c"))) void q6_K_to_f32_avx2(const BlockQ6_K* b, float* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k) {
    const float d = _cvtsh_ss(b[k].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      __m256i levels[4];
      q6_levels_avx2(b[k], h, levels);
      const std::int8_t* sc = b[k].scales + 8 * h;
      for (int g = 0; g < 4; ++g) {
        // q − 32 as signed bytes, then widened 8 at a time
        const __m256i q = _mm256_sub_epi8(levels[g], _mm256_set1_epi8(32));
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int p = 0; p < 4; ++p) {
          const __m256 a = _mm256_set1_ps(d * static_cast<float>(sc[2 * g + p / 2]));
          _mm256_storeu_ps(y + 32 * g + 8 * p, _mm256_mul_ps(a, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[p]))));
        }
      }
    }
  }
}

// q2_K and q3_K: each group of 32 as two sub-blocks of 16, y = a·q − b (q2_K: levels
// 0..3) or y = a·(q − 4) (q3_K), the scalar loops' arithmetic.
template <typename Block>
__attribute__((target("avx2,f16c"))) void q23_K_to_f32_avx2(const Block* b, float* y, std::size_t nb) {
  constexpr bool q3 = std::is_same_v<Block, BlockQ3_K>;
  for (std::size_t k = 0; k < nb; ++k) {
    const float d = _cvtsh_ss(b[k].d);
    float a[16], o[16] = {};
    if constexpr (q3) {
      std::uint64_t sc[2];
      unpack_q3_scales(b[k].scales, sc[0], sc[1]);
      for (int j = 0; j < 16; ++j) a[j] = d * static_cast<float>(static_cast<int>((sc[j / 8] >> (8 * (j % 8))) & 63) - 32);
    } else {
      const float dmin = _cvtsh_ss(b[k].dmin);
      for (int j = 0; j < 16; ++j) a[j] = d * static_cast<float>(b[k].scales[j] & 15), o[j] = dmin * static_cast<float>(b[k].scales[j] >> 4);
    }
    for (int h = 0; h < 2; ++h, y += 128) {
      __m256i levels[4];
      q23_levels_avx2(b[k], h, levels);
      for (int g = 0; g < 4; ++g) {
        const __m256i q = q3 ? _mm256_sub_epi8(levels[g], _mm256_set1_epi8(4)) : levels[g];
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int p = 0; p < 4; ++p) {
          const int j = 8 * h + 2 * g + p / 2;
          const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[p]));
          const __m256 r = _mm256_mul_ps(_mm256_set1_ps(a[j]), v);
          _mm256_storeu_ps(y + 32 * g + 8 * p, q3 ? r : _mm256_sub_ps(r, _mm256_set1_ps(o[j])));
        }
      }
    }
  }
}

// Number l of sub-blocks 2c and 2c + 1 of a q4_K or q5_K super-block: its level.
template <typename Block>
int k_level(const Block& b, int c, int l, int hi) {
  const int nibble = hi ? b.qs[32 * c + l] >> 4 : b.qs[32 * c + l] & 15;
  if constexpr (std::is_same_v<Block, BlockQ5_K>) return nibble | ((b.qh[l] >> (2 * c + hi)) & 1) << 4;
  return nibble;
}

template <typename Block>
void q45_K_to_f32_scalar(const Block* b, float* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k, y += 256) {
    const float d = f16_to_f32(b[k].d), dmin = f16_to_f32(b[k].dmin);
    std::uint8_t sc[8], m[8];
    unpack_k_scales(b[k].scales, sc, m);
    for (int c = 0; c < 4; ++c)
      for (int h = 0; h < 2; ++h) {
        const float a = d * sc[2 * c + h], o = dmin * m[2 * c + h];
        for (int l = 0; l < 32; ++l) y[64 * c + 32 * h + l] = a * static_cast<float>(k_level(b[k], c, l, h)) - o;
      }
  }
}

// q4_K (levels 0..15) and q5_K (0..31, the fifth bit of number l of sub-block j in bit j
// of qh[l]).
template <typename Block>
void quantize_q45_K(const float* x, Block* y, std::size_t nb) {
  constexpr bool q5 = std::is_same_v<Block, BlockQ5_K>;
  constexpr int Q = q5 ? 31 : 15;
  for (std::size_t k = 0; k < nb; ++k, x += 256) {
    Affine f[8];
    for (int j = 0; j < 8; ++j) f[j] = fit_affine(x + 32 * j, 32, Q);
    float a[8], b[8];
    pack_k_scales(f, y[k], a, b);
    std::uint8_t q[256];
    k_levels(x, a, b, Q, q);
    if constexpr (q5) std::memset(y[k].qh, 0, sizeof y[k].qh);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        const int q0 = q[64 * c + l], q1 = q[64 * c + 32 + l];
        y[k].qs[32 * c + l] = static_cast<std::uint8_t>((q0 & 15) | (q1 & 15) << 4);
        if constexpr (q5) y[k].qh[l] = static_cast<std::uint8_t>(y[k].qh[l] | (q0 >> 4) << (2 * c) | (q1 >> 4) << (2 * c + 1));
      }
  }
}

}  // namespace

void q4_K_to_f32(const BlockQ4_K* b, float* y, std::size_t nb) {
  if (cpu::avx2()) return q45_K_to_f32_avx2<false>(b, y, nb);
  q45_K_to_f32_scalar(b, y, nb);
}

void q5_K_to_f32(const BlockQ5_K* b, float* y, std::size_t nb) {
  if (cpu::avx2()) return q45_K_to_f32_avx2<true>(b, y, nb);
  q45_K_to_f32_scalar(b, y, nb);
}

void q4_K_to_f32_scalar(const BlockQ4_K* b, float* y, std::size_t nb) { q45_K_to_f32_scalar(b, y, nb); }
void q5_K_to_f32_scalar(const BlockQ5_K* b, float* y, std::size_t nb) { q45_K_to_f32_scalar(b, y, nb); }

void q6_K_to_f32(const BlockQ6_K* b, float* y, std::size_t nb) {
  if (cpu::avx2()) return q6_K_to_f32_avx2(b, y, nb);
  q6_K_to_f32_scalar(b, y, nb);
}

void q6_K_to_f32_scalar(const BlockQ6_K* b, float* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k) {
    const float d = f16_to_f32(b[k].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const std::uint8_t* ql = b[k].ql + 64 * h;
      const std::uint8_t* qh = b[k].qh + 32 * h;
      const std::int8_t* sc = b[k].scales + 8 * h;
      for (int g = 0; g < 4; ++g)
        for (int l = 0; l < 32; ++l) {
          const std::uint8_t lowbyte = ql[l + 32 * (g & 1)];
          const int q = ((g < 2 ? lowbyte & 15 : lowbyte >> 4) | ((qh[l] >> (2 * g)) & 3) << 4) - 32;
          y[32 * g + l] = d * static_cast<float>(sc[2 * g + l / 16]) * static_cast<float>(q);
        }
    }
  }
}

void quantize_q4_K(const float* x, BlockQ4_K* y, std::size_t nb) { quantize_q45_K(x, y, nb); }
void quantize_q5_K(const float* x, BlockQ5_K* y, std::size_t nb) { quantize_q45_K(x, y, nb); }

void quantize_q6_K(const float* x, BlockQ6_K* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k, x += 256) {
    float s[16], amax = 0;
    for (int j = 0; j < 16; ++j) {
      s[j] = fit_symmetric<31>(x + 16 * j);
      amax = std::max(amax, std::fabs(s[j]));
    }
    y[k].d = f32_to_f16(amax / 127.0f);
    const float d = f16_to_f32(y[k].d);
    std::uint8_t q[256];
    for (int j = 0; j < 16; ++j) {
      y[k].scales[j] = static_cast<std::int8_t>(d > 0 ? std::clamp(nearest(s[j] / d), -128, 127) : 0);
      const float eff = d * static_cast<float>(y[k].scales[j]);
      const float inv = eff != 0 ? 1.0f / eff : 0.0f;
      for (int l = 0; l < 16; ++l) q[16 * j + l] = static_cast<std::uint8_t>(std::clamp(nearest(x[16 * j + l] * inv), -32, 31) + 32);
    }
    std::memset(y[k].qh, 0, sizeof y[k].qh);
    for (int h = 0; h < 2; ++h) {
      std::uint8_t* ql = y[k].ql + 64 * h;
      std::uint8_t* qh = y[k].qh + 32 * h;
      const std::uint8_t* qq = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<std::uint8_t>((qq[l] & 15) | (qq[64 + l] & 15) << 4);
        ql[l + 32] = static_cast<std::uint8_t>((qq[32 + l] & 15) | (qq[96 + l] & 15) << 4);
        qh[l] = static_cast<std::uint8_t>(qq[l] >> 4 | (qq[32 + l] >> 4) << 2 | (qq[64 + l] >> 4) << 4 | (qq[96 + l] >> 4) << 6);
      }
    }
  }
}

void q2_K_to_f32(const BlockQ2_K* b, float* y, std::size_t nb) {
  if (cpu::avx2()) return q23_K_to_f32_avx2(b, y, nb);
  q2_K_to_f32_scalar(b, y, nb);
}

void q3_K_to_f32(const BlockQ3_K* b, float* y, std::size_t nb) {
  if (cpu::avx2()) return q23_K_to_f32_avx2(b, y, nb);
  q3_K_to_f32_scalar(b, y, nb);
}

void q2_K_to_f32_scalar(const BlockQ2_K* b, float* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k) {
    const float d = f16_to_f32(b[k].d), dmin = f16_to_f32(b[k].dmin);
    for (int h = 0; h < 2; ++h, y += 128)
      for (int g = 0; g < 4; ++g)
        for (int l = 0; l < 32; ++l) {
          const std::uint8_t sc = b[k].scales[8 * h + 2 * g + l / 16];
          const int q = (b[k].qs[32 * h + l] >> (2 * g)) & 3;
          y[32 * g + l] = d * static_cast<float>(sc & 15) * static_cast<float>(q) - dmin * static_cast<float>(sc >> 4);
        }
  }
}

void q3_K_to_f32_scalar(const BlockQ3_K* b, float* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k) {
    const float d = f16_to_f32(b[k].d);
    const std::uint8_t* s = b[k].scales;
    for (int h = 0; h < 2; ++h, y += 128)
      for (int g = 0; g < 4; ++g)
        for (int l = 0; l < 32; ++l) {
          const int j = 8 * h + 2 * g + l / 16;
          const int sc = ((j < 8 ? s[j] & 15 : s[j - 8] >> 4) | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
          const int q = ((b[k].qs[32 * h + l] >> (2 * g)) & 3) | ((b[k].hmask[l] >> (4 * h + g)) & 1) << 2;
          y[32 * g + l] = d * static_cast<float>(sc) * static_cast<float>(q - 4);
        }
  }
}

// q2_K: each sub-block of 16 fitted as q4_K's of 32 (levels 0..3), the 16 scales and
// offsets then as 4-bit integers under the f16 factors d and dmin.
void quantize_q2_K(const float* x, BlockQ2_K* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k, x += 256) {
    Affine f[16];
    float max_a = 0, max_b = 0;
    for (int j = 0; j < 16; ++j) {
      f[j] = fit_affine(x + 16 * j, 16, 3);
      max_a = std::max(max_a, f[j].a), max_b = std::max(max_b, f[j].b);
    }
    y[k].d = f32_to_f16(max_a / 15.0f);
    y[k].dmin = f32_to_f16(max_b / 15.0f);
    const float d = f16_to_f32(y[k].d), dmin = f16_to_f32(y[k].dmin);
    std::uint8_t q[256];
    for (int j = 0; j < 16; ++j) {
      const int sc = d > 0 ? std::clamp(nearest(f[j].a / d), 0, 15) : 0;
      const int m = dmin > 0 ? std::clamp(nearest(f[j].b / dmin), 0, 15) : 0;
      y[k].scales[j] = static_cast<std::uint8_t>(sc | m << 4);
      const float a = d * static_cast<float>(sc), b = dmin * static_cast<float>(m);
      const float inv = a > 0 ? 1.0f / a : 0.0f;
      for (int l = 0; l < 16; ++l) q[16 * j + l] = static_cast<std::uint8_t>(std::clamp(nearest((x[16 * j + l] + b) * inv), 0, 3));
    }
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const std::uint8_t* qq = q + 128 * h + l;
        y[k].qs[32 * h + l] = static_cast<std::uint8_t>(qq[0] | qq[32] << 2 | qq[64] << 4 | qq[96] << 6);
      }
  }
}

// q3_K: each sub-block's scale fitted symmetric (levels −4..3), the 16 scales then as
// 6-bit integers −32..31 under d, the largest in magnitude taken to −32.
void quantize_q3_K(const float* x, BlockQ3_K* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k, x += 256) {
    float s[16], amax = 0, max = 0;
    for (int j = 0; j < 16; ++j) {
      s[j] = fit_symmetric<3>(x + 16 * j);
      if (std::fabs(s[j]) > amax) amax = std::fabs(s[j]), max = s[j];
    }
    y[k].d = f32_to_f16(max / -32.0f);
    const float d = f16_to_f32(y[k].d);
    std::uint8_t q[256], sc6[16];
    for (int j = 0; j < 16; ++j) {
      const int sc = d != 0 ? std::clamp(nearest(s[j] / d), -32, 31) : 0;
      sc6[j] = static_cast<std::uint8_t>(sc + 32);
      const float eff = d * static_cast<float>(sc);
      const float inv = eff != 0 ? 1.0f / eff : 0.0f;
      for (int l = 0; l < 16; ++l) q[16 * j + l] = static_cast<std::uint8_t>(std::clamp(nearest(x[16 * j + l] * inv), -4, 3) + 4);
    }
    std::memset(y[k].scales, 0, sizeof y[k].scales);
    for (int j = 0; j < 16; ++j) {
      y[k].scales[j % 8] = static_cast<std::uint8_t>(y[k].scales[j % 8] | (sc6[j] & 15) << (j < 8 ? 0 : 4));
      y[k].scales[8 + j % 4] = static_cast<std::uint8_t>(y[k].scales[8 + j % 4] | (sc6[j] >> 4) << (2 * (j / 4)));
    }
    std::memset(y[k].hmask, 0, sizeof y[k].hmask);
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const std::uint8_t* qq = q + 128 * h + l;
        y[k].qs[32 * h + l] = static_cast<std::uint8_t>((qq[0] & 3) | (qq[32] & 3) << 2 | (qq[64] & 3) << 4 | (qq[96] & 3) << 6);
        for (int g = 0; g < 4; ++g) y[k].hmask[l] = static_cast<std::uint8_t>(y[k].hmask[l] | (qq[32 * g] >> 2) << (4 * h + g));
      }
  }
}

namespace {

// The index of the table level nearest v (rounded to an integer first: v is a number over
// the scale, the levels are integers from −127 to 113).
struct Iq4Nearest {
  std::uint8_t at[256];  // at[i + 128]: nearest level to the integer i
  Iq4Nearest() {
    for (int i = -128; i < 128; ++i) {
      int best = 0;
      for (int k = 1; k < 16; ++k)
        if (std::abs(kIq4Levels[k] - i) < std::abs(kIq4Levels[best] - i)) best = k;
      at[i + 128] = static_cast<std::uint8_t>(best);
    }
  }
  int operator()(float v) const {
    const float c = std::clamp(v, -128.0f, 127.0f);
    return at[static_cast<int>(std::lrint(c)) + 128];
  }
};
const Iq4Nearest& iq4_nearest() {
  static const Iq4Nearest n;
  return n;
}

// The scale s of n numbers x ≈ s·T[q] (see quantize_iq4_nl).
float fit_iq4(const float* x, int n) {
  const Iq4Nearest& near = iq4_nearest();
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax == 0) return 0;
  const auto error = [&](float sc) {
    const float inv = 1.0f / sc;
    float e = 0;
    for (int i = 0; i < n; ++i) {
      const float r = sc * static_cast<float>(kIq4Levels[near(x[i] * inv)]) - x[i];
      e += r * r;
    }
    return e;
  };
  const auto refit = [&](float sc) {  // least squares for the levels sc chooses
    const float inv = 1.0f / sc;
    float stx = 0, stt = 0;
    for (int i = 0; i < n; ++i) {
      const auto t = static_cast<float>(kIq4Levels[near(x[i] * inv)]);
      stx += t * x[i];
      stt += t * t;
    }
    return stt > 0 && stx != 0 ? stx / stt : sc;
  };
  float best = max / -127.0f, best_err = error(best);
  for (const float end : {-127.0f, 113.0f})
    for (int k = -3; k <= 3; ++k) {
      const float sc = max / (end + 3.0f * static_cast<float>(k) * (end < 0 ? -1.0f : 1.0f));
      const float e = error(sc);
      if (e < best_err) best_err = e, best = sc;
    }
  for (int it = 0; it < 2; ++it) {
    const float sc = refit(best);
    const float e = error(sc);
    if (!(e < best_err)) break;
    best_err = e, best = sc;
  }
  return best;
}

// 32 numbers under the scale sc into 16 bytes of nibbles (q4_0's order).
void pack_iq4(const float* x, float sc, std::uint8_t qs[16]) {
  const Iq4Nearest& near = iq4_nearest();
  const float inv = sc != 0 ? 1.0f / sc : 0.0f;
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<std::uint8_t>(near(x[j] * inv) | near(x[j + 16] * inv) << 4);
}

__attribute__((target("avx2,f16c"))) void store_iq4_avx2(const std::uint8_t* qs, float a, float* y) {
  const __m256i v = iq4_values_avx2(qs);
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  const __m256 s = _mm256_set1_ps(a);
  for (int p = 0; p < 4; ++p) _mm256_storeu_ps(y + 8 * p, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[p]))));
}
__attribute__((target("avx2,f16c"))) void iq4_nl_to_f32_avx2(const BlockIq4Nl* b, float* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k) store_iq4_avx2(b[k].qs, _cvtsh_ss(b[k].d), y + 32 * k);
}
__attribute__((target("avx2,f16c"))) void iq4_xs_to_f32_avx2(const BlockIq4Xs* b, float* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k) {
    const float d = _cvtsh_ss(b[k].d);
    for (int j = 0; j < 8; ++j) store_iq4_avx2(b[k].qs + 16 * j, d * static_cast<float>(iq4_xs_scale(b[k], j) - 32), y + 256 * k + 32 * j);
  }
}

}  // namespace

void iq4_nl_to_f32(const BlockIq4Nl* b, float* y, std::size_t nb) {
  if (cpu::avx2()) return iq4_nl_to_f32_avx2(b, y, nb);
  iq4_nl_to_f32_scalar(b, y, nb);
}
void iq4_xs_to_f32(const BlockIq4Xs* b, float* y, std::size_t nb) {
  if (cpu::avx2()) return iq4_xs_to_f32_avx2(b, y, nb);
  iq4_xs_to_f32_scalar(b, y, nb);
}

void iq4_nl_to_f32_scalar(const BlockIq4Nl* b, float* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k, y += 32) {
    const float d = f16_to_f32(b[k].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kIq4Levels[b[k].qs[j] & 15]);
      y[j + 16] = d * static_cast<float>(kIq4Levels[b[k].qs[j] >> 4]);
    }
  }
}
void iq4_xs_to_f32_scalar(const BlockIq4Xs* b, float* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k) {
    const float d = f16_to_f32(b[k].d);
    for (int j = 0; j < 8; ++j, y += 32) {
      const float a = d * static_cast<float>(iq4_xs_scale(b[k], j) - 32);
      const std::uint8_t* qs = b[k].qs + 16 * j;
      for (int l = 0; l < 16; ++l) {
        y[l] = a * static_cast<float>(kIq4Levels[qs[l] & 15]);
        y[l + 16] = a * static_cast<float>(kIq4Levels[qs[l] >> 4]);
      }
    }
  }
}

void quantize_iq4_nl(const float* x, BlockIq4Nl* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k, x += 32) {
    y[k].d = f32_to_f16(fit_iq4(x, 32));
    pack_iq4(x, f16_to_f32(y[k].d), y[k].qs);
  }
}

void quantize_iq4_xs(const float* x, BlockIq4Xs* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k, x += 256) {
    float s[8], amax = 0, max = 0;
    for (int j = 0; j < 8; ++j) {
      s[j] = fit_iq4(x + 32 * j, 32);
      if (std::fabs(s[j]) > amax) amax = std::fabs(s[j]), max = s[j];
    }
    y[k].d = f32_to_f16(max / -32.0f);
    const float d = f16_to_f32(y[k].d);
    y[k].scales_h = 0;
    std::memset(y[k].scales_l, 0, sizeof y[k].scales_l);
    for (int j = 0; j < 8; ++j) {
      const int sc = d != 0 ? std::clamp(nearest(s[j] / d), -32, 31) : 0;
      const int ls = sc + 32;
      y[k].scales_l[j / 2] = static_cast<std::uint8_t>(y[k].scales_l[j / 2] | (ls & 15) << (4 * (j % 2)));
      y[k].scales_h = static_cast<std::uint16_t>(y[k].scales_h | (ls >> 4) << (2 * j));
      pack_iq4(x + 32 * j, d * static_cast<float>(sc), y[k].qs + 16 * j);
    }
  }
}

}  // namespace lmp
