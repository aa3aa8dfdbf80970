#include "lmpipe/model/ops.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "lmpipe/core/cpu.h"
#include "lmpipe/tensor_io/kquants.h"

namespace lmp::model {

namespace {

// set_prefetch_distance: the distance for quantized rows, and for float rows (kAutomatic:
// the default of prefetch_distance).
constexpr std::size_t kAutomatic = ~std::size_t{0};
std::atomic<std::size_t> g_prefetch{kDefaultPrefetch}, g_prefetch_float{kAutomatic};
std::atomic<FloatRows> g_float_rows{FloatRows::automatic};  // set_float_rows
std::atomic<Int8Dots> g_int8_dots{Int8Dots::automatic};     // set_int8_dots
// Float rows in 512-bit registers (set_float_rows): where the CPU has AVX-512 and runs it whole.
bool wide_float_rows() {
  const FloatRows fr = g_float_rows.load(std::memory_order_relaxed);
  return cpu::avx512() && (fr == FloatRows::avx512 || (fr == FloatRows::automatic && !cpu::avx512_halves()));
}
bool use_vnni() { return cpu::avx512_vnni() && g_int8_dots.load(std::memory_order_relaxed) != Int8Dots::avx2; }
// The q4_0 decode step in 512-bit registers (dot_q4_zmm).
bool use_zmm_q4() {
  return cpu::avx512_vbmi() && !cpu::avx512_halves() && g_int8_dots.load(std::memory_order_relaxed) == Int8Dots::automatic;
}

// ---- scalar reference kernels ----------------------------------------------------------

float dot_f32_scalar(const float* a, const float* x, std::int64_t n) {
  float s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * x[i];
  return s;
}

float dot_q8_scalar(const BlockQ8_0* w, const std::int8_t* xq, const float* xd, std::int64_t nb) {
  float s = 0;
  for (std::int64_t b = 0; b < nb; ++b) {
    int acc = 0;
    for (int j = 0; j < 32; ++j) acc += w[b].qs[j] * xq[b * 32 + j];
    s += static_cast<float>(acc) * f16_to_f32(w[b].d) * xd[b];
  }
  return s;
}

float dot_q4_scalar(const BlockQ4_0* w, const std::int8_t* xq, const float* xd, std::int64_t nb) {
  float s = 0;
  for (std::int64_t b = 0; b < nb; ++b) {
    int acc = 0;
    for (int j = 0; j < 16; ++j) {
      acc += ((w[b].qs[j] & 0x0F) - 8) * xq[b * 32 + j];
      acc += ((w[b].qs[j] >> 4) - 8) * xq[b * 32 + 16 + j];
    }
    s += static_cast<float>(acc) * f16_to_f32(w[b].d) * xd[b];
  }
  return s;
}

// ---- AVX2 ------------------------------------------------------------------------------

// A software prefetch `pd` bytes ahead of the weights being read (0: none), `lines` cache
// lines: what one step of a loop below consumes. See set_prefetch_distance (ops.h).
// Always inlined: out of line, GCC finds the function free of side effects (a prefetch
// changes nothing it can see) and drops every call to it.
__attribute__((always_inline)) inline void prefetch_ahead(const void* p, std::ptrdiff_t pd, int lines) {
  if (pd == 0) return;
  const char* q = static_cast<const char*>(p) + pd;
  for (int k = 0; k < lines; ++k) _mm_prefetch(q + 64 * k, _MM_HINT_T0);
}

__attribute__((target("avx2,fma,f16c"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const float* a) { return _mm256_loadu_ps(a); }
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const std::uint16_t* a) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
}
__attribute__((target("avx2,fma,f16c"))) inline float load1(const float* a) { return *a; }
__attribute__((target("avx2,fma,f16c"))) inline float load1(const std::uint16_t* a) { return _cvtsh_ss(*a); }

// A bf16 weight, told apart from an f16 one by its type.
struct Bf16 {
  std::uint16_t bits;
};
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const Bf16* a) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
__attribute__((target("avx2,fma,f16c"))) inline float load1(const Bf16* a) { return bf16_to_f32(a->bits); }

// An f32, f16 or bf16 row against x in 256-bit registers: four accumulators of 8, 32
// numbers a step (the f16 kernel with two accumulators read 10% slower on Zen 4; bf16 took
// two until this loop served it too), the prefetch one step's lines ahead.
template <class T>
__attribute__((target("avx2,fma,f16c"))) float dot_avx2(const T* a, const float* x, std::int64_t n, std::ptrdiff_t pd) {
  constexpr int lines = static_cast<int>(32 * sizeof(T) / 64);
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_ahead(a + i, pd, lines);
    s0 = _mm256_fmadd_ps(load8(a + i), _mm256_loadu_ps(x + i), s0);
    s1 = _mm256_fmadd_ps(load8(a + i + 8), _mm256_loadu_ps(x + i + 8), s1);
    s2 = _mm256_fmadd_ps(load8(a + i + 16), _mm256_loadu_ps(x + i + 16), s2);
    s3 = _mm256_fmadd_ps(load8(a + i + 24), _mm256_loadu_ps(x + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load8(a + i), _mm256_loadu_ps(x + i), s0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) s += load1(a + i) * x[i];
  return s;
}

// 16 f16 or bf16 numbers → f32 (the masked forms: GCC 12 warns of an undefined value in
// the plain ones).
__attribute__((target("avx512f,avx512bw,avx2,fma,f16c"))) inline __m512 load16(const std::uint16_t* a) {
  return _mm512_mask_cvtph_ps(_mm512_setzero_ps(), static_cast<__mmask16>(0xFFFF),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
}
__attribute__((target("avx512f,avx512bw,avx2,fma,f16c"))) inline __m512 load16(const Bf16* a) {
  const __m512i w = _mm512_maskz_cvtepu16_epi32(static_cast<__mmask16>(0xFFFF), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(static_cast<__mmask16>(0xFFFF), w, 16));
}

__attribute__((target("avx512f,avx512bw,avx2,fma,f16c"))) inline __m512 load16(const float* a) { return _mm512_loadu_ps(a); }

// An f32, f16 or bf16 row against x in 512-bit registers, 64 numbers a step into four
// accumulators. Rows whose length is no multiple of 64 (stories15M's 288): the rest 16 and
// 8 at a time, and the last few one by one (the scalar loop of before took 14% of a step).
template <class T>
__attribute__((target("avx512f,avx512bw,avx2,fma,f16c"))) float dot_half_avx512(const T* a, const float* x, std::int64_t n,
                                                                                std::ptrdiff_t pd) {
  constexpr int lines = static_cast<int>(sizeof(T));  // a step's 64 numbers: 2 lines of halves, 4 of f32
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    prefetch_ahead(a + i, pd, lines);
    s0 = _mm512_fmadd_ps(load16(a + i), _mm512_loadu_ps(x + i), s0);
    s1 = _mm512_fmadd_ps(load16(a + i + 16), _mm512_loadu_ps(x + i + 16), s1);
    s2 = _mm512_fmadd_ps(load16(a + i + 32), _mm512_loadu_ps(x + i + 32), s2);
    s3 = _mm512_fmadd_ps(load16(a + i + 48), _mm512_loadu_ps(x + i + 48), s3);
  }
  for (; i + 16 <= n; i += 16) s1 = _mm512_fmadd_ps(load16(a + i), _mm512_loadu_ps(x + i), s1);
  __m256 t = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) t = _mm256_fmadd_ps(load8(a + i), _mm256_loadu_ps(x + i), t);
  float lanes[16];
  _mm512_storeu_ps(lanes, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  float s = hsum(t);
  for (float v : lanes) s += v;
  for (; i < n; ++i) s += load1(a + i) * x[i];
  return s;
}

// R f32 rows against x in 512-bit registers, 16 numbers of each row a step into one
// accumulator per row: R streams through memory at once, x's 16 numbers loaded once for all
// of them. On Zen 5 (TinyLlama, one thread) 4 rows at a time decode at 7.3-7.8 tok/s
// against 5.5-6.5 one row at a time (docs/generate.md, all rounds; docs/benchmarks.md).
// f16 rows 2, 4 or 8 at a time measured no faster there, so f16 and bf16 rows keep
// dot_half_avx512. Each stream prefetches `pd` / R bytes ahead, so the bytes in flight are
// those of one row's setting.
// A row's arithmetic does not depend on R (its own chain of multiply-adds, then its lanes
// and tail in order, the tail by explicit multiply-adds), so the rows' split between
// threads changes no bit.
template <int R>
__attribute__((target("avx512f,avx2,fma"))) void dot_rows_f32_avx512(const float* a, std::size_t lda, const float* x,
                                                                    std::int64_t n, std::ptrdiff_t pd, float* out) {
  __m512 s[R];
  for (int r = 0; r < R; ++r) s[r] = _mm512_setzero_ps();
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int r = 0; r < R; ++r) prefetch_ahead(a + static_cast<std::size_t>(r) * lda + i, pd, 1);
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int r = 0; r < R; ++r) s[r] = _mm512_fmadd_ps(_mm512_loadu_ps(a + static_cast<std::size_t>(r) * lda + i), xv, s[r]);
  }
  for (int r = 0; r < R; ++r) {
    float lanes[16];  // summed through memory: GCC 12 warns inside _mm512_reduce_add_ps
    _mm512_storeu_ps(lanes, s[r]);
    float t = 0;
    for (float v : lanes) t += v;
    for (std::int64_t k = i; k < n; ++k) t = std::fma(a[static_cast<std::size_t>(r) * lda + static_cast<std::size_t>(k)], x[k], t);
    out[r] = t;
  }
}

// Rows lo..hi of an f32 matrix, 4 at a time (dot_rows_f32_avx512), or one at a time where
// they are short: rows of 768 (stories110M) decode 6-15% faster one at a time, one
// stream through the matrix instead of four that jump ahead at every fourth row; rows of
// 2048 (TinyLlama) 5% slower (Zen 5, one thread, paired rounds; docs/benchmarks.md).
inline constexpr std::int64_t kShortF32Row = 1024;
__attribute__((target("avx512f,avx2,fma"))) void matvec_f32_avx512(float* out, const Weight& w, const float* x, std::int64_t lo,
                                                                  std::int64_t hi, std::ptrdiff_t pd) {
  constexpr int R = 4;
  const std::size_t lda = w.row_bytes / sizeof(float);
  const auto* a = reinterpret_cast<const float*>(w.data);
  std::int64_t r = lo;
  if (w.cols <= kShortF32Row) {
    for (; r < hi; ++r) out[r - lo] = dot_half_avx512<float>(a + static_cast<std::size_t>(r) * lda, x, w.cols, pd);
    return;
  }
  for (; r + R <= hi; r += R)
    dot_rows_f32_avx512<R>(a + static_cast<std::size_t>(r) * lda, lda, x, w.cols, pd / R, out + (r - lo));
  for (; r < hi; ++r) dot_rows_f32_avx512<1>(a + static_cast<std::size_t>(r) * lda, lda, x, w.cols, pd / R, out + (r - lo));
}

// Long rows on the AVX2 path (f32, f16, bf16). A row of 5632 (TinyLlama's down projection) has
// an x of 22 KB: streamed a row at a time, the row's weights push x out of the 32 KB L1
// before the next row comes back to it, and the weights read at 12-13 GB/s where rows of
// 2048 read at 20-21 (Zen 4, one core; four rows at a time, the path before this one,
// 14-16). So a thread's rows go in blocks of about 192 KB, which stay in L2, and each block
// is read in column tiles of about 1400 numbers: x's tile (5.5 KB) stays in L1 while the
// block's rows pass over it. The tiles' order would leave the memory streams short and
// scattered, so the next block is fetched into L2 in order while this one is read (one
// prefetch per cache line, spread over the block's tiles); without that prefetch this order
// reads at 8 GB/s, with it at 20-22 (docs/benchmarks.md). The prefetch distance setting
// does not apply here: the distance is the block.
// A row's sum is its tiles' partial sums added in tile order, whichever rows share its
// block, so results do not depend on how the rows were split between threads.
inline constexpr std::int64_t kLongRow = 4096;

template <class T, float (*Dot)(const T*, const float*, std::int64_t, std::ptrdiff_t)>
__attribute__((target("avx2,fma,f16c"))) void matvec_tiled(float* out, const Weight& w, const float* x, std::int64_t lo,
                                                          std::int64_t hi) {
  const std::int64_t n = w.cols;
  const std::int64_t tiles = (n + 1535) / 1536, tile = ((n + tiles - 1) / tiles + 31) / 32 * 32;
  const std::int64_t block = std::max<std::int64_t>(4, static_cast<std::int64_t>((std::size_t{192} << 10) / w.row_bytes));
  for (std::int64_t r0 = lo; r0 < hi; r0 += block) {
    const std::int64_t r1 = std::min(hi, r0 + block);
    // The next block's lines, a share of them with each row's tile.
    const char* next = reinterpret_cast<const char*>(w.data + static_cast<std::size_t>(r1) * w.row_bytes);
    const std::size_t lines = static_cast<std::size_t>(std::min(hi, r1 + block) - r1) * w.row_bytes / 64;
    const auto steps = static_cast<std::size_t>((r1 - r0) * tiles);
    const std::size_t per_step = (lines + steps - 1) / steps;
    std::size_t fetched = 0;
    for (std::int64_t c = 0; c < n; c += tile) {
      const std::int64_t len = std::min(tile, n - c);
      for (std::int64_t r = r0; r < r1; ++r) {
        for (std::size_t k = 0; k < per_step && fetched < lines; ++k, ++fetched) _mm_prefetch(next + 64 * fetched, _MM_HINT_T1);
        const T* a = reinterpret_cast<const T*>(w.data + static_cast<std::size_t>(r) * w.row_bytes) + c;
        const float p = Dot(a, x + c, len, 0);
        out[r - lo] = c == 0 ? p : out[r - lo] + p;
      }
    }
  }
}

// ---- a few tokens at once: each row read once for all of them ---------------------------

// s[r · 4 + t] = a_r[0, len) · x_t[0, len) for R rows a_r = a + r · lda and NT tokens, the
// x_t packed in steps of 8 columns: column i of token t at xp[(i / 8) · step + t · 8 + i % 8].
// A step loads the NT tokens' 8 numbers once (side by side: one stream through L1) and
// each row's 8 numbers once, for R · NT multiply-adds into as many accumulators.
template <class T, int R, int NT>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void dots_few(const T* a, std::size_t lda, const float* xp,
                                                             std::size_t step, std::int64_t len, float* s) {
  __m256 acc[R][NT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  const float* xs = xp;
  std::int64_t i = 0;
  for (; i + 8 <= len; i += 8, xs += step) {
    __m256 xv[NT];
    for (int t = 0; t < NT; ++t) xv[t] = _mm256_loadu_ps(xs + 8 * t);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = load8(a + static_cast<std::size_t>(r) * lda + i);
      for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) {
      float v = hsum(acc[r][t]);
      for (std::int64_t k = i; k < len; ++k) v += load1(a + static_cast<std::size_t>(r) * lda + k) * xs[8 * t + (k - i)];
      s[r * 4 + t] = v;
    }
}

// With AVX-512VL's 32 registers 4 rows × 4 tokens (16 accumulators), with AVX2's 16 two rows.
template <class T, int R, int NT>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl"))) void dots_few_wide(const T* a, std::size_t lda, const float* xp,
                                                                            std::size_t step, std::int64_t len, float* s) {
  dots_few<T, R, NT>(a, lda, xp, step, len, s);
}

template <class T, int R>
__attribute__((target("avx2,fma,f16c"))) inline void dots_few_tokens(bool wide, const T* a, std::size_t lda, const float* xp,
                                                                    std::size_t step, std::int64_t len, std::size_t nt,
                                                                    float* s) {
  if (wide) {
    switch (nt) {
      case 4: return dots_few_wide<T, R, 4>(a, lda, xp, step, len, s);
      case 3: return dots_few_wide<T, R, 3>(a, lda, xp, step, len, s);
      case 2: return dots_few_wide<T, R, 2>(a, lda, xp, step, len, s);
      default: return dots_few_wide<T, R, 1>(a, lda, xp, step, len, s);
    }
  }
  switch (nt) {
    case 4: return dots_few<T, R, 4>(a, lda, xp, step, len, s);
    case 3: return dots_few<T, R, 3>(a, lda, xp, step, len, s);
    case 2: return dots_few<T, R, 2>(a, lda, xp, step, len, s);
    default: return dots_few<T, R, 1>(a, lda, xp, step, len, s);
  }
}

// The rows go in blocks that stay in L2 (about 192 KB), each block in column tiles whose
// slices of the n tokens' activations (16 KB in all) stay in L1 while the block's rows
// pass over them; with more than one tile the next block is fetched into L2 meanwhile, as
// in matvec_tiled. A row's sum for a token is its tiles' sums in tile order, the tiles
// set by n and the row length only, so the threads' split of the rows changes no bit.
template <class T>
__attribute__((target("avx2,fma,f16c"))) void matmul_few_rows(float* out, std::size_t ld, const Weight& w, const float* x,
                                                             std::int64_t n, std::int64_t lo, std::int64_t hi,
                                                             std::vector<float>& xp) {
  const bool wide = cpu::avx512();
  const std::int64_t R = wide ? 4 : 2;
  const std::int64_t cols = w.cols;
  const std::int64_t fit = std::max<std::int64_t>(256, (std::int64_t{16} << 10) / (4 * n) / 32 * 32);
  const std::int64_t tiles = (cols + fit - 1) / fit, tile = ((cols + tiles - 1) / tiles + 31) / 32 * 32;
  const std::int64_t block =
      std::max<std::int64_t>(4, static_cast<std::int64_t>((std::size_t{192} << 10) / w.row_bytes) / 4 * 4);
  // X packed: 8 columns of every token side by side (the last step's columns past
  // `cols` are zeros nobody reads).
  const auto N = static_cast<std::size_t>(n), C = static_cast<std::size_t>(cols), step = 8 * N;
  xp.assign((C + 7) / 8 * step, 0.0f);
  for (std::size_t t = 0; t < N; ++t)
    for (std::size_t c = 0; c < C; ++c) xp[c / 8 * step + t * 8 + c % 8] = x[t * C + c];
  const std::size_t lda = w.row_bytes / sizeof(T);
  for (std::int64_t r0 = lo; r0 < hi; r0 += block) {
    const std::int64_t r1 = std::min(hi, r0 + block);
    const char* next = reinterpret_cast<const char*>(w.data + static_cast<std::size_t>(r1) * w.row_bytes);
    const std::size_t lines = tiles > 1 ? static_cast<std::size_t>(std::min(hi, r1 + block) - r1) * w.row_bytes / 64 : 0;
    const auto steps = static_cast<std::size_t>((r1 - r0 + R - 1) / R * tiles);
    const std::size_t per_step = (lines + steps - 1) / steps;
    std::size_t fetched = 0;
    for (std::int64_t c = 0; c < cols; c += tile) {
      const std::int64_t len = std::min(tile, cols - c);
      for (std::int64_t r = r0; r < r1; r += R) {
        for (std::size_t k = 0; k < per_step && fetched < lines; ++k, ++fetched) _mm_prefetch(next + 64 * fetched, _MM_HINT_T1);
        const T* a = reinterpret_cast<const T*>(w.data + static_cast<std::size_t>(r) * w.row_bytes) + c;
        const std::int64_t nr = std::min(R, r1 - r);
        for (std::size_t t0 = 0; t0 < N; t0 += 4) {
          float s[16];
          const float* xt = xp.data() + static_cast<std::size_t>(c) / 8 * step + t0 * 8;
          const std::size_t nt = std::min<std::size_t>(4, N - t0);
          if (nr == 4) dots_few_tokens<T, 4>(wide, a, lda, xt, step, len, nt, s);
          else if (nr >= 2) dots_few_tokens<T, 2>(wide, a, lda, xt, step, len, nt, s);
          else dots_few_tokens<T, 1>(wide, a, lda, xt, step, len, nt, s);
          if (nr == 3) dots_few_tokens<T, 1>(wide, a + 2 * lda, lda, xt, step, len, nt, s + 8);
          for (std::int64_t i = 0; i < nr; ++i)
            for (std::size_t j = 0; j < nt; ++j) {
              float& dst = out[(t0 + j) * ld + static_cast<std::size_t>(r + i - lo)];
              const float v = s[i * 4 + static_cast<std::int64_t>(j)];
              dst = c == 0 ? v : dst + v;
            }
        }
      }
    }
  }
}

// The int8 dot product of 32 weights w and 32 activations x, as 8 int32 lanes: the
// unsigned × signed multiply-add needs an unsigned operand, so |w| times x with w's sign.
__attribute__((target("avx2"))) inline __m256i dot32_avx2(__m256i w, __m256i x) {
  __m256i aw = _mm256_sign_epi8(w, w), sx = _mm256_sign_epi8(x, w);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
}

__attribute__((target("avx2,avx512vnni,avx512vl,avx512bw"))) inline __m256i dot32_vnni(__m256i w, __m256i x) {
  __m256i aw = _mm256_sign_epi8(w, w), sx = _mm256_sign_epi8(x, w);
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sx);
}

// The q8_0 decode step's loop, expanded twice: with AVX2's multiply-adds and with VNNI's.
// (dots_q8_vnni below gives the same sums, bit for bit, for several tokens at once.)
#define LMP_DOT_Q8(DOT32)                                                                   \
  /* two blocks per step into two accumulators: the chain of multiply-adds is not the limit */ \
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                            \
  std::int64_t b = 0;                                                                       \
  for (; b + 2 <= nb; b += 2) {                                                             \
    prefetch_ahead(w + b, pd, 2); /* 68 bytes a step: two lines, so that none is missed */ \
    __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));            \
    __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b + 1].qs));        \
    __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));        \
    __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32 + 32));   \
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT32(w0, x0)), _mm256_set1_ps(_cvtsh_ss(w[b].d) * xd[b]), acc0); \
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT32(w1, x1)), _mm256_set1_ps(_cvtsh_ss(w[b + 1].d) * xd[b + 1]), acc1); \
  }                                                                                         \
  for (; b < nb; ++b) {                                                                     \
    __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));            \
    __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));        \
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT32(wv, xv)), _mm256_set1_ps(_cvtsh_ss(w[b].d) * xd[b]), acc0); \
  }                                                                                         \
  return hsum(_mm256_add_ps(acc0, acc1));

// A q4_0 or q8_0 row against T tokens (T = 1: the decode step). Each block gives the int8
// multiply-add an unsigned operand: q4_0's nibbles (0..15) as they are, q8_0's bytes plus
// 128 (w ^ 0x80). The offset (8 or 128) comes back through each token's block bias
// (QuantizedVec: −8 · Σ x and −128 · Σ x over each group of 4), which the integer sums
// start from: the same integers as Σ w · x. A block is unpacked once and its scale
// converted once for all T tokens; each token then costs one multiply-add, a conversion and
// two float products. A token's arithmetic does not depend on T, so a prompt's few tokens
// get the decode step's sums bit for bit. Grouped (q4_0): each token sums 4 blocks into p,
// then p into its total, so that the groups' chains of multiply-adds overlap. Paired
// (q8_0): even and odd blocks into two totals, the order of dot_q8_vnni, the decode step's
// loop, which streams memory a few percent faster on Zen 4 than this one with T = 1. Every
// product is added by an explicit multiply-add or after one (never a product then a sum
// that the compiler may or may not fuse), so the bits do not depend on how it compiles T.
#define LMP_Q4_UNSIGNED(k) nibbles_avx2(w[k].qs) /* low nibbles, then high ones */
#define LMP_Q8_UNSIGNED(k)                                                                  \
  _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[k].qs)), _mm256_set1_epi8(static_cast<char>(0x80)))
#define LMP_INT8_BLOCK(MADD, UNSIGNED, k, STEP)                                             \
  do {                                                                                      \
    const __m256i u = UNSIGNED(k);                                                          \
    const __m256 dw = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(w[k].d)));          \
    for (int t = 0; t < T; ++t) {                                                           \
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + ((k) * T + t) * 32)); \
      const __m256i bias = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bias + ((k) * T + t) * 8)); \
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(x.d[(k) * T + t]));            \
      const __m256 prod = _mm256_cvtepi32_ps(MADD(bias, u, xv));                             \
      if constexpr (Paired) acc[(k) & 1][t] = _mm256_fmadd_ps(prod, scale, acc[(k) & 1][t]); \
      else if (STEP == 0) p[t] = _mm256_mul_ps(prod, scale);                                \
      else if (STEP == 1) p[t] = _mm256_fmadd_ps(prod, scale, p[t]);                        \
      else acc[0][t] = _mm256_fmadd_ps(prod, scale, acc[0][t]);                             \
    }                                                                                       \
  } while (0)
#define LMP_DOTS_INT8(MADD, UNSIGNED, LINES)                                                \
  /* acc[0] alone when grouped (sums of 4 blocks in p added to it); acc[0] and acc[1] for  \
     even and odd blocks when paired */                                                     \
  __m256 acc[2][T], p[T];                                                                   \
  for (int t = 0; t < T; ++t) acc[0][t] = acc[1][t] = _mm256_setzero_ps();                  \
  std::int64_t b = 0;                                                                       \
  for (; b + 4 <= nb; b += 4) {                                                             \
    prefetch_ahead(w + b, pd, LINES); /* 4 blocks: 72 bytes (q4_0), 136 (q8_0) */          \
    LMP_INT8_BLOCK(MADD, UNSIGNED, b, 0);                                             \
    LMP_INT8_BLOCK(MADD, UNSIGNED, b + 1, 1);                                         \
    LMP_INT8_BLOCK(MADD, UNSIGNED, b + 2, 1);                                         \
    LMP_INT8_BLOCK(MADD, UNSIGNED, b + 3, 1);                                         \
    if constexpr (!Paired)                                                                  \
      for (int t = 0; t < T; ++t) acc[0][t] = _mm256_add_ps(acc[0][t], p[t]);              \
  }                                                                                         \
  for (; b < nb; ++b) LMP_INT8_BLOCK(MADD, UNSIGNED, b, 2);                           \
  for (int t = 0; t < T; ++t) out[t] = hsum(Paired ? _mm256_add_ps(acc[0][t], acc[1][t]) : acc[0][t]);

__attribute__((target("avx2"))) inline __m256i madd_u8_avx2(__m256i bias, __m256i nib, __m256i x) {
  return _mm256_add_epi32(bias, _mm256_madd_epi16(_mm256_maddubs_epi16(nib, x), _mm256_set1_epi16(1)));
}
__attribute__((target("avx2,avx512vnni,avx512vl"))) inline __m256i madd_u8_vnni(__m256i bias, __m256i nib, __m256i x) {
  return _mm256_dpbusd_epi32(bias, nib, x);
}

__attribute__((target("avx2,fma,f16c"))) float dot_q8_avx2(const BlockQ8_0* w, const std::int8_t* xq, const float* xd,
                                                         std::int64_t nb, std::ptrdiff_t pd) {
  LMP_DOT_Q8(dot32_avx2)
}
__attribute__((target("avx2,fma,f16c,avx512vnni,avx512vl,avx512bw"))) float dot_q8_vnni(const BlockQ8_0* w,
                                                                                       const std::int8_t* xq,
                                                                                       const float* xd, std::int64_t nb, std::ptrdiff_t pd) {
  LMP_DOT_Q8(dot32_vnni)
}
// T tokens' quantized activations, side by side per block: block k of token t at
// q + (k·T + t)·32, its biases at bias + (k·T + t)·8 and its scale at d[k·T + t]. With
// T = 1 these are a QuantizedVec's own arrays.
struct TokenBlocks {
  const std::int8_t* q;
  const std::int32_t* bias;  // QuantizedVec::bias_q4 or bias_q8, for the rows' dtype
  const float* d;
};

// out[t] = row · x's token t for T tokens. q8_0 rows without VNNI take dot_q8_avx2: AVX2's
// byte multiply-add sums pairs in 16 bits, and (w + 128) · x can pass 32767 there.
template <int T>
__attribute__((target("avx2,fma,f16c"))) void dots_q4_avx2(float* out, const BlockQ4_0* w, TokenBlocks x, std::int64_t nb,
                                                          std::ptrdiff_t pd) {
  constexpr bool Paired = false;
  LMP_DOTS_INT8(madd_u8_avx2, LMP_Q4_UNSIGNED, 2)
}
template <int T>
__attribute__((target("avx2,fma,f16c,avx512vnni,avx512vl,avx512bw"))) void dots_q4_vnni(float* out, const BlockQ4_0* w,
                                                                                       TokenBlocks x, std::int64_t nb,
                                                                                       std::ptrdiff_t pd) {
  constexpr bool Paired = false;
  LMP_DOTS_INT8(madd_u8_vnni, LMP_Q4_UNSIGNED, 2)
}
template <int T>
__attribute__((target("avx2,fma,f16c,avx512vnni,avx512vl,avx512bw"))) void dots_q8_vnni(float* out, const BlockQ8_0* w,
                                                                                       TokenBlocks x, std::int64_t nb,
                                                                                       std::ptrdiff_t pd) {
  constexpr bool Paired = true;
  LMP_DOTS_INT8(madd_u8_vnni, LMP_Q8_UNSIGNED, 4)
}
// An iq4_nl row with VNNI: q4_0's loop, each block's nibbles looked up in the table plus
// 128 (one byte shuffle), the sums started from −128 · Σ x (TokenBlocks::bias = bias_q8).
#define LMP_IQ4NL_UNSIGNED(k) _mm256_shuffle_epi8(table, LMP_Q4_UNSIGNED(k))
__attribute__((target("avx2,fma,f16c,avx512vnni,avx512vl,avx512bw"))) float dot_iq4_nl_vnni(const BlockIq4Nl* w,
                                                                                           TokenBlocks x, std::int64_t nb,
                                                                                           std::ptrdiff_t pd) {
  constexpr int T = 1;
  constexpr bool Paired = false;
  const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kIq4LevelsU)));
  float out[1];
  LMP_DOTS_INT8(madd_u8_vnni, LMP_IQ4NL_UNSIGNED, 2)
  return out[0];
}
#undef LMP_IQ4NL_UNSIGNED

// The q4_0 decode step in 512-bit registers (VNNI and VBMI, on CPUs that do not split them
// in halves: Zen 5, Intel), two blocks a step, four a loop into two accumulators. One 64-byte
// load holds blocks k and k + 1 (36 bytes); a byte permute lays each block's 16 bytes out
// twice (lanes 0-31 for block k, 32-63 for k + 1), a shift of the second copies by 4 and a
// mask give both blocks' nibbles, and one multiply-add takes the 64 activations from the
// bias (−8 · Σ x), as in LMP_DOTS_INT8. The scales' f16 bytes come out of the same bytes by a
// 256-bit permute, block k's in lanes 0-7 and k + 1's in 8-15, as the sums. The last steps
// load only the row's own bytes (masked): a full load would read past the matrix. Per block
// that is about half the instructions of dots_q4_vnni<1>, which sets a scale from scalars
// and loads, shifts and masks each block alone: 1.05-1.4× its decode speed on Zen 5, one
// thread (docs/benchmarks.md).
// A row's blocks are added in another order than dots_q4_vnni's, so the few-token products
// (which keep the 256-bit kernel) match these to rounding, not bit for bit.
// GCC 12 warns of undefined values inside its own 512-bit permute, shift and load intrinsics
// (their unmasked forms start from an undefined register); the code reads none. Clang has
// neither the warning nor its name.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
struct Q4ZmmConsts {
  __m512i perm, shift, low4;
  __m256i dperm;
  __m512i xdperm;
};

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c"))) inline Q4ZmmConsts q4_zmm_consts() {
  alignas(64) std::uint8_t perm[64];
  alignas(32) std::uint8_t dperm[32];
  for (int i = 0; i < 64; ++i) perm[i] = static_cast<std::uint8_t>((i < 32 ? 2 : 20) + i % 16);
  for (int i = 0; i < 32; ++i) dperm[i] = static_cast<std::uint8_t>((i < 16 ? 0 : 18) + i % 2);
  Q4ZmmConsts c;
  c.perm = _mm512_load_si512(perm);
  c.shift = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);  // qwords 2-3 and 6-7: the high nibbles
  c.low4 = _mm512_set1_epi8(0x0F);
  c.dperm = _mm256_load_si256(reinterpret_cast<const __m256i*>(dperm));
  c.xdperm = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return c;
}

// Blocks k and k + 1 of a row (only k when one == true) against x, added to acc.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c"), always_inline)) inline __m512 q4_zmm_step(
    const Q4ZmmConsts& c, const BlockQ4_0* w, const TokenBlocks& x, std::int64_t k, bool full, bool one, __m512 acc) {
  const __mmask64 bytes = one ? (__mmask64{1} << 18) - 1 : (__mmask64{1} << 36) - 1;
  const __m512i raw = full ? _mm512_loadu_si512(w + k) : _mm512_maskz_loadu_epi8(bytes, w + k);
  const __m256i head = full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k))
                            : _mm256_maskz_loadu_epi8(static_cast<__mmask32>(bytes), w + k);
  const __m512i nib = _mm512_and_si512(_mm512_srlv_epi64(_mm512_permutexvar_epi8(c.perm, raw), c.shift), c.low4);
  const __m512i xv = one ? _mm512_maskz_loadu_epi8(0xFFFFFFFFull, x.q + k * 32) : _mm512_loadu_si512(x.q + k * 32);
  const __m512i bias = one ? _mm512_maskz_loadu_epi32(0x00FF, x.bias + k * 8) : _mm512_loadu_si512(x.bias + k * 8);
  const __m512 dw = _mm512_mask_cvtph_ps(_mm512_setzero_ps(), static_cast<__mmask16>(0xFFFF), _mm256_permutexvar_epi8(c.dperm, head));
  const __m512 xd = _mm512_permutexvar_ps(c.xdperm, _mm512_maskz_loadu_ps(one ? 0x1 : 0x3, x.d + k));
  const __m512 prod = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, nib, xv));
  return _mm512_fmadd_ps(prod, _mm512_mul_ps(dw, xd), acc);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c"))) float dot_q4_zmm(const BlockQ4_0* w,
                                                                                                      TokenBlocks x, std::int64_t nb,
                                                                                                      std::ptrdiff_t pd) {
  const Q4ZmmConsts c = q4_zmm_consts();
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  std::int64_t k = 0;
  // Full 64-byte loads while 4 blocks (72 bytes) remain from the load's start.
  for (; k + 4 <= nb; k += 4) {
    prefetch_ahead(w + k, pd, 2);  // 72 bytes a loop: two lines, so that none is missed
    acc0 = q4_zmm_step(c, w, x, k, true, false, acc0);
    acc1 = q4_zmm_step(c, w, x, k + 2, k + 6 <= nb, false, acc1);
  }
  if (k + 2 <= nb) {
    acc0 = q4_zmm_step(c, w, x, k, false, false, acc0);
    k += 2;
  }
  if (k < nb) acc1 = q4_zmm_step(c, w, x, k, false, true, acc1);
  // Summed through memory: GCC 12 warns of uninitialized values inside _mm512_reduce_add_ps.
  float lanes[16];
  _mm512_storeu_ps(lanes, _mm512_add_ps(acc0, acc1));
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#undef LMP_DOT_Q8
#undef LMP_DOTS_INT8
#undef LMP_INT8_BLOCK
#undef LMP_Q4_UNSIGNED
#undef LMP_Q8_UNSIGNED

// ---- iq4_nl and iq4_xs rows against a quantized activation ------------------------------
// Each block of 32 looked up in the table by one byte shuffle. With VNNI the table is
// taken plus 128, unsigned, and each multiply-add starts from the activation's
// −128 · Σ x of each 4 (QuantizedVec::bias_q8), as q8_0's rows do; with AVX2 alone, whose
// byte multiply-add sums pairs in 16 bits, where 241 · 127 · 2 overflows, the signed
// values meet x with the sign moved onto x (dot32_avx2). Then times d (iq4_xs:
// d · (ls − 32), a super-block's 8 factors made at once from its scale bits) and the
// activation block's scale. nb: blocks of 32.
__attribute__((target("avx2"))) inline __m256i iq4_dot_avx2(__m256i table, const std::uint8_t* qs, __m256i x,
                                                           const std::int32_t*) {
  return dot32_avx2(_mm256_shuffle_epi8(table, nibbles_avx2(qs)), x);
}
__attribute__((target("avx2,avx512vnni,avx512vl"))) inline __m256i iq4_dot_vnni(__m256i table, const std::uint8_t* qs,
                                                                               __m256i x, const std::int32_t* bias) {
  return _mm256_dpbusd_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bias)),
                             _mm256_shuffle_epi8(table, nibbles_avx2(qs)), x);
}
#define LMP_IQ4_X(k) _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + (k) * 32))
#define LMP_DOT_IQ4(DOT, LEVELS)                                                            \
  const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(LEVELS))); \
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;                                           \
  if constexpr (std::is_same_v<Block, BlockIq4Nl>) {                                        \
    const auto* w = reinterpret_cast<const BlockIq4Nl*>(row);                              \
    std::int64_t b = 0;                                                                     \
    for (; b + 2 <= nb; b += 2) {                                                           \
      prefetch_ahead(w + b, pd, 1); /* 36 bytes a step */                                   \
      const __m256i p0 = DOT(table, w[b].qs, LMP_IQ4_X(b), bias + 8 * b);                          \
      const __m256i p1 = DOT(table, w[b + 1].qs, LMP_IQ4_X(b + 1), bias + 8 * b + 8);              \
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(_cvtsh_ss(w[b].d) * xd[b]), acc0); \
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(_cvtsh_ss(w[b + 1].d) * xd[b + 1]), acc1); \
    }                                                                                       \
    if (b < nb)                                                                             \
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT(table, w[b].qs, LMP_IQ4_X(b), bias + 8 * b)),  \
                             _mm256_set1_ps(_cvtsh_ss(w[b].d) * xd[b]), acc0);              \
  } else {                                                                                  \
    const auto* w = reinterpret_cast<const BlockIq4Xs*>(row);                              \
    const __m256i nib_shift = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);               \
    const __m256i pair_shift = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);                \
    for (std::int64_t s = 0; s < nb / 8; ++s) {                                             \
      prefetch_ahead(w + s, pd, 3); /* 136 bytes */                                         \
      /* ls_j: nibble j of scales_l's 32 bits, bits 2j and 2j + 1 of scales_h above them */ \
      std::uint32_t lo4;                                                                    \
      __builtin_memcpy(&lo4, w[s].scales_l, 4);                                             \
      const __m256i ls = _mm256_or_si256(                                                   \
          _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(lo4)), nib_shift), _mm256_set1_epi32(15)), \
          _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w[s].scales_h), pair_shift), \
                                             _mm256_set1_epi32(3)), 4));                    \
      const __m256 f = _mm256_mul_ps(                                                       \
          _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(w[s].d)), _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)))), \
          _mm256_loadu_ps(xd + 8 * s));                                                     \
      for (int j = 0; j < 8; ++j) {                                                         \
        const std::int64_t k = 8 * s + j;                                                   \
        const __m256i p = DOT(table, w[s].qs + 16 * j, LMP_IQ4_X(k), bias + 8 * k);                \
        const __m256 fj = _mm256_permutevar8x32_ps(f, _mm256_set1_epi32(j));               \
        if (j & 1) acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), fj, acc1);                 \
        else acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), fj, acc0);                       \
      }                                                                                     \
    }                                                                                       \
  }                                                                                         \
  return hsum(_mm256_add_ps(acc0, acc1));

// bias: QuantizedVec::bias_q8 (used with VNNI).
template <typename Block>
__attribute__((target("avx2,fma,f16c"))) float dot_iq4_avx2(const std::byte* row, const std::int8_t* xq, const float* xd,
                                                          const std::int32_t* bias, std::int64_t nb, std::ptrdiff_t pd) {
  LMP_DOT_IQ4(iq4_dot_avx2, kIq4Levels)
}
template <typename Block>
__attribute__((target("avx2,fma,f16c,avx512vnni,avx512vl,avx512bw"))) float dot_iq4_vnni(const std::byte* row,
                                                                                        const std::int8_t* xq,
                                                                                        const float* xd,
                                                                                        const std::int32_t* bias,
                                                                                        std::int64_t nb, std::ptrdiff_t pd) {
  LMP_DOT_IQ4(iq4_dot_vnni, kIq4LevelsU)
}
#undef LMP_DOT_IQ4
#undef LMP_IQ4_X

// ---- q4_1, q5_0 and q5_1 rows against a quantized activation ---------------------------
// Each block's levels (0..15 or 0..31: q4_0's nibbles, and for the 5-bit types each fifth
// bit of qh moved to bit 4: byte j of the 32 takes byte j / 8 of qh by a shuffle, tests
// its bit j % 8, and keeps 16 where it is set) on the unsigned side of the multiply-add.
// q5_0's − 16 comes back as twice q4_0's bias (−16 · Σ x of each 4); q4_1's and q5_1's
// offset m as m · (the activation block's d · Σ q), QuantizedVec::sum.
#define LMP_DOT_Q451(MADD)                                                                  \
  constexpr bool five = !std::is_same_v<Block, BlockQ4_1>, offset = !std::is_same_v<Block, BlockQ5_0>; \
  const auto* w = reinterpret_cast<const Block*>(row);                                     \
  const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll); \
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));  \
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;                                           \
  float om = 0;                                                                             \
  for (std::int64_t b = 0; b < nb; ++b) {                                                   \
    if ((b & 3) == 0) prefetch_ahead(w + b, pd, 2); /* 4 blocks: 80 to 96 bytes */        \
    __m256i lev = nibbles_avx2(w[b].qs);                                                    \
    __m256i start = _mm256_setzero_si256();                                                 \
    if constexpr (five) {                                                                   \
      std::uint32_t qh;                                                                     \
      __builtin_memcpy(&qh, w[b].qh, 4);                                                    \
      const __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), spread); \
      lev = _mm256_or_si256(lev, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit), _mm256_set1_epi8(16))); \
    }                                                                                       \
    if constexpr (!offset) start = _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bias + 8 * b)), 1); \
    const __m256i p = MADD(start, lev, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * b))); \
    const __m256 f = _mm256_set1_ps(_cvtsh_ss(w[b].d) * xd[b]);                            \
    if (b & 1) acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), f, acc1);                      \
    else acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), f, acc0);                            \
    if constexpr (offset) om += _cvtsh_ss(w[b].m) * xs[b];                                  \
  }                                                                                         \
  return hsum(_mm256_add_ps(acc0, acc1)) + om;

// bias: QuantizedVec::bias_q4 (q5_0); xs: QuantizedVec::sum (q4_1, q5_1). nb: blocks.
template <typename Block>
__attribute__((target("avx2,fma,f16c"))) float dot_q451_avx2(const std::byte* row, const std::int8_t* xq, const float* xd,
                                                           const std::int32_t* bias, const float* xs, std::int64_t nb,
                                                           std::ptrdiff_t pd) {
  LMP_DOT_Q451(madd_u8_avx2)
}
template <typename Block>
__attribute__((target("avx2,fma,f16c,avx512vnni,avx512vl,avx512bw"))) float dot_q451_vnni(const std::byte* row,
                                                                                         const std::int8_t* xq,
                                                                                         const float* xd,
                                                                                         const std::int32_t* bias,
                                                                                         const float* xs, std::int64_t nb,
                                                                                         std::ptrdiff_t pd) {
  LMP_DOT_Q451(madd_u8_vnni)
}
#undef LMP_DOT_Q451

// ---- k-quant rows (q2_K … q6_K) against a quantized activation ---------------------
// Each sub-block of 32 numbers meets one of the activation's 32-number blocks: the int8
// multiply-add of its unsigned levels and the activation's bytes, times the sub-block's
// scale, the super-block's factor and the activation block's scale. q4_K and q5_K take
// their offsets off through the activation blocks' sums (QuantizedVec::sum):
// Σ (a·q − b)·x = a·Σ q·x − b·Σ x, one multiply-add of 8 sub-blocks a super-block.
// q6_K, q3_K and q2_K have a scale per 16 numbers (LMP_DOT_K16 below).
__attribute__((target("avx2"))) inline __m256 u8x8_to_ps(std::uint64_t v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(v))));
}
#define LMP_DOT_Q45_K(MADD)                                                                 \
  using Block = std::conditional_t<Q5, BlockQ5_K, BlockQ4_K>;                               \
  const auto* w = reinterpret_cast<const Block*>(row);                                     \
  const __m256i zero = _mm256_setzero_si256();                                             \
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, accm = acc0;                              \
  for (std::int64_t s = 0; s < nsb; ++s) {                                                  \
    prefetch_ahead(w + s, pd, 3); /* 144 or 176 bytes */                                    \
    std::uint64_t sc, mn;                                                                   \
    unpack_k_scales(w[s].scales, sc, mn);                                                   \
    /* each sub-block's factor: d · sc_j · (the activation block's scale) */                \
    const __m256 f = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(w[s].d)), u8x8_to_ps(sc)), \
                                   _mm256_loadu_ps(xd + 8 * s));                             \
    accm = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(w[s].dmin)), u8x8_to_ps(mn)), \
                           _mm256_loadu_ps(xs + 8 * s), accm);                              \
    const std::int8_t* x = xq + 256 * s;                                                    \
    for (int c = 0; c < 4; ++c) {                                                           \
      __m256i lo, hi;                                                                       \
      k_levels_avx2(w[s], c, lo, hi);                                                       \
      const __m256i plo = MADD(zero, lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * c))); \
      const __m256i phi = MADD(zero, hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * c + 32))); \
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(plo), _mm256_permutevar8x32_ps(f, _mm256_set1_epi32(2 * c)), acc0); \
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(phi), _mm256_permutevar8x32_ps(f, _mm256_set1_epi32(2 * c + 1)), acc1); \
    }                                                                                       \
  }                                                                                         \
  return hsum(_mm256_add_ps(acc0, acc1)) - hsum(accm);

template <bool Q5>
__attribute__((target("avx2,fma,f16c"))) float dot_q45_K_avx2(const std::byte* row, const std::int8_t* xq, const float* xd,
                                                            const float* xs, std::int64_t nsb, std::ptrdiff_t pd) {
  LMP_DOT_Q45_K(madd_u8_avx2)
}
template <bool Q5>
__attribute__((target("avx2,fma,f16c,avx512vnni,avx512vl,avx512bw"))) float dot_q45_K_vnni(const std::byte* row,
                                                                                         const std::int8_t* xq,
                                                                                         const float* xd, const float* xs,
                                                                                         std::int64_t nsb, std::ptrdiff_t pd) {
  LMP_DOT_Q45_K(madd_u8_vnni)
}
#undef LMP_DOT_Q45_K

// q6_K, q3_K and q2_K: a scale per 16 numbers. Each 32-number group's int8 multiply-add
// starts from what makes its levels signed: the activation's −32 · Σ x of each 4 for
// q6_K (QuantizedVec::bias_q6), an eighth of that, −4 · Σ x, for q3_K, 0 for q2_K, whose
// offsets dmin · m_j are taken off through the activation's sums of 16 (QuantizedVec::sum16),
// two multiply-adds a super-block. So the lanes hold Σ (q − 32)·x, Σ (q − 4)·x or Σ q·x
// exactly; lanes 0-3 are the group's first 16 numbers, 4-7 its second, and meet their
// scales as floats: the factors d · sc_j · (the activation block's scale) of a
// super-block's 16 scales are made at once, 8 to a register (F[0]: groups 0-3, F[1]:
// 4-7), and each group's pair spread over its lanes by one permute.
#define LMP_DOT_K16(MADD)                                                                   \
  constexpr bool q6 = std::is_same_v<Block, BlockQ6_K>, q3 = std::is_same_v<Block, BlockQ3_K>; \
  const auto* w = reinterpret_cast<const Block*>(row);                                     \
  const __m256i pairs_lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), pairs_hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7); \
  const __m128i low4 = _mm_set1_epi8(15);                                                   \
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, accm = acc0;                              \
  for (std::int64_t s = 0; s < nsb; ++s) {                                                  \
    prefetch_ahead(w + s, pd, q6 ? 4 : 2); /* 210, 110 or 84 bytes */                        \
    __m128i sc; /* the 16 scales, signed bytes */                                           \
    if constexpr (q6) {                                                                     \
      sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[s].scales));                  \
    } else if constexpr (q3) {                                                              \
      std::uint64_t lo, hi;                                                                 \
      unpack_q3_scales(w[s].scales, lo, hi);                                                \
      sc = _mm_sub_epi8(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)), _mm_set1_epi8(32)); \
    } else {                                                                                \
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[s].scales)); \
      const __m128i m = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);                      \
      const __m256 dmin = _mm256_set1_ps(_cvtsh_ss(w[s].dmin));                             \
      sc = _mm_and_si128(bytes, low4);                                                      \
      accm = _mm256_fmadd_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m))), \
                             _mm256_loadu_ps(xs16 + 16 * s), accm);                         \
      accm = _mm256_fmadd_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(m, m)))), \
                             _mm256_loadu_ps(xs16 + 16 * s + 8), accm);                     \
    }                                                                                       \
    const __m256 xds = _mm256_mul_ps(_mm256_loadu_ps(xd + 8 * s), _mm256_set1_ps(_cvtsh_ss(w[s].d))); \
    const __m256 F[2] = {                                                                   \
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)), _mm256_permutevar8x32_ps(xds, pairs_lo)), \
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc, sc))), \
                      _mm256_permutevar8x32_ps(xds, pairs_hi))};                            \
    const std::int8_t* x = xq + 256 * s;                                                    \
    const std::int32_t* b = bias + 64 * s;                                                  \
    for (int h = 0; h < 2; ++h) {                                                           \
      __m256i levels[4];                                                                    \
      if constexpr (q6) q6_levels_avx2(w[s], h, levels);                                    \
      else q23_levels_avx2(w[s], h, levels);                                                \
      for (int g = 0; g < 4; ++g) {                                                         \
        const int j = 4 * h + g; /* the activation's block */                               \
        __m256i start = _mm256_setzero_si256();                                             \
        if constexpr (q6) start = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 8 * j)); \
        else if constexpr (q3) start = _mm256_srai_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 8 * j)), 3); \
        const __m256i p = MADD(start, levels[g], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * j))); \
        const __m256 f = _mm256_permutevar8x32_ps(                                          \
            F[h], _mm256_setr_epi32(2 * g, 2 * g, 2 * g, 2 * g, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1)); \
        if (g & 1) acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), f, acc1);                  \
        else acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), f, acc0);                        \
      }                                                                                     \
    }                                                                                       \
  }                                                                                         \
  if constexpr (q6 || q3) return hsum(_mm256_add_ps(acc0, acc1));                           \
  else return hsum(_mm256_add_ps(acc0, acc1)) - hsum(accm);

// bias: QuantizedVec::bias_q6 (q6_K, q3_K); xs16: QuantizedVec::sum16 (q2_K).
template <typename Block>
__attribute__((target("avx2,fma,f16c"))) float dot_k16_avx2(const std::byte* row, const std::int8_t* xq, const float* xd,
                                                          const std::int32_t* bias, const float* xs16, std::int64_t nsb,
                                                          std::ptrdiff_t pd) {
  LMP_DOT_K16(madd_u8_avx2)
}
template <typename Block>
__attribute__((target("avx2,fma,f16c,avx512vnni,avx512vl,avx512bw"))) float dot_k16_vnni(const std::byte* row,
                                                                                        const std::int8_t* xq,
                                                                                        const float* xd,
                                                                                        const std::int32_t* bias,
                                                                                        const float* xs16,
                                                                                        std::int64_t nsb, std::ptrdiff_t pd) {
  LMP_DOT_K16(madd_u8_vnni)
}
#undef LMP_DOT_K16

// Without AVX2: each (super-)block converted to f32 and multiplied with x as it is.
float dot_k_scalar(DType t, const std::byte* row, const float* x, std::int64_t n) {
  float buf[kQK_K];
  const DTypeInfo& di = dtype_info(t);
  float s = 0;
  for (std::int64_t k = 0; k < n; k += static_cast<std::int64_t>(di.block), row += di.block_bytes) {
    to_f32(t, row, buf, di.block);
    for (std::size_t i = 0; i < di.block; ++i) s += buf[i] * x[k + static_cast<std::int64_t>(i)];
  }
  return s;
}

}  // namespace

void set_prefetch_distance(std::size_t bytes) {
  g_prefetch.store(bytes, std::memory_order_relaxed);
  g_prefetch_float.store(bytes, std::memory_order_relaxed);
}
void reset_prefetch_distance() {
  g_prefetch.store(kDefaultPrefetch, std::memory_order_relaxed);
  g_prefetch_float.store(kAutomatic, std::memory_order_relaxed);
}
std::size_t prefetch_distance(bool float_rows) {
  if (!float_rows) return g_prefetch.load(std::memory_order_relaxed);
  const std::size_t d = g_prefetch_float.load(std::memory_order_relaxed);
  return d != kAutomatic ? d : cpu::avx512_halves() ? 0 : kDefaultPrefetch;
}
void set_float_rows(FloatRows k) { g_float_rows.store(k, std::memory_order_relaxed); }
void set_int8_dots(Int8Dots k) { g_int8_dots.store(k, std::memory_order_relaxed); }
bool q4_decode_zmm() { return use_zmm_q4(); }

const char* kernel_name() {
  if (cpu::avx512_vnni()) return cpu::avx512_halves() ? "avx512-vnni (f32, f16, bf16: avx2)" : "avx512-vnni";
  return cpu::avx2() ? "avx2" : "scalar";
}

namespace {
// quantize_activation's blocks in 256-bit registers, the same bytes as its scalar loop:
// lround is half away from zero, done here as trunc plus one away from zero where the
// dropped fraction is at least 0.5 (y - trunc(y) is exact). The scalar loop called lround
// per number and took 2% of a q8_0 decode step on the main thread while the others waited.
// Also each group of 4's bias for q4_0, q8_0 and q6_K rows (QuantizedVec::bias_q4,
// bias_q8, bias_q6).
__attribute__((target("avx2"))) void quantize_blocks_avx2(std::int8_t* q, float* d, float* sum, float* sum16,
                                                          std::int32_t* bias_q4, std::int32_t* bias_q8,
                                                          std::int32_t* bias_q6, const float* x, std::size_t nb) {
  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  for (std::size_t b = 0; b < nb; ++b, x += 32, q += 32, bias_q4 += 8, bias_q8 += 8, bias_q6 += 8) {
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float db = _mm_cvtss_f32(m4) / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
    d[b] = db;
    __m256i r[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 y = _mm256_mul_ps(v[k], _mm256_set1_ps(id));
      const __m256 t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(y, t)), half, _CMP_GE_OQ);
      const __m256 away = _mm256_or_ps(one, _mm256_and_ps(sign, y));  // ±1, the sign of y
      r[k] = _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, away)));
    }
    // 32 int32 in [-127, 127] to bytes: the packs work within 128-bit lanes, the permute
    // puts the lanes back in order.
    const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
    const __m256i qv = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), qv);
    // Σ of each 4 bytes (1 · q in pairs, then the pairs), times −8, −128 and −32.
    const __m256i sum4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), qv), _mm256_set1_epi16(1));
    const __m256i zero = _mm256_setzero_si256();
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias_q4), _mm256_sub_epi32(zero, _mm256_slli_epi32(sum4, 3)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias_q8), _mm256_sub_epi32(zero, _mm256_slli_epi32(sum4, 7)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias_q6), _mm256_sub_epi32(zero, _mm256_slli_epi32(sum4, 5)));
    // the sums of the two 16s (lanes 0-3 and 4-7), side by side, then the block's
    __m128i s4 = _mm_hadd_epi32(_mm256_castsi256_si128(sum4), _mm256_extracti128_si256(sum4, 1));
    s4 = _mm_hadd_epi32(s4, s4);
    const int s0 = _mm_cvtsi128_si32(s4), s1 = _mm_extract_epi32(s4, 1);
    sum16[2 * b] = db * static_cast<float>(s0);
    sum16[2 * b + 1] = db * static_cast<float>(s1);
    sum[b] = db * static_cast<float>(s0 + s1);
  }
}
}  // namespace

void quantize_activation(QuantizedVec& out, const float* x, std::size_t n) {
  const std::size_t nb = n / 32;
  out.q.resize(nb * 32);
  out.d.resize(nb);
  out.sum.resize(nb);
  out.sum16.resize(nb * 2);
  out.bias_q4.resize(nb * 8);
  out.bias_q8.resize(nb * 8);
  out.bias_q6.resize(nb * 8);
  if (cpu::avx2())
    return quantize_blocks_avx2(out.q.data(), out.d.data(), out.sum.data(), out.sum16.data(), out.bias_q4.data(),
                                out.bias_q8.data(), out.bias_q6.data(), x, nb);
  for (std::size_t b = 0; b < nb; ++b) {
    float amax = 0;
    for (std::size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out.d[b] = d;
    for (std::size_t j = 0; j < 32; ++j) out.q[b * 32 + j] = static_cast<std::int8_t>(std::lround(x[b * 32 + j] * id));
  }
  for (std::size_t g = 0; g < nb * 8; ++g) {
    const int sum = out.q[4 * g] + out.q[4 * g + 1] + out.q[4 * g + 2] + out.q[4 * g + 3];
    out.bias_q4[g] = -8 * sum;
    out.bias_q8[g] = -128 * sum;
    out.bias_q6[g] = -32 * sum;
  }
  for (std::size_t b = 0; b < nb; ++b) {
    int half[2] = {0, 0};
    for (std::size_t j = 0; j < 32; ++j) half[j / 16] += out.q[b * 32 + j];
    out.sum16[2 * b] = out.d[b] * static_cast<float>(half[0]);
    out.sum16[2 * b + 1] = out.d[b] * static_cast<float>(half[1]);
    out.sum[b] = out.d[b] * static_cast<float>(half[0] + half[1]);
  }
}

void matvec(float* out, const Weight& w, const float* x, const QuantizedVec* xq, std::int64_t lo, std::int64_t hi) {
  const std::int64_t n = w.cols;
  const bool avx2 = cpu::avx2(), vnni = use_vnni(), zmm_q4 = use_zmm_q4(), avx512 = wide_float_rows();
  // A thread's rows are one contiguous stream; the dot products prefetch a fixed distance
  // ahead in it (past the row's end, into the next rows), see set_prefetch_distance.
  const bool float_rows = w.dtype == DType::f32 || w.dtype == DType::f16 || w.dtype == DType::bf16;
  const auto pd = static_cast<std::ptrdiff_t>(prefetch_distance(float_rows));
  if (!avx512 && avx2 && n >= kLongRow) {
    if (w.dtype == DType::f32) return matvec_tiled<float, dot_avx2<float>>(out, w, x, lo, hi);
    if (w.dtype == DType::f16) return matvec_tiled<std::uint16_t, dot_avx2<std::uint16_t>>(out, w, x, lo, hi);
    if (w.dtype == DType::bf16) return matvec_tiled<Bf16, dot_avx2<Bf16>>(out, w, x, lo, hi);
  }
  if (avx512 && w.dtype == DType::f32) return matvec_f32_avx512(out, w, x, lo, hi, pd);
  for (std::int64_t r = lo; r < hi; ++r) {
    const std::byte* row = w.data + static_cast<std::size_t>(r) * w.row_bytes;
    float s = 0;
    switch (w.dtype) {
      case DType::f32: {
        const auto* a = reinterpret_cast<const float*>(row);
        s = avx2 ? dot_avx2(a, x, n, pd) : dot_f32_scalar(a, x, n);
        break;
      }
      case DType::f16: {
        const auto* a = reinterpret_cast<const std::uint16_t*>(row);
        if (avx512) s = dot_half_avx512(a, x, n, pd);
        else if (avx2) s = dot_avx2(a, x, n, pd);
        else
          for (std::int64_t i = 0; i < n; ++i) s += f16_to_f32(a[i]) * x[i];
        break;
      }
      case DType::bf16: {
        const auto* a = reinterpret_cast<const Bf16*>(row);
        if (avx512) s = dot_half_avx512(a, x, n, pd);
        else if (avx2) s = dot_avx2(a, x, n, pd);
        else
          for (std::int64_t i = 0; i < n; ++i) s += bf16_to_f32(a[i].bits) * x[i];
        break;
      }
      case DType::q8_0: {
        const auto* b = reinterpret_cast<const BlockQ8_0*>(row);
        s = vnni ? dot_q8_vnni(b, xq->q.data(), xq->d.data(), n / 32, pd)
            : avx2 ? dot_q8_avx2(b, xq->q.data(), xq->d.data(), n / 32, pd)
                   : dot_q8_scalar(b, xq->q.data(), xq->d.data(), n / 32);
        break;
      }
      case DType::q4_0: {
        const auto* b = reinterpret_cast<const BlockQ4_0*>(row);
        const TokenBlocks x1{xq->q.data(), xq->bias_q4.data(), xq->d.data()};
        if (zmm_q4) s = dot_q4_zmm(b, x1, n / 32, pd);
        else if (vnni) dots_q4_vnni<1>(&s, b, x1, n / 32, pd);
        else if (avx2) dots_q4_avx2<1>(&s, b, x1, n / 32, pd);
        else s = dot_q4_scalar(b, xq->q.data(), xq->d.data(), n / 32);
        break;
      }
      case DType::q4_K:
      case DType::q5_K: {
        const bool q5 = w.dtype == DType::q5_K;
        const std::int64_t nsb = n / static_cast<std::int64_t>(kQK_K);
        const std::int8_t* q = xq->q.data();
        const float *xd = xq->d.data(), *xs = xq->sum.data();
        if (vnni) s = q5 ? dot_q45_K_vnni<true>(row, q, xd, xs, nsb, pd) : dot_q45_K_vnni<false>(row, q, xd, xs, nsb, pd);
        else if (avx2) s = q5 ? dot_q45_K_avx2<true>(row, q, xd, xs, nsb, pd) : dot_q45_K_avx2<false>(row, q, xd, xs, nsb, pd);
        else s = dot_k_scalar(w.dtype, row, x, n);
        break;
      }
      case DType::q6_K:
      case DType::q3_K:
      case DType::q2_K: {
        const std::int64_t nsb = n / static_cast<std::int64_t>(kQK_K);
        const std::int8_t* q = xq->q.data();
        const float *xd = xq->d.data(), *xs16 = xq->sum16.data();
        const std::int32_t* b = xq->bias_q6.data();
        if (!avx2) s = dot_k_scalar(w.dtype, row, x, n);
        else if (w.dtype == DType::q6_K)
          s = vnni ? dot_k16_vnni<BlockQ6_K>(row, q, xd, b, xs16, nsb, pd) : dot_k16_avx2<BlockQ6_K>(row, q, xd, b, xs16, nsb, pd);
        else if (w.dtype == DType::q3_K)
          s = vnni ? dot_k16_vnni<BlockQ3_K>(row, q, xd, b, xs16, nsb, pd) : dot_k16_avx2<BlockQ3_K>(row, q, xd, b, xs16, nsb, pd);
        else
          s = vnni ? dot_k16_vnni<BlockQ2_K>(row, q, xd, b, xs16, nsb, pd) : dot_k16_avx2<BlockQ2_K>(row, q, xd, b, xs16, nsb, pd);
        break;
      }
      case DType::iq4_nl:
      case DType::iq4_xs: {
        const std::int8_t* q = xq->q.data();
        const float* xd = xq->d.data();
        const std::int32_t* b = xq->bias_q8.data();
        if (!avx2) s = dot_k_scalar(w.dtype, row, x, n);
        else if (w.dtype == DType::iq4_nl)
          s = vnni ? dot_iq4_nl_vnni(reinterpret_cast<const BlockIq4Nl*>(row), TokenBlocks{q, b, xd}, n / 32, pd)
                   : dot_iq4_avx2<BlockIq4Nl>(row, q, xd, b, n / 32, pd);
        else
          s = vnni ? dot_iq4_vnni<BlockIq4Xs>(row, q, xd, b, n / 32, pd) : dot_iq4_avx2<BlockIq4Xs>(row, q, xd, b, n / 32, pd);
        break;
      }
      case DType::q4_1:
      case DType::q5_0:
      case DType::q5_1: {
        const std::int8_t* q = xq->q.data();
        const float *xd = xq->d.data(), *xs = xq->sum.data();
        const std::int32_t* b = xq->bias_q4.data();
        const std::int64_t nb = n / 32;
        if (!avx2) s = dot_k_scalar(w.dtype, row, x, n);
        else if (w.dtype == DType::q4_1)
          s = vnni ? dot_q451_vnni<BlockQ4_1>(row, q, xd, b, xs, nb, pd) : dot_q451_avx2<BlockQ4_1>(row, q, xd, b, xs, nb, pd);
        else if (w.dtype == DType::q5_0)
          s = vnni ? dot_q451_vnni<BlockQ5_0>(row, q, xd, b, xs, nb, pd) : dot_q451_avx2<BlockQ5_0>(row, q, xd, b, xs, nb, pd);
        else
          s = vnni ? dot_q451_vnni<BlockQ5_1>(row, q, xd, b, xs, nb, pd) : dot_q451_avx2<BlockQ5_1>(row, q, xd, b, xs, nb, pd);
        break;
      }
      default:
        s = 0;  // other dtypes are refused when the model is loaded
    }
    out[r - lo] = s;
  }
}

namespace {

// out[j][i] += Σ_c w_i[c] · x_j[c] for 4 rows i and 4 tokens j (32 ymm registers).
__attribute__((target("avx2,fma,avx512f,avx512vl"))) void block4x4(const float* w, std::size_t cols, const float* x,
                                                                  std::size_t ldx, float* out, std::size_t ldo) {
  __m256 acc[4][4];
  for (auto& r : acc)
    for (auto& a : r) a = _mm256_setzero_ps();
  std::size_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    __m256 w0 = _mm256_loadu_ps(w + c), w1 = _mm256_loadu_ps(w + cols + c), w2 = _mm256_loadu_ps(w + 2 * cols + c),
           w3 = _mm256_loadu_ps(w + 3 * cols + c);
    for (int j = 0; j < 4; ++j) {
      __m256 xv = _mm256_loadu_ps(x + static_cast<std::size_t>(j) * ldx + c);
      acc[0][j] = _mm256_fmadd_ps(w0, xv, acc[0][j]);
      acc[1][j] = _mm256_fmadd_ps(w1, xv, acc[1][j]);
      acc[2][j] = _mm256_fmadd_ps(w2, xv, acc[2][j]);
      acc[3][j] = _mm256_fmadd_ps(w3, xv, acc[3][j]);
    }
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc[i][j]), _mm256_extractf128_ps(acc[i][j], 1));
      s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
      s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
      float s = _mm_cvtss_f32(s4);
      for (std::size_t k = c; k < cols; ++k) s += w[static_cast<std::size_t>(i) * cols + k] * x[static_cast<std::size_t>(j) * ldx + k];
      out[static_cast<std::size_t>(j) * ldo + static_cast<std::size_t>(i)] = s;
    }
}

}  // namespace

void matmul(float* out, std::size_t ld, const Weight& w, const float* x, std::int64_t n, std::int64_t lo, std::int64_t hi,
            std::vector<float>& scratch) {
  const auto cols = static_cast<std::size_t>(w.cols);
  constexpr std::int64_t kTokens = 64;  // tokens per pass over the rows: their activations stay in L2
  scratch.resize(4 * cols);
  const bool fast = cpu::avx512();
  for (std::int64_t t0 = 0; t0 < n; t0 += kTokens) {
    const std::int64_t t1 = std::min(n, t0 + kTokens);
    for (std::int64_t r = lo; r < hi; r += 4) {
      const std::int64_t nr = std::min<std::int64_t>(4, hi - r);
      for (std::int64_t i = 0; i < nr; ++i)  // the rows as f32
        to_f32(w.dtype, w.data + static_cast<std::size_t>(r + i) * w.row_bytes, scratch.data() + static_cast<std::size_t>(i) * cols, cols);
      std::int64_t t = t0;
      if (fast && nr == 4)
        for (; t + 4 <= t1; t += 4)
          block4x4(scratch.data(), cols, x + static_cast<std::size_t>(t) * cols, cols,
                   out + static_cast<std::size_t>(t) * ld + static_cast<std::size_t>(r - lo), ld);
      for (; t < t1; ++t)
        for (std::int64_t i = 0; i < nr; ++i)
          out[static_cast<std::size_t>(t) * ld + static_cast<std::size_t>(r - lo + i)] =
              dot(scratch.data() + static_cast<std::size_t>(i) * cols, x + static_cast<std::size_t>(t) * cols, static_cast<int>(cols));
    }
  }
}

// Tokens up to which k-quant rows take matmul_few, the decode step's products token after
// token (about the decode step's rate per token): against the int8 GEMM (VNNI), 6
// (TinyLlama q4_K, one thread, read into memory: the GEMM 10, 19, 38 and 72 tok/s at 2,
// 4, 8 and 16 tokens, these products 30 at any of them; q5_K: the GEMM 35 and 48–51 at 8
// and 12, these products 30–32; q6_K: the GEMM 21, 23–28 and 40–41 at 6, 8 and 12, these
// products 22–25); against the f32 GEMM, which converts every row first, 16, and 32 for
// q6_K, whose decode step is the faster (TinyLlama q6_K, one thread: these products 31
// tok/s at 24 and 40 tokens, the f32 GEMM 27 at 24, 30 at 32, 31 at 40, 38 at 64).
constexpr std::int64_t kFewKQuant = 16, kFewQ6K = 32, kFewKQuantInt8 = 6;

bool matmul_few_available(DType t, std::int64_t n) {
  // Measured on Zen 4 (docs/benchmarks.md). Float rows: against the AVX-512 GEMM, which
  // packs every row first, up to 16 tokens. Against the int8 GEMM's group of 16 tokens:
  // q4_0 and q8_0 rows unpacked once for 8 tokens with VNNI, up to 8 tokens (12 took 33–38
  // tok/s on TinyLlama q4_0, the GEMM 45–50); q4_0 rows 4 tokens at a time with AVX2 alone,
  // up to 7; q8_0 rows without VNNI, the decode step's products token after token, up to 4.
  if (t == DType::q4_0) return n <= (use_vnni() ? 8 : cpu::avx2() ? 7 : 4);
  if (t == DType::q8_0) return n <= (use_vnni() ? 8 : 4);
  // (iq4_nl and iq4_xs as the k-quants; not measured on their own)
  if ((is_k_quant(t) || is_iq4(t)) && gemm_q8_takes(t)) return n <= kFewKQuantInt8;
  if (t == DType::q6_K) return n <= kFewQ6K;
  if (is_k_quant(t) || is_iq4(t) || is_q45_legacy(t)) return n <= kFewKQuant;
  return n <= 16 && cpu::avx2() && (t == DType::f32 || t == DType::f16 || t == DType::bf16);
}

namespace {
// q4_0 rows (and q8_0 rows with VNNI) against a few tokens: each row read once, each
// block unpacked once for up to 8 tokens at a time with VNNI (its 32 registers hold 8
// tokens' sums), 4 without (the decode step's arithmetic per token, see LMP_DOTS_INT8).
// The tokens' activations are first laid side by side per block (TokenBlocks) in
// `scratch`, so that one pointer walks them all.
template <typename Block>
void matmul_few_int8(float* out, std::size_t ld, const Weight& w, const QuantizedVec* xq, std::int64_t n,
                     std::int64_t lo, std::int64_t hi, std::vector<float>& scratch) {
  using Kernel = void (*)(float*, const Block*, TokenBlocks, std::int64_t, std::ptrdiff_t);
  constexpr bool q8 = std::is_same_v<Block, BlockQ8_0>;
  const bool vnni = use_vnni();
  Kernel kernels[8] = {};
  if constexpr (q8) {
    kernels[0] = dots_q8_vnni<1>, kernels[1] = dots_q8_vnni<2>, kernels[2] = dots_q8_vnni<3>, kernels[3] = dots_q8_vnni<4>;
    kernels[4] = dots_q8_vnni<5>, kernels[5] = dots_q8_vnni<6>, kernels[6] = dots_q8_vnni<7>, kernels[7] = dots_q8_vnni<8>;
  } else if (vnni) {
    kernels[0] = dots_q4_vnni<1>, kernels[1] = dots_q4_vnni<2>, kernels[2] = dots_q4_vnni<3>, kernels[3] = dots_q4_vnni<4>;
    kernels[4] = dots_q4_vnni<5>, kernels[5] = dots_q4_vnni<6>, kernels[6] = dots_q4_vnni<7>, kernels[7] = dots_q4_vnni<8>;
  } else {
    kernels[0] = dots_q4_avx2<1>, kernels[1] = dots_q4_avx2<2>, kernels[2] = dots_q4_avx2<3>, kernels[3] = dots_q4_avx2<4>;
  }
  const std::int64_t group = vnni ? 8 : 4;
  if (n > 2 * group) {  // past matmul_few_available's limits: two groups at a time
    matmul_few_int8<Block>(out, ld, w, xq, 2 * group, lo, hi, scratch);
    return matmul_few_int8<Block>(out + static_cast<std::size_t>(2 * group) * ld, ld, w, xq + 2 * group, n - 2 * group, lo,
                                  hi, scratch);
  }
  const auto pd = static_cast<std::ptrdiff_t>(prefetch_distance(false));
  const auto nb = static_cast<std::size_t>(w.cols / 32);
  // Per group of tokens: nb · g · (32 bytes of q + 8 biases) and nb · g scales, in floats.
  // Every group is laid out first, then each row is read once for all of them.
  const auto g_max = static_cast<std::size_t>(std::min(group, n));
  const std::size_t region = nb * g_max * (8 + 8 + 1), groups = static_cast<std::size_t>((n + group - 1) / group);
  scratch.resize(region * groups);
  TokenBlocks packed[2];
  for (std::size_t gi = 0; gi < groups; ++gi) {
    const std::size_t t0 = gi * static_cast<std::size_t>(group), g = std::min(static_cast<std::size_t>(n) - t0, g_max);
    float* base = scratch.data() + gi * region;
    auto* q = reinterpret_cast<std::int8_t*>(base);
    auto* bias = reinterpret_cast<std::int32_t*>(base + nb * g_max * 8);
    float* d = base + nb * g_max * 16;
    for (std::size_t t = 0; t < g; ++t) {
      const QuantizedVec& v = xq[t0 + t];
      const std::int32_t* vb = q8 ? v.bias_q8.data() : v.bias_q4.data();
      for (std::size_t k = 0; k < nb; ++k) {
        std::memcpy(q + (k * g + t) * 32, v.q.data() + k * 32, 32);
        std::memcpy(bias + (k * g + t) * 8, vb + k * 8, 32);
        d[k * g + t] = v.d[k];
      }
    }
    packed[gi] = TokenBlocks{q, bias, d};
  }
  float s[8];
  for (std::int64_t r = lo; r < hi; ++r) {
    const auto* row = reinterpret_cast<const Block*>(w.data + static_cast<std::size_t>(r) * w.row_bytes);
    for (std::size_t gi = 0; gi < groups; ++gi) {
      const std::size_t t0 = gi * static_cast<std::size_t>(group), g = std::min(static_cast<std::size_t>(n) - t0, g_max);
      kernels[g - 1](s, row, packed[gi], static_cast<std::int64_t>(nb), pd);
      for (std::size_t j = 0; j < g; ++j) out[(t0 + j) * ld + static_cast<std::size_t>(r - lo)] = s[j];
    }
  }
}
}  // namespace

void matmul_few(float* out, std::size_t ld, const Weight& w, const float* x, const QuantizedVec* xq, std::int64_t n,
                std::int64_t lo, std::int64_t hi, std::vector<float>& scratch) {
  switch (w.dtype) {
    case DType::f32: return matmul_few_rows<float>(out, ld, w, x, n, lo, hi, scratch);
    case DType::f16: return matmul_few_rows<std::uint16_t>(out, ld, w, x, n, lo, hi, scratch);
    case DType::bf16: return matmul_few_rows<Bf16>(out, ld, w, x, n, lo, hi, scratch);
    case DType::q4_0:
      if (cpu::avx2()) return matmul_few_int8<BlockQ4_0>(out, ld, w, xq, n, lo, hi, scratch);
      [[fallthrough]];
    case DType::q8_0:
      if (w.dtype == DType::q8_0 && use_vnni()) return matmul_few_int8<BlockQ8_0>(out, ld, w, xq, n, lo, hi, scratch);
      [[fallthrough]];
    default: {
      // Rows in blocks of about 128 KB, which stay in L2 while every token's decode-step
      // product passes over them: the same sums as the steps, the weights read once.
      const auto block = std::max<std::int64_t>(4, static_cast<std::int64_t>((std::size_t{128} << 10) / w.row_bytes));
      for (std::int64_t r0 = lo; r0 < hi; r0 += block) {
        const std::int64_t r1 = std::min(hi, r0 + block);
        for (std::int64_t t = 0; t < n; ++t) {
          const auto tu = static_cast<std::size_t>(t);
          matvec(out + tu * ld + static_cast<std::size_t>(r0 - lo), w, x + tu * static_cast<std::size_t>(w.cols), xq + tu, r0, r1);
        }
      }
    }
  }
}

float dot(const float* a, const float* b, int n) { return cpu::avx2() ? dot_avx2(a, b, n, 0) : dot_f32_scalar(a, b, n); }

void rmsnorm(float* out, const float* x, const float* w, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const auto scale = static_cast<float>(1.0 / std::sqrt(ss / n + static_cast<double>(eps)));
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

namespace {

// e^x for 8 floats (x <= 0 here): x = n·ln2 + r with |r| <= ln2/2, e^r by a degree-6
// polynomial (Taylor, relative error under 2e-7), times 2^n through the exponent bits.
__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);  // ln2 in two parts
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma"))) SoftmaxStats softmax_avx2(float* x, int n) {
  __m256 mv = _mm256_set1_ps(x[0]);
  int i = 0;
  for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  float lanes[8];
  _mm256_storeu_ps(lanes, mv);
  float m = x[0];
  for (float v : lanes) m = std::max(m, v);
  for (; i < n; ++i) m = std::max(m, x[i]);
  const __m256 mm = _mm256_set1_ps(m);
  __m256 zv = _mm256_setzero_ps();
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mm));
    _mm256_storeu_ps(x + i, e);
    zv = _mm256_add_ps(zv, e);
  }
  float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int k = 0; i + k < n; ++k) tail[k] = x[i + k] - m;
  const __m256 et = _mm256_blendv_ps(_mm256_setzero_ps(), exp8(_mm256_loadu_ps(tail)),
                                     _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n - i),
                                                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))));
  _mm256_storeu_ps(tail, et);
  for (int k = 0; i + k < n; ++k) x[i + k] = tail[k];
  zv = _mm256_add_ps(zv, et);
  _mm256_storeu_ps(lanes, zv);
  float z = 0;
  for (float v : lanes) z += v;
  const __m256 inv = _mm256_set1_ps(1.0f / z);
  i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  for (; i < n; ++i) x[i] *= 1.0f / z;
  return {m, z};
}

// g = silu(g) · u, 8 at a time: silu(x) = x · σ(x) with σ(x) = 1 / (1 + e^-x) for x >= 0
// and e^x / (1 + e^x) below, so that the exponential's argument, -|x|, is never positive.
// The last n % 8 go through the same arithmetic in a padded register, so that a number's
// result does not depend on where the array it is in starts (threads split the work).
__attribute__((target("avx2,fma"))) inline __m256 swiglu8(__m256 x, __m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 z = exp8(_mm256_or_ps(x, _mm256_set1_ps(-0.0f)));  // e^-|x|
  const __m256 num = _mm256_blendv_ps(z, one, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
  return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_div_ps(num, _mm256_add_ps(one, z))), u);
}

__attribute__((target("avx2,fma"))) void swiglu_avx2(float* g, const float* u, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(g + i, swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  if (i == n) return;
  float a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::copy(g + i, g + n, a);
  std::copy(u + i, u + n, b);
  _mm256_storeu_ps(a, swiglu8(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));
  std::copy(a, a + (n - i), g + i);
}

}  // namespace

void swiglu(float* g, const float* u, std::size_t n) {
  if (cpu::avx2()) return swiglu_avx2(g, u, n);
  for (std::size_t i = 0; i < n; ++i) {
    const float x = g[i];
    const float z = std::exp(-std::fabs(x));
    g[i] = x * ((x >= 0 ? 1.0f : z) / (1.0f + z)) * u[i];
  }
}

SoftmaxStats softmax(float* x, int n) {
  if (cpu::avx2()) return softmax_avx2(x, n);
  float m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, x[i]);
  float z = 0;
  for (int i = 0; i < n; ++i) z += (x[i] = std::exp(x[i] - m));
  const float inv = 1.0f / z;
  for (int i = 0; i < n; ++i) x[i] *= inv;
  return {m, z};
}

void rope(float* v, int n_head, int head_dim, int pos, float theta, RopeLayout layout) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double freq = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    const double a = pos * freq;
    const auto c = static_cast<float>(std::cos(a)), s = static_cast<float>(std::sin(a));
    for (int h = 0; h < n_head; ++h) {
      float* p = v + static_cast<std::ptrdiff_t>(h) * head_dim;
      float& x0 = layout == RopeLayout::adjacent ? p[2 * i] : p[i];
      float& x1 = layout == RopeLayout::adjacent ? p[2 * i + 1] : p[i + half];
      const float a0 = x0, a1 = x1;
      x0 = a0 * c - a1 * s;
      x1 = a0 * s + a1 * c;
    }
  }
}

}  // namespace lmp::model
