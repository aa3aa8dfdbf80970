// Matrix-matrix products of prompt processing, AVX-512: out (n, rows) = X (n, cols) · Wᵀ.
//
// Float weights (f32, f16, bf16; and the k-quants, converted the same way). Panels of 32 rows are converted to f32 and packed
// k-major, P[k][32], 128 columns at a time (16 KB: it stays in L1 while every token
// passes over it). The micro-kernel takes 8 tokens: for each column k it broadcasts
// X[t][k] and adds it times the panel's two 16-wide halves into 16 zmm accumulators,
// the outer-product form of BLIS's kernels: no horizontal sums, two loads per 16 FMAs.
//
// q8_0 and q4_0 weights (a q4_0 row is unpacked into q8_0 blocks of the same values
// first, 4 rows at a time), and q4_K and q5_K (each sub-block of 32 unpacked into a block
// of its levels 0..15 or 0..31, with the sub-block's scale d·sc as the block's scale and
// its offset dmin·m taken off as dmin·m · d_x · Σ x_q, each token block's sum), and q6_K
// and q3_K (each group of 32 unpacked into a block of its signed values q − 32 or q − 4,
// whose two halves of 16 keep their own scales: each half's sums are scaled on their
// own; q2_K's blocks of levels 0..3 have two offsets too, taken off through each token
// half block's sum), and iq4_nl and iq4_xs (each block of 32 unpacked into its table
// values, under its own scale). The activations are quantized as q8_0 quantizes (a scale per
// token and 32 columns) but stored as unsigned bytes, x_q + 128, in VNNI order: per group
// of 16 tokens, 4 columns of all 16 tokens side by side (64 bytes). vpdpbusd then
// multiplies 4 columns of 16 tokens by 4 weight bytes broadcast from the row: 64 products
// in one instruction, summed per token into its own lane. After a block's 32 columns each
// lane holds Σ (x_q + 128)·w = Σ x_q·w + 128·Σ w; the accumulator starts at -128·Σ w
// (computed once per row and block), is converted to float, and scaled by the two
// blocks' scales. 4 rows × 32 tokens at a time: 8 integer and 8 float accumulators.
#include "lmpipe/model/ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "lmpipe/core/cpu.h"
#include "lmpipe/tensor_io/kquants.h"

// GCC 12 takes the _mm512_undefined_* placeholders inside its AVX-512 headers for
// uninitialized values (a false positive of -Wmaybe-uninitialized once inlined).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace lmp::model {

namespace {

constexpr std::size_t kPanelRows = 32, kPanelCols = 128, kTokens = 8;
static_assert(kAttnKeys == kPanelRows);

// 16 rows of 16 floats (r[i] = row i) transposed in registers: r[j] holds, lane by lane,
// rows 0..15 of column (j with its bits 0 and 1 swapped): 0, 2, 1, 3, 4, 6, 5, 7, ...
__attribute__((target("avx512f"))) inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4)
    for (int j = 0; j < 2; ++j) {
      r[i + j] = _mm512_shuffle_ps(t[i + j], t[i + j + 2], 0x44);
      r[i + j + 2] = _mm512_shuffle_ps(t[i + j], t[i + j + 2], 0xEE);
    }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xDD);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xDD);
  }
}

// P (kc, 32) = W[r0 .. r0+nr)[k0 .. k0+kc) transposed, as f32; rows past nr are zero.
// The rows are converted into `rows` (32, kc), then transposed 16 × 16 in registers.
__attribute__((target("avx512f"))) void pack_panel(float* P, const Weight& w, std::int64_t r0, std::int64_t nr,
                                                  std::size_t k0, std::size_t kc, std::vector<float>& rows) {
  const std::size_t kp = (kc + 15) / 16 * 16;  // kc rounded up: whole 16-column tiles
  rows.assign(kPanelRows * kp, 0.0f);
  for (std::int64_t i = 0; i < nr; ++i)  // (k0 and kc whole blocks of a k-quant: see gemm_f32)
    to_f32(w.dtype, w.data + static_cast<std::size_t>(r0 + i) * w.row_bytes + dtype_bytes(w.dtype, k0),
           rows.data() + static_cast<std::size_t>(i) * kp, kc);
  for (std::size_t k = 0; k < kp; k += 16)
    for (std::size_t h = 0; h < kPanelRows; h += 16) {
      __m512 r[16];
      for (std::size_t i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(rows.data() + (h + i) * kp + k);
      transpose16(r);
      for (std::size_t j = 0; j < 16; ++j) {
        const std::size_t col = k + ((j & ~std::size_t{3}) | ((j & 1) << 1) | ((j >> 1) & 1));
        if (col < kc) _mm512_storeu_ps(P + col * kPanelRows + h, r[j]);
      }
    }
}

// C (nt, 32) (+)= X (nt, kc) · P (kc, 32): X's rows ldx floats apart, C's ldc; the
// columns of C past `nr` are not written.
template <int NT>
__attribute__((target("avx512f,fma"))) void micro_f32(const float* P, std::size_t kc, const float* X, std::size_t ldx,
                                                      float* C, std::size_t ldc, bool accumulate, std::int64_t nr) {
  __m512 c0[NT], c1[NT];
  for (int t = 0; t < NT; ++t) c0[t] = c1[t] = _mm512_setzero_ps();
  for (std::size_t k = 0; k < kc; ++k) {
    const __m512 p0 = _mm512_loadu_ps(P + k * kPanelRows), p1 = _mm512_loadu_ps(P + k * kPanelRows + 16);
    for (int t = 0; t < NT; ++t) {
      const __m512 x = _mm512_set1_ps(X[static_cast<std::size_t>(t) * ldx + k]);
      c0[t] = _mm512_fmadd_ps(p0, x, c0[t]);
      c1[t] = _mm512_fmadd_ps(p1, x, c1[t]);
    }
  }
  const auto m0 = static_cast<__mmask16>(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
  const auto m1 = static_cast<__mmask16>(nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (1u << (nr - 16)) - 1);
  for (int t = 0; t < NT; ++t) {
    float* c = C + static_cast<std::size_t>(t) * ldc;
    if (accumulate) {
      c0[t] = _mm512_add_ps(c0[t], _mm512_maskz_loadu_ps(m0, c));
      c1[t] = _mm512_add_ps(c1[t], _mm512_maskz_loadu_ps(m1, c + 16));
    }
    _mm512_mask_storeu_ps(c, m0, c0[t]);
    _mm512_mask_storeu_ps(c + 16, m1, c1[t]);
  }
}

using MicroF32 = void (*)(const float*, std::size_t, const float*, std::size_t, float*, std::size_t, bool, std::int64_t);
constexpr MicroF32 kMicroF32[kTokens + 1] = {nullptr,        micro_f32<1>, micro_f32<2>, micro_f32<3>, micro_f32<4>,
                                             micro_f32<5>, micro_f32<6>, micro_f32<7>, micro_f32<8>};

// ---- q8_0 × quantized activations ------------------------------------------------------

inline std::int32_t load_i32(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Rows [r0, r0 + R) by token groups [g0, g0 + G): out (tokens, rows), ld floats apart.
// Sub scales a block (1; 2 for the halves of 16 of q6_K, q3_K and q2_K): corr, dw and
// offs hold Sub values a block, at (r · nb + b) · Sub + h, and the integer sums of each
// part are scaled on their own; Offsets: each part's offset times the tokens' sums of
// that part (xq.s, or xq.s16 for halves) is taken off.
template <int R, int G, bool Offsets, int Sub = 1>
__attribute__((target("avx512f,avx512bw,avx512vnni,fma"))) void tile_q8(const BlockQ8_0* const* rows,
                                                                          const std::int32_t* corr, const float* dw,
                                                                          const float* offs, std::size_t nb,
                                                                          const QuantizedBatch& xq, std::size_t g0,
                                                                          float* out, std::size_t ld, std::size_t n_tokens) {
  __m512 facc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) facc[r][g] = _mm512_setzero_ps();
  const std::size_t group_bytes = xq.cols * 16;  // one group's bytes: cols/4 steps of 64
  for (std::size_t b = 0; b < nb; ++b) {
    for (int h = 0; h < Sub; ++h) {
      const auto at = [&](int r) { return (static_cast<std::size_t>(r) * nb + b) * Sub + static_cast<std::size_t>(h); };
      __m512i acc[R][G];
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) acc[r][g] = _mm512_set1_epi32(corr[at(r)]);
      for (int k4 = h * 8 / Sub; k4 < (h + 1) * 8 / Sub; ++k4) {
        __m512i a[G];
        for (int g = 0; g < G; ++g)
          a[g] = _mm512_loadu_si512(xq.q.data() + (g0 + static_cast<std::size_t>(g)) * group_bytes + (b * 8 + static_cast<std::size_t>(k4)) * 64);
        for (int r = 0; r < R; ++r) {
          const __m512i wv = _mm512_set1_epi32(load_i32(rows[r][b].qs + 4 * k4));
          for (int g = 0; g < G; ++g) acc[r][g] = _mm512_dpbusd_epi32(acc[r][g], a[g], wv);
        }
      }
      for (int g = 0; g < G; ++g) {
        const std::size_t tb = (g0 + static_cast<std::size_t>(g)) * xq.blocks + b;  // the token group's block
        const __m512 dx = _mm512_loadu_ps(xq.d.data() + tb * 16);
        for (int r = 0; r < R; ++r) {
          const __m512 s = _mm512_mul_ps(_mm512_set1_ps(dw[at(r)]), dx);
          facc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][g]), s, facc[r][g]);
        }
        if constexpr (Offsets) {
          const __m512 sx = _mm512_loadu_ps(Sub == 1 ? xq.s.data() + tb * 16 : xq.s16.data() + (tb * 2 + static_cast<std::size_t>(h)) * 16);
          for (int r = 0; r < R; ++r) facc[r][g] = _mm512_fnmadd_ps(_mm512_set1_ps(offs[at(r)]), sx, facc[r][g]);
        }
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    alignas(64) float lanes[R][16];
    for (int r = 0; r < R; ++r) _mm512_store_ps(lanes[r], facc[r][g]);
    const std::size_t t0 = (g0 + static_cast<std::size_t>(g)) * 16;
    for (std::size_t l = 0; l < 16 && t0 + l < n_tokens; ++l)
      for (int r = 0; r < R; ++r) out[(t0 + l) * ld + static_cast<std::size_t>(r)] = lanes[r][l];
  }
}

template <int R, bool Offsets, int Sub>
void tiles_q8(const BlockQ8_0* const* rows, const std::int32_t* corr, const float* dw, const float* offs, std::size_t nb,
              const QuantizedBatch& xq, std::size_t g_lo, std::size_t g_hi, float* out, std::size_t ld) {
  std::size_t g = g_lo;
  for (; g + 2 <= g_hi; g += 2) tile_q8<R, 2, Offsets, Sub>(rows, corr, dw, offs, nb, xq, g, out, ld, xq.n);
  if (g < g_hi) tile_q8<R, 1, Offsets, Sub>(rows, corr, dw, offs, nb, xq, g, out, ld, xq.n);
}
// The kinds of rows: q8_0-style blocks (q8_0, q4_0), with offsets (q4_K, q5_K), with two
// scales a block (q6_K, q3_K), with two scales and two offsets a block (q2_K).
enum class RowKind { plain, offsets, halves, offset_halves };
template <int R>
void tiles_q8_any(RowKind kind, const BlockQ8_0* const* rows, const std::int32_t* corr, const float* dw, const float* offs,
              std::size_t nb, const QuantizedBatch& xq, std::size_t g_lo, std::size_t g_hi, float* out, std::size_t ld) {
  switch (kind) {
    case RowKind::offsets: return tiles_q8<R, true, 1>(rows, corr, dw, offs, nb, xq, g_lo, g_hi, out, ld);
    case RowKind::halves: return tiles_q8<R, false, 2>(rows, corr, dw, offs, nb, xq, g_lo, g_hi, out, ld);
    case RowKind::offset_halves: return tiles_q8<R, true, 2>(rows, corr, dw, offs, nb, xq, g_lo, g_hi, out, ld);
    case RowKind::plain: return tiles_q8<R, false, 1>(rows, corr, dw, offs, nb, xq, g_lo, g_hi, out, ld);
  }
}

// corr[b] = -128 · Σ qs and (unless dw is null) dw[b] = d of a row's blocks; with Halves,
// corr[2b + h] = -128 · Σ over half h (16 numbers) instead. Σ qs through the unsigned sum
// of absolute differences of qs + 128 from 0 (four partial sums of 8), less 128 a number.
template <bool Halves = false>
__attribute__((target("avx2,f16c"))) void row_sums(const BlockQ8_0* row, std::size_t nb, std::int32_t* corr, float* dw) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80)), zero = _mm256_setzero_si256();
  for (std::size_t b = 0; b < nb; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[b].qs));
    const __m256i s4 = _mm256_sad_epu8(_mm256_xor_si256(q, bias), zero);
    const auto half = [](__m128i v) {  // Σ qs of 16 numbers from its two partial sums
      return static_cast<std::int32_t>(_mm_cvtsi128_si64(_mm_add_epi64(v, _mm_unpackhi_epi64(v, v)))) - 16 * 128;
    };
    const std::int32_t s0 = half(_mm256_castsi256_si128(s4)), s1 = half(_mm256_extracti128_si256(s4, 1));
    if constexpr (Halves) {
      corr[2 * b] = -128 * s0;
      corr[2 * b + 1] = -128 * s1;
    } else {
      corr[b] = -128 * (s0 + s1);
    }
    if (dw) dw[b] = _cvtsh_ss(row[b].d);
  }
}

// q4_0 blocks as q8_0 blocks of the same values: element j < 16 is the low nibble of byte
// j minus 8, element j ≥ 16 the high nibble of byte j − 16 minus 8; the scale is kept.
__attribute__((target("avx2"))) void unpack_q4(const BlockQ4_0* in, std::size_t nb, BlockQ8_0* out) {
  const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (std::size_t b = 0; b < nb; ++b) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in[b].qs));
    out[b].d = in[b].d;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs), _mm_sub_epi8(_mm_and_si128(q, low), eight));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs + 16),
                     _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low), eight));
  }
}

// A q4_K or q5_K row's sub-blocks as q8_0 blocks of their levels (0..15, 0..31), with
// each sub-block's scale d·sc in dw and offset dmin·m in offs (the blocks' own f16 scale
// is not used).
template <bool Q5>
__attribute__((target("avx2,f16c"))) void unpack_k(const void* in, std::size_t nsb, BlockQ8_0* out, float* dw,
                                                   float* offs) {
  using Block = std::conditional_t<Q5, BlockQ5_K, BlockQ4_K>;
  const auto* w = static_cast<const Block*>(in);
  for (std::size_t s = 0; s < nsb; ++s, out += 8, dw += 8, offs += 8) {
    std::uint8_t sc[8], m[8];
    unpack_k_scales(w[s].scales, sc, m);
    const float d = _cvtsh_ss(w[s].d), dmin = _cvtsh_ss(w[s].dmin);
    for (int c = 0; c < 4; ++c) {
      __m256i q0, q1;
      k_levels_avx2(w[s], c, q0, q1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[2 * c].qs), q0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[2 * c + 1].qs), q1);
      out[2 * c].d = out[2 * c + 1].d = 0;
    }
    for (int j = 0; j < 8; ++j) dw[j] = d * sc[j], offs[j] = dmin * m[j];
  }
}

// A q6_K, q3_K or q2_K row's groups of 32 as q8_0 blocks of their values q − 32, q − 4
// or q, with the scales d·sc (q3_K: d·(sc − 32)) of each block's two halves of 16 in dw
// (two a block; the blocks' own scale is not used), and q2_K's offsets dmin·m in offs.
template <typename Block>
__attribute__((target("avx2,f16c"))) void unpack_k16(const Block* w, std::size_t nsb, BlockQ8_0* out, float* dw,
                                                     float* offs) {
  constexpr bool q6 = std::is_same_v<Block, BlockQ6_K>, q2 = std::is_same_v<Block, BlockQ2_K>;
  const __m256i mid = _mm256_set1_epi8(q6 ? 32 : q2 ? 0 : 4);
  for (std::size_t s = 0; s < nsb; ++s, out += 8, dw += 16, offs += q2 ? 16 : 0) {
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      if constexpr (q6) q6_levels_avx2(w[s], h, q);
      else q23_levels_avx2(w[s], h, q);
      for (int g = 0; g < 4; ++g) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[4 * h + g].qs), _mm256_sub_epi8(q[g], mid));
        out[4 * h + g].d = 0;
      }
    }
    const float d = _cvtsh_ss(w[s].d);
    if constexpr (q6) {
      for (int j = 0; j < 16; ++j) dw[j] = d * static_cast<float>(w[s].scales[j]);
    } else if constexpr (q2) {
      const float dmin = _cvtsh_ss(w[s].dmin);
      for (int j = 0; j < 16; ++j) dw[j] = d * static_cast<float>(w[s].scales[j] & 15), offs[j] = dmin * static_cast<float>(w[s].scales[j] >> 4);
    } else {
      std::uint64_t sc[2];
      unpack_q3_scales(w[s].scales, sc[0], sc[1]);
      for (int j = 0; j < 16; ++j) dw[j] = d * static_cast<float>(static_cast<int>((sc[j / 8] >> (8 * (j % 8))) & 63) - 32);
    }
  }
}

// iq4_nl blocks as q8_0 blocks of their table values (the scale kept); iq4_xs super-blocks
// as 8 q8_0 blocks with the sub-blocks' scales d·(ls − 32) in dw (the blocks' own scale is
// not used).
__attribute__((target("avx2,f16c"))) void unpack_iq4_nl(const BlockIq4Nl* in, std::size_t nb, BlockQ8_0* out) {
  for (std::size_t b = 0; b < nb; ++b) {
    out[b].d = in[b].d;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), iq4_values_avx2(in[b].qs));
  }
}
__attribute__((target("avx2,f16c"))) void unpack_iq4_xs(const BlockIq4Xs* in, std::size_t nsb, BlockQ8_0* out, float* dw) {
  for (std::size_t s = 0; s < nsb; ++s, out += 8, dw += 8) {
    const float d = _cvtsh_ss(in[s].d);
    for (int j = 0; j < 8; ++j) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[j].qs), iq4_values_avx2(in[s].qs + 16 * j));
      out[j].d = 0;
      dw[j] = d * static_cast<float>(iq4_xs_scale(in[s], j) - 32);
    }
  }
}

}  // namespace

void pack_keys(float* Kt, const float* K, std::size_t c, std::size_t hd) {
  std::fill_n(Kt, hd * kAttnKeys, 0.0f);
  for (std::size_t j = 0; j < c; ++j)
    for (std::size_t d = 0; d < hd; ++d) Kt[d * kAttnKeys + j] = K[j * hd + d];
}

void attn_scores_f32(float* S, std::size_t lds, const float* Q, std::size_t r, const float* Kt, std::size_t c,
                     std::size_t hd) {
  for (std::size_t t = 0; t < r; t += kTokens)
    kMicroF32[std::min(kTokens, r - t)](Kt, hd, Q + t * hd, hd, S + t * lds, lds, false, static_cast<std::int64_t>(c));
}

void attn_values_f32(float* O, std::size_t ldo, std::size_t w, const float* P, std::size_t ldp, std::size_t r,
                     const float* Vp, std::size_t c, bool accumulate) {
  for (std::size_t t = 0; t < r; t += kTokens)
    kMicroF32[std::min(kTokens, r - t)](Vp, c, P + t * ldp, ldp, O + t * ldo, ldo, accumulate, static_cast<std::int64_t>(w));
}

bool gemm_f32_available() { return cpu::avx512(); }
bool gemm_q8_available() { return cpu::avx512_vnni(); }
bool gemm_q8_takes(DType t) {
  return gemm_q8_available() && (t == DType::q8_0 || t == DType::q4_0 || is_k_quant(t) || is_iq4(t));
}

void gemm_f32(float* out, std::size_t ld, const Weight& w, const float* x, std::int64_t n, std::int64_t lo,
              std::int64_t hi, GemmScratch& s) {
  const auto cols = static_cast<std::size_t>(w.cols);
  // k-quant rows convert whole super-blocks: panels of 256 columns (32 KB) for them.
  const std::size_t step = std::max(kPanelCols, dtype_info(w.dtype).block);
  s.panel.resize(step * kPanelRows);
  for (std::int64_t r0 = lo; r0 < hi; r0 += static_cast<std::int64_t>(kPanelRows)) {
    const std::int64_t nr = std::min<std::int64_t>(static_cast<std::int64_t>(kPanelRows), hi - r0);
    for (std::size_t k0 = 0; k0 < cols; k0 += step) {
      const std::size_t kc = std::min(step, cols - k0);
      pack_panel(s.panel.data(), w, r0, nr, k0, kc, s.row);
      for (std::int64_t t = 0; t < n; t += static_cast<std::int64_t>(kTokens)) {
        const auto nt = static_cast<int>(std::min<std::int64_t>(static_cast<std::int64_t>(kTokens), n - t));
        kMicroF32[nt](s.panel.data(), kc, x + static_cast<std::size_t>(t) * cols + k0, cols,
                      out + static_cast<std::size_t>(t) * ld + static_cast<std::size_t>(r0 - lo), ld, k0 > 0, nr);
      }
    }
  }
}

namespace {
__attribute__((target("avx512f"))) inline __m512 abs_ps(__m512 v) {
  return _mm512_castsi512_ps(_mm512_andnot_si512(_mm512_set1_epi32(static_cast<int>(0x80000000u)), _mm512_castps_si512(v)));
}

// One token's blocks (AVX-512): the same values as quantize_activation's lround(x / d),
// rounded half away from zero, plus 128.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize_token(const float* row, std::size_t nb,
                                                                       std::uint8_t* q, float* d, float* s, float* s16,
                                                                       std::size_t lane) {
  // (Sign and magnitude through integer ops: AVX-512F has no float and/or without DQ.)
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i one = _mm512_castps_si512(_mm512_set1_ps(1.0f));
  const __m512 half = _mm512_set1_ps(0.5f);
  for (std::size_t b = 0; b < nb; ++b) {
    const __m512 x0 = _mm512_loadu_ps(row + b * 32), x1 = _mm512_loadu_ps(row + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(abs_ps(x0), abs_ps(x1)));
    const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
    d[b * 16 + lane] = db;
    alignas(64) std::int32_t v[32];
    for (int h = 0; h < 2; ++h) {
      const __m512 y = _mm512_mul_ps(h ? x1 : x0, _mm512_set1_ps(id));
      // round half away from zero: trunc, plus one away from zero where |frac| >= 0.5
      const __m512 t = _mm512_roundscale_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __mmask16 up = _mm512_cmp_ps_mask(abs_ps(_mm512_sub_ps(y, t)), half, _CMP_GE_OQ);
      const __m512 away = _mm512_castsi512_ps(_mm512_or_si512(one, _mm512_and_si512(sign, _mm512_castps_si512(y))));
      const __m512 r = _mm512_mask_add_ps(t, up, t, away);
      _mm512_store_si512(v + 16 * h, _mm512_cvttps_epi32(r));
    }
    int part[2] = {0, 0};
    for (std::size_t j = 0; j < 32; ++j) {
      const std::size_t c = b * 32 + j;
      q[(c / 4) * 64 + lane * 4 + c % 4] = static_cast<std::uint8_t>(v[j] + 128);
      part[j / 16] += v[j];
    }
    s[b * 16 + lane] = db * static_cast<float>(part[0] + part[1]);
    s16[b * 32 + lane] = db * static_cast<float>(part[0]);
    s16[b * 32 + 16 + lane] = db * static_cast<float>(part[1]);
  }
}
}  // namespace

void quantize_batch(QuantizedBatch& xq, const float* x, std::int64_t cols, std::int64_t t_lo, std::int64_t t_hi) {
  const auto C = static_cast<std::size_t>(cols);
  const std::size_t nb = C / 32;
  for (auto t = static_cast<std::size_t>(t_lo); t < static_cast<std::size_t>(t_hi); ++t) {
    const std::size_t g = t / 16, lane = t % 16;
    quantize_token(x + t * C, nb, xq.q.data() + g * C * 16, xq.d.data() + g * nb * 16, xq.s.data() + g * nb * 16,
                   xq.s16.data() + g * nb * 32, lane);
  }
}

void prepare_batch(QuantizedBatch& xq, std::int64_t n, std::int64_t cols) {
  xq.n = static_cast<std::size_t>(n);
  xq.cols = static_cast<std::size_t>(cols);
  xq.blocks = xq.cols / 32;
  xq.groups = (xq.n + 15) / 16;
  // Tokens past n in the last group: the value 0 (byte 128) and a zero scale.
  xq.q.assign(xq.groups * xq.cols * 16, 128);
  xq.d.assign(xq.groups * xq.blocks * 16, 0.0f);
  xq.s.assign(xq.groups * xq.blocks * 16, 0.0f);
  xq.s16.assign(xq.groups * xq.blocks * 32, 0.0f);
}

void gemm_q8(float* out, std::size_t ld, const Weight& w, const QuantizedBatch& xq, std::int64_t lo, std::int64_t hi,
             GemmScratch& s) {
  const std::size_t nb = static_cast<std::size_t>(w.cols) / 32;
  const bool q4 = w.dtype == DType::q4_0, kq = w.dtype == DType::q4_K || w.dtype == DType::q5_K,
             q6 = w.dtype == DType::q6_K || w.dtype == DType::q3_K, q2 = w.dtype == DType::q2_K,
             iq = is_iq4(w.dtype);
  const RowKind kind = kq ? RowKind::offsets : q6 ? RowKind::halves : q2 ? RowKind::offset_halves : RowKind::plain;
  const std::size_t sub = q6 || q2 ? 2 : 1;  // scales a block
  s.corr.resize(4 * nb * sub);
  s.dw.resize(4 * nb * sub);
  if (q4 || kq || q6 || q2 || iq) s.unpacked.resize(4 * nb);
  if (kq || q2) s.offs.resize(4 * nb * sub);
  // Groups of tokens per pass over the rows: their activations (cols · 16 bytes a group)
  // stay in L2 while the rows stream by.
  const std::size_t chunk = std::max<std::size_t>(2, (std::size_t{512} << 10) / (xq.cols * 16) / 2 * 2);
  for (std::size_t g0 = 0; g0 < xq.groups; g0 += chunk) {
    const std::size_t g1 = std::min(xq.groups, g0 + chunk);
    for (std::int64_t r0 = lo; r0 < hi; r0 += 4) {
      const int R = static_cast<int>(std::min<std::int64_t>(4, hi - r0));
      const BlockQ8_0* rows[4];
      for (int r = 0; r < R; ++r) {
        const std::byte* row = w.data + static_cast<std::size_t>(r0 + r) * w.row_bytes;
        BlockQ8_0* u = s.unpacked.data() + static_cast<std::size_t>(r) * nb;
        float* dw = s.dw.data() + static_cast<std::size_t>(r) * nb * sub;
        std::int32_t* corr = s.corr.data() + static_cast<std::size_t>(r) * nb * sub;
        if (q4) unpack_q4(reinterpret_cast<const BlockQ4_0*>(row), nb, u);
        if (w.dtype == DType::iq4_nl) unpack_iq4_nl(reinterpret_cast<const BlockIq4Nl*>(row), nb, u);
        rows[r] = q4 || kq || q6 || q2 || iq ? u : reinterpret_cast<const BlockQ8_0*>(row);
        float* offs = s.offs.data() + static_cast<std::size_t>(r) * nb * sub;
        if (q6 || q2) {
          if (w.dtype == DType::q3_K) unpack_k16(reinterpret_cast<const BlockQ3_K*>(row), nb / 8, u, dw, offs);
          else if (q2) unpack_k16(reinterpret_cast<const BlockQ2_K*>(row), nb / 8, u, dw, offs);
          else unpack_k16(reinterpret_cast<const BlockQ6_K*>(row), nb / 8, u, dw, offs);
          row_sums<true>(u, nb, corr, nullptr);
        } else if (w.dtype == DType::iq4_xs) {
          unpack_iq4_xs(reinterpret_cast<const BlockIq4Xs*>(row), nb / 8, u, dw);
          row_sums(u, nb, corr, nullptr);
        } else if (kq) {
          if (w.dtype == DType::q5_K) unpack_k<true>(row, nb / 8, u, dw, offs);
          else unpack_k<false>(row, nb / 8, u, dw, offs);
          row_sums(rows[r], nb, corr, nullptr);
        } else {
          row_sums(rows[r], nb, corr, dw);
        }
      }
      float* o = out + static_cast<std::size_t>(r0 - lo);
      switch (R) {
        case 4: tiles_q8_any<4>(kind, rows, s.corr.data(), s.dw.data(), s.offs.data(), nb, xq, g0, g1, o, ld); break;
        case 3: tiles_q8_any<3>(kind, rows, s.corr.data(), s.dw.data(), s.offs.data(), nb, xq, g0, g1, o, ld); break;
        case 2: tiles_q8_any<2>(kind, rows, s.corr.data(), s.dw.data(), s.offs.data(), nb, xq, g0, g1, o, ld); break;
        default: tiles_q8_any<1>(kind, rows, s.corr.data(), s.dw.data(), s.offs.data(), nb, xq, g0, g1, o, ld); break;
      }
    }
  }
}

}  // namespace lmp::model
