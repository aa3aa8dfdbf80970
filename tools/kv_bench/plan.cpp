// kv-bench plan: how many sequences of a context length fit next to the weights in a
// memory budget, for MHA, GQA and MQA variants of the shape and each cache type, with the
// arithmetic shown.
#include <cmath>

#include "kv_bench/bench.h"
#include "lmpipe/model/synth.h"

namespace lmp::kvbench {

Result<cli::Report> run_plan(const Common& com, const PlanOptions& o) {
  LMP_ASSIGN(model::Config c, resolve_shape(com.spec));
  const int ctx = o.ctx ? o.ctx : c.n_ctx_train;
  const auto wdt = parse_dtype(o.weights);
  if (!wdt || !dtype_info(*wdt).is_float)
    return make_error(Errc::invalid_argument, "--weights: '{}' is not one of {}", o.weights, weight_dtype_list());
  const double per_param = static_cast<double>(dtype_info(*wdt).block_bytes) / static_cast<double>(dtype_info(*wdt).block);
  const std::uint64_t memory = cli::parse_bytes(o.memory, "--memory"), reserve = cli::parse_bytes(o.reserve, "--reserve");
  const std::uint64_t params = model::param_count(c);
  const double weights = static_cast<double>(params) * per_param;
  const double free = static_cast<double>(memory) - weights - static_cast<double>(reserve);

  cli::Report rep;
  rep.mode = "plan";
  rep.field("model", shape_name(com.spec, c));
  rep.field("memory_bytes", static_cast<double>(memory));
  rep.field("ctx", ctx);
  rep.field("params", static_cast<double>(params));
  rep.field("weights_type", o.weights);
  rep.field("weights_bytes", weights);
  rep.field("reserve_bytes", static_cast<double>(reserve));
  rep.field("free_bytes", free);
  rep.head.push_back(fmt::format("model: {}", shape_name(com.spec, c)));
  rep.head.push_back(fmt::format("memory {} ({} bytes); weights {} params x {} B ({}) = {}; reserve {}; left for the KV cache: {}",
                                 cli::human_bytes(static_cast<double>(memory)), cli::with_commas(memory), cli::with_commas(params),
                                 cli::num(per_param, 4), o.weights, cli::human_bytes(weights), cli::human_bytes(static_cast<double>(reserve)),
                                 free > 0 ? cli::human_bytes(free) : std::string("nothing")));
  cli::Table t("plan", {{"attention", "attention", false},
                        {"kv_heads", "kv heads"},
                        {"type", "cache", false},
                        {"bytes_per_token", "B/token"},
                        {"bytes_per_sequence", fmt::format("B/sequence at {}", ctx)},
                        {"per_sequence", "per sequence", false},
                        {"max_batch", "max batch"},
                        {"max_ctx_batch1", "max context, batch 1"}});
  std::vector<std::pair<std::string, int>> variants{{"MHA", c.n_head}};
  int g = c.n_kv_head < c.n_head ? c.n_kv_head : (c.n_head % 8 == 0 && c.n_head > 8 ? 8 : 0);
  if (g > 1) variants.emplace_back("GQA", g);
  if (c.n_head > 1) variants.emplace_back("MQA", 1);
  for (const auto& [name, kvh] : variants) {
    model::Config vc = c;
    vc.n_kv_head = kvh;
    for (kv::KvType type : {kv::KvType::f16, kv::KvType::int8, kv::KvType::int4}) {
      const std::uint64_t bpt = kv::bytes_per_token(cache_config(vc, 1, type));
      const double seq = static_cast<double>(bpt) * ctx;
      const double batch = free > 0 ? std::floor(free / seq) : 0;
      const double maxctx = free > 0 ? std::floor(free / static_cast<double>(bpt)) : 0;
      t.add({name, std::to_string(kvh), kv::kv_type_name(type), std::to_string(bpt), cli::num(seq, 15), cli::human_bytes(seq),
             cli::num(batch, 12), cli::num(maxctx, 12)});
      if (type == kv::KvType::f16)
        rep.foot.push_back(fmt::format("{} f16: 2 x {} layers x {} kv heads x {} head_dim x 2 B = {} B/token; x {} tokens = {}",
                                       name, c.n_layer, kvh, c.head_dim(), cli::with_commas(bpt), ctx, cli::human_bytes(seq)));
    }
  }
  rep.tables.push_back(std::move(t));
  rep.foot.push_back("int8 and int4 store 32 numbers in 34 and 18 bytes (an f16 scale per group); max batch = floor(left / "
                     "per sequence)");
  if (free <= 0)
    rep.foot.push_back(fmt::format("the weights alone ({}) do not fit in {}: try --weights q8_0 or q4_0", cli::human_bytes(weights),
                                   cli::human_bytes(static_cast<double>(memory))));
  return rep;
}

}  // namespace lmp::kvbench
