#include "lmpipe/kv/kv_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "lmpipe/core/cpu.h"
#include "lmpipe/tensor_io/dtype.h"

// GCC 12 takes the _mm512_undefined_* placeholders inside its AVX-512 headers for
// uninitialized values (a false positive of -Wmaybe-uninitialized once inlined).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

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
// Templates on the storage type. Both kernels read the rows in memory order, one row at a
// time, every head's slice of it (the hardware then fetches the rows ahead as one stream).
// Scores: four heads at a time, each head's products summed in a register (per group, then
// times the group's scale), the four reduced together. Values: see accumulate_avx2.

__attribute__((target("avx2,fma,f16c"))) inline float scale_f16(const RowFormat& f, const std::byte* row, int g) {
  if (f.unscaled) return 1.0f;
  std::uint16_t h;
  std::memcpy(&h, row + 2 * static_cast<std::size_t>(g), 2);
  return _cvtsh_ss(h);
}

// The kernels take the group size as G when it is 32 (every head_dim that is a multiple of
// 32), so that finding a number's group is a shift, not a division; G = 0 reads it from f.
template <int G>
inline int group_of(const RowFormat& f) {
  if constexpr (G > 0) return G;
  return f.group;
}

// The 8 numbers from element e of a row (e a multiple of 8 inside one group), unscaled.
template <KvType T, int G>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8_at(const RowFormat& f, const std::byte* r, int e) {
  if constexpr (T == KvType::f32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(r) + e);
  } else if constexpr (T == KvType::f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * static_cast<std::size_t>(e))));
  } else if constexpr (T == KvType::int8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + f.scales + static_cast<std::size_t>(e)));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  } else {  // int4: element j of a group is the low nibble of byte j, j + half the high one
    const int half = group_of<G>(f) / 2, g = e / group_of<G>(f), j = e % group_of<G>(f);
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

// The bytes of a row that H heads' slices span, [first, last]: the kernels fetch this of a
// row ahead (its first and last line and the row's scales; the hardware fetches what lies
// between, the rows being read in memory order).
struct Span {
  std::size_t first, last;
};
inline Span span_of(const RowFormat& f, const int* off, int H, int hd) {
  Span s{data_offset(f, off[0]), data_offset(f, off[0] + hd) - 1};
  for (int h = 1; h < H; ++h) {
    s.first = std::min(s.first, data_offset(f, off[h]));
    s.last = std::max(s.last, data_offset(f, off[h] + hd) - 1);
  }
  return s;
}

// Rows the kernels fetch ahead of the one they read.
constexpr int kAhead = 16;

__attribute__((target("avx2,fma,f16c"))) inline void prefetch_slice(const RowFormat& f, const std::byte* r, Span span) {
  _mm_prefetch(reinterpret_cast<const char*>(r + span.first), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(r + span.last), _MM_HINT_T0);
  if (f.scales) _mm_prefetch(reinterpret_cast<const char*>(r), _MM_HINT_T0);
}

// Row k of the rows followed by the next block's (null past both): the kernels prefetch 16
// rows ahead, into the next block at the end of this one. (Folding this and the
// prefetch_slice after it into one helper made the f32 kernels 20-30% slower out of cache,
// measured at the tenth stop: the pairs stay as they are.)
inline const std::byte* row_ahead(const RowFormat& f, const std::byte* rows, int n, Ahead next, int k) {
  if (k < n) return rows + static_cast<std::size_t>(k) * f.bytes;
  if (k - n < next.n) return next.rows + static_cast<std::size_t>(k - n) * f.bytes;
  return nullptr;
}

template <KvType T>
constexpr bool quantized() {
  return T == KvType::int8 || T == KvType::int4;
}

// Four heads at once (their steps interleaved; each head's sum takes the same steps as it
// would alone): out[k] = Σ over head k's slice of q[k] · row, in a register (not yet
// reduced). Heads may repeat (the last one standing in for missing ones).
template <KvType T, int G>
__attribute__((target("avx2,fma,f16c"))) inline void row_dot4(const RowFormat& f, const std::byte* r,
                                                            const float* const* q, const int* off, int hd,
                                                            __m256* out) {
  if constexpr (!quantized<T>()) {
    __m256 a[4], b[4];
    for (int k = 0; k < 4; ++k) a[k] = b[k] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= hd; i += 16)
      for (int k = 0; k < 4; ++k) {
        a[k] = _mm256_fmadd_ps(load8_at<T, G>(f, r, off[k] + i), _mm256_loadu_ps(q[k] + i), a[k]);
        b[k] = _mm256_fmadd_ps(load8_at<T, G>(f, r, off[k] + i + 8), _mm256_loadu_ps(q[k] + i + 8), b[k]);
      }
    if (i < hd)
      for (int k = 0; k < 4; ++k) a[k] = _mm256_fmadd_ps(load8_at<T, G>(f, r, off[k] + i), _mm256_loadu_ps(q[k] + i), a[k]);
    for (int k = 0; k < 4; ++k) out[k] = _mm256_add_ps(a[k], b[k]);
  } else {
    const int group = group_of<G>(f);
    for (int k = 0; k < 4; ++k) out[k] = _mm256_setzero_ps();
    for (int g = 0; g < hd; g += group)
      for (int k = 0; k < 4; ++k) {
        __m256 s = _mm256_setzero_ps();
        for (int i = g; i < g + group; i += 8)
          s = _mm256_fmadd_ps(load8_at<T, G>(f, r, off[k] + i), _mm256_loadu_ps(q[k] + i), s);
        out[k] = _mm256_fmadd_ps(_mm256_set1_ps(scale_f16(f, r, (off[k] + g) / group)), s, out[k]);
      }
  }
}

// The same for int8 and int4 rows against q in int16 (qi = q / sq, rounded: a relative
// error of 2^-16, far below the rows' own): 16 products per multiply-add in integers, one
// conversion and one scale per group. Groups of 16 (int8) or 32 (int4) numbers.
template <KvType T, int G>
__attribute__((target("avx2,fma,f16c"))) inline void row_dot4_i16(const RowFormat& f, const std::byte* r,
                                                                const std::int16_t* const* qi, const int* off, int hd,
                                                                __m256* out) {
  const int group = group_of<G>(f);
  const std::byte* x = r + f.scales;
  for (int k = 0; k < 4; ++k) out[k] = _mm256_setzero_ps();
  for (int g = 0; g < hd; g += group)
    for (int k = 0; k < 4; ++k) {
      __m256i s = _mm256_setzero_si256();
      if constexpr (T == KvType::int8) {
        for (int i = g; i < g + group; i += 16) {
          const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + off[k] + i)));
          s = _mm256_add_epi32(s, _mm256_madd_epi16(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi[k] + i))));
        }
      } else {
        const int half = group / 2;
        const std::byte* p = x + (off[k] + g) / 2;
        const __m128i m = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
        for (int i = 0; i < half; i += 16) {
          const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
          const __m128i lo = _mm_sub_epi8(_mm_and_si128(b, m), eight);
          const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), m), eight);
          s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_cvtepi8_epi16(lo),
                                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi[k] + g + i))));
          s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_cvtepi8_epi16(hi),
                                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi[k] + g + half + i))));
        }
      }
      out[k] = _mm256_fmadd_ps(_mm256_set1_ps(scale_f16(f, r, (off[k] + g) / group)), _mm256_cvtepi32_ps(s), out[k]);
    }
}

// Each head's q in int16, q ≈ qi · sq, sq = max |q| / 32767; sc[h] *= sq. Eight numbers a
// step (the same quotients, rounded to nearest even as lrintf does): the kernels run this
// once per block of rows, and scalar it cost as much as scoring a 16-row int8 block.
constexpr int kMaxIntDim = 512;
__attribute__((target("avx2,fma,f16c"))) inline void quantize_queries(const float* const* q, int H, int hd,
                                                                     std::int16_t (*qi)[kMaxIntDim], float* sc) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int h = 0; h < H; ++h) {
    const float* x = q[h];
    int i = 0;
    __m256 m = _mm256_setzero_ps();
    for (; i + 8 <= hd; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    float qmax = 0;
    for (float v : lanes) qmax = std::max(qmax, v);
    for (; i < hd; ++i) qmax = std::max(qmax, std::fabs(x[i]));
    const float sq = qmax > 0 ? qmax / 32767.0f : 1.0f;
    const __m256 d = _mm256_set1_ps(sq);
    i = 0;
    for (; i + 16 <= hd; i += 16) {
      const __m256i a = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x + i), d));
      const __m256i b = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x + i + 8), d));
      // packs works within 128-bit lanes: a0-3 b0-3 a4-7 b4-7, put back in order.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qi[h] + i), _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8));
    }
    for (; i < hd; ++i) qi[h][i] = static_cast<std::int16_t>(std::lrintf(x[i] / sq));
    sc[h] *= sq;
  }
}

// [a0 a1 a2 a3] summed: pairwise adds, then the two 128-bit halves. Each sum takes the same
// steps whichever slot its vector is in, so a head's score has the same bits whatever
// heads come with it (the slots past the last head get zeros).
__attribute__((target("avx2,fma,f16c"))) inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// att[h + i][j] = t_i · sc[h + i] for the heads h .. min(h + 4, H) - 1 (sc has 3 numbers
// past the last head).
__attribute__((target("avx2,fma,f16c"))) inline void store4(float* const* att, int h, int H, int j, __m128 t,
                                                           const float* sc) {
  alignas(16) float v[4];
  _mm_store_ps(v, _mm_mul_ps(t, _mm_loadu_ps(sc + h)));
  for (int i = 0; i < 4 && h + i < H; ++i) att[h + i][j] = v[i];
}

template <KvType T>
constexpr int int_group() {  // the group sizes the integer path takes
  return T == KvType::int8 ? 16 : T == KvType::int4 ? 32 : 0;
}

// Row by row, four heads at a time. Measured at 2048 tokens of context (stories110M's rows,
// 12 heads, one thread, the rows out of cache) against four rows at a time head by head,
// which read four places of memory at once: int8 about 2× as fast, f32 and f16 1.3×.
template <KvType T, int G>
__attribute__((target("avx2,fma,f16c"))) void scores_avx2(const RowFormat& f, float* const* att, const float* const* q,
                                                          const int* off, int H, const std::byte* rows, int n, int hd,
                                                          float scale, Ahead next) {
  // Quantized rows against q in int16 where the groups allow it.
  alignas(32) std::int16_t qi[kHeadsPerPass][kMaxIntDim];
  float sc[kHeadsPerPass + 3] = {};
  bool ints = false;
  for (int h = 0; h < H; ++h) sc[h] = scale;
  if constexpr (int_group<T>() > 0) {
    if (group_of<G>(f) % int_group<T>() == 0 && hd <= kMaxIntDim) {
      quantize_queries(q, H, hd, qi, sc);
      ints = true;
    }
  }
  // Heads in fours, the last standing in for missing ones.
  const float* qs[kHeadsPerPass + 3];
  const std::int16_t* qis[kHeadsPerPass + 3];
  int offs[kHeadsPerPass + 3];
  for (int h = 0; h < H + 3; ++h) {
    const int k = std::min(h, H - 1);
    qs[h] = q[k], qis[h] = qi[k], offs[h] = off[k];
  }
  const Span span = span_of(f, off, H, hd);
  for (int j = 0; j < n; ++j) {
    const std::byte* r = rows + static_cast<std::size_t>(j) * f.bytes;
    if (const std::byte* p = row_ahead(f, rows, n, next, j + kAhead)) prefetch_slice(f, p, span);
    for (int h = 0; h < H; h += 4) {
      __m256 a[4];
      if (ints) {
        if constexpr (int_group<T>() > 0) row_dot4_i16<T, G>(f, r, qis + h, offs + h, hd, a);
      } else {
        row_dot4<T, G>(f, r, qs + h, offs + h, hd, a);
      }
      const __m128 t = reduce4(a[0], a[1], a[2], a[3]);
      store4(att, h, H, j, t, sc);
    }
  }
}

// out[c0 .. c0 + 8·NR) += Σ_j att_j · V_j over n rows, the slice in NR registers.
template <KvType T, int G, int NR>
__attribute__((target("avx2,fma,f16c"))) inline void accumulate_slice(const RowFormat& f, float* out, const float* att,
                                                                      const std::byte* rows, int n, int e0) {
  __m256 acc[NR];
  for (int i = 0; i < NR; ++i) acc[i] = _mm256_loadu_ps(out + 8 * i);
  for (int j = 0; j < n; ++j) {
    const std::byte* r = rows + static_cast<std::size_t>(j) * f.bytes;
    if constexpr (!quantized<T>()) {
      const __m256 a = _mm256_set1_ps(att[j]);
      for (int i = 0; i < NR; ++i) acc[i] = _mm256_fmadd_ps(a, load8_at<T, G>(f, r, e0 + 8 * i), acc[i]);
    } else {  // one coefficient (weight × scale) per group the slice crosses
      int g = e0 / group_of<G>(f);
      __m256 a = _mm256_set1_ps(att[j] * scale_f16(f, r, g));
      for (int i = 0; i < NR; ++i) {
        const int e = e0 + 8 * i;
        if (e / group_of<G>(f) != g) {
          g = e / group_of<G>(f);
          a = _mm256_set1_ps(att[j] * scale_f16(f, r, g));
        }
        acc[i] = _mm256_fmadd_ps(a, load8_at<T, G>(f, r, e), acc[i]);
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
// With AVX-512, int8 and int4 in groups of 32 take accumulate_avx512 (row by row).
template <KvType T, int G>
__attribute__((target("avx2,fma,f16c"))) void accumulate_avx2(const RowFormat& f, float* const* out,
                                                              const float* const* att, const int* off, int H,
                                                              const std::byte* rows, int n, int hd, Ahead next) {
  const Span span = span_of(f, off, H, hd);
  if constexpr (T != KvType::int4) {
    for (int j = 0; j < n; ++j) {
      const std::byte* r = rows + static_cast<std::size_t>(j) * f.bytes;
      if (const std::byte* p = row_ahead(f, rows, n, next, j + kAhead)) prefetch_slice(f, p, span);
      for (int h = 0; h < H; ++h) {
        float* o = out[h];
        const float w = att[h][j];
        if constexpr (!quantized<T>()) {
          const __m256 a = _mm256_set1_ps(w);
          for (int i = 0; i < hd; i += 8)
            _mm256_storeu_ps(o + i, _mm256_fmadd_ps(a, load8_at<T, G>(f, r, off[h] + i), _mm256_loadu_ps(o + i)));
        } else {  // one coefficient (weight × scale) per group
          for (int g0 = 0; g0 < hd; g0 += group_of<G>(f)) {
            const __m256 a = _mm256_set1_ps(w * scale_f16(f, r, (off[h] + g0) / group_of<G>(f)));
            for (int i = g0; i < g0 + group_of<G>(f); i += 8)
              _mm256_storeu_ps(o + i, _mm256_fmadd_ps(a, load8_at<T, G>(f, r, off[h] + i), _mm256_loadu_ps(o + i)));
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
            case 1: accumulate_slice<T, G, 1>(f, o, a, r0, m, e); break;
            case 2: accumulate_slice<T, G, 2>(f, o, a, r0, m, e); break;
            case 3: accumulate_slice<T, G, 3>(f, o, a, r0, m, e); break;
            case 4: accumulate_slice<T, G, 4>(f, o, a, r0, m, e); break;
            case 5: accumulate_slice<T, G, 5>(f, o, a, r0, m, e); break;
            case 6: accumulate_slice<T, G, 6>(f, o, a, r0, m, e); break;
            case 7: accumulate_slice<T, G, 7>(f, o, a, r0, m, e); break;
            default: accumulate_slice<T, G, 8>(f, o, a, r0, m, e); break;
          }
        }
      }
    }
  }
}

// x (hd) = numbers off .. off+hd-1 of a row, dequantized 8 at a time.
template <KvType T, int G>
__attribute__((target("avx2,fma,f16c"))) void slice_avx2(const RowFormat& f, float* x, const std::byte* r, int off,
                                                         int hd) {
  for (int i = 0; i < hd; i += 8) {
    __m256 v = load8_at<T, G>(f, r, off + i);
    if constexpr (quantized<T>()) v = _mm256_mul_ps(v, _mm256_set1_ps(scale_f16(f, r, (off + i) / group_of<G>(f))));
    _mm256_storeu_ps(x + i, v);
  }
}

// ---- AVX-512: the values of int8 and int4 rows in groups of 32 -------------------------
// Row by row as the AVX2 kernel does for int8, 16 numbers a register: each number gets the
// same multiply-add (weight × scale, times the integer, plus the sum) in the same row
// order as in the AVX2 kernels, so the bits are the same. Measured on stories110M's rows
// (12 heads of 64), one thread, time per row against the AVX2 kernels: int8 1.3–1.6×
// faster, int4 (unpacked here a whole group at a time, so row by row pays) 1.2–1.6×, the
// rows in L2 or out of cache.

#define LMP_AVX512 __attribute__((target("avx2,fma,f16c,avx512f")))

template <KvType T>
LMP_AVX512 void accumulate_avx512(const RowFormat& f, float* const* out, const float* const* att, const int* off,
                                  int H, const std::byte* rows, int n, int hd, Ahead next) {
  const Span span = span_of(f, off, H, hd);
  const int groups = hd / 32;
  for (int j = 0; j < n; ++j) {
    const std::byte* r = rows + static_cast<std::size_t>(j) * f.bytes;
    // int4 without, like the AVX2 int4 kernel, where it measured slower (not re-measured here)
    if constexpr (T == KvType::int8)
      if (const std::byte* p = row_ahead(f, rows, n, next, j + kAhead)) prefetch_slice(f, p, span);
    for (int h = 0; h < H; ++h) {
      float* o = out[h];
      const float w = att[h][j];
      const int g0 = off[h] / 32;
      for (int g = 0; g < groups; ++g) {
        const __m512 a = _mm512_set1_ps(w * scale_f16(f, r, g0 + g));
        float* og = o + 32 * g;
        __m512 v0, v1;
        if constexpr (T == KvType::int8) {
          const std::byte* x = r + f.scales + off[h] + 32 * g;
          v0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))));
          v1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 16))));
        } else {  // byte i: number i (low nibble) and i + 16 (high nibble), each stored q + 8
          const std::byte* x = r + f.scales + (off[h] + 32 * g) / 2;
          const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
          const __m512i eight = _mm512_set1_epi32(8);
          v0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x0F)), eight));
          v1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(b, 4), eight));
        }
        _mm512_storeu_ps(og, _mm512_fmadd_ps(a, v0, _mm512_loadu_ps(og)));
        _mm512_storeu_ps(og + 16, _mm512_fmadd_ps(a, v1, _mm512_loadu_ps(og + 16)));
      }
    }
  }
}

#undef LMP_AVX512

// True when the kernel above serves: int8 or int4 in groups of 32, head slices of whole
// groups.
bool avx512_values_ok(const RowFormat& f, int hd) {
  return (f.type == KvType::int8 || f.type == KvType::int4 || f.type == KvType::int4_kivi) && f.group == 32 &&
         hd % 32 == 0 && cpu::avx512();
}

// fn(std::integral_constant<int, G>) with G = 32 for groups of 32 and 0 (the size read
// from f) for the rest.
template <class Fn>
void with_group(const RowFormat& f, Fn&& fn) {
  if (f.group == 32) {
    fn(std::integral_constant<int, 32>{});
  } else {
    fn(std::integral_constant<int, 0>{});
  }
}

// The AVX2 kernels need whole registers: head slices of 8 numbers (f32, f16, int8 groups)
// or int4 groups of 16; and quantized slices of whole groups.
bool simd_ok(const RowFormat& f, int hd) {
  if (!cpu::avx2() || hd % 8) return false;
  if (f.type == KvType::int8) return f.group % 8 == 0 && hd % f.group == 0;
  if (f.type == KvType::int4) return f.group % 16 == 0 && hd % f.group == 0;
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
    with_group(f, [&](auto g) {
      constexpr int G = decltype(g)::value;
      switch (f.type) {
        case KvType::f32: return slice_avx2<KvType::f32, G>(f, x, row, off, hd);
        case KvType::f16: return slice_avx2<KvType::f16, G>(f, x, row, off, hd);
        case KvType::int8: return slice_avx2<KvType::int8, G>(f, x, row, off, hd);
        case KvType::int4:
        case KvType::int4_kivi: return slice_avx2<KvType::int4, G>(f, x, row, off, hd);
      }
    });
    return;
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
    with_group(f, [&](auto g) {
      constexpr int G = decltype(g)::value;
      switch (f.type) {
        case KvType::f32: return scores_avx2<KvType::f32, G>(f, att + h0, q + h0, off + h0, m, rows, n, hd, scale, next);
        case KvType::f16: return scores_avx2<KvType::f16, G>(f, att + h0, q + h0, off + h0, m, rows, n, hd, scale, next);
        case KvType::int8: return scores_avx2<KvType::int8, G>(f, att + h0, q + h0, off + h0, m, rows, n, hd, scale, next);
        case KvType::int4:
        case KvType::int4_kivi:
          return scores_avx2<KvType::int4, G>(f, att + h0, q + h0, off + h0, m, rows, n, hd, scale, next);
      }
    });
  }
}

void row_accumulate(const RowFormat& f, float* const* out, const float* const* att, const int* off, int H,
                    const std::byte* rows, int n, int hd, Ahead next) {
  if (!simd_ok(f, hd)) {
    for (int h = 0; h < H; ++h) accumulate_scalar(f, out[h], att[h], rows, n, off[h], hd);
    return;
  }
  if (avx512_values_ok(f, hd)) {
    if (f.type == KvType::int8) return accumulate_avx512<KvType::int8>(f, out, att, off, H, rows, n, hd, next);
    return accumulate_avx512<KvType::int4>(f, out, att, off, H, rows, n, hd, next);
  }
  with_group(f, [&](auto g) {
    constexpr int G = decltype(g)::value;
    switch (f.type) {
      case KvType::f32: return accumulate_avx2<KvType::f32, G>(f, out, att, off, H, rows, n, hd, next);
      case KvType::f16: return accumulate_avx2<KvType::f16, G>(f, out, att, off, H, rows, n, hd, next);
      case KvType::int8: return accumulate_avx2<KvType::int8, G>(f, out, att, off, H, rows, n, hd, next);
      case KvType::int4:
      case KvType::int4_kivi: return accumulate_avx2<KvType::int4, G>(f, out, att, off, H, rows, n, hd, next);
    }
  });
}

}  // namespace lmp::kv
