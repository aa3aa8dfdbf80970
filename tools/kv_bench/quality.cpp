// kv-bench quality: a quantized or half-precision cache against the f32 cache on the same
// tokens (teacher-forced): the largest error of the attention outputs, the KL divergence
// of the next-token distributions, top-1 agreement, and the perplexity change.
#include <cmath>

#include "kv_bench/bench.h"
#include "lmpipe/core/io.h"
#include "lmpipe/core/rng.h"
#include "lmpipe/sample/sampler.h"
#include "lmpipe/tok/ids.h"

namespace lmp::kvbench {

namespace {

// log-softmax of logits, in double.
void log_softmax(const float* x, std::size_t n, std::vector<double>& out) {
  out.resize(n);
  double m = static_cast<double>(x[0]);
  for (std::size_t i = 1; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  const double lse = m + std::log(s);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<double>(x[i]) - lse;
}

struct Pass {
  std::vector<float> logits;  // (steps, n_vocab)
  std::vector<float> attn;    // (steps, n_layer, n_embd)
};

Result<Pass> teacher_forced(model::Transformer& m, ThreadPool& pool, const std::vector<TokenId>& toks, kv::KvType type) {
  const model::Config& c = m.config();
  LMP_ASSIGN(auto cache, kv::make_kv_cache(cache_config(c, static_cast<int>(toks.size()), type)));
  Pass p;
  std::vector<float> logits(static_cast<std::size_t>(c.n_vocab));
  m.set_attention_probe(&p.attn);
  for (std::size_t t = 0; t + 1 < toks.size(); ++t) {
    auto st = m.forward(toks[t], static_cast<int>(t), *cache, logits.data(), pool);
    if (!st.ok()) {
      m.set_attention_probe(nullptr);
      return std::move(st).error();
    }
    p.logits.insert(p.logits.end(), logits.begin(), logits.end());
  }
  m.set_attention_probe(nullptr);
  return p;
}

}  // namespace

Result<cli::Report> run_quality(const Common& com, const QualityOptions& o) {
  LMP_ASSIGN(auto rm, load_runnable(com.spec));
  model::Transformer& m = *rm->model;
  const model::Config& c = m.config();
  ThreadPool pool(com.threads);
  std::vector<TokenId> toks;
  std::string source;
  if (!o.ids.empty()) {
    LMP_ASSIGN(auto buf, io::read_file(o.ids));
    const std::string name = o.ids == "-" ? "<stdin>" : o.ids;
    LMP_TRY(tok::parse_ids(buf, name, toks));
    if (toks.size() < 2) return make_error(Errc::invalid_argument, "{}: at least 2 token ids are needed", name);
    for (std::size_t i = 0; i < toks.size(); ++i)
      if (toks[i] < 0 || toks[i] >= c.n_vocab)
        return make_error(Errc::out_of_range, "{}: token {} (id {}) is outside the model's vocabulary (0..{})", name, i + 1,
                          toks[i], c.n_vocab - 1);
    if (o.tokens > 0 && toks.size() > static_cast<std::size_t>(o.tokens)) toks.resize(static_cast<std::size_t>(o.tokens));
    source = fmt::format("{} ({} tokens)", o.ids, toks.size());
  } else {
    // The model's own text: sampled at temperature 1 from BOS (id 1) with the f32 cache.
    LMP_ASSIGN(auto cache, kv::make_kv_cache(cache_config(c, o.tokens)));
    LMP_ASSIGN(auto chain, sample::Chain::make(sample::Config{}));
    Rng rng(o.seed);
    sample::Candidates cand;
    std::vector<float> logits(static_cast<std::size_t>(c.n_vocab));
    toks.push_back(1);
    while (static_cast<int>(toks.size()) < o.tokens) {
      LMP_TRY(m.forward(toks.back(), static_cast<int>(toks.size()) - 1, *cache, logits.data(), pool));
      LMP_TRY(cand.load(logits.data(), logits.size()));
      toks.push_back(chain.sample(cand, rng));
    }
    source = fmt::format("{} tokens sampled from the model at temperature 1 (seed {})", toks.size(), o.seed);
  }
  LMP_ASSIGN(Pass ref, teacher_forced(m, pool, toks, kv::KvType::f32));
  const std::size_t V = static_cast<std::size_t>(c.n_vocab), steps = toks.size() - 1;
  float attn_scale = 0;
  for (float a : ref.attn) attn_scale = std::max(attn_scale, std::fabs(a));
  cli::Report rep;
  rep.mode = "quality";
  rep.field("model", rm->name);
  rep.field("tokens", static_cast<double>(toks.size()));
  rep.field("source", source);
  rep.head.push_back(fmt::format("model: {}", shape_name(com.spec, c)));
  rep.head.push_back(fmt::format("text: {}; every cache against the f32 cache, teacher-forced", source));
  cli::Table t("quality", {{"type", "type", false},
                           {"bytes_per_token", "B/token"},
                           {"attn_max_abs_err", "attn max |err|"},
                           {"attn_rel_err", "attn rel err"},
                           {"kl_mean", "KL mean"},
                           {"kl_max", "KL max"},
                           {"top1_agreement_pct", "top-1 agree %"},
                           {"flip_margin_max", "flip margin max"},
                           {"ppl", "perplexity"},
                           {"ppl_change_pct", "ppl change %"}});
  std::vector<double> lp, lq;
  double ppl_ref = 0;
  std::vector<std::string> types = {"f32"};
  types.insert(types.end(), o.types.begin(), o.types.end());
  for (const auto& name : types) {
    LMP_ASSIGN(kv::KvType type, kv::parse_kv_type(name));
    Pass q;
    if (type == kv::KvType::f32) {
      q = ref;
    } else {
      LMP_ASSIGN(q, teacher_forced(m, pool, toks, type));
    }
    double amax = 0;
    for (std::size_t i = 0; i < q.attn.size(); ++i) amax = std::max(amax, static_cast<double>(std::fabs(q.attn[i] - ref.attn[i])));
    double kl_sum = 0, kl_max = 0, nll = 0;
    double flip_margin = -1;  // the largest f32 logit margin between the two choices where top-1 differs
    std::size_t agree = 0;
    for (std::size_t s = 0; s < steps; ++s) {
      const float* a = ref.logits.data() + s * V;
      const float* b = q.logits.data() + s * V;
      log_softmax(a, V, lp);
      log_softmax(b, V, lq);
      double kl = 0;
      for (std::size_t i = 0; i < V; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
      kl = std::max(kl, 0.0);
      kl_sum += kl, kl_max = std::max(kl_max, kl);
      const auto top_a = std::max_element(a, a + V) - a, top_b = std::max_element(b, b + V) - b;
      if (top_a == top_b) ++agree;
      else flip_margin = std::max(flip_margin, static_cast<double>(a[top_a]) - static_cast<double>(a[top_b]));
      nll -= lq[static_cast<std::size_t>(toks[s + 1])];
    }
    const double ppl = std::exp(nll / static_cast<double>(steps));
    if (type == kv::KvType::f32) ppl_ref = ppl;
    const double agree_pct = 100.0 * static_cast<double>(agree) / static_cast<double>(steps);
    const double dppl = 100.0 * (ppl / ppl_ref - 1.0);
    t.add({kv::kv_type_name(type), std::to_string(kv::bytes_per_token(cache_config(c, 1, type))), cli::num(amax, 3),
           cli::num(amax / std::max(static_cast<double>(attn_scale), 1e-30), 3), cli::num(kl_sum / static_cast<double>(steps), 3),
           cli::num(kl_max, 3), cli::num(agree_pct, 4),
           flip_margin < 0 ? std::string("-") : cli::num(flip_margin, 3), cli::num(ppl, 5), cli::num(dppl, 3)});
    rep.field(fmt::format("{}_top1_agreement_pct", kv::kv_type_name(type)), agree_pct);
    rep.field(fmt::format("{}_ppl_change_pct", kv::kv_type_name(type)), dppl);
  }
  rep.tables.push_back(std::move(t));
  rep.foot.push_back("attn: the attention outputs of every layer and step (before the output projection); rel: over their "
                     "largest magnitude. KL(f32 || type) per next-token distribution; perplexity of the text's next tokens");
  rep.foot.push_back("flip margin: where the top-1 token differs, how far apart the two choices were in the f32 logits "
                     "(the largest such gap; small means the flips are near-ties)");
  return rep;
}

}  // namespace lmp::kvbench
