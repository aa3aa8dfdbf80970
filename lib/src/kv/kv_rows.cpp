#include "lmpipe/kv/kv_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lmpipe/core/cpu.h"
#include "lmpipe/tensor_io/dtype.h"

namespace lmp::kv {

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::f32: return "f32";
    case KvType::f16: return "f16";
    case KvType::int8: return "int8";
    case KvType::int4: return "int4";
    case KvType::int4_kivi: return "int4-kivi";
  }
  return "?";
}

Result<KvType> parse_kv_type(std::string_view s) {
  if (s == "f32") return KvType::f32;
  if (s == "f16") return KvType::f16;
  if (s == "int8" || s == "q8_0") return KvType::int8;
  if (s == "int4" || s == "q4_0") return KvType::int4;
  if (s == "int4-kivi") return KvType::int4_kivi;
  return make_error(Errc::invalid_argument, "unknown KV storage type '{}' (f32, f16, int8, int4, int4-kivi)", s);
}

RowFormat RowFormat::make(KvType t, int kv_dim, int head_dim) {
  if (t == KvType::int4_kivi) t = KvType::int4;
  RowFormat f;
  f.type = t;
  f.kv_dim = kv_dim;
  if (head_dim <= 0) head_dim = kv_dim;
  f.group = head_dim % 32 == 0 ? 32 : head_dim;
  const auto n = static_cast<std::size_t>(kv_dim);
  switch (t) {
    case KvType::f32: f.bytes = 4 * n; break;
    case KvType::f16: f.bytes = 2 * n; break;
    case KvType::int8:
      f.scales = 2 * (n / static_cast<std::size_t>(f.group));
      f.bytes = f.scales + n;
      break;
    case KvType::int4:
    case KvType::int4_kivi:
      f.scales = 2 * (n / static_cast<std::size_t>(f.group));
      f.bytes = f.scales + n / 2;
      break;
  }
  return f;
}

RowFormat RowFormat::unscaled_int4(int kv_dim, int head_dim) {
  RowFormat f = make(KvType::int4, kv_dim, head_dim);
  f.scales = 0;
  f.bytes = static_cast<std::size_t>(kv_dim) / 2;
  f.unscaled = true;
  return f;
}

namespace {


float scale_at(const std::byte* row, int g) {
  std::uint16_t h;
  std::memcpy(&h, row + 2 * static_cast<std::size_t>(g), 2);
  return f16_to_f32(h);
}

// ---- scalar reference ------------------------------------------------------------------

// The number i of a row (i within the row).
float number_at(const RowFormat& f, const std::byte* row, int i) {
  switch (f.type) {
    case KvType::f32: {
      float x;
      std::memcpy(&x, row + 4 * static_cast<std::size_t>(i), 4);
      return x;
    }
    case KvType::f16: {
      std::uint16_t h;
      std::memcpy(&h, row + 2 * static_cast<std::size_t>(i), 2);
      return f16_to_f32(h);
    }
    case KvType::int8:
      return scale_at(row, i / f.group) * static_cast<float>(static_cast<std::int8_t>(row[f.scales + static_cast<std::size_t>(i)]));
    case KvType::int4:
    case KvType::int4_kivi: {
      const int g = i / f.group, j = i % f.group, half = f.group / 2;
      const auto b = static_cast<unsigned>(row[f.scales + static_cast<std::size_t>(g * half + (j % half))]);
      const int q = static_cast<int>(j < half ? (b & 0x0F) : (b >> 4)) - 8;
      return (f.unscaled ? 1.0f : scale_at(row, g)) * static_cast<float>(q);
    }
  }
  return 0;
}

void scores_scalar(const RowFormat& f, float* att, const float* q, const std::byte* rows, int n, int off, int hd,
                   float scale) {
  for (int j = 0; j < n; ++j) {
    const std::byte* r = rows + static_cast<std::size_t>(j) * f.bytes;
    float s = 0;
    for (int i = 0; i < hd; ++i) s += q[i] * number_at(f, r, off + i);
    att[j] = s * scale;
  }
}

void accumulate_scalar(const RowFormat& f, float* out, const float* att, const std::byte* rows, int n, int off, int hd) {
  for (int j = 0; j < n; ++j) {
    const std::byte* r = rows + static_cast<std::size_t>(j) * f.bytes;
    for (int i = 0; i < hd; ++i) out[i] += att[j] * number_at(f, r, off + i);
  }
}

// ---- AVX2 ------------------------------------------------------------------------------
// Templates on the storage type. Scores: four rows at a time, each row's products summed
// in a register (per group, then times the group's scale), the four reduced together.
// Accumulate: the output slice (up to 64 numbers) stays in registers over all rows.

__attribute__((target("avx2,fma,f16c"))) inline float scale_f16(const RowFormat& f, const std::byte* row, int g) {
  if (f.unscaled) return 1.0f;
  std::uint16_t h;
  std::memcpy(&h, row + 2 * static_cast<std::size_t>(g), 2);
  return _cvtsh_ss(h);
}

// The 8 numbers from element e of a row (e a multiple of 8 inside one group), unscaled.
template <KvType T>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8_at(const RowFormat& f, const std::byte* r, int e) {
  if constexpr (T == KvType::f32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(r) + e);
  } else if constexpr (T == KvType::f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * static_cast<std::size_t>(e))));
  } else if constexpr (T == KvType::int8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + f.scales + static_cast<std::size_t>(e)));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  } else {  // int4: element j of a group is the low nibble of byte j, j + half the high one
    const int half = f.group / 2, g = e / f.group, j = e % f.group;
    const std::byte* p = r + f.scales + static_cast<std::size_t>(g * half + (j % half));
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    if (j >= half) b = _mm_srli_epi16(b, 4);
    b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
}

// Bytes from a row's start to its number e (e even for int4).
inline std::size_t data_offset(const RowFormat& f, int e) {
  const auto u = static_cast<std::size_t>(e);
  switch (f.type) {
    case KvType::f32: return 4 * u;
    case KvType::f16: return 2 * u;
    case KvType::int8: return f.scales + u;
    default: return f.scales + u / 2;
  }
}

__attribute__((target("avx2,fma,f16c"))) inline void prefetch_slice(const RowFormat& f, const std::byte* r, std::size_t first,
                                                                  std::size_t last) {
  _mm_prefetch(reinterpret_cast<const char*>(r + first), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(r + last), _MM_HINT_T0);
  if (f.scales) _mm_prefetch(reinterpret_cast<const char*>(r), _MM_HINT_T0);
}

// Row k of the rows followed by the next block's (null past both): the kernels prefetch 16
// rows ahead, into the next block at the end of this one.
inline const std::byte* row_ahead(const RowFormat& f, const std::byte* rows, int n, Ahead next, int k) {
  if (k < n) return rows + static_cast<std::size_t>(k) * f.bytes;
  if (k - n < next.n) return next.rows + static_cast<std::size_t>(k - n) * f.bytes;
  return nullptr;
}

template <KvType T>
constexpr bool quantized() {
  return T == KvType::int8 || T == KvType::int4;
}

// Σ over the head slice of q · row, in a register (not yet reduced).
template <KvType T>
__attribute__((target("avx2,fma,f16c"))) inline __m256 row_dot(const RowFormat& f, const std::byte* r, const float* q,
                                                             int off, int hd) {
  if constexpr (!quantized<T>()) {
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= hd; i += 16) {
      a = _mm256_fmadd_ps(load8_at<T>(f, r, off + i), _mm256_loadu_ps(q + i), a);
      b = _mm256_fmadd_ps(load8_at<T>(f, r, off + i + 8), _mm256_loadu_ps(q + i + 8), b);
    }
    if (i < hd) a = _mm256_fmadd_ps(load8_at<T>(f, r, off + i), _mm256_loadu_ps(q + i), a);
    return _mm256_add_ps(a, b);
  } else {
    __m256 acc = _mm256_setzero_ps();
    for (int g = 0; g < hd; g += f.group) {
      __m256 s = _mm256_setzero_ps();
      for (int i = g; i < g + f.group; i += 8) s = _mm256_fmadd_ps(load8_at<T>(f, r, off + i), _mm256_loadu_ps(q + i), s);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(scale_f16(f, r, (off + g) / f.group)), s, acc);
    }
    return acc;
  }
}

// Σ over the head slice of q · row for int8 and int4 rows against q in int16 (qi = q / sq,
// rounded: a relative error of 2^-16, far below the rows' own): 16 products per
// multiply-add in integers, one conversion and one scale per group. Groups of 16 (int8)
// or 32 (int4) numbers.
template <KvType T>
__attribute__((target("avx2,fma,f16c"))) inline __m256 row_dot_i16(const RowFormat& f, const std::byte* r,
                                                                 const std::int16_t* qi, int off, int hd) {
  __m256 acc = _mm256_setzero_ps();
  const std::byte* x = r + f.scales;
  for (int g = 0; g < hd; g += f.group) {
    __m256i s = _mm256_setzero_si256();
    if constexpr (T == KvType::int8) {
      for (int i = g; i < g + f.group; i += 16) {
        const __m256i k = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + off + i)));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(k, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi + i))));
      }
    } else {
      const int half = f.group / 2;
      const std::byte* p = x + (off + g) / 2;
      const __m128i m = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
      for (int i = 0; i < half; i += 16) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(b, m), eight);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), m), eight);
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_cvtepi8_epi16(lo),
                                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi + g + i))));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_cvtepi8_epi16(hi),
                                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi + g + half + i))));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale_f16(f, r, (off + g) / f.group)), _mm256_cvtepi32_ps(s), acc);
  }
  return acc;
}

template <KvType T>
constexpr int int_group() {  // the group sizes the integer path takes
  return T == KvType::int8 ? 16 : T == KvType::int4 ? 32 : 0;
}


template <KvType T>
__attribute__((target("avx2,fma,f16c"))) void scores_avx2(const RowFormat& f, float* const* att, const float* const* q,
                                                          const int* off, int H, const std::byte* rows, int n, int hd,
                                                          float scale, Ahead next) {
  // Quantized rows against q in int16 where the groups allow it.
  alignas(32) std::int16_t qi[kHeadsPerPass][512];
  float sc[kHeadsPerPass];
  bool ints = false;
  for (int h = 0; h < H; ++h) sc[h] = scale;
  if constexpr (int_group<T>() > 0) {
    if (f.group % int_group<T>() == 0 && hd <= 512) {
      for (int h = 0; h < H; ++h) {
        float qmax = 0;
        for (int i = 0; i < hd; ++i) qmax = std::max(qmax, std::fabs(q[h][i]));
        const float sq = qmax > 0 ? qmax / 32767.0f : 1.0f;
        for (int i = 0; i < hd; ++i) qi[h][i] = static_cast<std::int16_t>(std::lrintf(q[h][i] / sq));
        sc[h] *= sq;
      }
      ints = true;
    }
  }
  auto dot = [&](const std::byte* r, int h) __attribute__((target("avx2,fma,f16c"))) {
    if constexpr (int_group<T>() > 0) {
      if (ints) return row_dot_i16<T>(f, r, qi[h], off[h], hd);
    }
    return row_dot<T>(f, r, q[h], off[h], hd);
  };
  // [a0 a1 a2 a3] summed: pairwise adds, then the two 128-bit halves. The last rows go
  // through the same sums (with zero rows), so that a row's score does not depend on where
  // a block starts: the paged and the contiguous cache give the same bits.
  auto reduce4 = [](__m256 a0, __m256 a1, __m256 a2, __m256 a3) __attribute__((target("avx2,fma,f16c"))) {
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  };
  // The heads' slices span [first, last] of a row, which rarely starts a cache line (rows
  // are not whole lines): fetch rows 16 ahead, the span's first and last byte and the
  // row's scales.
  std::size_t first = data_offset(f, off[0]), last = data_offset(f, off[0] + hd) - 1;
  for (int h = 1; h < H; ++h) {
    first = std::min(first, data_offset(f, off[h]));
    last = std::max(last, data_offset(f, off[h] + hd) - 1);
  }
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const std::byte* r = rows + static_cast<std::size_t>(j) * f.bytes;
    for (int k = j + 16; k < j + 20; ++k)
      if (const std::byte* p = row_ahead(f, rows, n, next, k)) prefetch_slice(f, p, first, last);
    for (int h = 0; h < H; ++h) {
      const __m128 t = reduce4(dot(r, h), dot(r + f.bytes, h), dot(r + 2 * f.bytes, h), dot(r + 3 * f.bytes, h));
      _mm_storeu_ps(att[h] + j, _mm_mul_ps(t, _mm_set1_ps(sc[h])));
    }
  }
  if (j < n) {
    for (int h = 0; h < H; ++h) {
      __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int k = 0; j + k < n; ++k) a[k] = dot(rows + static_cast<std::size_t>(j + k) * f.bytes, h);
      float tmp[4];
      _mm_storeu_ps(tmp, _mm_mul_ps(reduce4(a[0], a[1], a[2], a[3]), _mm_set1_ps(sc[h])));
      for (int k = 0; j + k < n; ++k) att[h][j + k] = tmp[k];
    }
  }
}

// out[c0 .. c0 + 8·NR) += Σ_j att_j · V_j over n rows, the slice in NR registers.
template <KvType T, int NR>
__attribute__((target("avx2,fma,f16c"))) inline void accumulate_slice(const RowFormat& f, float* out, const float* att,
                                                                      const std::byte* rows, int n, int e0) {
  __m256 acc[NR];
  for (int i = 0; i < NR; ++i) acc[i] = _mm256_loadu_ps(out + 8 * i);
  for (int j = 0; j < n; ++j) {
    const std::byte* r = rows + static_cast<std::size_t>(j) * f.bytes;
    if constexpr (!quantized<T>()) {
      const __m256 a = _mm256_set1_ps(att[j]);
      for (int i = 0; i < NR; ++i) acc[i] = _mm256_fmadd_ps(a, load8_at<T>(f, r, e0 + 8 * i), acc[i]);
    } else {  // one coefficient (weight × scale) per group the slice crosses
      int g = e0 / f.group;
      __m256 a = _mm256_set1_ps(att[j] * scale_f16(f, r, g));
      for (int i = 0; i < NR; ++i) {
        const int e = e0 + 8 * i;
        if (e / f.group != g) {
          g = e / f.group;
          a = _mm256_set1_ps(att[j] * scale_f16(f, r, g));
        }
        acc[i] = _mm256_fmadd_ps(a, load8_at<T>(f, r, e), acc[i]);
      }
    }
  }
  for (int i = 0; i < NR; ++i) _mm256_storeu_ps(out + 8 * i, acc[i]);
}

// out[h] (hd) += Σ_j att[h]_j · V_j over the rows, in memory order, two ways that give the
// same bits (each number's sum is the same chain of multiply-adds in row order as with one
// head and all rows at once):
// - f32, f16, int8: row by row, every head's slice of the row 8 numbers at a time, out
//   loaded, multiplied-added and stored (it stays in L1);
// - int4 (its nibbles cost more to unpack than to read): 16 rows at a time, each head's
//   slice of them with its sums in registers (64 numbers at a time), the 16 rows staying
//   in L1 while the heads pass over them. Measured at 2048 tokens of context, stories110M,
//   one thread: the first way 5–10% faster for f32 and f16 and no slower for int8, the
//   second 15–20% faster for int4.
template <KvType T>
__attribute__((target("avx2,fma,f16c"))) void accumulate_avx2(const RowFormat& f, float* const* out,
                                                              const float* const* att, const int* off, int H,
                                                              const std::byte* rows, int n, int hd, Ahead next) {
  std::size_t first = data_offset(f, off[0]), last = data_offset(f, off[0] + hd) - 1;
  for (int h = 1; h < H; ++h) {
    first = std::min(first, data_offset(f, off[h]));
    last = std::max(last, data_offset(f, off[h] + hd) - 1);
  }
  if constexpr (T != KvType::int4) {
    for (int j = 0; j < n; ++j) {
      const std::byte* r = rows + static_cast<std::size_t>(j) * f.bytes;
      if (const std::byte* p = row_ahead(f, rows, n, next, j + 16)) prefetch_slice(f, p, first, last);
      for (int h = 0; h < H; ++h) {
        float* o = out[h];
        const float w = att[h][j];
        if constexpr (!quantized<T>()) {
          const __m256 a = _mm256_set1_ps(w);
          for (int i = 0; i < hd; i += 8)
            _mm256_storeu_ps(o + i, _mm256_fmadd_ps(a, load8_at<T>(f, r, off[h] + i), _mm256_loadu_ps(o + i)));
        } else {  // one coefficient (weight × scale) per group
          for (int g0 = 0; g0 < hd; g0 += f.group) {
            const __m256 a = _mm256_set1_ps(w * scale_f16(f, r, (off[h] + g0) / f.group));
            for (int i = g0; i < g0 + f.group && i < hd; i += 8)
              _mm256_storeu_ps(o + i, _mm256_fmadd_ps(a, load8_at<T>(f, r, off[h] + i), _mm256_loadu_ps(o + i)));
          }
        }
      }
    }
  } else {  // (no prefetch: int4's values measured slower with it)
    constexpr int kRows = 16;
    for (int j0 = 0; j0 < n; j0 += kRows) {
      const int m = std::min(kRows, n - j0);
      const std::byte* r0 = rows + static_cast<std::size_t>(j0) * f.bytes;
      for (int h = 0; h < H; ++h) {
        const float* a = att[h] + j0;
        for (int c = 0; c < hd; c += 64) {
          float* o = out[h] + c;
          const int e = off[h] + c;
          switch (std::min(64, hd - c) / 8) {
            case 1: accumulate_slice<T, 1>(f, o, a, r0, m, e); break;
            case 2: accumulate_slice<T, 2>(f, o, a, r0, m, e); break;
            case 3: accumulate_slice<T, 3>(f, o, a, r0, m, e); break;
            case 4: accumulate_slice<T, 4>(f, o, a, r0, m, e); break;
            case 5: accumulate_slice<T, 5>(f, o, a, r0, m, e); break;
            case 6: accumulate_slice<T, 6>(f, o, a, r0, m, e); break;
            case 7: accumulate_slice<T, 7>(f, o, a, r0, m, e); break;
            default: accumulate_slice<T, 8>(f, o, a, r0, m, e); break;
          }
        }
      }
    }
  }
}

// x (hd) = numbers off .. off+hd-1 of a row, dequantized 8 at a time.
template <KvType T>
__attribute__((target("avx2,fma,f16c"))) void slice_avx2(const RowFormat& f, float* x, const std::byte* r, int off,
                                                         int hd) {
  for (int i = 0; i < hd; i += 8) {
    __m256 v = load8_at<T>(f, r, off + i);
    if constexpr (quantized<T>()) v = _mm256_mul_ps(v, _mm256_set1_ps(scale_f16(f, r, (off + i) / f.group)));
    _mm256_storeu_ps(x + i, v);
  }
}

// The AVX2 kernels need whole registers: head slices of 8 numbers (f32, f16, int8 groups)
// or int4 groups of 16.
bool simd_ok(const RowFormat& f, int hd) {
  if (!cpu::avx2() || hd % 8) return false;
  if (f.type == KvType::int8) return f.group % 8 == 0;
  if (f.type == KvType::int4) return f.group % 16 == 0;
  return true;
}

}  // namespace

void store_row(const RowFormat& f, std::byte* row, const float* x) {
  switch (f.type) {
    case KvType::f32: std::memcpy(row, x, 4 * static_cast<std::size_t>(f.kv_dim)); return;
    case KvType::f16:
      for (int i = 0; i < f.kv_dim; ++i) {
        const std::uint16_t h = f32_to_f16(x[i]);
        std::memcpy(row + 2 * static_cast<std::size_t>(i), &h, 2);
      }
      return;
    case KvType::int8:
    case KvType::int4:
    case KvType::int4_kivi: {
      const bool four = f.type != KvType::int8;
      const float qmax = four ? 7.0f : 127.0f;
      const int half = f.group / 2;
      std::byte* data = row + f.scales;
      for (int g0 = 0, g = 0; g0 < f.kv_dim; g0 += f.group, ++g) {
        float amax = 0;
        for (int i = 0; i < f.group; ++i) amax = std::max(amax, std::fabs(x[g0 + i]));
        // The scale is stored as f16; quantize with the value read back so that q · d is
        // what load_row returns.
        const std::uint16_t dh = f32_to_f16(amax / qmax);
        std::memcpy(row + 2 * static_cast<std::size_t>(g), &dh, 2);
        const float d = f16_to_f32(dh);
        const float inv = d > 0 ? 1.0f / d : 0.0f;
        auto quant = [&](float v) {
          return static_cast<int>(std::clamp(std::nearbyint(v * inv), -qmax, qmax));
        };
        if (!four) {
          for (int i = 0; i < f.group; ++i)
            data[g0 + i] = static_cast<std::byte>(static_cast<std::int8_t>(quant(x[g0 + i])));
        } else {
          for (int i = 0; i < half; ++i) {
            const auto lo = static_cast<unsigned>(quant(x[g0 + i]) + 8), hi = static_cast<unsigned>(quant(x[g0 + half + i]) + 8);
            data[g0 / 2 + i] = static_cast<std::byte>(lo | (hi << 4));
          }
        }
      }
      return;
    }
  }
}

void store_row_unscaled(const RowFormat& f, std::byte* row, const float* x, const float* inv_scale) {
  const int half = f.group / 2;
  for (int g0 = 0; g0 < f.kv_dim; g0 += f.group)
    for (int i = 0; i < half; ++i) {
      auto q = [&](int k) {
        return static_cast<unsigned>(std::clamp(std::nearbyint(x[k] * inv_scale[k]), -7.0f, 7.0f) + 8.0f);
      };
      row[g0 / 2 + i] = static_cast<std::byte>(q(g0 + i) | (q(g0 + half + i) << 4));
    }
}

void load_row(const RowFormat& f, float* x, const std::byte* row) {
  for (int i = 0; i < f.kv_dim; ++i) x[i] = number_at(f, row, i);
}

void load_slice(const RowFormat& f, float* x, const std::byte* row, int off, int hd) {
  if (simd_ok(f, hd)) {
    switch (f.type) {
      case KvType::f32: return slice_avx2<KvType::f32>(f, x, row, off, hd);
      case KvType::f16: return slice_avx2<KvType::f16>(f, x, row, off, hd);
      case KvType::int8: return slice_avx2<KvType::int8>(f, x, row, off, hd);
      case KvType::int4:
      case KvType::int4_kivi: return slice_avx2<KvType::int4>(f, x, row, off, hd);
    }
  }
  for (int i = 0; i < hd; ++i) x[i] = number_at(f, row, off + i);
}

void row_scores(const RowFormat& f, float* const* att, const float* const* q, const int* off, int H,
                const std::byte* rows, int n, int hd, float scale, Ahead next) {
  if (!simd_ok(f, hd)) {
    for (int h = 0; h < H; ++h) scores_scalar(f, att[h], q[h], rows, n, off[h], hd, scale);
    return;
  }
  for (int h0 = 0; h0 < H; h0 += kHeadsPerPass) {
    const int m = std::min(kHeadsPerPass, H - h0);
    switch (f.type) {
      case KvType::f32: scores_avx2<KvType::f32>(f, att + h0, q + h0, off + h0, m, rows, n, hd, scale, next); break;
      case KvType::f16: scores_avx2<KvType::f16>(f, att + h0, q + h0, off + h0, m, rows, n, hd, scale, next); break;
      case KvType::int8: scores_avx2<KvType::int8>(f, att + h0, q + h0, off + h0, m, rows, n, hd, scale, next); break;
      case KvType::int4:
      case KvType::int4_kivi: scores_avx2<KvType::int4>(f, att + h0, q + h0, off + h0, m, rows, n, hd, scale, next); break;
    }
  }
}

void row_accumulate(const RowFormat& f, float* const* out, const float* const* att, const int* off, int H,
                    const std::byte* rows, int n, int hd, Ahead next) {
  if (!simd_ok(f, hd)) {
    for (int h = 0; h < H; ++h) accumulate_scalar(f, out[h], att[h], rows, n, off[h], hd);
    return;
  }
  switch (f.type) {
    case KvType::f32: return accumulate_avx2<KvType::f32>(f, out, att, off, H, rows, n, hd, next);
    case KvType::f16: return accumulate_avx2<KvType::f16>(f, out, att, off, H, rows, n, hd, next);
    case KvType::int8: return accumulate_avx2<KvType::int8>(f, out, att, off, H, rows, n, hd, next);
    case KvType::int4:
    case KvType::int4_kivi: return accumulate_avx2<KvType::int4>(f, out, att, off, H, rows, n, hd, next);
  }
}

}  // namespace lmp::kv
