#include "lmpipe/model/perplexity.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "lmpipe/model/ops.h"

namespace lmp::model {

double PerplexityResult::perplexity() const { return std::exp(mean_nll()); }

namespace {

// A row's log-probability of `target` and whether it is the first maximum, through the
// vectorised softmax (the row is overwritten); false for NaN or an infinity other than
// -inf (a masked id).
bool score_row(float* row, std::size_t n, std::size_t target, double& logprob, bool& top1) {
  float mx = row[0];
  std::size_t argmax = 0;
  bool finite = true;
  for (std::size_t i = 0; i < n; ++i) {
    finite = finite && !std::isnan(row[i]) && row[i] != INFINITY;
    if (row[i] > mx) mx = row[i], argmax = i;
  }
  if (!finite || mx == -INFINITY) return false;
  const double x = static_cast<double>(row[target]);
  const SoftmaxStats st = softmax(row, static_cast<int>(n));
  logprob = x - static_cast<double>(st.max) - std::log(static_cast<double>(st.sum));
  top1 = argmax == target;
  return true;
}

}  // namespace

Result<PerplexityResult> perplexity(Transformer& model, std::span<const TokenId> ids, const PerplexityOptions& o,
                                    ThreadPool& pool, const std::function<Status(const TokenScore&)>& on_token,
                                    const std::function<void(std::size_t)>& progress) {
  const Config& c = model.config();
  if (ids.size() < 2) return make_error(Errc::invalid_argument, "perplexity needs at least 2 tokens, got {}", ids.size());
  if (o.window < 2) return make_error(Errc::invalid_argument, "the window must hold at least 2 tokens, not {}", o.window);
  if (o.stride < 1 || o.stride > o.window)
    return make_error(Errc::invalid_argument, "the stride must be 1..{} (the window), not {}", o.window, o.stride);
  if (o.batch < 1) return make_error(Errc::invalid_argument, "the batch must be at least 1 token, not {}", o.batch);
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.n_vocab)
      return make_error(Errc::out_of_range, "token {} (id {}) is outside the model's vocabulary (0..{})", i + 1, ids[i],
                        c.n_vocab - 1);
  kv::KvConfig kc = o.kv;
  kc.n_layer = c.n_layer;
  kc.kv_dim = c.kv_dim();
  kc.head_dim = c.head_dim();
  kc.n_ctx = o.window;
  kc.max_seqs = 1;
  kc.eviction = kv::Eviction::none;
  LMP_ASSIGN(auto cache, kv::make_kv_cache(kc));

  const auto V = static_cast<std::size_t>(c.n_vocab);
  const auto n = ids.size();
  const auto window = static_cast<std::size_t>(o.window), stride = static_cast<std::size_t>(o.stride),
             batch = static_cast<std::size_t>(o.batch);
  std::vector<float> logits(std::min(batch, window) * V);
  std::vector<TokenScore> scores;
  PerplexityResult r;
  r.tokens = n;
  std::size_t scored_to = 1;  // tokens below this are scored (the first never is)
  for (std::size_t s = 0;; s += stride) {
    const std::size_t e = std::min(s + window, n);
    // This window scores positions [first, e): token p from the logits of position p - 1.
    const std::size_t first = std::max(scored_to, s + 1);
    LMP_TRY(cache->truncate(0, 0));
    ++r.windows;
    for (std::size_t a = s; a < e;) {
      // Positions before first - 1 are context: their logits are not needed, so a batch
      // that ends before it asks for the last row only.
      std::size_t b = std::min(a + batch, e);
      const bool context_only = b < first;
      if (!context_only && a < first - 1) b = first - 1;  // the context apart, in its own batches
      const bool all = !context_only && b > first - 1;
      LMP_TRY(model.forward_batch(ids.subspan(a, b - a), static_cast<int>(a - s), *cache, logits.data(), pool, 0,
                                  all));
      r.evaluated += b - a;
      if (all) {
        // Rows j predict tokens j + 1: those in [first, e) are scored, on the pool's threads.
        const std::size_t j0 = std::max(a, first - 1), j1 = std::min(b, e - 1);
        scores.assign(j1 > j0 ? j1 - j0 : 0, TokenScore{});
        std::atomic<bool> bad{false};
        const auto T = static_cast<std::size_t>(pool.size());
        pool.run(T, [&](std::size_t i) {
          for (std::size_t j = j0 + (j1 - j0) * i / T; j < j0 + (j1 - j0) * (i + 1) / T; ++j) {
            TokenScore& t = scores[j - j0];
            t.pos = j + 1;
            t.id = ids[j + 1];
            t.context = static_cast<int>(j + 1 - s);
            if (!score_row(logits.data() + (j - a) * V, V, static_cast<std::size_t>(t.id), t.logprob, t.top1))
              bad = true;
          }
        });
        if (bad) return make_error(Errc::internal, "positions {}..{}: the logits hold NaN or infinity", j0, j1 - 1);
        for (const TokenScore& t : scores) {
          r.nll_sum -= t.logprob;
          r.top1 += t.top1;
          ++r.scored;
          if (on_token) LMP_TRY(on_token(t));
        }
        if (progress) progress(r.scored);
      }
      a = b;
    }
    scored_to = e;
    if (e == n) break;
  }
  return r;
}

}  // namespace lmp::model
