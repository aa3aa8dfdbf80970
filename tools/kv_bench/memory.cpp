// kv-bench memory: bytes per token of the KV cache by formula and as the allocator sees
// them, for every storage type and for MHA, GQA and MQA variants of the model's shape,
// and the total at a context length.
#include <algorithm>

#include "kv_bench/bench.h"

namespace lmp::kvbench {

Result<cli::Report> run_memory(const Common& com, const MemoryOptions& o) {
  LMP_ASSIGN(model::Config c, resolve_shape(com.spec));
  const int ctx = o.ctx ? o.ctx : c.n_ctx_train;
  // The variants: multi-head (a KV head per query head), the model's grouping (or 8 KV
  // heads, Llama-2-70B's, when the model is MHA), multi-query (one KV head).
  struct Variant {
    std::string name;
    int kv_heads;
  };
  std::vector<Variant> variants{{"MHA", c.n_head}};
  int g = c.n_kv_head < c.n_head ? c.n_kv_head : 0;
  if (!g)
    for (int k : {8, 4, 2})
      if (c.n_head % k == 0 && k < c.n_head) {
        g = k;
        break;
      }
  if (g > 1) variants.push_back({"GQA", g});
  if (c.n_head > 1) variants.push_back({"MQA", 1});
  cli::Report rep;
  rep.mode = "memory";
  rep.field("model", shape_name(com.spec, c));
  rep.field("ctx", ctx);
  rep.field("measured_tokens", o.tokens);
  rep.head.push_back(fmt::format("model: {}", shape_name(com.spec, c)));
  rep.head.push_back(fmt::format("bytes per token = 2 (K and V) x {} layers x kv_heads x {} (head_dim) x bytes per number; "
                                 "int8 and int4 add an f16 scale per group of {}",
                                 c.n_layer, c.head_dim(), kv::RowFormat::make(kv::KvType::int8, c.head_dim(), c.head_dim()).group));
  cli::Table t("memory", {{"attention", "attention", false},
                          {"kv_heads", "kv heads"},
                          {"type", "type", false},
                          {"bytes_per_number", "bytes/number"},
                          {"formula_bytes_per_token", "formula B/token"},
                          {"measured_bytes_per_token", "measured B/token"},
                          {"total_bytes", fmt::format("total at {} tokens (B)", ctx)},
                          {"total", fmt::format("at {}", ctx), false},
                          {"note", "note", false}});
  cli::Panel plot{"KV-cache size against context", "tokens of context", "MiB", {}, false};
  bool by_allocator = true;
  bool unmeasured = false;  // some row's one token passes the 256 MiB measured per row
  for (const auto& v : variants) {
    model::Config vc = c;
    vc.n_kv_head = v.kv_heads;
    for (kv::KvType type : {kv::KvType::f32, kv::KvType::f16, kv::KvType::int8, kv::KvType::int4}) {
      kv::KvConfig kc = cache_config(vc, o.tokens, type);
      const std::uint64_t formula = kv::bytes_per_token(kc);
      // At most 256 MiB measured per row of the table (Llama-2-70B's MHA f32 is 5 MiB a token);
      // a shape whose single token passes that is given by its formula alone.
      constexpr std::uint64_t budget = 256u << 20;
      const bool measurable = formula <= budget;
      kc.n_ctx = static_cast<int>(std::clamp<std::uint64_t>(budget / formula, 1, static_cast<std::uint64_t>(o.tokens)));
      std::string per_cell = "-";
      if (measurable) {
        // Measured: what the allocator hands out for a cache of kc.n_ctx tokens, filled.
        // (A sanitizer's allocator reports nothing to mallinfo2: then the cache's own count.)
        std::vector<float> k(static_cast<std::size_t>(kc.kv_dim), 0.5f);
        const std::uint64_t before = heap_bytes();
        std::uint64_t measured = 0;
        {
          LMP_ASSIGN(auto cache, kv::make_kv_cache(kc));
          for (int tok = 0; tok < kc.n_ctx; ++tok)
            for (int l = 0; l < kc.n_layer; ++l) LMP_TRY(cache->append(l, 0, k, k));
          const std::uint64_t after = heap_bytes();
          measured = after > before ? after - before : 0;
          if (measured == 0) {
            measured = cache->stats().reserved;
            by_allocator = false;
          }
        }
        per_cell = cli::num(static_cast<double>(measured) / kc.n_ctx, 9);
      } else {
        unmeasured = true;
      }
      const double total = static_cast<double>(formula) * ctx;
      const bool own = v.kv_heads == c.n_kv_head;
      const double per_number = kv::RowFormat::make(type, kc.kv_dim, kc.head_dim).bytes_per_number();
      t.add({v.name, std::to_string(v.kv_heads), kv::kv_type_name(type), cli::num(per_number, 5), std::to_string(formula),
             per_cell, cli::num(total, 12), cli::human_bytes(total), own ? "this model" : ""});
      if (own) {
        cli::Series s{fmt::format("{} {}", v.name, kv::kv_type_name(type)), {}};
        for (int i = 0; i <= 16; ++i)
          s.points.emplace_back(ctx * i / 16.0, static_cast<double>(formula) * ctx * i / 16.0 / 1048576.0);
        plot.series.push_back(std::move(s));
      }
    }
  }
  rep.tables.push_back(std::move(t));
  rep.field("measured_by", by_allocator ? "allocator" : "cache");
  if (by_allocator)
    rep.foot.push_back(fmt::format("measured: the bytes the allocator (glibc mallinfo2) holds for a filled cache of {} tokens "
                                   "(fewer where that passes 256 MiB), divided by its tokens",
                                   o.tokens));
  else
    rep.foot.push_back("measured: the allocator reports nothing to mallinfo2 (a sanitizer build?): the cache's own count of "
                       "the bytes it reserved, divided by its tokens");
  if (unmeasured)
    rep.foot.push_back("measured B/token '-': one token of that row's cache passes 256 MiB, more than this command "
                       "allocates to measure a row; its formula is exact");
  if (!com.plot.empty()) LMP_TRY(io::write_file_atomic(com.plot, cli::svg_chart({plot})));
  return rep;
}

}  // namespace lmp::kvbench
