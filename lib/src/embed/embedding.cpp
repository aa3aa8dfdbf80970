#include "lmpipe/embed/embedding.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "lmpipe/core/cpu.h"
#include "lmpipe/core/parallel.h"


namespace lmp::embed {

namespace {
constexpr std::int64_t kMaxDim = std::int64_t{1} << 40;

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rows [lo, hi) of f32 data: dot with q and squared norm, 4 rows at a time so that q's
// loads are shared and the eight accumulators keep the FMA units busy.
__attribute__((target("avx2,fma"))) void dots_norms_f32_avx2(const float* m, std::size_t n, const float* q,
                                                               std::size_t lo, std::size_t hi, float* dots,
                                                               float* norms2) {
  std::size_t r = lo;
  for (; r + 4 <= hi; r += 4) {
    const float* a = m + r * n;
    __m256 d0 = _mm256_setzero_ps(), d1 = d0, d2 = d0, d3 = d0, s0 = d0, s1 = d0, s2 = d0, s3 = d0;
    std::size_t j = 0;
    for (; j + 8 <= n; j += 8) {
      __m256 x = _mm256_loadu_ps(q + j);
      __m256 r0 = _mm256_loadu_ps(a + j), r1 = _mm256_loadu_ps(a + n + j), r2 = _mm256_loadu_ps(a + 2 * n + j),
             r3 = _mm256_loadu_ps(a + 3 * n + j);
      d0 = _mm256_fmadd_ps(r0, x, d0);
      d1 = _mm256_fmadd_ps(r1, x, d1);
      d2 = _mm256_fmadd_ps(r2, x, d2);
      d3 = _mm256_fmadd_ps(r3, x, d3);
      s0 = _mm256_fmadd_ps(r0, r0, s0);
      s1 = _mm256_fmadd_ps(r1, r1, s1);
      s2 = _mm256_fmadd_ps(r2, r2, s2);
      s3 = _mm256_fmadd_ps(r3, r3, s3);
    }
    float dd[4] = {hsum(d0), hsum(d1), hsum(d2), hsum(d3)}, ss[4] = {hsum(s0), hsum(s1), hsum(s2), hsum(s3)};
    for (; j < n; ++j)
      for (int k = 0; k < 4; ++k) {
        float v = a[static_cast<std::size_t>(k) * n + j];
        dd[k] += v * q[j];
        ss[k] += v * v;
      }
    for (int k = 0; k < 4; ++k) {
      dots[r + static_cast<std::size_t>(k)] = dd[k];
      norms2[r + static_cast<std::size_t>(k)] = ss[k];
    }
  }
  for (; r < hi; ++r) {
    const float* a = m + r * n;
    float d = 0, s = 0;
    for (std::size_t j = 0; j < n; ++j) {
      d += a[j] * q[j];
      s += a[j] * a[j];
    }
    dots[r] = d;
    norms2[r] = s;
  }
}

void dots_norms_scalar(const float* a, std::size_t n, const float* q, float& d, float& s) {
  d = 0;
  s = 0;
  for (std::size_t j = 0; j < n; ++j) {
    d += a[j] * q[j];
    s += a[j] * a[j];
  }
}


// Split [0, rows) over `threads` threads: f(lo, hi).
template <class F>
void over_rows(std::size_t rows, int threads, F&& f) {
  auto t = static_cast<std::size_t>(std::clamp(threads, 1, 64));
  if (rows < 1024) t = 1;
  run_parallel(t, [&](std::size_t i) { f(rows * i / t, rows * (i + 1) / t); });
}
}  // namespace

Result<Embedding> Embedding::view(DType dtype, const void* data, std::int64_t n_vocab, std::int64_t n_embd) {
  const DTypeInfo& d = dtype_info(dtype);
  if (!d.is_float) return make_error(Errc::unsupported, "an embedding matrix of {} (float types only)", d.name);
  if (n_vocab <= 0 || n_embd <= 0 || n_vocab > kMaxDim || n_embd > kMaxDim)
    return make_error(Errc::invalid_argument, "an embedding matrix of [{}, {}]", n_vocab, n_embd);
  if (static_cast<std::size_t>(n_embd) % d.block != 0)
    return make_error(Errc::invalid_argument, "rows of {} elements are not whole {}-element blocks of {}", n_embd,
                      d.block, d.name);
  Embedding e;
  e.dtype_ = dtype;
  e.n_vocab_ = n_vocab;
  e.n_embd_ = n_embd;
  e.row_bytes_ = dtype_bytes(dtype, static_cast<std::size_t>(n_embd));
  e.data_ = static_cast<const std::byte*>(data);
  return e;
}

Result<Embedding> Embedding::from_f32(std::span<const float> m, std::int64_t n_vocab, std::int64_t n_embd,
                                      DType dtype) {
  if (n_vocab <= 0 || n_embd <= 0 || m.size() != static_cast<std::size_t>(n_vocab * n_embd))
    return make_error(Errc::invalid_argument, "{} values for an embedding matrix of [{}, {}]", m.size(), n_vocab,
                      n_embd);
  LMP_ASSIGN(Embedding e, Embedding::view(dtype, nullptr, n_vocab, n_embd));
  e.owned_.resize(e.bytes());
  for (std::int64_t r = 0; r < n_vocab; ++r)
    lmp::from_f32(dtype, m.data() + r * n_embd, e.owned_.data() + static_cast<std::size_t>(r) * e.row_bytes_,
             static_cast<std::size_t>(n_embd));
  e.data_ = e.owned_.data();
  return e;
}

void Embedding::row(TokenId id, float* out) const {
  LMP_ASSERT(id >= 0 && id < n_vocab_);
  to_f32(dtype_, data_ + static_cast<std::size_t>(id) * row_bytes_, out, static_cast<std::size_t>(n_embd_));
}

Status Embedding::lookup(std::span<const TokenId> ids, float* out) const {
  for (std::size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] < 0 || ids[k] >= n_vocab_)
      return make_error(Errc::out_of_range, "token id {} at position {} is outside the vocabulary (0..{})", ids[k],
                        k + 1, n_vocab_ - 1);
    row(ids[k], out + k * static_cast<std::size_t>(n_embd_));
  }
  return {};
}

void Embedding::dots_and_norms(const float* q, float* dots, float* norms2, int threads) const {
  const auto n = static_cast<std::size_t>(n_embd_);
  if (dtype_ == DType::f32) {
    const auto* m = reinterpret_cast<const float*>(data_);
    over_rows(static_cast<std::size_t>(n_vocab_), threads, [&](std::size_t lo, std::size_t hi) {
      if (cpu::avx2()) return dots_norms_f32_avx2(m, n, q, lo, hi, dots, norms2);
      for (std::size_t r = lo; r < hi; ++r) dots_norms_scalar(m + r * n, n, q, dots[r], norms2[r]);
    });
    return;
  }
  over_rows(static_cast<std::size_t>(n_vocab_), threads, [&](std::size_t lo, std::size_t hi) {
    std::vector<float> buf(n);
    for (std::size_t r = lo; r < hi; ++r) {
      row(static_cast<TokenId>(r), buf.data());
      dots_norms_scalar(buf.data(), n, q, dots[r], norms2[r]);
    }
  });
}

}  // namespace lmp::embed
