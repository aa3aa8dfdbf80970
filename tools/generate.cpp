// generate: LLaMA-family inference with a KV cache from GGUF or llama2.c files: token ids
// or text in, text, ids or logits out, streamed as they are made.
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "common/cli.h"
#include "lmpipe/core/json.h"
#include "lmpipe/core/npy.h"
#include "lmpipe/core/thread_pool.h"
#include "lmpipe/model/synth.h"
#include "lmpipe/model/transformer.h"
#include "lmpipe/sample/sampler.h"
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
  int n = 128, ctx = 0, threads = 1;
  bool no_cache = false, json = false, greedy = false, force = false, bos = false, emit_given = false;
};

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Text of the generated ids, written as it becomes whole: a byte-level token can end in
// the middle of a UTF-8 character, so the tail that is not yet complete waits.
struct TextStream {
  const tok::Tokenizer& t;
  std::vector<TokenId> ids;
  std::size_t shown = 0;
  std::string text;
  Result<std::string> add(TokenId id, bool last) {
    ids.push_back(id);
    text.clear();
    LMP_TRY(t.decode(ids.data(), ids.size(), text, true));
    std::size_t end = text.size();
    if (!last) {  // hold back an incomplete UTF-8 sequence at the end
      std::size_t k = end;
      while (k > shown && k > end - 4 && (static_cast<unsigned char>(text[k - 1]) & 0xC0) == 0x80) --k;
      if (k > shown && k <= end && k > 0 && (static_cast<unsigned char>(text[k - 1]) & 0x80)) {
        auto lead = static_cast<unsigned char>(text[k - 1]);
        std::size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (end - (k - 1) < need) end = k - 1;
      }
    }
    if (end < shown) return std::string();
    std::string out = text.substr(shown, end - shown);
    shown = end;
    return out;
  }
};

Status run(const Options& o, cli::Output& out) {
  auto t_load = Clock::now();
  LMP_ASSIGN(auto file, tensor_io::TensorFile::open(o.model));
  LMP_ASSIGN(auto model, model::Transformer::load(*file));
  const model::Config& c = model->config();
  std::unique_ptr<tok::Tokenizer> tok;
  if (!o.tokenizer.empty()) {
    LMP_ASSIGN(tok, tok::load_tokenizer(o.tokenizer));
  } else if (file->meta("tokenizer.ggml.model")) {  // a GGUF carries its tokenizer
    LMP_ASSIGN(tok, tok::load_gguf_tokenizer(*file));
  }
  if (tok && tok->vocab_size() > static_cast<std::size_t>(c.n_vocab))
    return make_error(Errc::invalid_argument, "the tokenizer has {} tokens, the model {}", tok->vocab_size(), c.n_vocab);
  if (!tok && !o.prompt.empty())
    return make_error(Errc::invalid_argument, "-p TEXT needs a tokenizer: give -t (the model file carries none)");
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
  const int n_ctx = o.ctx ? o.ctx : std::min(c.n_ctx_train, static_cast<int>(prompt.size()) + o.n);
  if (static_cast<int>(prompt.size()) + o.n > n_ctx)
    return make_error(Errc::out_of_range, "{} prompt tokens + {} to generate exceed the context of {} (--ctx)",
                      prompt.size(), o.n, n_ctx);
  LMP_ASSIGN(auto chain, sample::Chain::make(o.sampling));
  for (TokenId id : prompt) chain.accept(id);
  Rng rng(*o.seed);
  ThreadPool pool(o.threads);
  kv::KvConfig kc{c.n_layer, n_ctx, c.kv_dim()};
  LMP_ASSIGN(auto cache, kv::make_kv_cache(kc));
  std::vector<float> logits(static_cast<std::size_t>(c.n_vocab));
  std::vector<TokenId> seq = prompt;
  const double load_s = secs(t_load, Clock::now());

  // Prompt: every token through the model; the logits of the last one start generation.
  auto t0 = Clock::now();
  LMP_TRY(model->forward_batch(prompt, 0, *cache, logits.data(), pool));
  auto t1 = Clock::now();
  std::optional<TextStream> ts;
  if (emit == "text") ts.emplace(TextStream{*tok, {}, 0, {}});
  sample::Candidates cand;
  std::size_t generated = 0;
  std::string all_text;
  Clock::time_point t_first{};
  for (int step = 0; step < o.n; ++step) {
    if (emit == "logits") {
      std::string a;
      npy::append_header(a, "<f4", {c.n_vocab});
      a.append(reinterpret_cast<const char*>(logits.data()), logits.size() * 4);
      LMP_TRY(out.write(a));
    }
    auto st = cand.load(logits.data(), logits.size());
    if (!st) return make_error(Errc::internal, "step {}: {}", step + 1, st.error().message);
    TokenId id = chain.sample(cand, rng);
    if (step == 0) t_first = Clock::now();
    seq.push_back(id);
    ++generated;
    bool stop = false;
    if (emit == "ids") {
      LMP_TRY(out.write(fmt::format("{}{}", step ? " " : "", id)));
    } else if (emit == "text") {
      LMP_ASSIGN(std::string piece, ts->add(id, step + 1 == o.n));
      all_text += piece;
      for (const auto& s : o.stops)
        if (!s.empty() && all_text.find(s) != std::string::npos) stop = true;
      LMP_TRY(out.write(piece));
    }
    LMP_TRY(out.flush_stdout());
    if (stop || step + 1 == o.n) break;
    // The next logits: one step with the cache, or (--no-cache) the whole sequence again.
    const int pos = static_cast<int>(seq.size()) - 1;
    if (o.no_cache) {
      LMP_ASSIGN(cache, kv::make_kv_cache(kc));
      LMP_TRY(model->forward_batch(seq, 0, *cache, logits.data(), pool));
    } else {
      LMP_TRY(model->forward(id, pos, *cache, logits.data(), pool));
    }
  }
  if (emit != "logits") LMP_TRY(out.write("\n"));
  auto t2 = Clock::now();
  const double pp = secs(t0, t1), gen = secs(t1, t2);
  const std::size_t kv_bytes = cache->stats().used;
  if (o.json) {
    cli::note(fmt::format(
        "{{\"model\":{},\"load_s\":{:.4f},\"prompt_tokens\":{},\"prompt_s\":{:.4f},\"prompt_tok_s\":{:.2f},"
        "\"generated_tokens\":{},\"generate_s\":{:.4f},\"generate_tok_s\":{:.2f},\"time_to_first_token_s\":{:.4f},"
        "\"kv_cache_bytes\":{},\"kv_cache_reserved_bytes\":{},\"peak_rss_bytes\":{},\"threads\":{},\"cache\":{},"
        "\"weight_bytes_per_token\":{},\"kernels\":\"{}\"}}",
        [&] { std::string s; json::append_string(s, model->describe()); return s; }(), load_s, prompt.size(), pp,
        static_cast<double>(prompt.size()) / pp, generated, gen, gen > 0 ? static_cast<double>(generated) / gen : 0.0,
        secs(t1, t_first), kv_bytes, cache->stats().reserved, cli::peak_rss_bytes(), o.threads, !o.no_cache,
        model->weight_bytes_per_token(), model::kernel_name()));
  } else {
    cli::note(fmt::format("{}", model->describe()));
    cli::note(fmt::format("prompt {} tokens in {:.3f} s ({:.1f} tok/s); generated {} tokens in {:.3f} s ({:.1f} tok/s); "
                          "first token after {:.3f} s",
                          prompt.size(), pp, static_cast<double>(prompt.size()) / pp, generated, gen,
                          gen > 0 ? static_cast<double>(generated) / gen : 0.0, secs(t0, t_first)));
    cli::note(fmt::format("KV cache {} in use ({} reserved){}; peak memory {}", cli::human_bytes(static_cast<double>(kv_bytes)),
                          cli::human_bytes(static_cast<double>(cache->stats().reserved)), o.no_cache ? ", --no-cache: recomputed every step" : "",
                          cli::human_bytes(static_cast<double>(cli::peak_rss_bytes()))));
  }
  return {};
}

const char* kExamples =
    "  generate -m stories15M.bin -t tokenizer.model -p 'Once upon a time' -n 100\n"
    "  echo 1 | generate -m stories260K.bin --ids - -n 50 --emit ids --temperature 0\n"
    "  tok-encode -t tok.json prompt.txt | generate -m model.gguf --ids - --emit ids | tok-encode -t tok.json --decode\n"
    "  generate -m model.gguf --ids prompt.ids -n 20 --emit logits | sample --show\n"
    "  generate -m model.gguf --ids prompt.ids -n 64 --no-cache     # the baseline: recompute every step";

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app;
  app.add_option("-m,--model", o.model, "GGUF (llama, qwen2) or llama2.c checkpoint (required)");
  app.add_option("-t,--tokenizer", o.tokenizer, "tokenizer for -p and for text output (tokenizer.json, .model, ...)");
  app.add_option("-p,--prompt", o.prompt, "prompt text (needs -t)");
  app.add_option("--ids", o.ids, "prompt token ids (text or .npy; '-' for standard input), taken as given");
  app.add_flag("--bos", o.bos, "with -p: put the tokenizer's prefix (BOS) before the prompt");
  app.add_option("-n", o.n, "tokens to generate (default 128)")->check(CLI::Range(1, 1 << 24));
  app.add_option("--ctx", o.ctx, "context length (default: prompt + n, at most the model's)")->check(CLI::Range(1, 1 << 24));
  app.add_option("-j,--threads", o.threads, "threads (default 1)")->check(CLI::Range(1, 256));
  app.add_option("--emit", o.emit, "text (default with -t), ids, or logits (.npy rows, f32)")
      ->check(CLI::IsMember({"text", "ids", "logits"}));
  app.add_flag("--no-cache", o.no_cache, "recompute the whole sequence at every step (same logits, slower)");
  app.add_option("--stop", o.stops, "stop when the text contains STR (repeatable)")->allow_extra_args(false);
  app.add_option("--temperature", o.sampling.temperature, "0 = greedy (default 1)")->check(CLI::Range(0.0f, 1e6f));
  app.add_flag("--greedy", o.greedy, "the most likely token every step (--temperature 0)");
  app.add_option("--top-k", o.sampling.top_k, "top-k (0 = off)")->check(CLI::Range(0, 1 << 30));
  app.add_option("--top-p", o.sampling.top_p, "top-p (1 = off)")->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--min-p", o.sampling.min_p, "min-p (0 = off)")->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--repeat-penalty", o.sampling.repeat_penalty, "repetition penalty (1 = off)")->check(CLI::Range(0.0001f, 100.0f));
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
  synth->add_option("--preset", synth_preset, "stories15M, stories110M or tinyllama-1.1b")
      ->check(CLI::IsMember(model::preset_names()));
  synth->add_option("--n-embd", shape.n_embd, "model width");
  synth->add_option("--n-layer", shape.n_layer, "layers");
  synth->add_option("--n-head", shape.n_head, "attention heads");
  synth->add_option("--n-kv-head", shape.n_kv_head, "key/value heads (default: n-head)");
  synth->add_option("--n-ff", shape.n_ff, "feed-forward width");
  synth->add_option("--n-vocab", shape.n_vocab, "vocabulary size");
  synth->add_option("--n-ctx", shape.n_ctx_train, "context length");
  bool untied = false;
  synth->add_flag("--untied", untied, "an output matrix of its own (default: tied, except tinyllama-1.1b)");
  synth->add_option("--dtype", synth_dtype, "f32 (default), f16, bf16, q8_0, q4_0")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  synth->add_option("--seed", synth_seed, "random seed (default 1)");
  synth->add_option("-o,--output", synth_out, "GGUF to write (required)")->required();
  CLI::App* conv = app.add_subcommand("convert", "write a model (GGUF or llama2.c) as GGUF in another dtype");
  conv->add_option("-m,--model", o.model, "model file")->required();
  conv->add_option("--dtype", conv_dtype, "f32, f16, bf16, q8_0, q4_0")->required()
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  conv->add_option("-o,--output", conv_out, "GGUF to write (required)")->required();

  cli::ToolSpec spec{
      "generate", "-m MODEL (-p TEXT -t TOKENIZER | --ids FILE) [OPTION]...\n"
      "       generate synth (--preset NAME | --n-embd ... ) [--dtype T] -o OUT.gguf\n"
      "       generate convert -m MODEL --dtype T -o OUT.gguf",
      "Generate tokens with a LLaMA-family model (GGUF or llama2.c) and a KV cache, streamed as they are made.",
      "Prompt ids from --ids are taken as given (no BOS added); -p TEXT is encoded with -t. Output:\n"
      "--emit text (needs -t), ids (one line), or logits (the f32 row each token was drawn from, one\n"
      ".npy array per token: pipe it to sample). At the end, on stderr: prompt and generation\n"
      "tok/s, time to first token, KV-cache bytes, peak memory (--json: as JSON). See docs/generate.md.",
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
      } else {
        if (!c.n_embd || !c.n_layer || !c.n_head || !c.n_ff || !c.n_vocab)
          throw cli::UsageError("synth needs --preset, or --n-embd, --n-layer, --n-head, --n-ff and --n-vocab");
        if (!c.n_kv_head) c.n_kv_head = c.n_head;
        if (!c.n_ctx_train) c.n_ctx_train = 2048;
        c.tied = true;
      }
      if (untied) c.tied = false;
      cli::note(fmt::format("writing {}: {} layers, n_embd {}, {} heads ({} kv), n_ff {}, vocab {}, {}, {}", synth_out, c.n_layer,
                            c.n_embd, c.n_head, c.n_kv_head, c.n_ff, c.n_vocab, c.tied ? "tied" : "untied", synth_dtype));
      return model::write_random_gguf(synth_out, c, *parse_dtype(synth_dtype), synth_seed);
    }
    if (conv->parsed()) {
      LMP_ASSIGN(auto f, tensor_io::TensorFile::open(o.model));
      return model::convert_gguf(conv_out, *f, *parse_dtype(conv_dtype));
    }
    if (o.model.empty()) throw cli::UsageError("--model is required");
    if (o.ids.empty() == o.prompt.empty()) throw cli::UsageError("give the prompt as -p TEXT or --ids FILE");
    o.emit_given = app.count("--emit") > 0;
    if (o.greedy) o.sampling.temperature = 0.0f;
    if (!o.seed) o.seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
    LMP_ASSIGN(auto out, cli::Output::open(o.output, o.emit == "logits", o.force));
    LMP_TRY(run(o, *out));
    return out->close();
  });
}
