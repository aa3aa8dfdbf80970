// A LLaMA-family decoder (LLaMA, Llama 2/3, TinyLlama, Qwen2): token embedding, per layer
// RMSNorm → attention with rotary positions (grouped-query: n_kv_head <= n_head, so MHA, GQA
// and MQA are one code path; Qwen2's q/k/v biases) → residual → RMSNorm → SwiGLU
// feed-forward → residual; final RMSNorm; output projection, tied to the embedding or not.
//
// Weights are views into the mapped file (GGUF, or a llama2.c checkpoint) in f32, f16,
// bf16, q8_0, q4_0 or a k-quant (q2_K … q6_K); only the norm vectors are converted to f32 at load. The keys and
// values of every position go to a KvCache, so a decode step computes only the new token.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/core/thread_pool.h"
#include "lmpipe/embed/embedding.h"
#include "lmpipe/kv/kv_cache.h"
#include "lmpipe/model/ops.h"
#include "lmpipe/tensor_io/tensor_file.h"

namespace lmp::model {

struct Config {
  std::string arch;          // llama, qwen2
  int n_vocab = 0, n_embd = 0, n_layer = 0, n_head = 0, n_kv_head = 0, n_ff = 0;
  int n_ctx_train = 0;       // the context length the model was trained with
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  RopeLayout rope = RopeLayout::adjacent;
  bool tied = false;         // the output projection is the embedding
  int head_dim() const { return n_embd / n_head; }
  int kv_dim() const { return n_kv_head * head_dim(); }
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;  // (n_embd)
  Weight wq, wk, wv, wo;                   // (n_embd, n_embd), (kv_dim, n_embd) ×2, (n_embd, n_embd)
  std::vector<float> bq, bk, bv;           // Qwen2 biases, or empty
  Weight w_gate, w_up, w_down;             // (n_ff, n_embd) ×2, (n_embd, n_ff)
};

class Transformer {
 public:
  static constexpr int kMaxHeadDim = 512;

  // Read the configuration from the file's metadata (GGUF llama/qwen2 keys; the llama.*
  // keys a llama2.c checkpoint is read with) and view the weights. The file must outlive it.
  static Result<std::unique_ptr<Transformer>> load(const tensor_io::TensorFile& f);

  const Config& config() const { return cfg_; }
  // Bytes of weights one decode step reads (every matrix once, the embedding row aside).
  std::uint64_t weight_bytes_per_token() const;
  std::string describe() const;  // "llama: 5 layers, n_embd 64, 8 heads (4 kv), ... f32"

  // One token at position `pos` of sequence `seq` (the cache holds its positions
  // 0..pos-1, or those not evicted): appends its keys and values and writes the logits
  // (n_vocab). Errors: an id outside the vocabulary, a full context or cache.
  Status forward(TokenId token, int pos, kv::KvCache& cache, float* logits, ThreadPool& pool, kv::SeqId seq = 0);
  // Many tokens at positions pos0, pos0 + 1, ... (prompt processing): matrix-matrix
  // products, so each weight is read once per block of tokens; keys and values of all go
  // to the cache; the logits of the last token are written, or with `all_logits` every
  // token's (n, n_vocab), through one matrix product (perplexity). Under eviction, the
  // tokens past the cache's room go one at a time, so that each sees exactly its window.
  Status forward_batch(std::span<const TokenId> tokens, int pos0, kv::KvCache& cache, float* logits, ThreadPool& pool,
                       kv::SeqId seq = 0, bool all_logits = false);
  // While set, forward() appends each layer's attention output (n_embd, before the output
  // projection) to *probe: kv-bench compares them across cache storage types.
  void set_attention_probe(std::vector<float>* probe) { probe_ = probe; }

 private:
  struct Mm {
    const Weight* w;
    float* out;       // (n, ld)
    std::size_t ld;
  };
  void matmuls(std::span<const Mm> jobs, const float* x, std::int64_t n, ThreadPool& pool);
  void attend_heads(int h0, int h1, int pos, int t_lo, int t_hi, const float* q, float* out, float* att,
                    std::size_t ld, float* qbuf, SoftmaxStats* stats, const kv::RowFormat& fmt,
                    const std::vector<kv::KvBlock>& blocks) const;
  Transformer() = default;
  void matvecs(std::span<const std::pair<const Weight*, float*>> jobs, const float* x, ThreadPool& pool);
  // Prompt processing's causal attention, bq_ → bxb_, for n tokens whose keys are the last
  // n of blocks_ (total rows): per kv head and tile of tokens, as matrix products.
  void attention_tiles(std::int64_t n, int total, const kv::RowFormat& fmt, ThreadPool& pool);
  void attention(int layer, int pos, kv::SeqId seq, const kv::KvCache& cache, ThreadPool& pool);

  Config cfg_;
  embed::Embedding embedding_;
  Weight output_;                      // (n_vocab, n_embd): output.weight or the embedding itself
  std::vector<float> output_norm_;     // (n_embd)
  std::vector<LayerWeights> layers_;
  bool quantized_ = false;             // some matrix is a GGML block type (is_quantized)
  // Scratch: the state of one token ("the wave of activations").
  std::vector<float> x_, xb_, xb2_, q_, k_, v_, att_, hb_, hb2_;  // see forward()
  std::vector<float> qbuf_;            // (parts, n_embd) the queries moved or scaled for a block
  std::vector<float> part_out_;        // (parts, n_embd) attention's parts of the context, combined
  std::vector<SoftmaxStats> part_stats_;  // (parts, n_head)
  QuantizedVec xq_;
  std::vector<kv::KvBlock> blocks_;
  // Scratch of forward_batch: (n, n_embd) and (n, n_ff) activations; per-thread buffers.
  std::vector<float> bx_, bxb_, bxb2_, bq_, bk_, bv_, bh_, bh2_;
  std::vector<std::vector<float>> scratch_, batt_;
  struct TileScratch {               // attention_tiles, per thread
    std::vector<float> q, s, o;
  };
  std::vector<TileScratch> tiles_;
  struct CacheRow {                  // one token's key and value rows, as attention_tiles reads them
    const std::byte *k, *v;
    const kv::RowFormat *kfmt, *vfmt;
    const std::uint16_t* kscale;
  };
  std::vector<CacheRow> rows_;
  std::vector<float> kpack_, vpack_;   // attention_tiles: one kv head's keys and values in f32, packed
  std::vector<GemmScratch> gemm_;      // per thread
  QuantizedBatch bxq_;                 // (n, cols) activations for the int8 products
  std::vector<QuantizedVec> bxv_;      // (n) a few tokens' activations for the decode step's products
  std::vector<float>* probe_ = nullptr;
};

}  // namespace lmp::model
