// Sampling: logits → one token id, through a chain of samplers over a candidate array
// (llama.cpp's design: each stage filters or rescales the candidates, the last draws),
// with the randomness passed in (llama2.c's design: the draw is a pure function of the
// candidates and one uniform number).
//
// Stages: penalties (repetition, frequency, presence over the last N accepted tokens),
// temperature, top-k, top-p (nucleus), min-p, typical; then the draw (or greedy).
// Orders: `hf` (the default) = penalties, temperature, top-k, top-p, min-p, typical, as HF
// transformers and vLLM apply them: truncation sees the distribution that is sampled, so
// the probabilities `sample --show` prints are the ones drawn from, and the settings of
// model cards (written for HF) mean what they say. `llama` = penalties, top-k, typical,
// top-p, min-p, temperature last, as llama.cpp: truncation sees the untempered
// distribution. Any order can be given as a list of stage names.
//
// Semantics (docs/sample.md): temperature 0 is greedy (first maximum: the lowest id among
// equal logits); top-p >= 1, top-k <= 0 or >= vocab, min-p <= 0, typical >= 1 are no-ops;
// top-p <= 0 keeps the top token; ties at the top-k boundary are kept (HF) or cut to k by
// lowest id (llama.cpp); every truncation keeps at least min_keep candidates; softmax
// subtracts the maximum; NaN or +inf logits are errors, -inf logits are masked, an
// all-masked row is an error.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/core/rng.h"
#include "lmpipe/tok/types.h"

namespace lmp::sample {

struct Candidate {
  TokenId id;
  float logit;
};

// The candidates of one row: survivors of the stages so far. `sorted`: by logit,
// descending (ties by id); `dense`: items[i].id == i for every token of the row (nothing
// removed yet), so a token's candidate is found by its id.
struct Candidates {
  std::vector<Candidate> items;
  bool sorted = false;
  bool dense = false;
  std::size_t n_vocab = 0;
  // Set by a stage that already summed the survivors' exp(logit − mass_ref) (top-p), so
  // the draw need not: valid while no stage changes items or logits after it.
  bool has_mass = false;
  float mass_ref = 0;
  double mass = 0;

  // Load a row of logits; an error names the first NaN or +inf, or an all -inf row.
  Status load(const float* logits, std::size_t n);
  // Probabilities (softmax with the maximum subtracted) of items, in items' order.
  void probabilities(std::vector<float>& p) const;
  void sort();  // by logit descending, ties by lower id
};

enum class Ties { keep, cut };

struct Config {
  float temperature = 1.0f;
  int top_k = 0;            // <= 0: off
  float top_p = 1.0f;       // >= 1: off
  float min_p = 0.0f;       // <= 0: off
  float typical = 1.0f;     // >= 1: off
  float repeat_penalty = 1.0f;  // 1: off; > 1 discourages repeats (CTRL's rule, sign-aware)
  float frequency_penalty = 0.0f, presence_penalty = 0.0f;
  int penalty_last_n = 64;  // the window of accepted tokens the penalties look at
  std::size_t min_keep = 1;
  std::string order = "hf"; // hf, llama, or a comma-separated list of stage names
  std::optional<Ties> ties; // default: keep for hf, cut for llama
};

// One stage of the chain.
class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::string_view name() const = 0;
  virtual void apply(Candidates& c) = 0;
  virtual void accept(TokenId) {}  // the token drawn (for the penalties' history)
  virtual void reset() {}
};

class Chain {
 public:
  static Result<Chain> make(const Config& cfg);
  // Run the stages on `c` (loaded); `trace` (may be empty) sees the candidates after each.
  void apply(Candidates& c, const std::function<void(std::string_view, const Candidates&)>& trace = {});
  // Draw from the candidates (softmax, one uniform, a walk of the CDF in items' order); or
  // the first maximum when greedy.
  TokenId draw(const Candidates& c, Rng& rng);
  // apply, draw, accept.
  TokenId sample(Candidates& c, Rng& rng);
  void accept(TokenId id);
  void reset();
  bool greedy() const { return greedy_; }
  std::string describe() const;  // "penalties -> temperature 0.8 -> top-k 40 -> ..."
  const std::vector<std::unique_ptr<Sampler>>& stages() const { return stages_; }

  Chain() = default;
  Chain(Chain&&) = default;
  Chain& operator=(Chain&&) = default;

 private:
  std::vector<std::unique_ptr<Sampler>> stages_;
  bool greedy_ = false;
};

// The p-value of a chi-square statistic with `dof` degrees of freedom (the upper tail:
// the regularized incomplete gamma function Q(dof/2, x/2)).
double chi_square_p(double x, double dof);

// The index into items of the first maximum (lowest id among equal logits).
std::size_t argmax(const Candidates& c);
// Entropy (nats) of the softmax of the candidates.
double entropy(const Candidates& c);

}  // namespace lmp::sample
