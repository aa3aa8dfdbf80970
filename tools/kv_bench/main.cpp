// kv-bench: what a KV cache buys, measured from the terminal: generation speed with and
// without it, its memory by formula and by allocator, paged against contiguous storage
// under a workload, the quality of quantized caches, and capacity planning.
#include <sstream>

#include "kv_bench/bench.h"
#include "lmpipe/model/synth.h"

namespace {

using namespace lmp;
using namespace lmp::kvbench;

const char* kExamples =
    "  kv-bench speedup                                   # stories15M-shaped random model: 128, 512, 2048 tokens\n"
    "  kv-bench speedup -m stories110M.gguf --lengths 128,512 -j 2 --plot speedup.svg\n"
    "  kv-bench memory --preset llama2-7b --ctx 4096      # every storage type, MHA / GQA / MQA\n"
    "  kv-bench paged --preset llama2-7b --memory 24GiB --decode 0\n"
    "  kv-bench quality -m stories260K.bin                # f16, int8, int4 against f32\n"
    "  kv-bench plan --preset llama2-13b --memory 24GiB --ctx 4096 --weights q8_0\n"
    "  kv-bench memory --n-layer 32 --n-embd 4096 --n-head 32 --n-kv-head 8 --csv";

std::vector<int> int_list(const std::string& s, const char* opt) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const int x = std::stoi(item, &used);
      if (used != item.size() || x < 1) throw std::invalid_argument(item);
      v.push_back(x);
    } catch (const std::exception&) {
      throw cli::UsageError(fmt::format("{}: '{}' is not a list of positive integers (e.g. 128,512,2048)", opt, s));
    }
  }
  if (v.empty()) throw cli::UsageError(fmt::format("{}: empty list", opt));
  return v;
}

std::pair<int, int> range(const std::string& s, const char* opt) {
  const auto c = s.find(':');
  try {
    if (c == std::string::npos) {
      const int x = std::stoi(s);
      return {x, x};
    }
    return {std::stoi(s.substr(0, c)), std::stoi(s.substr(c + 1))};
  } catch (const std::exception&) {
    throw cli::UsageError(fmt::format("{}: '{}' is not MIN:MAX", opt, s));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Common com;
  bool json = false, csv = false, quiet = false;
  std::string output = "-";
  CLI::App app;
  app.require_subcommand(1);
  auto common = [&](CLI::App* sc, bool runnable) {
    sc->add_option("-m,--model", com.spec.file, "a GGUF or llama2.c model file");
    sc->add_option("--preset", com.spec.preset,
                   "a model shape: " + fmt::format("{}", fmt::join(model::preset_names(), ", ")) + " (7b, 13b, 70b: Llama-2's)")
        ->check(CLI::Validator(
            [](std::string& v) {
              return model::preset(v) ? std::string() : fmt::format("unknown preset '{}' ({})", v, fmt::join(model::preset_names(), ", "));
            },
            "NAME"));
    sc->add_option("--n-layer", com.spec.shape.n_layer, "layers (alone, or over the preset's)")->check(cli::Range(1, 1 << 12));
    sc->add_option("--n-embd", com.spec.shape.n_embd, "model width")->check(cli::Range(2, 1 << 20));
    sc->add_option("--n-head", com.spec.shape.n_head, "attention heads")->check(cli::Range(1, 1 << 12));
    sc->add_option("--n-kv-head", com.spec.shape.n_kv_head, "key/value heads (default: --n-head)")->check(cli::Range(1, 1 << 12));
    sc->add_option("--n-ff", com.spec.shape.n_ff, "feed-forward width (default: 8/3 n_embd)")->check(cli::Range(1, 1 << 22));
    sc->add_option("--n-vocab", com.spec.shape.n_vocab, "vocabulary (default 32000)")->check(cli::Range(2, 1 << 24));
    if (runnable) {
      sc->add_option("--dtype", com.spec.dtype, "weights of a random model: " + weight_dtype_list() + " (default: f32)")
          ->check(CLI::IsMember(weight_dtype_names()));
      sc->add_option("-j,--threads", com.threads, "threads (default 1)")->check(cli::Range(1, 256));
    }
    sc->add_flag("--json", json, "the report as JSON (fields: docs/kv-bench.md)");
    sc->add_flag("--csv", csv, "the report's tables as CSV");
    sc->add_option("-o,--output", output, "write the report here instead of standard output");
    sc->add_flag("-q,--quiet", quiet, "no progress on stderr");
  };
  SpeedupOptions so;
  std::string lengths = "128,512,2048";
  CLI::App* sp = app.add_subcommand("speedup", "generation time without and with the cache; per-step curves");
  common(sp, true);
  sp->add_option("--lengths", lengths, "tokens to generate, a list (default 128,512,2048)");
  sp->add_option("--prompt", so.prompt, "prompt tokens (default 1)")->check(cli::Range(1, 1 << 20));
  sp->add_option("--repeats", so.repeats, "runs per length; times are medians (default 1)")->check(cli::Range(1, 100));
  sp->add_option("--plot", com.plot, "write the per-step and total-time curves as SVG");

  MemoryOptions mo;
  CLI::App* me = app.add_subcommand("memory", "bytes per token by formula and by allocator; MHA, GQA, MQA; every type");
  common(me, false);
  me->add_option("--ctx", mo.ctx, "context length of the totals (default: the model's)")->check(cli::Range(1, 1 << 26));
  me->add_option("--tokens", mo.tokens, "tokens stored to measure the allocator (default 256)")->check(cli::Range(1, 1 << 20));
  me->add_option("--plot", com.plot, "write size against context as SVG");

  PagedOptions po;
  std::string blocks = "1,8,16,32,64,128", plen = "32:1024", olen = "32:512";
  bool memory_given = false;
  CLI::App* pg = app.add_subcommand("paged", "a served workload: waste and capacity of contiguous against paged storage");
  common(pg, true);
  pg->add_option("--requests", po.requests, "requests (default 256)")->check(cli::Range(1, 1 << 20));
  pg->add_option("--prompt-len", plen, "prompt lengths MIN:MAX, uniform (default 32:1024)");
  pg->add_option("--output-len", olen, "output lengths MIN:MAX, uniform (default 32:512)");
  pg->add_option("--ctx", po.ctx, "context per sequence: what contiguous storage reserves (default 2048)")->check(cli::Range(2, 1 << 24));
  pg->add_option("--memory", po.memory, "KV-cache budget (default: 64 contiguous sequences' worth)");
  pg->add_option("--blocks", blocks, "block sizes to compare (default 1,8,16,32,64,128)");
  pg->add_option("--kv-type", po.kv_type, "storage type for the bytes (default f16)")->check(CLI::IsMember({"f32", "f16", "int8", "int4"}));
  pg->add_option("--decode", po.decode, "tokens decoded in all to compare speeds, 0 to skip (default 256)")->check(cli::Range(0, 1 << 20));
  pg->add_option("--decode-seqs", po.decode_seqs,
                 "sequences growing together in the speed comparison (default 4; 1: one sequence grown alone, the "
                 "paged cache's best case)")
      ->check(cli::Range(1, 4096));
  pg->add_option("--seed", po.seed, "workload seed (default 1)");

  QualityOptions qo;
  std::string types = "f16,int8,int4,int4-kivi";
  CLI::App* qu = app.add_subcommand("quality", "f16, int8, int4 caches against f32: attention error, KL, top-1, perplexity");
  common(qu, true);
  qu->add_option("--ids", qo.ids, "token ids to score (text or .npy, '-' for standard input); default: the model's own sample");
  qu->add_option("--tokens", qo.tokens, "tokens to sample, or to keep of --ids (default 256)")->check(cli::Range(2, 1 << 20));
  qu->add_option("--seed", qo.seed, "seed of the sampled text (default 1)");
  qu->add_option("--types", types, "storage types to compare (default f16,int8,int4,int4-kivi)");

  PlanOptions pl;
  CLI::App* pn = app.add_subcommand("plan", "the largest batch that fits next to the weights, per attention variant and type");
  common(pn, false);
  pn->add_option("--memory", pl.memory, "device or host memory (default 24GiB)");
  pn->add_option("--ctx", pl.ctx, "tokens per sequence (default: the model's context)")->check(cli::Range(1, 1 << 26));
  pn->add_option("--weights", pl.weights, "weights' type: " + weight_dtype_list() + " (default: f16)");
  pn->add_option("--reserve", pl.reserve, "memory kept for activations and the runtime (default 0)");

  cli::ToolSpec spec{
      "kv-bench",
      "speedup [MODEL] [--lengths N,...] [-j T] [--plot FILE.svg]\n"
      "       kv-bench memory [MODEL] [--ctx N]\n"
      "       kv-bench paged [MODEL] [--memory BYTES] [--blocks N,...]\n"
      "       kv-bench quality [MODEL] [--ids FILE] [--types f16,int8,int4,int4-kivi]\n"
      "       kv-bench plan [MODEL] --memory BYTES [--ctx N] [--weights T]\n"
      "  MODEL: -m FILE | --preset NAME | --n-layer L --n-embd E --n-head H [--n-kv-head K]",
      "Measure the KV cache: speedup, memory, paged storage, quantization quality, capacity planning.",
      "The model is a file (-m), a preset shape (random weights where it must run), or hyperparameters.\n"
      "speedup, paged (--decode) and quality run the model; without -m they use a random one of the\n"
      "shape (default stories15M). Output: aligned tables, or --json / --csv for scripts (field names\n"
      "in docs/kv-bench.md, kept stable). Progress on stderr when it is a terminal.",
      kExamples, false};

  return cli::run_tool(spec, app, argc, argv, [&]() -> Status {
    if (json && csv) throw cli::UsageError("--json and --csv: choose one");
    if (quiet) cli::set_quiet(true);
    if (com.spec.preset == "7b" || com.spec.preset == "13b" || com.spec.preset == "70b") com.spec.preset = "llama2-" + com.spec.preset;
    com.format = json ? cli::ReportFormat::json : csv ? cli::ReportFormat::csv : cli::ReportFormat::text;
    if (!com.spec.file.empty() && !com.spec.preset.empty()) throw cli::UsageError("give -m FILE or --preset NAME, not both");
    const bool runs = sp->parsed() || qu->parsed() || pg->parsed();
    if (com.spec.file.empty() && com.spec.preset.empty() && !com.spec.shape.n_layer && !com.spec.shape.n_embd &&
        !com.spec.shape.n_head) {
      if (runs) com.spec.preset = "stories15M";
      else throw cli::UsageError("give the model: -m FILE, --preset NAME, or --n-layer, --n-embd and --n-head");
    }
    Result<cli::Report> rep = make_error(Errc::internal, "no mode");
    if (sp->parsed()) {
      so.lengths = int_list(lengths, "--lengths");
      rep = run_speedup(com, so);
    } else if (me->parsed()) {
      rep = run_memory(com, mo);
    } else if (pg->parsed()) {
      po.blocks = int_list(blocks, "--blocks");
      std::tie(po.prompt_min, po.prompt_max) = range(plen, "--prompt-len");
      std::tie(po.output_min, po.output_max) = range(olen, "--output-len");
      memory_given = pg->count("--memory") > 0;
      if (!memory_given) po.memory.clear();
      rep = run_paged(com, po);
    } else if (qu->parsed()) {
      qo.types.clear();
      std::stringstream ss(types);
      for (std::string t; std::getline(ss, t, ',');) {
        if (!kv::parse_kv_type(t).ok())
          throw cli::UsageError(fmt::format("--types: unknown type '{}' (f32, f16, int8, int4, int4-kivi)", t));
        qo.types.push_back(t);
      }
      rep = run_quality(com, qo);
    } else {
      rep = run_plan(com, pl);
    }
    if (!rep.ok()) return std::move(rep).error();
    LMP_ASSIGN(auto out, cli::Output::open(output, false, false));
    LMP_TRY(out->write(rep->render(com.format)));
    return out->close();
  });
}
