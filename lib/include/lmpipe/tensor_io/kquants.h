// GGML's k-quant block formats (llama.cpp's Q2_K, Q3_K, Q4_K, Q5_K and Q6_K, the types of
// its Q2_K, Q3_K_M, Q4_K_M, Q5_K_M and Q6_K files): super-blocks of 256 numbers whose
// sub-blocks carry their own small integer scales, themselves scaled by the super-block's
// f16 factors.
//
//   q4_K, 144 bytes: d, dmin (f16), 12 bytes of 6-bit scales sc_j and mins m_j of 8
//         sub-blocks of 32, 128 bytes of nibbles. x = d·sc_j·q − dmin·m_j, q in 0..15.
//         Byte 32k + l of qs holds number 64k + l (sub-block 2k) in its low nibble and
//         64k + 32 + l (sub-block 2k + 1) in its high one. Scales, s = the 12 bytes:
//         j < 4: sc_j = s[j] & 63, m_j = s[j + 4] & 63;
//         j ≥ 4: sc_j = (s[j + 4] & 15) | (s[j − 4] >> 6) << 4, m_j = (s[j + 4] >> 4) | (s[j] >> 6) << 4.
//   q5_K, 176 bytes: d, dmin, the 12 scale bytes of q4_K, qh (32 bytes), qs (128 bytes):
//         q = nibble as q4_K + 16 · bit j of qh[l] for number l of sub-block j; q in 0..31.
//   q6_K, 210 bytes: ql (128 bytes), qh (64), 16 int8 scales, d (f16); 16 sub-blocks of 16,
//         x = d·sc_j·(q − 32), q in 0..63. Half h (numbers 128h …) reads ql + 64h, qh + 32h,
//         scales + 8h; its number 32g + l (g = 0..3, l = 0..31) takes its low 4 bits from
//         ql[l + 32·(g & 1)] (the low nibble for g < 2, the high one for g ≥ 2), its high 2
//         bits from qh[l] >> 2g, and scale sc[2g + l / 16].
//   q2_K, 84 bytes: 16 scale bytes (sc_j in the low nibble, m_j in the high one), qs (64
//         bytes), d, dmin (f16); 16 sub-blocks of 16, x = d·sc_j·q − dmin·m_j, q in 0..3.
//         Half h reads qs + 32h: its number 32g + l takes bits 2g and 2g + 1 of qs[32h + l]
//         and sub-block j = 8h + 2g + l / 16 (q6_K's order of groups and scales).
//   q3_K, 110 bytes: hmask (32 bytes), qs (64), 12 bytes of 6-bit scales, d (f16); 16
//         sub-blocks of 16, x = d·(sc_j − 32)·(q − 4), q in 0..7: number 128h + 32g + l
//         takes its low 2 bits as q2_K does and its third from bit 4h + g of hmask[l].
//         Scale j's low 4 bits are s[j] & 15 for j < 8 and s[j − 8] >> 4 for j ≥ 8, its
//         high 2 bits (s[8 + j % 4] >> 2·(j / 4)) & 3.
// Rows must hold a multiple of 256 numbers (tensor_bytes refuses others).
//
// And its non-linear 4-bit types (llama.cpp's IQ4_NL and IQ4_XS), whose 16 levels are the
// values of a fixed table (kIq4Levels, from −127 to 113) times a scale:
//   iq4_nl, 18 bytes: d (f16), 16 bytes of nibbles as q4_0's (byte j: number j low, j + 16
//         high); blocks of 32, x = d·T[q].
//   iq4_xs, 136 bytes: d (f16), scales_h (u16), scales_l (4 bytes), qs (128 bytes); 8
//         sub-blocks of 32, x = d·(ls_j − 32)·T[q], ls_j = (scales_l[j / 2] >> 4·(j % 2)) & 15
//         | ((scales_h >> 2j) & 3) << 4; sub-block j's nibbles at qs + 16j, as iq4_nl's.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace lmp {

inline constexpr std::size_t kQK_K = 256;

struct BlockQ4_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[128];
};
struct BlockQ5_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[32];
  std::uint8_t qs[128];
};
struct BlockQ6_K {
  std::uint8_t ql[128];
  std::uint8_t qh[64];
  std::int8_t scales[16];
  std::uint16_t d;
};
struct BlockQ2_K {
  std::uint8_t scales[16];
  std::uint8_t qs[64];
  std::uint16_t d, dmin;
};
struct BlockQ3_K {
  std::uint8_t hmask[32];
  std::uint8_t qs[64];
  std::uint8_t scales[12];
  std::uint16_t d;
};
struct BlockIq4Nl {
  std::uint16_t d;
  std::uint8_t qs[16];
};
struct BlockIq4Xs {
  std::uint16_t d;
  std::uint16_t scales_h;
  std::uint8_t scales_l[4];
  std::uint8_t qs[128];
};
static_assert(sizeof(BlockIq4Nl) == 18 && sizeof(BlockIq4Xs) == 136, "GGML iq4 layouts");
alignas(16) inline constexpr std::int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                           1,    13,   25,  38,  53,  69,  89,  113};
// The same plus 128, unsigned: the int8 multiply-add's unsigned operand.
alignas(16) inline constexpr std::uint8_t kIq4LevelsU[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
// The 6-bit scale ls_j (0..63; the factor is ls_j − 32) of sub-block j of an iq4_xs block.
inline int iq4_xs_scale(const BlockIq4Xs& b, int j) {
  return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 15) | ((b.scales_h >> (2 * j)) & 3) << 4;
}

static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 &&
                  sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110,
              "GGML k-quant layouts");

// The 8 (scale, min) pairs of a q4_K or q5_K super-block.
inline void unpack_k_scales(const std::uint8_t s[12], std::uint8_t sc[8], std::uint8_t m[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    m[j] = s[j + 4] & 63;
    sc[j + 4] = static_cast<std::uint8_t>((s[j + 8] & 15) | ((s[j] >> 6) << 4));
    m[j + 4] = static_cast<std::uint8_t>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}

// The same, as two 64-bit words of 8 bytes each (sub-block j in byte j), worked out on
// three 32-bit words in registers: the kernels' form, which keeps the bytes out of memory.
inline void unpack_k_scales(const std::uint8_t s[12], std::uint64_t& sc, std::uint64_t& m) {
  std::uint32_t w0, w1, w2;
  __builtin_memcpy(&w0, s, 4);
  __builtin_memcpy(&w1, s + 4, 4);
  __builtin_memcpy(&w2, s + 8, 4);
  const std::uint32_t low6 = 0x3F3F3F3Fu, low4 = 0x0F0F0F0Fu, top2 = 0x03030303u;
  sc = (w0 & low6) | static_cast<std::uint64_t>((w2 & low4) | ((w0 >> 6) & top2) << 4) << 32;
  m = (w1 & low6) | static_cast<std::uint64_t>(((w2 >> 4) & low4) | ((w1 >> 6) & top2) << 4) << 32;
}

// The 16 6-bit scales sc_j (0..63; the format's factor is sc_j − 32) of a q3_K
// super-block, as two 64-bit words of 8 bytes (scale j in byte j % 8 of word j / 8),
// worked out on its three 32-bit words.
inline void unpack_q3_scales(const std::uint8_t s[12], std::uint64_t& lo, std::uint64_t& hi) {
  std::uint32_t w0, w1, w2;
  __builtin_memcpy(&w0, s, 4);
  __builtin_memcpy(&w1, s + 4, 4);
  __builtin_memcpy(&w2, s + 8, 4);
  const std::uint32_t low4 = 0x0F0F0F0Fu, top2 = 0x03030303u;
  const std::uint32_t a0 = (w0 & low4) | (w2 & top2) << 4, a1 = (w1 & low4) | ((w2 >> 2) & top2) << 4;
  const std::uint32_t a2 = ((w0 >> 4) & low4) | ((w2 >> 4) & top2) << 4, a3 = ((w1 >> 4) & low4) | ((w2 >> 6) & top2) << 4;
  lo = a0 | static_cast<std::uint64_t>(a1) << 32;
  hi = a2 | static_cast<std::uint64_t>(a3) << 32;
}

// The levels of a q4_K or q5_K super-block's sub-blocks 2c (lo) and 2c + 1 (hi), one byte
// a number (0..15, or 0..31 with q5_K's fifth bits), in 256-bit registers: the common
// first step of the conversion, the decode step's dot products and the int8 GEMM.
template <typename Block>
__attribute__((target("avx2"))) inline void k_levels_avx2(const Block& b, int c, __m256i& lo, __m256i& hi) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
  lo = _mm256_and_si256(bytes, low);
  hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
  if constexpr (std::is_same_v<Block, BlockQ5_K>) {
    // Bits 2c and 2c + 1 of each qh byte moved to bit 4 by shifts: first 4 to the left
    // for c < 2 (bits 0-3 to 4-7), then 2·(c & 1) and one more to the right. What the
    // 16-bit shifts carry over from the neighbouring byte never reaches bit 4.
    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh)), bit4 = _mm256_set1_epi8(16);
    const __m256i src = (c & 2) ? hb : _mm256_slli_epi16(hb, 4);
    const int r = 2 * (c & 1);
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_srli_epi16(src, r), bit4));
    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi16(src, r + 1), bit4));
  }
}

// The levels (0..63) of half h of a q6_K super-block, its groups g = 0..3 of 32 numbers,
// one byte a number, in 256-bit registers (the conversion's and the decode step's first step).
__attribute__((target("avx2"))) inline void q6_levels_avx2(const BlockQ6_K& b, int h, __m256i q[4]) {
  const __m256i low = _mm256_set1_epi8(0x0F), two_bits = _mm256_set1_epi8(0x30);
  const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
  const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
  // the high bit pairs moved to bits 4-5 of each byte (what spills over from the
  // neighbouring byte in the 16-bit shifts is masked away)
  q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low), _mm256_and_si256(_mm256_slli_epi16(qh, 4), two_bits));
  q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low), _mm256_and_si256(_mm256_slli_epi16(qh, 2), two_bits));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low), _mm256_and_si256(qh, two_bits));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low), _mm256_and_si256(_mm256_srli_epi16(qh, 2), two_bits));
}

// The levels of half h of a q2_K (0..3) or q3_K (0..7, the value q − 4) super-block, its
// groups g = 0..3 of 32 numbers, one byte a number, in 256-bit registers.
template <typename Block>
__attribute__((target("avx2"))) inline void q23_levels_avx2(const Block& b, int h, __m256i q[4]) {
  const __m256i three = _mm256_set1_epi8(3);
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h));
  q[0] = _mm256_and_si256(bytes, three);
  q[1] = _mm256_and_si256(_mm256_srli_epi16(bytes, 2), three);
  q[2] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), three);
  q[3] = _mm256_and_si256(_mm256_srli_epi16(bytes, 6), three);
  if constexpr (std::is_same_v<Block, BlockQ3_K>) {
    // bit 4h + g of each hmask byte moved to bit 2 (within the byte: nothing from the
    // neighbouring byte reaches bit 2 in these 16-bit shifts)
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask)), bit2 = _mm256_set1_epi8(4);
    for (int g = 0; g < 4; ++g) {
      const int k = 4 * h + g;
      const __m256i t = k >= 2 ? _mm256_srli_epi16(hm, k - 2) : _mm256_slli_epi16(hm, 2 - k);
      q[g] = _mm256_or_si256(q[g], _mm256_and_si256(t, bit2));
    }
  }
}

// The 32 nibbles of 16 bytes in q4_0's order (byte j: number j low, j + 16 high), one byte
// a number: q4_0, q4_1, q5_0, q5_1 and the iq4 types.
__attribute__((target("avx2"))) inline __m256i nibbles_avx2(const std::uint8_t* qs) {
  const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(bytes, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

// The 32 numbers of an iq4 block of 16 nibble bytes as the table's signed values, one
// byte a number.
__attribute__((target("avx2"))) inline __m256i iq4_values_avx2(const std::uint8_t* qs) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kIq4Levels)));
  return _mm256_shuffle_epi8(table, nibbles_avx2(qs));
}

// nb super-blocks → nb · 256 floats.
void q4_K_to_f32(const BlockQ4_K* b, float* y, std::size_t nb);
void q5_K_to_f32(const BlockQ5_K* b, float* y, std::size_t nb);
void q6_K_to_f32(const BlockQ6_K* b, float* y, std::size_t nb);
void q2_K_to_f32(const BlockQ2_K* b, float* y, std::size_t nb);
void q3_K_to_f32(const BlockQ3_K* b, float* y, std::size_t nb);
// The portable loops those take without AVX2: the same bits (the unit tests compare them).
void q4_K_to_f32_scalar(const BlockQ4_K* b, float* y, std::size_t nb);
void q5_K_to_f32_scalar(const BlockQ5_K* b, float* y, std::size_t nb);
void q6_K_to_f32_scalar(const BlockQ6_K* b, float* y, std::size_t nb);
void q2_K_to_f32_scalar(const BlockQ2_K* b, float* y, std::size_t nb);
void q3_K_to_f32_scalar(const BlockQ3_K* b, float* y, std::size_t nb);
// iq4_nl: nb blocks of 32; iq4_xs: nb super-blocks of 256.
void iq4_nl_to_f32(const BlockIq4Nl* b, float* y, std::size_t nb);
void iq4_xs_to_f32(const BlockIq4Xs* b, float* y, std::size_t nb);
void iq4_nl_to_f32_scalar(const BlockIq4Nl* b, float* y, std::size_t nb);
void iq4_xs_to_f32_scalar(const BlockIq4Xs* b, float* y, std::size_t nb);
// nb · 256 floats → nb super-blocks. Each sub-block's scale and offset fit its numbers'
// range (q2_K, q4_K, q5_K) or its largest magnitude (q3_K, q6_K), then a few nearby scales
// are tried, each refitted by least squares to the levels it chose, and the one with the
// least squared error is kept.
void quantize_q4_K(const float* x, BlockQ4_K* y, std::size_t nb);
void quantize_q5_K(const float* x, BlockQ5_K* y, std::size_t nb);
void quantize_q6_K(const float* x, BlockQ6_K* y, std::size_t nb);
void quantize_q2_K(const float* x, BlockQ2_K* y, std::size_t nb);
void quantize_q3_K(const float* x, BlockQ3_K* y, std::size_t nb);
// Each block's (iq4_nl) or sub-block's (iq4_xs) scale: the one mapping the number of
// largest magnitude to either end of the table, and nearby ones, each refitted by least
// squares to the levels it chose; least squared error. iq4_xs's 8 scales then as 6-bit
// integers under d.
void quantize_iq4_nl(const float* x, BlockIq4Nl* y, std::size_t nb);
void quantize_iq4_xs(const float* x, BlockIq4Xs* y, std::size_t nb);

}  // namespace lmp
