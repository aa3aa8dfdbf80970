// Perplexity of a model on a token sequence: exp of the mean negative log-likelihood of
// each token given the ones before it, the figure llama.cpp's perplexity tool and HF's
// "perplexity of fixed-length models" guide report.
//
// A sequence longer than the model's context is read in windows of `window` tokens whose
// starts are `stride` apart (HF's sliding window): each window is run from an empty cache,
// and scores the tokens no earlier window scored, so every token but the first is scored
// once, and each after the first window with at least window - stride tokens before it.
// stride == window: disjoint windows, whose first tokens go unscored. Within a window the
// tokens go through the model `batch` at a time, all of a batch's logits from one matrix
// product (Transformer::forward_batch with all_logits).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "lmpipe/core/result.h"
#include "lmpipe/core/thread_pool.h"
#include "lmpipe/kv/kv_cache.h"
#include "lmpipe/model/transformer.h"

namespace lmp::model {

struct PerplexityOptions {
  int window = 512;  // tokens per window (the context each is run in)
  int stride = 256;  // tokens between window starts, 1..window
  int batch = 512;   // tokens per forward pass (bounds the logits held: batch × n_vocab f32)
  kv::KvConfig kv;   // type and layout of the cache; n_layer, kv_dim, n_ctx are set from the model
};

// One scored token: the log-probability (natural log) the model gave `id` at `pos`, from
// the tokens before it in its window.
struct TokenScore {
  std::size_t pos = 0;
  TokenId id = 0;
  double logprob = 0;
  bool top1 = false;  // the model's most likely token (the first maximum) was this one
  int context = 0;    // tokens before it in its window
};

struct PerplexityResult {
  std::size_t tokens = 0;   // the sequence's length
  std::size_t scored = 0;   // tokens scored (tokens - 1 unless windows are disjoint)
  std::size_t windows = 0;
  std::size_t evaluated = 0;  // tokens run through the model, over all windows
  std::size_t top1 = 0;     // scored tokens that were the model's first choice
  double nll_sum = 0;       // -Σ logprob, nats
  double mean_nll() const { return scored ? nll_sum / static_cast<double>(scored) : 0.0; }
  double perplexity() const;
};

// `on_token` (optional) sees every scored token in order; an error from it stops the run.
// `progress` (optional) is told the tokens scored so far. Errors: fewer than 2 tokens, an
// id outside the vocabulary, bad options, NaN or infinite logits.
Result<PerplexityResult> perplexity(Transformer& model, std::span<const TokenId> ids, const PerplexityOptions& opts,
                                    ThreadPool& pool, const std::function<Status(const TokenScore&)>& on_token = {},
                                    const std::function<void(std::size_t)>& progress = {});

}  // namespace lmp::model
