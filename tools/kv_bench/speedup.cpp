// kv-bench speedup: generation without and with the KV cache. Without it, every step runs
// the whole sequence through the model again (its cost grows with the sequence: quadratic
// in total); with it, a step runs only the new token (its cost grows only by attention's
// reads of the cache: about linear in total).
#include <chrono>
#include <cmath>

#include "kv_bench/bench.h"

namespace lmp::kvbench {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TokenId argmax(const std::vector<float>& v) {
  return static_cast<TokenId>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Least-squares slope of log(y) against log(x).
double loglog_slope(const std::vector<std::pair<double, double>>& pts) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const auto n = static_cast<double>(pts.size());
  for (auto [x, y] : pts) {
    const double lx = std::log(x), ly = std::log(y);
    sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly;
  }
  const double d = n * sxx - sx * sx;
  return d != 0 ? (n * sxy - sx * sy) / d : 0.0;
}

struct Run {
  std::vector<double> step_s;     // seconds per step
  std::vector<TokenId> tokens;    // generated
  double total = 0;
};

}  // namespace

Result<cli::Report> run_speedup(const Common& com, const SpeedupOptions& o) {
  for (int n : o.lengths)
    if (n < 2) return make_error(Errc::invalid_argument, "--lengths: {} is too short (at least 2 tokens)", n);
  LMP_ASSIGN(auto rm, load_runnable(com.spec));
  model::Transformer& m = *rm->model;
  const model::Config& c = m.config();
  ThreadPool pool(com.threads);
  const int n_max = *std::max_element(o.lengths.begin(), o.lengths.end());
  std::vector<TokenId> prompt;
  for (int i = 0; i < o.prompt; ++i) prompt.push_back(filler_token(i, c.n_vocab));
  LMP_ASSIGN(auto cache, kv::make_kv_cache(cache_config(c, o.prompt + n_max)));
  std::vector<float> logits(static_cast<std::size_t>(c.n_vocab));

  // Cached: the prompt, then one token per step.
  auto cached = [&](int n) -> Result<Run> {
    Run r;
    cache->release(0);
    auto t0 = Clock::now();
    for (int k = 0; k < n; ++k) {
      auto ts = Clock::now();
      if (k == 0) {
        LMP_TRY(m.forward_batch(prompt, 0, *cache, logits.data(), pool));
      } else {
        LMP_TRY(m.forward(r.tokens.back(), o.prompt + k - 1, *cache, logits.data(), pool));
      }
      r.tokens.push_back(argmax(logits));
      r.step_s.push_back(since(ts));
    }
    r.total = since(t0);
    return r;
  };
  // Uncached: every step the whole sequence (prompt + tokens so far) from scratch, fed
  // the cached run's tokens, so that both compute the same thing.
  cli::Progress progress("speedup");
  double work_done = 0, work_all = 0;
  for (int n : o.lengths) work_all += static_cast<double>(o.repeats) * n * (n + 2.0 * o.prompt) / 2;
  auto uncached = [&](int n, const std::vector<TokenId>& forced) -> Result<Run> {
    Run r;
    std::vector<TokenId> seq = prompt;
    auto t0 = Clock::now();
    for (int k = 0; k < n; ++k) {
      auto ts = Clock::now();
      cache->release(0);
      LMP_TRY(m.forward_batch(seq, 0, *cache, logits.data(), pool));
      r.tokens.push_back(argmax(logits));
      r.step_s.push_back(since(ts));
      seq.push_back(forced[static_cast<std::size_t>(k)]);
      work_done += static_cast<double>(seq.size());
      progress.update(work_done / work_all, fmt::format("{} tokens, no cache: step {}", n, k + 1));
    }
    r.total = since(t0);
    return r;
  };

  cli::Report rep;
  rep.mode = "speedup";
  rep.field("model", rm->name);
  rep.field("threads", com.threads);
  rep.field("prompt_tokens", o.prompt);
  rep.field("repeats", o.repeats);
  rep.head.push_back(fmt::format("model: {}", shape_name(com.spec, c)));
  rep.head.push_back(fmt::format("{} thread{}, prompt {} token{}, greedy; times are medians of {} run{}", com.threads,
                                 com.threads > 1 ? "s" : "", o.prompt, o.prompt > 1 ? "s" : "", o.repeats,
                                 o.repeats > 1 ? "s" : ""));
  cli::Table t("speedup", {{"tokens", "tokens"},
                           {"no_cache_s", "no cache (s)"},
                           {"cache_s", "cache (s)"},
                           {"speedup", "speedup"},
                           {"no_cache_last_step_ms", "last step, no cache (ms)"},
                           {"cache_last_step_ms", "last step, cache (ms)"},
                           {"same_tokens", "same tokens", false}});
  std::vector<std::pair<double, double>> tot_nc, tot_c;
  Run last_nc, last_c;
  for (int n : o.lengths) {
    std::vector<double> nc_t, c_t;
    Run rc, rn;
    for (int rep_i = 0; rep_i < o.repeats; ++rep_i) {
      LMP_ASSIGN(rc, cached(n));
      LMP_ASSIGN(rn, uncached(n, rc.tokens));
      c_t.push_back(rc.total);
      nc_t.push_back(rn.total);
    }
    const double tc = median(c_t), tn = median(nc_t);
    const bool same = rc.tokens == rn.tokens;
    t.add({std::to_string(n), cli::num(tn, 4), cli::num(tc, 4), cli::num(tn / tc, 3), cli::num(rn.step_s.back() * 1e3, 4),
           cli::num(rc.step_s.back() * 1e3, 4), same ? "yes" : "no"});
    tot_nc.emplace_back(n, tn);
    tot_c.emplace_back(n, tc);
    if (n == n_max) last_nc = rn, last_c = rc;
  }
  progress.done();
  rep.tables.push_back(std::move(t));

  // Growth: total time against tokens (log-log slope: 2 is quadratic, 1 linear), and the
  // per-step curves of the longest run.
  if (o.lengths.size() > 1) {
    const double e_nc = loglog_slope(tot_nc), e_c = loglog_slope(tot_c);
    rep.field("no_cache_growth_exponent", e_nc);
    rep.field("cache_growth_exponent", e_c);
    rep.foot.push_back(fmt::format("total time grows as tokens^{:.2f} without the cache (quadratic: 2) and tokens^{:.2f} with it "
                                   "(linear: 1)",
                                   e_nc, e_c));
  }
  auto tenth = [](const std::vector<double>& v, bool end) {
    const std::size_t k = std::max<std::size_t>(v.size() / 10, 1);
    std::vector<double> part(end ? v.end() - static_cast<std::ptrdiff_t>(k) : v.begin(),
                             end ? v.end() : v.begin() + static_cast<std::ptrdiff_t>(k));
    return median(part);
  };
  // Step 0 processes the prompt in both runs; the curves start at step 1.
  std::vector<double> sn(last_nc.step_s.begin() + 1, last_nc.step_s.end()), sc(last_c.step_s.begin() + 1, last_c.step_s.end());
  const double g_nc = tenth(sn, true) / tenth(sn, false), g_c = tenth(sc, true) / tenth(sc, false);
  rep.field("no_cache_step_growth", g_nc);
  rep.field("cache_step_growth", g_c);
  rep.foot.push_back(fmt::format("over {} tokens one step takes {:.1f}x longer at the end than at the start without the cache, "
                                 "{:.2f}x with it (attention reads a longer cache)",
                                 n_max, g_nc, g_c));
  cli::Table curve("steps", {{"step", "step"}, {"no_cache_ms", "no cache (ms)"}, {"cache_ms", "cache (ms)"}});
  for (std::size_t k = 0; k < last_c.step_s.size(); ++k)
    curve.add({std::to_string(k + 1), cli::num(last_nc.step_s[k] * 1e3, 4), cli::num(last_c.step_s[k] * 1e3, 4)});
  curve.in_text = false;
  rep.tables.push_back(std::move(curve));

  if (!com.plot.empty()) {
    cli::Panel steps{fmt::format("Time per generated token, {} tokens", n_max), "token", "ms per token", {}, true};
    cli::Panel total{"Total generation time", "tokens generated", "seconds", {}, true};
    cli::Series a{"no cache", {}}, b{"KV cache", {}}, ca{"no cache", {}}, cb{"KV cache", {}};
    double acc_a = 0, acc_b = 0;
    for (std::size_t k = 0; k < last_c.step_s.size(); ++k) {
      a.points.emplace_back(static_cast<double>(k + 1), last_nc.step_s[k] * 1e3);
      b.points.emplace_back(static_cast<double>(k + 1), last_c.step_s[k] * 1e3);
      acc_a += last_nc.step_s[k], acc_b += last_c.step_s[k];
      ca.points.emplace_back(static_cast<double>(k + 1), acc_a);
      cb.points.emplace_back(static_cast<double>(k + 1), acc_b);
    }
    steps.series = {a, b};
    total.series = {ca, cb};
    LMP_TRY(io::write_file_atomic(com.plot, cli::svg_chart({steps, total})));
  }
  return rep;
}

}  // namespace lmp::kvbench
