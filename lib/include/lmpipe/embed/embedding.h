// The token-embedding matrix E (n_vocab, n_embd) and its two uses: lookup (a token's row
// is its input vector) and projection (logits = E · h, the output layer). A tied model
// uses one Embedding for both, as llama2.c's shared classifier and GGUF files without
// output.weight do; an untied model has a second matrix of the same shape for output.
//
// The matrix is viewed (a mapped file keeps it) or owned, in any float dtype: f32, f16,
// bf16, q8_0, q4_0, q2_K … q6_K. Rows of the other types are converted to f32 as they
// are used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/tensor_io/dtype.h"
#include "lmpipe/tok/types.h"

namespace lmp::embed {

class Embedding {
 public:
  Embedding() = default;
  // A view of `data` (n_vocab rows of n_embd elements of `dtype`); `data` must outlive it.
  static Result<Embedding> view(DType dtype, const void* data, std::int64_t n_vocab, std::int64_t n_embd);
  // An owned copy of an f32 matrix, stored as `dtype` (quantized for the block types).
  static Result<Embedding> from_f32(std::span<const float> m, std::int64_t n_vocab, std::int64_t n_embd,
                                    DType dtype = DType::f32);

  DType dtype() const { return dtype_; }
  std::int64_t n_vocab() const { return n_vocab_; }
  std::int64_t n_embd() const { return n_embd_; }
  std::size_t row_bytes() const { return row_bytes_; }
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(n_vocab_) * row_bytes_; }
  const std::byte* data() const { return data_; }
  bool owns() const { return !owned_.empty(); }

  // out (n_embd) = row `id` as f32. Precondition: 0 <= id < n_vocab.
  void row(TokenId id, float* out) const;
  // out (ids.size(), n_embd) = the rows of `ids`; an id outside the vocabulary is an
  // error naming it and its position.
  Status lookup(std::span<const TokenId> ids, float* out) const;
  // logits (n_vocab) = E · hidden (n_embd), through OpenBLAS sgemv for f32 (rows of the
  // other types are converted in blocks first). `threads` splits the rows.
  void project(const float* hidden, float* logits, int threads = 1) const;
  // For every row i: dots[i] = E[i] · q and norms2[i] = E[i] · E[i], in one pass over
  // the matrix (the pass is memory-bound: reading E once is the cost).
  void dots_and_norms(const float* q, float* dots, float* norms2, int threads = 1) const;

 private:
  DType dtype_ = DType::f32;
  std::int64_t n_vocab_ = 0, n_embd_ = 0;
  std::size_t row_bytes_ = 0;
  const std::byte* data_ = nullptr;
  std::vector<std::byte> owned_;
};

}  // namespace lmp::embed
