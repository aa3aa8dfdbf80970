#include "lmpipe/tensor_io/dtype.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <string>

#include "lmpipe/core/cpu.h"
#include "lmpipe/tensor_io/kquants.h"

namespace lmp {

namespace {
const DTypeInfo kInfo[] = {
    {"f32", 1, 4, true},    {"f16", 1, 2, true}, {"bf16", 1, 2, true}, {"q8_0", 32, 34, true},
    {"q4_0", 32, 18, true}, {"i32", 1, 4, false}, {"i8", 1, 1, false},  {"u8", 1, 1, false},
    {"i16", 1, 2, false},   {"i64", 1, 8, false}, {"f64", 1, 8, false}, {"q4_K", 256, 144, true},
    {"q5_K", 256, 176, true}, {"q6_K", 256, 210, true}, {"q2_K", 256, 84, true},  {"q3_K", 256, 110, true},
    {"iq4_nl", 32, 18, true}, {"iq4_xs", 256, 136, true}, {"q4_1", 32, 20, true}, {"q5_0", 32, 22, true},
    {"q5_1", 32, 24, true},
};

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float float_of(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}


__attribute__((target("avx2,f16c"))) void f16_to_f32_avx2(const std::uint16_t* s, float* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = f16_to_f32(s[i]);
}
__attribute__((target("avx2,f16c"))) void f32_to_f16_avx2(const float* s, std::uint16_t* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) d[i] = f32_to_f16(s[i]);
}
__attribute__((target("avx2,f16c"))) void q8_0_to_f32_avx2(const BlockQ8_0* b, float* d, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k) {
    __m256 scale = _mm256_set1_ps(_cvtsh_ss(b[k].d));
    for (int j = 0; j < 32; j += 8) {
      __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[k].qs + j));
      __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
      _mm256_storeu_ps(d + k * 32 + static_cast<std::size_t>(j), _mm256_mul_ps(x, scale));
    }
  }
}
__attribute__((target("avx2,f16c"))) void q4_0_to_f32_avx2(const BlockQ4_0* b, float* d, std::size_t nb) {
  const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (std::size_t k = 0; k < nb; ++k) {
    __m256 scale = _mm256_set1_ps(_cvtsh_ss(b[k].d));
    __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[k].qs));
    __m128i lo = _mm_sub_epi8(_mm_and_si128(q, low), eight);                      // elements 0..15
    __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low), eight);   // elements 16..31
    float* o = d + k * 32;
    _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), scale));
    _mm256_storeu_ps(o + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), scale));
    _mm256_storeu_ps(o + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), scale));
    _mm256_storeu_ps(o + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), scale));
  }
}

void quantize_q8_0(const float* x, BlockQ8_0* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = f32_to_f16(d);
    for (int j = 0; j < 32; ++j) y[k].qs[j] = static_cast<std::int8_t>(std::round(x[j] * id));
  }
}

void quantize_q4_0(const float* x, BlockQ4_0* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k, x += 32) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = f32_to_f16(d);
    for (int j = 0; j < 16; ++j) {
      // Truncation toward zero of a value in [0.5, 16.5], as the reference does.
      auto q0 = std::min(15, static_cast<int>(static_cast<std::int8_t>(x[j] * id + 8.5f)));
      auto q1 = std::min(15, static_cast<int>(static_cast<std::int8_t>(x[16 + j] * id + 8.5f)));
      y[k].qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
    }
  }
}

// q4_1 and q5_1: d = (max − min) / (2^bits − 1), m = min, q = trunc((x − min) / d + 0.5)
// (the reference's rounding); q5_0 as q4_0 with 16 levels a side.
template <int Bits, typename Block>
void quantize_affine_32(const float* x, Block* y, std::size_t nb) {
  constexpr int Q = (1 << Bits) - 1;
  for (std::size_t k = 0; k < nb; ++k, x += 32) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
    const float d = (hi - lo) / static_cast<float>(Q);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = f32_to_f16(d);
    y[k].m = f32_to_f16(lo);
    std::uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(Q, static_cast<int>((x[j] - lo) * id + 0.5f));
      const int q1 = std::min(Q, static_cast<int>((x[16 + j] - lo) * id + 0.5f));
      y[k].qs[j] = static_cast<std::uint8_t>((q0 & 15) | (q1 & 15) << 4);
      qh |= static_cast<std::uint32_t>(q0 >> 4) << j | static_cast<std::uint32_t>(q1 >> 4) << (j + 16);
    }
    if constexpr (Bits == 5) std::memcpy(y[k].qh, &qh, 4);
  }
}
void quantize_q4_1(const float* x, BlockQ4_1* y, std::size_t nb) { quantize_affine_32<4>(x, y, nb); }
void quantize_q5_1(const float* x, BlockQ5_1* y, std::size_t nb) { quantize_affine_32<5>(x, y, nb); }

void quantize_q5_0(const float* x, BlockQ5_0* y, std::size_t nb) {
  for (std::size_t k = 0; k < nb; ++k, x += 32) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = f32_to_f16(d);
    std::uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      // Truncation toward zero of a value in [0.5, 32.5], as the reference does.
      const int q0 = std::min(31, static_cast<int>(static_cast<std::int8_t>(x[j] * id + 16.5f)));
      const int q1 = std::min(31, static_cast<int>(static_cast<std::int8_t>(x[16 + j] * id + 16.5f)));
      y[k].qs[j] = static_cast<std::uint8_t>((q0 & 15) | (q1 & 15) << 4);
      qh |= static_cast<std::uint32_t>(q0 >> 4) << j | static_cast<std::uint32_t>(q1 >> 4) << (j + 16);
    }
    std::memcpy(y[k].qh, &qh, 4);
  }
}
}  // namespace

const DTypeInfo& dtype_info(DType t) { return kInfo[static_cast<std::size_t>(t)]; }

std::optional<DType> parse_dtype(std::string_view name) {
  std::string low(name);
  for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::size_t i = 0; i < std::size(kInfo); ++i) {
    std::string known(kInfo[i].name);
    for (char& c : known) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (known == low) return static_cast<DType>(i);
  }
  return std::nullopt;
}

const std::vector<std::string>& weight_dtype_names() {
  static const std::vector<std::string> names{"f32",  "f16",  "bf16", "q8_0", "q4_0", "q4_1",   "q5_0",
                                                "q5_1", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs"};
  return names;
}
const std::string& weight_dtype_list() {
  static const std::string list = [] {
    std::string s;
    for (const auto& n : weight_dtype_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }();
  return list;
}

std::optional<std::uint64_t> tensor_bytes(DType t, std::uint64_t count, std::uint64_t row) {
  const DTypeInfo& d = dtype_info(t);
  if (row % d.block != 0) return std::nullopt;
  std::uint64_t blocks = count / d.block;
  if (blocks > std::numeric_limits<std::uint64_t>::max() / d.block_bytes) return std::nullopt;
  return blocks * d.block_bytes;
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: man × 2^-24
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return float_of(sign | 0x7F800000u | (man << 13));  // inf, nan
  return float_of(sign | ((exp + 112) << 23) | (man << 13));
}

std::uint16_t f32_to_f16(float f) {
  std::uint32_t x = bits_of(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u)  // inf, or nan kept quiet with its top payload bits
    return static_cast<std::uint16_t>(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u | ((ax >> 13) & 0x3FFu) : 0u));
  if (ax >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to 65520 or more: inf
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal (or zero), rounded to a multiple of 2^-24
    auto q = static_cast<std::uint32_t>(std::nearbyint(float_of(ax) * 16777216.0f));
    return static_cast<std::uint16_t>(sign | q);
  }
  // Re-bias the exponent (127 → 15) and round the 13 dropped bits to nearest even.
  ax += 0xC8000FFFu + ((ax >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (ax >> 13));
}

std::uint16_t f32_to_bf16(float f) {
  std::uint32_t x = bits_of(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet nan
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

void to_f32(DType t, const void* src, float* dst, std::size_t n) {
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::f16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      if (cpu::avx2()) return f16_to_f32_avx2(s, dst, n);
      for (std::size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::bf16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);  // vectorized by the compiler
      return;
    }
    case DType::q8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      if (cpu::avx2()) return q8_0_to_f32_avx2(b, dst, n / 32);
      for (std::size_t k = 0; k < n / 32; ++k) {
        float d = f16_to_f32(b[k].d);
        for (int j = 0; j < 32; ++j) dst[k * 32 + static_cast<std::size_t>(j)] = static_cast<float>(b[k].qs[j]) * d;
      }
      return;
    }
    case DType::q4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      if (cpu::avx2()) return q4_0_to_f32_avx2(b, dst, n / 32);
      for (std::size_t k = 0; k < n / 32; ++k) {
        float d = f16_to_f32(b[k].d);
        for (std::size_t j = 0; j < 16; ++j) {
          dst[k * 32 + j] = static_cast<float>((b[k].qs[j] & 0x0F) - 8) * d;
          dst[k * 32 + j + 16] = static_cast<float>((b[k].qs[j] >> 4) - 8) * d;
        }
      }
      return;
    }
    case DType::q4_K: return q4_K_to_f32(static_cast<const BlockQ4_K*>(src), dst, n / kQK_K);
    case DType::q5_K: return q5_K_to_f32(static_cast<const BlockQ5_K*>(src), dst, n / kQK_K);
    case DType::q6_K: return q6_K_to_f32(static_cast<const BlockQ6_K*>(src), dst, n / kQK_K);
    case DType::q2_K: return q2_K_to_f32(static_cast<const BlockQ2_K*>(src), dst, n / kQK_K);
    case DType::q3_K: return q3_K_to_f32(static_cast<const BlockQ3_K*>(src), dst, n / kQK_K);
    case DType::iq4_nl: return iq4_nl_to_f32(static_cast<const BlockIq4Nl*>(src), dst, n / 32);
    case DType::q4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(src);
      for (std::size_t k = 0; k < n / 32; ++k) {
        const float d = f16_to_f32(b[k].d), m = f16_to_f32(b[k].m);
        for (std::size_t j = 0; j < 16; ++j) {
          dst[k * 32 + j] = static_cast<float>(b[k].qs[j] & 0x0F) * d + m;
          dst[k * 32 + j + 16] = static_cast<float>(b[k].qs[j] >> 4) * d + m;
        }
      }
      return;
    }
    case DType::q5_0:
    case DType::q5_1: {
      // (the two differ only in m and its place: q5_0 has none and subtracts 16)
      const bool one = t == DType::q5_1;
      const std::size_t bytes = one ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0);
      for (std::size_t k = 0; k < n / 32; ++k) {
        const auto* p = static_cast<const std::uint8_t*>(src) + k * bytes;
        std::uint16_t dh, mh = 0;
        std::uint32_t qh;
        std::memcpy(&dh, p, 2);
        if (one) std::memcpy(&mh, p + 2, 2);
        const std::uint8_t* q = p + (one ? 4 : 2);
        std::memcpy(&qh, q, 4);
        const float d = f16_to_f32(dh), m = f16_to_f32(mh);
        for (std::size_t j = 0; j < 16; ++j) {
          const int q0 = (q[4 + j] & 0x0F) | static_cast<int>((qh >> j) & 1) << 4;
          const int q1 = (q[4 + j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4;
          if (one) {
            dst[k * 32 + j] = static_cast<float>(q0) * d + m;
            dst[k * 32 + j + 16] = static_cast<float>(q1) * d + m;
          } else {
            dst[k * 32 + j] = static_cast<float>(q0 - 16) * d;
            dst[k * 32 + j + 16] = static_cast<float>(q1 - 16) * d;
          }
        }
      }
      return;
    }
    case DType::iq4_xs: return iq4_xs_to_f32(static_cast<const BlockIq4Xs*>(src), dst, n / kQK_K);
    case DType::i32: {
      const auto* s = static_cast<const std::int32_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::i8: {
      const auto* s = static_cast<const std::int8_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::u8: {
      const auto* s = static_cast<const std::uint8_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::i16: {
      const auto* s = static_cast<const std::int16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::i64: {
      const auto* s = static_cast<const std::int64_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::f64: {
      const auto* s = static_cast<const double*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
  }
}

void from_f32(DType t, const float* src, void* dst, std::size_t n) {
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::f16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      if (cpu::avx2()) return f32_to_f16_avx2(src, d, n);
      for (std::size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::bf16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::q8_0:
      return quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), n / 32);
    case DType::q4_0:
      return quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), n / 32);
    case DType::q4_K: return quantize_q4_K(src, static_cast<BlockQ4_K*>(dst), n / kQK_K);
    case DType::q5_K: return quantize_q5_K(src, static_cast<BlockQ5_K*>(dst), n / kQK_K);
    case DType::q6_K: return quantize_q6_K(src, static_cast<BlockQ6_K*>(dst), n / kQK_K);
    case DType::q2_K: return quantize_q2_K(src, static_cast<BlockQ2_K*>(dst), n / kQK_K);
    case DType::q3_K: return quantize_q3_K(src, static_cast<BlockQ3_K*>(dst), n / kQK_K);
    case DType::iq4_nl: return quantize_iq4_nl(src, static_cast<BlockIq4Nl*>(dst), n / 32);
    case DType::q4_1: return quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), n / 32);
    case DType::q5_0: return quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), n / 32);
    case DType::q5_1: return quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), n / 32);
    case DType::iq4_xs: return quantize_iq4_xs(src, static_cast<BlockIq4Xs*>(dst), n / kQK_K);
    case DType::i32:
    case DType::i8:
    case DType::u8:
    case DType::i16:
    case DType::i64:
    case DType::f64:
      std::abort();  // callers convert only to float types (see from_f32's contract)
  }
}

}  // namespace lmp
