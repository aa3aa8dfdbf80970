// generate: LLaMA-family inference with a KV cache from GGUF or llama2.c files: token ids
// or text in, text, ids or logits out, streamed as they are made.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>

#include <fmt/ranges.h>

#include "common/cli.h"
#include "lmpipe/core/json.h"
#include "lmpipe/core/npy.h"
#include "lmpipe/core/thread_pool.h"
#include "lmpipe/kv/kv_cache.h"
#include "lmpipe/model/perplexity.h"
#include "lmpipe/model/synth.h"
#include "lmpipe/model/transformer.h"
#include "lmpipe/sample/sampler.h"
#include "lmpipe/tok/decode_stream.h"
#include "lmpipe/tok/end_ids.h"
#include "lmpipe/tok/gguf_tokenizer.h"
#include "lmpipe/tok/ids.h"
#include "lmpipe/tok/tokenizer.h"

namespace {

using namespace lmp;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model, tokenizer, prompt, ids, emit = "text", output = "-";
  std::vector<std::string> stops;
  sample::Config sampling;
  std::optional<std::uint64_t> seed;
  int n = 128, ctx = 0, threads = 1, samples = 1;
  std::optional<std::size_t> prefetch;  // --prefetch; unset: the library's defaults
  kv::KvConfig kv;  // layout, type, block, eviction, budget from the options
  // generate perplexity: the text (with -t) and the windows
  std::string text;
  int stride = 0, batch = 512;
  bool per_token = false;
  bool no_cache = false, no_mmap = false, json = false, greedy = false, force = false, bos = false, emit_given = false,
       ignore_eos = false;
};

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// One continuation of sequence `seq`, whose prompt is in the cache and whose first logits
// are in `logits`: n tokens (or up to a stop string) drawn and written as they are made.
struct Continuation {
  std::size_t generated = 0;
  std::size_t steps = 0;  // forward passes: the first token comes from the prompt's logits, so generated - 1 at most
  Clock::time_point first{};
  TokenId last = -1;     // the last token drawn
  bool ended = false;    // drew an end-of-sequence token
  bool stopped = false;  // its text reached a --stop string
};

Result<Continuation> continue_sequence(const Options& o, const std::string& emit, model::Transformer& model,
                                       const tok::Tokenizer* tok, kv::KvCache& cache, kv::SeqId seq_id,
                                       std::vector<TokenId> seq, std::vector<float>& logits, sample::Chain& chain, Rng& rng,
                                       ThreadPool& pool, const std::vector<TokenId>& end_ids, cli::Output& out) {
  const model::Config& c = model.config();
  Continuation r;
  // The text, when it is shown or searched for stop strings: the stream decodes a short
  // window per token, and only the last few bytes are kept to search (a stop string can
  // start in an earlier piece).
  std::optional<tok::DecodeStream> ds;
  if (tok && (emit == "text" || !o.stops.empty())) ds.emplace(*tok);
  std::size_t longest_stop = 0;
  for (const auto& s : o.stops) longest_stop = std::max(longest_stop, s.size());
  sample::Candidates cand;
  std::string piece, recent;
  std::unique_ptr<kv::KvCache> scratch;  // --no-cache: the whole sequence again, every step
  // A model whose vocabulary is padded past its tokenizer's (Qwen2's 151,936 rows for
  // 151,665 tokens): the padding ids have no text, so they are masked and never drawn.
  const std::size_t drawable = tok ? std::min(tok->vocab_size(), logits.size()) : logits.size();
  for (int step = 0; step < o.n; ++step) {
    std::fill(logits.begin() + static_cast<std::ptrdiff_t>(drawable), logits.end(), -std::numeric_limits<float>::infinity());
    if (emit == "logits") {
      std::string a;
      npy::append_header(a, "<f4", {c.n_vocab});
      a.append(reinterpret_cast<const char*>(logits.data()), logits.size() * 4);
      LMP_TRY(out.write(a));
    }
    auto st = cand.load(logits.data(), logits.size());
    if (!st) return make_error(Errc::internal, "step {}: {}", step + 1, st.error().message);
    TokenId id = chain.sample(cand, rng);
    if (step == 0) r.first = Clock::now();
    seq.push_back(id);
    ++r.generated;
    r.last = id;
    r.ended = std::binary_search(end_ids.begin(), end_ids.end(), id);
    bool stop = r.ended;
    if (ds) {
      piece.clear();
      LMP_TRY(ds->add(id, piece));
      if (!o.stops.empty()) {
        recent += piece;
        for (const auto& s : o.stops)
          if (recent.find(s) != std::string::npos) stop = r.stopped = true;
        if (recent.size() >= longest_stop) recent.erase(0, recent.size() - (longest_stop - 1));
      }
      if (stop || step + 1 == o.n) LMP_TRY(ds->finish(piece));  // what a last token left held back
    }
    if (emit == "ids") {
      LMP_TRY(out.write(fmt::format("{}{}", step ? " " : "", id)));
    } else if (emit == "text") {
      LMP_TRY(out.write(piece));
    }
    LMP_TRY(out.flush_stdout());
    if (stop || step + 1 == o.n) break;
    // The next logits: one step with the cache, or (--no-cache) the whole sequence again.
    const int pos = static_cast<int>(seq.size()) - 1;
    if (o.no_cache) {
      kv::KvConfig kc = cache.config();
      kc.max_seqs = 1;
      kc.max_bytes = 0;
      LMP_ASSIGN(scratch, kv::make_kv_cache(kc));
      LMP_TRY(model.forward_batch(seq, 0, *scratch, logits.data(), pool));
    } else {
      LMP_TRY(model.forward(id, pos, cache, logits.data(), pool, seq_id));
    }
    ++r.steps;
  }
  if (emit != "logits") LMP_TRY(out.write("\n"));
  return r;
}

// The model (mapped, or read with --no-mmap) and its tokenizer: -t, else the one a GGUF
// carries, else none; a tokenizer larger than the model's vocabulary is an error.
struct Loaded {
  std::unique_ptr<tensor_io::TensorFile> file;
  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<tok::Tokenizer> tok;
};

Result<Loaded> load_model(const Options& o) {
  Loaded l;
  LMP_ASSIGN(l.file, tensor_io::TensorFile::open(o.model, o.no_mmap ? MappedFile::Load::copy : MappedFile::Load::map));
  LMP_ASSIGN(l.model, model::Transformer::load(*l.file));
  const model::Config& c = l.model->config();
  if (!o.tokenizer.empty()) {
    LMP_ASSIGN(l.tok, tok::load_tokenizer(o.tokenizer));
  } else if (l.file->meta("tokenizer.ggml.model")) {  // a GGUF carries its tokenizer
    LMP_ASSIGN(l.tok, tok::load_gguf_tokenizer(*l.file));
  }
  if (l.tok && l.tok->vocab_size() > static_cast<std::size_t>(c.n_vocab))
    return make_error(Errc::parse, "the tokenizer {} has {} tokens but the model {} only {}: they do not belong together",
                      o.tokenizer.empty() ? o.model : o.tokenizer, l.tok->vocab_size(), o.model, c.n_vocab);
  return l;
}

Status run(const Options& o, cli::Output& out) {
  auto t_load = Clock::now();
  LMP_ASSIGN(Loaded loaded, load_model(o));
  auto& model = loaded.model;
  auto& tok = loaded.tok;
  const model::Config& c = model->config();
  if (tok && tok->vocab_size() < static_cast<std::size_t>(c.n_vocab))
    cli::note(fmt::format("the model has {} rows of logits, the tokenizer {} tokens: ids {}..{} have no text and are "
                          "masked (-inf), never drawn",
                          c.n_vocab, tok->vocab_size(), tok->vocab_size(), c.n_vocab - 1));
  if (!tok && !o.prompt.empty())
    return make_error(Errc::invalid_argument, "-p TEXT needs a tokenizer: give -t (the model file carries none)");
  if (!tok && !o.stops.empty())
    return make_error(Errc::invalid_argument, "--stop needs a tokenizer to see the text: give -t (the model file carries none)");
  // Where a generation ends (docs/generate.md): the tokenizer's end-of-sequence and
  // end-of-turn tokens, unless --ignore-eos.
  std::vector<TokenId> end_ids;
  if (tok && !o.ignore_eos) {
    LMP_ASSIGN(end_ids, tok::end_of_generation_ids(*tok, o.tokenizer.empty() ? o.model : o.tokenizer));
    end_ids.erase(std::remove_if(end_ids.begin(), end_ids.end(), [&](TokenId id) { return id >= c.n_vocab; }), end_ids.end());
  }
  std::string emit = o.emit;
  if (emit == "text" && !tok) {
    if (o.emit_given) return make_error(Errc::invalid_argument, "--emit text needs a tokenizer: give -t (the model file carries none)");
    emit = "ids";
  }
  // The prompt: ids as given, or the text encoded (with --bos, the tokenizer's prefix).
  std::vector<TokenId> prompt;
  if (!o.ids.empty()) {
    LMP_ASSIGN(auto buf, io::read_file(o.ids));
    LMP_TRY(tok::parse_ids(buf, o.ids == "-" ? "<stdin>" : o.ids, prompt));
  } else {
    tok::Session session(*tok);
    if (o.bos) prompt.assign(tok->template_prefix().begin(), tok->template_prefix().end());
    tok->encode(o.prompt, prompt, session);
  }
  if (prompt.empty()) return make_error(Errc::invalid_argument, "the prompt is empty: give at least one token");
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= c.n_vocab)
      return make_error(Errc::out_of_range, "prompt token {} (id {}) is outside the model's vocabulary (0..{})", i + 1,
                        prompt[i], c.n_vocab - 1);
  kv::KvConfig kc = o.kv;
  kc.n_layer = c.n_layer;
  kc.kv_dim = c.kv_dim();
  kc.head_dim = c.head_dim();
  kc.max_seqs = o.samples;
  kc.n_ctx = o.ctx ? o.ctx : std::min(c.n_ctx_train, static_cast<int>(prompt.size()) + o.n);
  if (kc.eviction == kv::Eviction::none && static_cast<int>(prompt.size()) + o.n > kc.n_ctx)
    return make_error(Errc::out_of_range, "{} prompt tokens + {} to generate exceed the context of {} (--ctx, or --kv-evict)",
                      prompt.size(), o.n, kc.n_ctx);
  if (kc.eviction == kv::Eviction::sinks && kc.n_sink >= kc.n_ctx)
    return make_error(Errc::invalid_argument, "--kv-sinks {} leaves no window in a context of {} (--ctx)", kc.n_sink, kc.n_ctx);
  if (o.no_cache && o.samples > 1) return make_error(Errc::invalid_argument, "--no-cache and --num-samples > 1 do not mix");
  LMP_TRY(sample::Chain::make(o.sampling));  // the sampling options, checked before the model runs
  Rng rng(*o.seed);
  if (o.prefetch) model::set_prefetch_distance(*o.prefetch);
  ThreadPool pool(o.threads);
  LMP_ASSIGN(auto cache, kv::make_kv_cache(kc));
  std::vector<float> logits(static_cast<std::size_t>(c.n_vocab));
  const double load_s = secs(t_load, Clock::now());

  // Prompt: every token through the model; the logits of the last one start generation.
  // The other samples share its keys and values (forked: the paged cache shares blocks).
  auto t0 = Clock::now();
  LMP_TRY(model->forward_batch(prompt, 0, *cache, logits.data(), pool));
  auto t1 = Clock::now();
  for (kv::SeqId k = 1; k < o.samples; ++k) LMP_TRY(cache->fork(0, k));
  const std::vector<float> prompt_logits = logits;
  std::size_t generated = 0, steps = 0, ended = 0, stopped = 0;
  TokenId last_id = -1;
  Clock::time_point t_first{};
  for (kv::SeqId k = 0; k < o.samples; ++k) {
    LMP_ASSIGN(auto chain, sample::Chain::make(o.sampling));  // its penalties see this sample's history
    for (TokenId id : prompt) chain.accept(id);
    if (k > 0) logits = prompt_logits;
    LMP_ASSIGN(auto r, continue_sequence(o, emit, *model, tok.get(), *cache, k, prompt, logits, chain, rng, pool, end_ids, out));
    if (k == 0) t_first = r.first, last_id = r.last;
    generated += r.generated;
    steps += r.steps;
    ended += r.ended;
    stopped += r.stopped;
  }
  auto t2 = Clock::now();
  const double pp = secs(t0, t1), gen = secs(t1, t2);
  // The decode rate counts forward steps: N tokens take N - 1 of them (the first comes from the prompt's logits),
  // so N / time would overstate it by N / (N - 1).
  const double step_rate = gen > 0 ? static_cast<double>(steps) / gen : 0.0;
  const kv::KvStats ks = cache->stats();
  // K separate caches of the same layout would each hold their own copy of the prompt.
  std::uint64_t separate = 0;
  for (kv::SeqId k = 0; k < o.samples; ++k) separate += cache->bytes_held(k);
  const double saved = separate ? 1.0 - static_cast<double>(ks.allocated) / static_cast<double>(separate) : 0.0;
  const std::string kv_desc = fmt::format("{} {}{}", kv::layout_name(kc.layout), kv::kv_type_name(kc.type),
                                          kc.layout == kv::Layout::paged ? fmt::format(", block {}", kc.block_size) : "");
  if (o.json) {
    cli::note(fmt::format(
        "{{\"model\":{},\"load_s\":{:.6f},\"prompt_tokens\":{},\"prompt_s\":{:.6f},\"prompt_tok_s\":{:.2f},"
        "\"generated_tokens\":{},\"decode_steps\":{},\"generate_s\":{:.6f},\"generate_tok_s\":{:.2f},\"time_to_first_token_s\":{:.6f},"
        "\"kv_cache_bytes\":{},\"kv_cache_allocated_bytes\":{},\"kv_cache_reserved_bytes\":{},\"kv_layout\":\"{}\","
        "\"kv_type\":\"{}\",\"kv_block\":{},\"kv_evict\":\"{}\",\"num_samples\":{},\"kv_separate_bytes\":{},"
        "\"kv_saved_fraction\":{:.4f},\"ended_at_eos\":{},\"stopped_by_string\":{},\"end_ids\":[{}],\"peak_rss_bytes\":{},\"threads\":{},\"cache\":{},"
        "\"weight_bytes_per_token\":{},\"kernels\":\"{}\",\"prefetch_bytes\":{},\"prefetch_float_bytes\":{},\"weights\":\"{}\"}}",
        [&] { std::string s; json::append_string(s, model->describe()); return s; }(), load_s, prompt.size(), pp,
        static_cast<double>(prompt.size()) / pp, generated, steps, gen, step_rate,
        secs(t0, t_first), ks.used, ks.allocated, ks.reserved, kv::layout_name(kc.layout), kv::kv_type_name(kc.type),
        kc.block_size, kv::eviction_name(kc.eviction), o.samples, separate, saved, ended, stopped, fmt::join(end_ids, ","), cli::peak_rss_bytes(), o.threads,
        !o.no_cache, model->weight_bytes_per_token(), model::kernel_name(), model::prefetch_distance(false), model::prefetch_distance(true), o.no_mmap ? "read" : "mapped"));
  } else {
    cli::note(fmt::format("{}", model->describe()));
    cli::note(fmt::format("prompt {} tokens in {:.3f} s ({:.1f} tok/s); generated {} tokens in {:.3f} s ({} decode steps, "
                          "{:.1f} tok/s); first token after {:.3f} s",
                          prompt.size(), pp, static_cast<double>(prompt.size()) / pp, generated, gen, steps, step_rate,
                          secs(t0, t_first)));
    cli::note(fmt::format("KV cache ({}): {} in use, {} allocated, {} reserved{}; peak memory {}", kv_desc,
                          cli::human_bytes(static_cast<double>(ks.used)), cli::human_bytes(static_cast<double>(ks.allocated)),
                          cli::human_bytes(static_cast<double>(ks.reserved)),
                          o.no_cache ? "; --no-cache: recomputed every step" : "",
                          cli::human_bytes(static_cast<double>(cli::peak_rss_bytes()))));
    if (ended || stopped) {
      std::string how;
      if (o.samples == 1)
        how = ended ? fmt::format("at end-of-sequence token {} ({})", last_id, tok->token_string(last_id))
                    : "at a --stop string";
      else
        how = fmt::format("{} of {} samples at an end-of-sequence token, {} at a --stop string", ended, o.samples, stopped);
      cli::note(fmt::format("ended {}{}", how, ended ? " (--ignore-eos goes on to -n)" : ""));
    }
    if (o.samples > 1)
      cli::note(fmt::format("{} samples share the prompt's {} tokens: {} allocated against {} for {} separate caches ({:.1f}% saved)",
                            o.samples, prompt.size(), cli::human_bytes(static_cast<double>(ks.allocated)),
                            cli::human_bytes(static_cast<double>(separate)), o.samples, 100.0 * saved));
  }
  return {};
}

// generate perplexity: the model's perplexity on a text or ids, in sliding windows.
Status run_perplexity(const Options& o, cli::Output& out) {
  auto t_load = Clock::now();
  LMP_ASSIGN(Loaded loaded, load_model(o));
  auto& model = loaded.model;
  auto& tok = loaded.tok;
  const model::Config& c = model->config();
  std::vector<TokenId> ids;
  std::string source;
  if (!o.ids.empty()) {
    LMP_ASSIGN(auto buf, io::read_file(o.ids));
    source = o.ids == "-" ? "<stdin>" : o.ids;
    LMP_TRY(tok::parse_ids(buf, source, ids));
  } else {
    if (!tok) return make_error(Errc::invalid_argument, "a text needs a tokenizer: give -t (the model file carries none), or --ids");
    LMP_ASSIGN(auto text, io::read_file(o.text));
    source = o.text == "-" ? "<stdin>" : o.text;
    tok::Session session(*tok);
    if (o.bos) ids.assign(tok->template_prefix().begin(), tok->template_prefix().end());
    tok->encode(text, ids, session);
  }
  if (ids.size() < 2)
    return make_error(Errc::invalid_argument, "{}: {} token{}: perplexity needs at least 2", source, ids.size(),
                      ids.size() == 1 ? "" : "s");
  model::PerplexityOptions po;
  po.window = o.ctx ? o.ctx : std::min(c.n_ctx_train > 0 ? c.n_ctx_train : 512, 512);
  po.window = std::min<int>(po.window, static_cast<int>(ids.size()));
  po.stride = o.stride ? std::min(o.stride, po.window) : std::max(1, po.window / 2);
  po.batch = o.batch;
  po.kv = o.kv;
  if (o.ctx > c.n_ctx_train && c.n_ctx_train > 0)
    cli::warn(fmt::format("--ctx {} is past the {} tokens the model was trained on", o.ctx, c.n_ctx_train));
  if (o.prefetch) model::set_prefetch_distance(*o.prefetch);
  ThreadPool pool(o.threads);
  const double load_s = secs(t_load, Clock::now());
  cli::Progress progress("perplexity");
  const std::size_t to_score = ids.size() - 1;
  std::string line;
  auto on_token = [&](const model::TokenScore& t) -> Status {
    if (!o.per_token) return {};
    line = fmt::format("{}\t{}\t{:.6f}\t{}\t{}", t.pos, t.id, t.logprob, t.top1 ? 1 : 0, t.context);
    if (tok) line += "\t" + cli::tsv_field(tok->token_string(t.id));
    line += '\n';
    return out.write(line);
  };
  auto t0 = Clock::now();
  LMP_ASSIGN(auto r, model::perplexity(*model, ids, po, pool, on_token, [&](std::size_t done) {
    progress.update(static_cast<double>(done) / static_cast<double>(to_score), fmt::format("{} tokens", done));
  }));
  progress.done();
  const double run_s = secs(t0, Clock::now());
  const double rate = run_s > 0 ? static_cast<double>(r.evaluated) / run_s : 0.0;
  const double top1 = r.scored ? 100.0 * static_cast<double>(r.top1) / static_cast<double>(r.scored) : 0.0;
  const std::string kv_desc = fmt::format("{} {}", kv::layout_name(po.kv.layout), kv::kv_type_name(po.kv.type));
  std::string report;
  if (o.json) {
    std::string desc, src;
    json::append_string(desc, model->describe());
    json::append_string(src, source);
    report = fmt::format(
        "{{\"model\":{},\"source\":{},\"tokens\":{},\"scored\":{},\"windows\":{},\"window\":{},\"stride\":{},"
        "\"evaluated\":{},\"nll\":{:.8f},\"perplexity\":{:.8g},\"top1_fraction\":{:.6f},\"kv\":\"{}\",\"threads\":{},"
        "\"load_s\":{:.6f},\"run_s\":{:.6f},\"tok_s\":{:.2f},\"peak_rss_bytes\":{}}}\n",
        desc, src, r.tokens, r.scored, r.windows, po.window, po.stride, r.evaluated, r.mean_nll(), r.perplexity(),
        top1 / 100.0, kv_desc, o.threads, load_s, run_s, rate, cli::peak_rss_bytes());
  } else {
    report = fmt::format(
        "model       {}\n"
        "text        {}: {} tokens; {} scored, in {} window{} of {} tokens {} apart\n"
        "nll         {:.4f} nats/token ({:.4f} bits)\n"
        "perplexity  {:.4f}\n"
        "top-1       {:.2f}% of the scored tokens were the model's first choice\n"
        "speed       {} tokens through the model in {:.3f} s ({:.1f} tok/s, {} thread{}; KV cache {})\n",
        model->describe(), source, cli::with_commas(r.tokens), cli::with_commas(r.scored), r.windows,
        r.windows == 1 ? "" : "s", po.window, po.stride, r.mean_nll(), r.mean_nll() / std::log(2.0), r.perplexity(),
        top1, cli::with_commas(r.evaluated), run_s, rate, o.threads, o.threads == 1 ? "" : "s", kv_desc);
  }
  if (o.per_token) {
    if (!cli::quiet()) std::fputs(report.c_str(), stderr);
    return {};
  }
  return out.write(report);
}

const char* kExamples =
    "  generate -m stories15M.bin -t tokenizer.model -p 'Once upon a time' -n 100\n"
    "  echo 1 | generate -m stories260K.bin --ids - -n 50 --emit ids --temperature 0\n"
    "  tok-encode -t tok.json prompt.txt | generate -m model.gguf --ids - --emit ids | tok-encode -t tok.json --decode\n"
    "  generate -m model.gguf --ids prompt.ids -n 20 --emit logits | sample --show\n"
    "  generate -m model.gguf --ids prompt.ids -n 64 --no-cache     # the baseline: recompute every step\n"
    "  generate -m model.gguf -p 'Once' -n 64 --kv paged --num-samples 4   # 4 continuations share the prompt\n"
    "  generate -m model.gguf --ids p.ids -n 100000 --ctx 2048 --kv-evict sinks --kv-type int8\n"
    "  generate -m tinyllama.gguf --ids p.ids -n 1000 --no-mmap -j 2        # long runs: weights in huge pages\n"
    "  generate synth --preset tinyllama-1.1b --dtype q4_K -o tl.gguf        # random weights in llama.cpp's Q4_K\n"
    "  generate convert -m stories110M.gguf --dtype q6_K -o s110-q6k.gguf\n"
    "  generate perplexity -m model.gguf -t tokenizer.json wiki.txt --ctx 512   # perplexity in sliding windows\n"
    "  generate perplexity -m model.gguf --ids text.ids --per-token -q | sort -t$'\\t' -k3 -g | head   # least likely tokens";

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app;
  app.add_option("-m,--model", o.model, "GGUF (llama, qwen2) or llama2.c checkpoint (required)");
  app.add_option("-t,--tokenizer", o.tokenizer, "tokenizer for -p and for text output (tokenizer.json, .model, ..., or a model directory)");
  app.add_option("-p,--prompt", o.prompt, "prompt text (needs -t)");
  app.add_option("--ids", o.ids, "prompt token ids (text or .npy; '-' for standard input), taken as given");
  app.add_flag("--ignore-eos", o.ignore_eos, "go on past the tokenizer's end-of-sequence and end-of-turn tokens");
  app.add_flag("--bos", o.bos, "with -p: put the tokenizer's prefix (BOS) before the prompt");
  app.add_option("-n", o.n, "tokens to generate (default 128)")->check(cli::Range(1, 1 << 24));
  app.add_option("--ctx", o.ctx, "context length (default: prompt + n, at most the model's)")->check(cli::Range(1, 1 << 24));
  app.add_option("-j,--threads", o.threads, "threads (default 1)")->check(cli::Range(1, 256));
  app.add_option("--emit", o.emit, "text (default with -t), ids, or logits (.npy rows, f32)")
      ->check(CLI::IsMember({"text", "ids", "logits"}));
  app.add_flag("--no-cache", o.no_cache, "recompute the whole sequence at every step (same logits, slower)");
  app.add_flag("--no-mmap", o.no_mmap,
               "read the model into memory (huge pages where the kernel gives them, rows on cache lines) instead of mapping it: slower to "
               "start, faster decoding where the page cache's small pages cost bandwidth (docs/generate.md)");
  app.add_option("--prefetch", o.prefetch,
                 "bytes ahead that the decode step prefetches the weights it streams, every weight type (default "
                 "4096; f32, f16 and bf16 weights 0 on AMD Zen 4; 0 = off; rows of 4096 or more on the AVX2 path fetch "
                 "their next block whatever this says)")
      ->check(cli::Range(std::size_t{0}, std::size_t{1} << 24));
  std::string kv_layout = "contiguous", kv_type = "f32", kv_evict = "none", kv_memory;
  app.add_option("--kv", kv_layout, "KV-cache layout: contiguous (default) or paged")
      ->check(CLI::IsMember({"contiguous", "paged"}));
  app.add_option("--kv-type", kv_type, "KV-cache storage: f32 (default), f16, int8, int4, int4-kivi")
      ->check(CLI::IsMember({"f32", "f16", "int8", "int4", "int4-kivi", "q8_0", "q4_0"}));
  app.add_option("--kv-block", o.kv.block_size, "tokens per block of the paged cache (default 16)")->check(cli::Range(1, 1 << 16));
  app.add_option("--kv-evict", kv_evict, "at the context limit: none (an error, default), window, sinks (StreamingLLM)")
      ->check(CLI::IsMember({"none", "window", "sinks"}));
  app.add_option("--kv-sinks", o.kv.n_sink, "attention sinks kept by --kv-evict sinks (default 4)")->check(cli::Range(0, 1 << 20));
  app.add_option("--kv-memory", kv_memory, "budget of the KV cache (e.g. 512MiB): an error when it runs out");
  app.add_option("--num-samples", o.samples, "continuations of the prompt, sharing its keys and values (default 1)")
      ->check(cli::Range(1, 4096));
  app.add_option("--stop", o.stops, "stop once the generated text contains STR (repeatable; needs a tokenizer, with any --emit)")->allow_extra_args(false);
  app.add_option("--temperature", o.sampling.temperature, "0 = greedy (default 1)")->check(cli::Range(0.0f, 1e6f));
  app.add_flag("--greedy", o.greedy, "the most likely token every step (--temperature 0)");
  app.add_option("--top-k", o.sampling.top_k, "top-k (0 = off)")->check(cli::Range(0, 1 << 30));
  app.add_option("--top-p", o.sampling.top_p, "top-p (1 = off)")->check(cli::Range(0.0f, 1.0f));
  app.add_option("--min-p", o.sampling.min_p, "min-p (0 = off)")->check(cli::Range(0.0f, 1.0f));
  app.add_option("--repeat-penalty", o.sampling.repeat_penalty, "repetition penalty (1 = off)")->check(cli::Range(0.0001f, 100.0f));
  app.add_option("--order", o.sampling.order, "sampler order: hf (default), llama, or a list (see sample --help)");
  app.add_option("--seed", o.seed, "random seed (default: a random one)");
  app.add_flag("--json", o.json, "the end-of-run statistics as JSON on stderr");
  app.add_option("-o,--output", o.output, "write here instead of standard output");
  app.add_flag("--force", o.force, "write logits to a terminal");

  // generate synth: a random LLaMA-shaped GGUF; generate convert: a model in another dtype.
  std::string synth_preset, synth_out, synth_dtype = "f32", conv_out, conv_dtype;
  model::Config shape;
  shape.arch = "llama";
  std::uint64_t synth_seed = 1;
  CLI::App* synth = app.add_subcommand("synth", "write a LLaMA-shaped GGUF with random weights (for tests and benchmarks)");
  synth->add_option("--preset", synth_preset, "stories15M, stories110M, tinyllama-1.1b, llama2-7b, llama2-13b, llama2-70b")
      ->check(CLI::IsMember(model::preset_names()));
  synth->add_option("--arch", shape.arch, "llama (default) or qwen2 (q/k/v biases, the halves RoPE layout)")
      ->check(CLI::IsMember({"llama", "qwen2"}));
  synth->add_option("--n-embd", shape.n_embd, "model width");
  synth->add_option("--n-layer", shape.n_layer, "layers");
  synth->add_option("--n-head", shape.n_head, "attention heads");
  synth->add_option("--n-kv-head", shape.n_kv_head, "key/value heads (default: n-head)");
  synth->add_option("--n-ff", shape.n_ff, "feed-forward width");
  synth->add_option("--n-vocab", shape.n_vocab, "vocabulary size");
  synth->add_option("--n-ctx", shape.n_ctx_train, "context length");
  bool untied = false;
  synth->add_flag("--untied", untied, "an output matrix of its own (default: tied, except tinyllama-1.1b)");
  synth->add_option("--dtype", synth_dtype, weight_dtype_list() + " (default: f32)")
      ->check(CLI::IsMember(weight_dtype_names()));
  synth->add_option("--seed", synth_seed, "random seed (default 1)");
  synth->add_option("-o,--output", synth_out, "GGUF to write (required)")->required();
  CLI::App* conv = app.add_subcommand("convert", "write a model (GGUF or llama2.c) as GGUF in another dtype");
  conv->add_option("-m,--model", o.model, "model file")->required();
  conv->add_option("--dtype", conv_dtype, weight_dtype_list())->required()
      ->check(CLI::IsMember(weight_dtype_names()));
  conv->add_option("-o,--output", conv_out, "GGUF to write (required)")->required();

  CLI::App* ppl = app.add_subcommand(
      "perplexity", "the model's perplexity on a text (with -t) or --ids, in windows of --ctx tokens --stride apart");
  ppl->add_option("FILE", o.text, "text to score (needs a tokenizer; '-' for standard input)");
  ppl->add_option("--stride", o.stride, "tokens between window starts (default: half the window)")->check(cli::Range(1, 1 << 24));
  ppl->add_option("--batch", o.batch, "tokens per forward pass (default 512)")->check(cli::Range(1, 1 << 16));
  ppl->add_flag("--per-token", o.per_token,
                "write each scored token (position, id, log-probability, first choice 1/0, context, token text) as a "
                "tab-separated line; the summary goes to stderr");

  cli::ToolSpec spec{
      "generate", "-m MODEL (-p TEXT -t TOKENIZER | --ids FILE) [OPTION]...\n"
      "       generate perplexity -m MODEL (-t TOKENIZER FILE | --ids FILE) [--ctx N] [--stride S] [--per-token]\n"
      "       generate synth (--preset NAME | --n-embd ... ) [--dtype T] -o OUT.gguf\n"
      "       generate convert -m MODEL --dtype T -o OUT.gguf",
      "Generate tokens with a LLaMA-family model (GGUF or llama2.c) and a KV cache, streamed as they are made.",
      "Prompt ids from --ids are taken as given (no BOS added); -p TEXT is encoded with -t. Output:\n"
      "--emit text (needs -t), ids (one line), or logits (the f32 row each token was drawn from, one\n"
      ".npy array per token: pipe it to sample). At the end, on stderr: prompt and generation\n"
      "tok/s, time to first token, KV-cache bytes, peak memory (--json: as JSON). See docs/generate.md.\n\n"
      "The KV cache (docs/kv-cache.md): --kv paged stores it in blocks of --kv-block tokens taken on\n"
      "demand; --num-samples K draws K continuations of one prompt, one per output line, which share\n"
      "the prompt's blocks (copy-on-write), and reports the memory saved against K separate caches.\n"
      "--kv-type int8/int4 quantizes keys and values per token in groups of 32. --kv-evict window\n"
      "keeps the last --ctx tokens; sinks keeps the first --kv-sinks and the last ones (StreamingLLM).\n\n"
      "generate perplexity scores a text or ids: mean negative log-likelihood and perplexity, in windows\n"
      "of --ctx tokens (default: the model's training context, at most 512) --stride apart (default half\n"
      "a window), each token scored once; --per-token lists every token's log-probability.",
      kExamples};

  return cli::run_tool(spec, app, argc, argv, [&]() -> Status {
    if (synth->parsed()) {
      model::Config c = shape;
      if (!synth_preset.empty()) {
        c = *model::preset(synth_preset);
        auto over = [&](const char* opt, int& field, int value) {
          if (synth->count(opt)) field = value;
        };
        over("--n-embd", c.n_embd, shape.n_embd);
        over("--n-layer", c.n_layer, shape.n_layer);
        over("--n-head", c.n_head, shape.n_head);
        over("--n-kv-head", c.n_kv_head, shape.n_kv_head);
        over("--n-ff", c.n_ff, shape.n_ff);
        over("--n-vocab", c.n_vocab, shape.n_vocab);
        over("--n-ctx", c.n_ctx_train, shape.n_ctx_train);
        c.arch = shape.arch;
      } else {
        if (!c.n_embd || !c.n_layer || !c.n_head || !c.n_ff || !c.n_vocab)
          throw cli::UsageError("synth needs --preset, or --n-embd, --n-layer, --n-head, --n-ff and --n-vocab");
        if (!c.n_kv_head) c.n_kv_head = c.n_head;
        if (!c.n_ctx_train) c.n_ctx_train = 2048;
        c.tied = true;
      }
      if (untied) c.tied = false;
      const std::size_t block = dtype_info(*parse_dtype(synth_dtype)).block;
      if (static_cast<std::size_t>(c.n_embd) % block || static_cast<std::size_t>(c.n_ff) % block)
        throw cli::UsageError(fmt::format("--dtype {} needs n_embd and n_ff that are multiples of {} (here {} and {})",
                                          synth_dtype, block, c.n_embd, c.n_ff));
      cli::note(fmt::format("writing {}: {} layers, n_embd {}, {} heads ({} kv), n_ff {}, vocab {}, {}, {}", synth_out, c.n_layer,
                            c.n_embd, c.n_head, c.n_kv_head, c.n_ff, c.n_vocab, c.tied ? "tied" : "untied", synth_dtype));
      return model::write_random_gguf(synth_out, c, *parse_dtype(synth_dtype), synth_seed);
    }
    if (conv->parsed()) {
      LMP_ASSIGN(auto f, tensor_io::TensorFile::open(o.model));
      return model::convert_gguf(conv_out, *f, *parse_dtype(conv_dtype));
    }
    if (o.model.empty()) throw cli::UsageError("--model is required");
    o.kv.layout = kv::parse_layout(kv_layout).value();
    o.kv.type = kv::parse_kv_type(kv_type).value();
    o.kv.eviction = kv::parse_eviction(kv_evict).value();
    if (!kv_memory.empty()) o.kv.max_bytes = cli::parse_bytes(kv_memory, "--kv-memory");
    if (app.count("--kv-block") && o.kv.layout != kv::Layout::paged) throw cli::UsageError("--kv-block needs --kv paged");
    if (ppl->parsed()) {
      if (o.ids.empty() == o.text.empty()) throw cli::UsageError("perplexity: give a text FILE (with -t) or --ids FILE");
      if (!o.prompt.empty()) throw cli::UsageError("perplexity: -p does not apply; give the text as FILE");
      if (o.kv.eviction != kv::Eviction::none) throw cli::UsageError("perplexity: --kv-evict does not apply (each window is run whole)");
      if (app.count("--ctx") && o.ctx < 2) throw cli::UsageError("perplexity: --ctx must be at least 2 (a window scores from what comes before)");
      if (app.count("--ctx") && o.stride > o.ctx)
        throw cli::UsageError(fmt::format("perplexity: --stride {} is past the window (--ctx {})", o.stride, o.ctx));
      for (const char* opt : {"-n", "--emit", "--num-samples", "--stop", "--temperature", "--greedy", "--top-k", "--top-p",
                              "--min-p", "--repeat-penalty", "--order", "--seed", "--no-cache", "--ignore-eos"})
        if (app.count(opt)) throw cli::UsageError(fmt::format("perplexity: {} does not apply (nothing is sampled)", opt));
      LMP_ASSIGN(auto out, cli::Output::open(o.output, false, false));
      LMP_TRY(run_perplexity(o, *out));
      return out->close();
    }
    if (o.ids.empty() == o.prompt.empty()) throw cli::UsageError("give the prompt as -p TEXT or --ids FILE");
    o.emit_given = app.count("--emit") > 0;
    for (const auto& s : o.stops)
      if (s.empty()) throw cli::UsageError("--stop: an empty string would stop at once; give the text to stop at");
    if (app.count("--kv-sinks") && o.kv.eviction != kv::Eviction::sinks) throw cli::UsageError("--kv-sinks needs --kv-evict sinks");
    if (o.greedy) o.sampling.temperature = 0.0f;
    if (!o.seed) o.seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
    LMP_ASSIGN(auto out, cli::Output::open(o.output, o.emit == "logits", o.force));
    LMP_TRY(run(o, *out));
    return out->close();
  });
}
