// The KV cache: the keys and values of every token seen, per layer, so that a decode step
// computes them only for the new token. Attention reads the cache as a list of blocks (one
// for the contiguous cache; many for a paged one), each a run of tokens, and never copies
// the cache out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/tensor_io/dtype.h"

namespace lmp::kv {

using SeqId = std::int32_t;

// A run of n_tokens consecutive tokens of one layer: k and v are (n_tokens, kv_dim) in
// `dtype` (f32 for the contiguous cache).
struct KvBlock {
  DType dtype = DType::f32;
  const void* k = nullptr;
  const void* v = nullptr;
  int n_tokens = 0;
};

struct KvConfig {
  int n_layer = 0;
  int n_ctx = 0;     // tokens per sequence
  int kv_dim = 0;    // n_kv_head × head_dim
};

class KvCache {
 public:
  virtual ~KvCache() = default;
  // Store the key and value (kv_dim each) of the next token of `seq` in `layer`. An error
  // at the context limit.
  virtual Status append(int layer, SeqId seq, std::span<const float> k, std::span<const float> v) = 0;
  // The blocks of `layer` for `seq`, in token order.
  virtual void blocks(int layer, SeqId seq, std::vector<KvBlock>& out) const = 0;
  // Tokens stored for `seq` (in its last layer: those fully processed).
  virtual int length(SeqId seq) const = 0;
  // Keep the first n_keep tokens of `seq`.
  virtual void truncate(SeqId seq, int n_keep) = 0;
  // Make `dst` a copy of `src` (a paged cache shares the blocks).
  virtual Status fork(SeqId src, SeqId dst) = 0;
  virtual std::size_t bytes_used() const = 0;      // bytes holding stored tokens
  virtual std::size_t bytes_reserved() const = 0;  // bytes allocated
};

// llama2.c's layout: per layer, (n_ctx, kv_dim) keys and values, allocated up front, one
// sequence (id 0).
class ContiguousKvCache final : public KvCache {
 public:
  explicit ContiguousKvCache(const KvConfig& cfg);
  Status append(int layer, SeqId seq, std::span<const float> k, std::span<const float> v) override;
  void blocks(int layer, SeqId seq, std::vector<KvBlock>& out) const override;
  int length(SeqId seq) const override;
  void truncate(SeqId seq, int n_keep) override;
  Status fork(SeqId src, SeqId dst) override;
  std::size_t bytes_used() const override;
  std::size_t bytes_reserved() const override;

 private:
  KvConfig cfg_;
  std::vector<float> k_, v_;  // (n_layer, n_ctx, kv_dim)
  std::vector<int> len_;      // (n_layer) tokens stored per layer
};

}  // namespace lmp::kv
