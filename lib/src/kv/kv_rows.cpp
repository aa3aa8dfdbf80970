#include "lmpipe/kv/kv_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lmpipe/tensor_io/dtype.h"

namespace lmp::kv {

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::f32: return "f32";
    case KvType::f16: return "f16";
    case KvType::int8: return "int8";
    case KvType::int4: return "int4";
  }
  return "?";
}

Result<KvType> parse_kv_type(std::string_view s) {
  if (s == "f32") return KvType::f32;
  if (s == "f16") return KvType::f16;
  if (s == "int8" || s == "q8_0") return KvType::int8;
  if (s == "int4" || s == "q4_0") return KvType::int4;
  return make_error(Errc::invalid_argument, "unknown KV storage type '{}' (f32, f16, int8, int4)", s);
}

RowFormat RowFormat::make(KvType t, int kv_dim, int head_dim) {
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
      f.scales = 2 * (n / static_cast<std::size_t>(f.group));
      f.bytes = f.scales + n / 2;
      break;
  }
  return f;
}

namespace {

bool cpu_avx2() {
  static const bool v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return v;
}

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
    case KvType::int4: {
      const int g = i / f.group, j = i % f.group, half = f.group / 2;
      const auto b = static_cast<unsigned>(row[f.scales + static_cast<std::size_t>(g * half + (j % half))]);
      const int q = static_cast<int>(j < half ? (b & 0x0F) : (b >> 4)) - 8;
      return scale_at(row, g) * static_cast<float>(q);
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
// Each kernel reads one row's head slice in registers of 8 numbers; the quantized ones
// multiply a group's partial sum by its scale.

__attribute__((target("avx2,fma,f16c"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(KvType t, const std::byte* p) {
  switch (t) {
    case KvType::f32: return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    case KvType::f16: return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    default: {  // int8
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    }
  }
}

// The two halves (numbers i..i+7 and half+i..half+i+7 of a group) of eight int4 bytes.
__attribute__((target("avx2,fma,f16c"))) inline void load_nibbles(const std::byte* p, __m256& lo, __m256& hi) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  const __m128i l = _mm_sub_epi8(_mm_and_si128(b, m), eight);
  const __m128i h = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), m), eight);
  lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(l));
  hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h));
}

__attribute__((target("avx2,fma,f16c"))) void scores_avx2(const RowFormat& f, float* att, const float* q,
                                                          const std::byte* rows, int n, int off, int hd, float scale) {
  const std::size_t esize = f.type == KvType::f32 ? 4 : 2;
  for (int j = 0; j < n; ++j) {
    const std::byte* r = rows + static_cast<std::size_t>(j) * f.bytes;
    __m256 acc = _mm256_setzero_ps();
    if (f.type == KvType::f32 || f.type == KvType::f16) {
      const std::byte* x = r + esize * static_cast<std::size_t>(off);
      __m256 acc2 = _mm256_setzero_ps();
      int i = 0;
      for (; i + 16 <= hd; i += 16) {
        acc = _mm256_fmadd_ps(load8(f.type, x + esize * static_cast<std::size_t>(i)), _mm256_loadu_ps(q + i), acc);
        acc2 = _mm256_fmadd_ps(load8(f.type, x + esize * static_cast<std::size_t>(i + 8)), _mm256_loadu_ps(q + i + 8), acc2);
      }
      for (; i < hd; i += 8) acc = _mm256_fmadd_ps(load8(f.type, x + esize * static_cast<std::size_t>(i)), _mm256_loadu_ps(q + i), acc);
      acc = _mm256_add_ps(acc, acc2);
    } else if (f.type == KvType::int8) {
      const std::byte* x = r + f.scales + static_cast<std::size_t>(off);
      for (int g = 0; g < hd; g += f.group) {
        __m256 s = _mm256_setzero_ps();
        for (int i = 0; i < f.group; i += 8)
          s = _mm256_fmadd_ps(load8(KvType::int8, x + g + i), _mm256_loadu_ps(q + g + i), s);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(scale_at(r, (off + g) / f.group)), s, acc);
      }
    } else {  // int4
      const int half = f.group / 2;
      const std::byte* x = r + f.scales + static_cast<std::size_t>(off / 2);
      for (int g = 0; g < hd; g += f.group) {
        __m256 s = _mm256_setzero_ps();
        for (int i = 0; i < half; i += 8) {
          __m256 lo, hi;
          load_nibbles(x + g / 2 + i, lo, hi);
          s = _mm256_fmadd_ps(lo, _mm256_loadu_ps(q + g + i), s);
          s = _mm256_fmadd_ps(hi, _mm256_loadu_ps(q + g + half + i), s);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(scale_at(r, (off + g) / f.group)), s, acc);
      }
    }
    att[j] = hsum(acc) * scale;
  }
}

__attribute__((target("avx2,fma,f16c"))) void accumulate_avx2(const RowFormat& f, float* out, const float* att,
                                                              const std::byte* rows, int n, int off, int hd) {
  const std::size_t esize = f.type == KvType::f32 ? 4 : 2;
  for (int j = 0; j < n; ++j) {
    const std::byte* r = rows + static_cast<std::size_t>(j) * f.bytes;
    if (f.type == KvType::f32 || f.type == KvType::f16) {
      const __m256 a = _mm256_set1_ps(att[j]);
      const std::byte* x = r + esize * static_cast<std::size_t>(off);
      for (int i = 0; i < hd; i += 8)
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(a, load8(f.type, x + esize * static_cast<std::size_t>(i)), _mm256_loadu_ps(out + i)));
    } else if (f.type == KvType::int8) {
      const std::byte* x = r + f.scales + static_cast<std::size_t>(off);
      for (int g = 0; g < hd; g += f.group) {
        const __m256 a = _mm256_set1_ps(att[j] * scale_at(r, (off + g) / f.group));
        for (int i = g; i < g + f.group; i += 8)
          _mm256_storeu_ps(out + i, _mm256_fmadd_ps(a, load8(KvType::int8, x + i), _mm256_loadu_ps(out + i)));
      }
    } else {
      const int half = f.group / 2;
      const std::byte* x = r + f.scales + static_cast<std::size_t>(off / 2);
      for (int g = 0; g < hd; g += f.group) {
        const __m256 a = _mm256_set1_ps(att[j] * scale_at(r, (off + g) / f.group));
        for (int i = 0; i < half; i += 8) {
          __m256 lo, hi;
          load_nibbles(x + g / 2 + i, lo, hi);
          _mm256_storeu_ps(out + g + i, _mm256_fmadd_ps(a, lo, _mm256_loadu_ps(out + g + i)));
          _mm256_storeu_ps(out + g + half + i, _mm256_fmadd_ps(a, hi, _mm256_loadu_ps(out + g + half + i)));
        }
      }
    }
  }
}

// The AVX2 kernels need whole registers: head slices of 8 numbers (f32, f16, int8 groups)
// or int4 groups of 16.
bool simd_ok(const RowFormat& f, int hd) {
  if (!cpu_avx2() || hd % 8) return false;
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
    case KvType::int4: {
      const bool four = f.type == KvType::int4;
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

void load_row(const RowFormat& f, float* x, const std::byte* row) {
  for (int i = 0; i < f.kv_dim; ++i) x[i] = number_at(f, row, i);
}

void row_scores(const RowFormat& f, float* att, const float* q, const std::byte* rows, int n, int off, int hd, float scale) {
  if (simd_ok(f, hd)) return scores_avx2(f, att, q, rows, n, off, hd, scale);
  scores_scalar(f, att, q, rows, n, off, hd, scale);
}

void row_accumulate(const RowFormat& f, float* out, const float* att, const std::byte* rows, int n, int off, int hd) {
  if (simd_ok(f, hd)) return accumulate_avx2(f, out, att, rows, n, off, hd);
  accumulate_scalar(f, out, att, rows, n, off, hd);
}

}  // namespace lmp::kv
