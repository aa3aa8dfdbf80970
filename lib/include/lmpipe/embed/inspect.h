// What embed-inspect reports: where a model's embedding and output projection are, whether
// they are tied, what they cost at another vocabulary size, the distribution of row norms
// (under-trained tokens have unusually small ones), duplicate rows, and nearest neighbours
// by cosine similarity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmpipe/embed/embedding.h"
#include "lmpipe/tensor_io/tensor_file.h"

namespace lmp::embed {

struct ModelEmbedding {
  const tensor_io::TensorInfo* embedding = nullptr;  // (n_vocab, n_embd)
  const tensor_io::TensorInfo* output = nullptr;     // (n_vocab, n_embd); null when tied
  bool tied = false;
  std::string tie_reason;        // why it is (or is not) tied
  std::int64_t n_vocab = 0, n_embd = 0;
  std::uint64_t model_params = 0;  // every tensor's elements (llama2.c's RoPE tables are not parameters)
  std::uint64_t model_bytes = 0;
};
// Find the token embedding (`name`, or by the names GGUF, llama2.c, HF/PyTorch and BERT
// use; a bare .npy is the matrix) and the output projection (GGUF output.weight, HF
// lm_head.weight; tied when it is absent, when llama2.c says shared, or when both
// tensors hold the same bytes).
Result<ModelEmbedding> find_embedding(const tensor_io::TensorFile& f, const std::string& name = {});
// A view of a tensor as an Embedding (f32, f16, bf16, q8_0, q4_0, q2_K … q6_K).
Result<Embedding> embedding_view(const tensor_io::TensorFile& f, const tensor_io::TensorInfo& t);

// Memory of the embedding and output matrices at a vocabulary size.
//   parameters P = vocab × hidden per matrix
//   inference: P × bytes per parameter of the dtype (once tied, twice untied)
//   Adam training: P × (weights + gradients in the dtype, two f32 moments, and an f32
//   master copy of the weights when the dtype is not f32)
struct VocabCost {
  std::int64_t vocab = 0, hidden = 0;
  DType dtype = DType::f32;
  std::uint64_t params = 0;          // one matrix
  double bytes_per_param = 0;        // inference
  double adam_bytes_per_param = 0;   // training
  double inference_tied = 0, inference_untied = 0, adam_tied = 0, adam_untied = 0;  // bytes
};
VocabCost vocab_cost(std::int64_t vocab, std::int64_t hidden, DType dtype);

struct RowStats {
  float min = 0, p01 = 0, p05 = 0, p25 = 0, median = 0, p75 = 0, p95 = 0, p99 = 0, max = 0;
  double mean = 0;
  float mad = 0;                          // median absolute deviation of the norms
  float small_threshold = 0;              // norms at or below: unusually small
  std::vector<std::pair<TokenId, float>> smallest;  // the `top` smallest norms, ascending
  std::size_t n_small = 0;                // rows at or below small_threshold
  std::size_t n_zero = 0;                 // all-zero rows
  std::vector<std::vector<TokenId>> duplicates;  // groups of rows with identical bytes (first `top`)
  std::size_t n_duplicate_groups = 0, n_duplicate_rows = 0;
  // Groups of rows pointing the same way (cosine >= 0.999 with the group's first row,
  // found by hashing each unit row rounded to a 1/16 grid): rows that training pushed
  // only as a block, as the softmax does to tokens that never occur — byte-fallback
  // tokens of a model trained on plain English, say. Largest first, the first `top`.
  std::vector<std::vector<TokenId>> parallel;
  std::size_t n_parallel_groups = 0, n_parallel_rows = 0;
};
// Row norms: their distribution, and rows under median − 4 × 1.4826 × MAD (a robust
// z-score below −4) as unusually small: tokens that training rarely or never updated.
RowStats row_stats(const Embedding& e, std::size_t top, int threads = 1);

struct Neighbor {
  TokenId id;
  float cosine;
};
// The k rows most similar to `query` (n_embd) by cosine similarity, best first, skipping
// `exclude` (the query's own token, or -1). One pass over the matrix.
std::vector<Neighbor> nearest(const Embedding& e, const float* query, std::size_t k, TokenId exclude,
                              int threads = 1);

}  // namespace lmp::embed
