// kv-bench paged: many sequences of random prompt and output lengths under a memory
// budget, served by continuous batching (admit while memory lasts, one token per running
// sequence per step, preempt the newest when a step runs out of blocks, as vLLM does).
// Contiguous storage reserves the whole context for each sequence; paged storage takes a
// block when a sequence needs one. The waste is allocated minus used.
//
// The allocator is the real cache (lib/kv) on a one-layer stand-in shape; bytes are those
// of the model's shape (the waste and the counts do not depend on the bytes per token).
#include <chrono>
#include <deque>
#include <random>

#include "kv_bench/bench.h"

namespace lmp::kvbench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kDecodeRounds = 3;

// Tokens each of `seqs` sequences decodes so that they decode `n` in all (rounded up).
int decode_steps(int n, int seqs) { return (n + seqs - 1) / seqs; }

struct Request {
  int prompt = 0, total = 0;
};

struct SimResult {
  double waste = 0;          // time-averaged (allocated - used) / allocated
  double mean_running = 0;   // sequences in the batch, averaged over steps
  std::int64_t steps = 0, preemptions = 0;
  double tokens_per_step = 0;
  std::int64_t max_running = 0;
};

// Serve all requests; `slots` > 0: contiguous with that many reservations, else paged
// with `blocks` blocks of `bs` tokens.
Result<SimResult> serve(const std::vector<Request>& reqs, int ctx, int bs, std::int64_t slots, std::int64_t blocks) {
  kv::KvConfig kc;
  kc.n_layer = 1;
  kc.kv_dim = 8;
  kc.head_dim = 8;
  kc.n_ctx = ctx;
  if (slots > 0) {
    kc.layout = kv::Layout::contiguous;
    kc.max_seqs = static_cast<int>(slots);
  } else {
    kc.layout = kv::Layout::paged;
    kc.block_size = bs;
    kc.max_seqs = static_cast<int>(reqs.size());
    kc.max_bytes = static_cast<std::uint64_t>(blocks) * static_cast<std::uint64_t>(bs) * kv::bytes_per_token(kc);
  }
  LMP_ASSIGN(auto cache, kv::make_kv_cache(kc));
  const std::vector<float> row(8, 0.25f);
  std::deque<std::size_t> waiting;
  for (std::size_t i = 0; i < reqs.size(); ++i) waiting.push_back(i);
  struct Running {
    std::size_t req;
    kv::SeqId slot;
  };
  std::vector<Running> running;
  std::vector<kv::SeqId> free_slots;
  for (int s = kc.max_seqs - 1; s >= 0; --s) free_slots.push_back(s);
  SimResult r;
  double alloc_sum = 0, waste_sum = 0, run_sum = 0, tokens = 0;
  auto put = [&](kv::SeqId s) { return cache->append(0, s, row, row); };
  while (!waiting.empty() || !running.empty()) {
    // Admit: the prompt goes in whole, or the request waits.
    while (!waiting.empty() && !free_slots.empty()) {
      const Request& q = reqs[waiting.front()];
      const kv::SeqId s = free_slots.back();
      bool ok = true;
      for (int i = 0; i < q.prompt && ok; ++i) ok = put(s).ok();
      if (!ok) {
        cache->release(s);
        if (running.empty())
          return make_error(Errc::out_of_range, "a request of {} prompt tokens does not fit in the budget alone", q.prompt);
        break;
      }
      free_slots.pop_back();
      running.push_back({waiting.front(), s});
      waiting.pop_front();
      tokens += q.prompt;
    }
    // One token for each running sequence; out of blocks: preempt the newest (its tokens
    // are recomputed when it is admitted again).
    for (std::size_t i = 0; i < running.size();) {
      if (put(running[i].slot).ok()) {
        ++i;
        tokens += 1;
        continue;
      }
      const Running victim = running.back();
      running.pop_back();
      cache->release(victim.slot);
      free_slots.push_back(victim.slot);
      waiting.push_front(victim.req);
      ++r.preemptions;
      if (running.empty()) return make_error(Errc::out_of_range, "one sequence alone does not fit in the budget");
    }
    const kv::KvStats st = cache->stats();
    alloc_sum += static_cast<double>(st.allocated);
    waste_sum += static_cast<double>(st.allocated - st.used);
    run_sum += static_cast<double>(running.size());
    r.max_running = std::max<std::int64_t>(r.max_running, static_cast<std::int64_t>(running.size()));
    ++r.steps;
    // Finished sequences leave.
    for (std::size_t i = 0; i < running.size();) {
      if (cache->length(running[i].slot) >= reqs[running[i].req].total) {
        cache->release(running[i].slot);
        free_slots.push_back(running[i].slot);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
  r.waste = alloc_sum > 0 ? waste_sum / alloc_sum : 0;
  r.mean_running = run_sum / static_cast<double>(r.steps);
  r.tokens_per_step = tokens / static_cast<double>(r.steps);
  return r;
}

// Decode speed of paged caches against the contiguous one, `seqs` sequences decoding
// together. Each sequence has its own prompt of `ctx` tokens; their keys and values are
// computed once (an f32 contiguous cache) and stored into every cache (`configs[0]` the
// contiguous one) in turns of a block (16 tokens for the contiguous cache), one sequence
// after another, so that a paged cache's sequences take their blocks in turn, as sequences
// decoding together do (its pool then sets runs of blocks aside for each: paged_kv_cache.h).
// One sequence alone is the best case. A decode step runs one token of every sequence.
// `rounds` rounds each decode on every cache in turn, the first cache of a round moving by
// one each round; each paged cache's figure is the median over the rounds of its tok/s
// over the contiguous cache's in the same round: hosts whose speed drifts within minutes
// moved the ratio by up to a tenth when the contiguous cache was measured first and the
// blocks after. The caches are all held at once (one per configuration).
// Tokens 0..ctx-1 of every sequence into `cache`, `turn` tokens of one sequence, then of
// the next; rows[s * n_layer + l]: sequence s's keys and values of layer l, (ctx, kv_dim) f32.
Status store_in_turns(kv::KvCache& cache, const std::vector<kv::KvBlock>& rows, int ctx, int turn) {
  const kv::KvConfig& kc = cache.config();
  const auto kv_dim = static_cast<std::size_t>(kc.kv_dim);
  for (int t0 = 0; t0 < ctx; t0 += turn) {
    for (int s = 0; s < kc.max_seqs; ++s) {
      for (int i = t0; i < std::min(ctx, t0 + turn); ++i) {
        for (int l = 0; l < kc.n_layer; ++l) {
          const kv::KvBlock& b = rows[static_cast<std::size_t>(s * kc.n_layer + l)];
          const std::size_t at = static_cast<std::size_t>(i) * kv_dim;
          LMP_TRY(cache.append(l, s, {reinterpret_cast<const float*>(b.k) + at, kv_dim},
                               {reinterpret_cast<const float*>(b.v) + at, kv_dim}));
        }
      }
    }
  }
  return {};
}

struct DecodeRatios {
  double contiguous_tok_s = 0;  // the contiguous cache's median, tokens of all sequences
  std::vector<double> ratios;   // (configs - 1) configs[1..]'s, in order
};
Result<DecodeRatios> decode_ratios(model::Transformer& m, ThreadPool& pool, std::vector<kv::KvConfig> configs, int ctx, int n,
                                   int seqs, int rounds, cli::Progress& progress) {
  const model::Config& c = m.config();
  const int steps = decode_steps(n, seqs);
  std::vector<float> logits(static_cast<std::size_t>(c.n_vocab));
  progress.update(0, "decode: prompts");
  kv::KvConfig pc = configs[0];
  pc.type = kv::KvType::f32;
  pc.layout = kv::Layout::contiguous;
  pc.n_ctx = ctx;
  pc.max_seqs = seqs;
  LMP_ASSIGN(auto prompts, kv::make_kv_cache(pc));
  for (int s = 0; s < seqs; ++s) {
    std::vector<TokenId> prompt;  // (ctx)
    for (int i = 0; i < ctx; ++i) prompt.push_back(filler_token(static_cast<std::int64_t>(s) * ctx + i, c.n_vocab));
    LMP_TRY(m.forward_batch(prompt, 0, *prompts, logits.data(), pool, s));
  }
  // rows[s * n_layer + l]: sequence s's keys and values in layer l, (ctx, kv_dim) f32 each.
  std::vector<kv::KvBlock> rows, one;
  for (int s = 0; s < seqs; ++s) {
    for (int l = 0; l < c.n_layer; ++l) {
      prompts->blocks(l, s, one);
      if (one.size() != 1 || one[0].begin != 0 || one[0].end != ctx)
        return make_error(Errc::internal, "the prompt cache holds sequence {} of layer {} in {} runs", s, l, one.size());
      rows.push_back(one[0]);
    }
  }
  std::vector<std::unique_ptr<kv::KvCache>> caches;  // (configs)
  for (auto& kc : configs) {
    kc.n_ctx = ctx + steps;
    kc.max_seqs = seqs;
    LMP_ASSIGN(auto cache, kv::make_kv_cache(kc));
    LMP_TRY(store_in_turns(*cache, rows, ctx, kc.layout == kv::Layout::paged ? kc.block_size : 16));
    caches.push_back(std::move(cache));
  }
  prompts.reset();
  const std::size_t k = caches.size();
  std::vector<double> contiguous;             // (rounds) the contiguous cache's tok/s
  std::vector<std::vector<double>> ratio(k);  // (configs, rounds) tok/s over the contiguous cache's
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> now(k);  // (configs) this round's tok/s
    progress.update(static_cast<double>(r) / rounds, fmt::format("decode: round {} of {}", r + 1, rounds));
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t ci = (j + static_cast<std::size_t>(r)) % k;
      kv::KvCache& cache = *caches[ci];
      for (int s = 0; s < seqs; ++s) LMP_TRY(cache.truncate(s, ctx));
      const auto t0 = Clock::now();
      for (int i = 0; i < steps; ++i) {
        for (int s = 0; s < seqs; ++s) {
          const TokenId tok = filler_token(static_cast<std::int64_t>(s) * ctx + ctx + i, c.n_vocab);
          LMP_TRY(m.forward(tok, ctx + i, cache, logits.data(), pool, s));
        }
      }
      now[ci] = static_cast<double>(steps) * seqs / std::chrono::duration<double>(Clock::now() - t0).count();
    }
    contiguous.push_back(now[0]);
    for (std::size_t ci = 0; ci < k; ++ci) ratio[ci].push_back(now[ci] / now[0]);
  }
  DecodeRatios out{median(contiguous), {}};
  for (std::size_t ci = 1; ci < k; ++ci) out.ratios.push_back(median(ratio[ci]));
  return out;
}

}  // namespace

Result<cli::Report> run_paged(const Common& com, const PagedOptions& o) {
  LMP_ASSIGN(model::Config c, resolve_shape(com.spec));
  LMP_ASSIGN(kv::KvType type, kv::parse_kv_type(o.kv_type));
  if (o.prompt_min < 1 || o.prompt_min > o.prompt_max || o.output_min < 1 || o.output_min > o.output_max)
    return make_error(Errc::invalid_argument, "--prompt-len and --output-len take MIN:MAX with 1 <= MIN <= MAX");
  if (o.prompt_max + 1 > o.ctx) return make_error(Errc::invalid_argument, "--ctx {} is shorter than the longest prompt", o.ctx);
  const std::uint64_t bpt = kv::bytes_per_token(cache_config(c, 1, type));
  const std::uint64_t budget = o.memory.empty() ? 64 * static_cast<std::uint64_t>(o.ctx) * bpt : cli::parse_bytes(o.memory, "--memory");
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int> pl(o.prompt_min, o.prompt_max), ol(o.output_min, o.output_max);
  std::vector<Request> reqs(static_cast<std::size_t>(o.requests));
  double mean_len = 0;
  for (auto& q : reqs) {
    q.prompt = pl(rng);
    q.total = std::min(q.prompt + ol(rng), o.ctx);
    mean_len += q.total;
  }
  mean_len /= static_cast<double>(reqs.size());

  cli::Report rep;
  rep.mode = "paged";
  rep.field("model", shape_name(com.spec, c));
  rep.field("kv_type", kv::kv_type_name(type));
  rep.field("bytes_per_token", static_cast<double>(bpt));
  rep.field("budget_bytes", static_cast<double>(budget));
  rep.field("requests", o.requests);
  rep.field("ctx", o.ctx);
  rep.field("mean_length", mean_len);
  rep.head.push_back(fmt::format("model: {}; {} cache, {} bytes per token", shape_name(com.spec, c), kv::kv_type_name(type), bpt));
  rep.head.push_back(fmt::format("workload: {} requests, prompts {}..{} tokens, outputs {}..{} (seed {}; mean length {:.0f}), "
                                 "context {}; budget {}",
                                 o.requests, o.prompt_min, o.prompt_max, o.output_min, o.output_max, o.seed, mean_len, o.ctx,
                                 cli::human_bytes(static_cast<double>(budget))));
  cli::Table t("paged", {{"layout", "layout", false},
                         {"block", "block"},
                         {"waste_pct", "waste %"},
                         {"fit_at_full_length", "fit (full length)"},
                         {"mean_running", "mean batch"},
                         {"max_running", "max batch"},
                         {"steps", "steps"},
                         {"tokens_per_step", "tokens/step"},
                         {"preemptions", "preempted"},
                         {"block_table_bytes", "table bytes/seq"},
                         {"decode_vs_contiguous", "decode vs contiguous"}});

  // Checked before the decode comparison, which takes minutes.
  const std::int64_t slots = static_cast<std::int64_t>(budget / (static_cast<std::uint64_t>(o.ctx) * bpt));
  if (slots < 1)
    return make_error(Errc::out_of_range, "the budget of {} holds no sequence of {} tokens ({} each)", cli::human_bytes(static_cast<double>(budget)),
                      o.ctx, cli::human_bytes(static_cast<double>(bpt) * o.ctx));
  std::unique_ptr<Runnable> rm;
  double contiguous_speed = 0;
  std::vector<double> ratios;  // decode speed of each block size over the contiguous cache's
  cli::Progress progress("paged");
  std::vector<kv::KvConfig> configs{cache_config(c, 1, type)};
  for (const int bs : o.blocks) configs.push_back(cache_config(c, 1, type, kv::Layout::paged, bs));
  if (o.decode > 0) {
    const int len = o.prompt_max + decode_steps(o.decode, o.decode_seqs);
    double total = 0;
    for (const auto& kc : configs) total += static_cast<double>(kv::bytes_per_token(kc)) * len * o.decode_seqs;
    total += static_cast<double>(kv::bytes_per_token(cache_config(c, 1))) * o.prompt_max * o.decode_seqs;  // the prompts, f32
    if (total > physical_memory() / 4)
      return make_error(Errc::out_of_range,
                        "the decode comparison holds {} caches of {} sequence{} of {} tokens at once ({} in all, with the "
                        "prompts), over a quarter of this machine's memory: give fewer --blocks or --decode-seqs, a shorter "
                        "--prompt-len or --decode, or --decode 0",
                        configs.size(), o.decode_seqs, o.decode_seqs > 1 ? "s" : "", len, cli::human_bytes(total));
    auto r = load_runnable(com.spec);
    if (!r.ok()) {
      rep.foot.push_back(fmt::format("decode speed not measured: {}", r.error().message));
    } else {
      rm = std::move(*r);
      ThreadPool pool(com.threads);
      LMP_ASSIGN(DecodeRatios d,
                 decode_ratios(*rm->model, pool, configs, o.prompt_max, o.decode, o.decode_seqs, kDecodeRounds, progress));
      contiguous_speed = d.contiguous_tok_s;
      ratios = std::move(d.ratios);
    }
  }
  LMP_ASSIGN(SimResult cr, serve(reqs, o.ctx, 1, slots, 0));
  t.add({"contiguous", "-", cli::num(100 * cr.waste, 3), std::to_string(slots), cli::num(cr.mean_running, 4),
         std::to_string(cr.max_running), std::to_string(cr.steps), cli::num(cr.tokens_per_step, 4), std::to_string(cr.preemptions),
         "0", rm ? "1" : "-"});
  double waste16 = -1, ratio16 = -1;
  for (std::size_t bi = 0; bi < o.blocks.size(); ++bi) {
    const int bs = o.blocks[bi];
    progress.update(static_cast<double>(bi) / static_cast<double>(o.blocks.size()), fmt::format("block {}", bs));
    const std::int64_t blocks = static_cast<std::int64_t>(budget / (static_cast<std::uint64_t>(bs) * bpt));
    // Sequences that fit at their full length, in arrival order.
    std::int64_t fit = 0, used = 0;
    for (const auto& q : reqs) {
      const int need = (q.total + bs - 1) / bs;
      if (used + need > blocks) break;
      used += need;
      ++fit;
    }
    LMP_ASSIGN(SimResult pr, serve(reqs, o.ctx, bs, 0, blocks));
    std::string speed = "-";
    if (rm) {
      speed = cli::num(ratios[bi], 3);
      if (bs == 16) ratio16 = ratios[bi];
    }
    if (bs == 16) waste16 = pr.waste;
    const double table_bytes = 4.0 * std::ceil(mean_len / bs);
    t.add({"paged", std::to_string(bs), cli::num(100 * pr.waste, 3), std::to_string(fit),
           cli::num(pr.mean_running, 4), std::to_string(pr.max_running), std::to_string(pr.steps), cli::num(pr.tokens_per_step, 4),
           std::to_string(pr.preemptions), cli::num(table_bytes, 4), speed});
  }
  progress.done();
  rep.tables.push_back(std::move(t));
  if (waste16 >= 0) rep.field("paged_waste_pct_block16", 100 * waste16);
  if (ratio16 >= 0) rep.field("paged_decode_ratio_block16", ratio16);
  if (rm) rep.field("decode_seqs", o.decode_seqs);
  rep.field("contiguous_waste_pct", 100 * cr.waste);
  rep.foot.push_back("waste: allocated minus used over allocated, averaged over the steps of serving the workload; "
                     "contiguous reserves the whole context per sequence");
  rep.foot.push_back("fit: sequences that fit at once at their full length; mean/max batch: sequences decoding together; "
                     "steps: decode steps to serve all requests (fewer is more throughput)");
  if (rm)
    rep.foot.push_back(fmt::format(
        "decode: {} sequence{} of a {}-token prompt decoding together, {} tokens each, on {}, {} thread{}; tokens/s against the "
        "contiguous cache ({:.1f} tok/s); median of {} rounds, each running every cache in turn",
        o.decode_seqs, o.decode_seqs > 1 ? "s" : "", o.prompt_max, decode_steps(o.decode, o.decode_seqs), rm->name, com.threads,
        com.threads > 1 ? "s" : "", contiguous_speed, kDecodeRounds));
  return rep;
}

}  // namespace lmp::kvbench
