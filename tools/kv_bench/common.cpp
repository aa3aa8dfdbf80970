#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "kv_bench/bench.h"
#include "lmpipe/model/synth.h"

namespace lmp::kvbench {

namespace {

model::Config with_overrides(model::Config c, const model::Config& o) {
  auto over = [](int& field, int v) {
    if (v) field = v;
  };
  over(c.n_embd, o.n_embd);
  over(c.n_layer, o.n_layer);
  over(c.n_head, o.n_head);
  over(c.n_kv_head, o.n_kv_head);
  over(c.n_ff, o.n_ff);
  over(c.n_vocab, o.n_vocab);
  over(c.n_ctx_train, o.n_ctx_train);
  return c;
}

}  // namespace

Result<model::Config> resolve_shape(const ModelSpec& spec) {
  if (!spec.file.empty()) {
    LMP_ASSIGN(auto f, tensor_io::TensorFile::open(spec.file));
    LMP_ASSIGN(auto m, model::Transformer::load(*f));
    return m->config();
  }
  model::Config c;
  c.arch = "llama";
  if (!spec.preset.empty()) {
    auto p = model::preset(spec.preset);
    if (!p) return make_error(Errc::invalid_argument, "unknown preset '{}'", spec.preset);
    c = *p;
  } else {
    c.n_vocab = 32000;
    c.n_ctx_train = 2048;
    c.tied = true;
  }
  c = with_overrides(c, spec.shape);
  if (!c.n_kv_head || (spec.preset.empty() && !spec.shape.n_kv_head)) c.n_kv_head = c.n_head;
  if (!c.n_ff && c.n_embd) c.n_ff = (8 * c.n_embd / 3 + 31) / 32 * 32;
  if (c.n_embd <= 0 || c.n_layer <= 0 || c.n_head <= 0)
    return make_error(Errc::invalid_argument, "no model: give -m FILE, --preset NAME, or --n-layer, --n-embd and --n-head");
  if (c.n_embd % c.n_head || c.n_kv_head <= 0 || c.n_head % c.n_kv_head || c.head_dim() % 2)
    return make_error(Errc::invalid_argument, "{} heads ({} kv) do not divide n_embd {} into even head sizes", c.n_head,
                      c.n_kv_head, c.n_embd);
  return c;
}

std::string shape_name(const ModelSpec& spec, const model::Config& c) {
  std::string base = !spec.file.empty() ? spec.file : !spec.preset.empty() ? spec.preset : std::string("custom");
  return fmt::format("{} ({} layers, n_embd {}, {} heads, {} kv heads, head_dim {})", base, c.n_layer, c.n_embd, c.n_head,
                     c.n_kv_head, c.head_dim());
}

Runnable::~Runnable() {
  model.reset();
  file.reset();
  if (!temp.empty()) std::remove(temp.c_str());
}

Result<std::unique_ptr<Runnable>> load_runnable(const ModelSpec& spec) {
  auto r = std::make_unique<Runnable>();
  std::string path = spec.file;
  if (path.empty()) {
    LMP_ASSIGN(model::Config c, resolve_shape(spec));
    const auto pdt = parse_dtype(spec.dtype);
    if (!pdt || !dtype_info(*pdt).is_float)
      return make_error(Errc::invalid_argument, "unknown dtype '{}' ({})", spec.dtype, weight_dtype_list());
    const DTypeInfo& dt = dtype_info(*pdt);
    if (static_cast<std::size_t>(c.n_embd) % dt.block || static_cast<std::size_t>(c.n_ff) % dt.block)
      return make_error(Errc::invalid_argument,
                        "--dtype {} needs n_embd and n_ff that are multiples of {}, and {} has {} and {}: give another "
                        "--preset (stories110M, tinyllama-1.1b, 7b) or shape",
                        spec.dtype, dt.block, spec.preset.empty() ? "this shape" : spec.preset, c.n_embd, c.n_ff);
    const double bytes = static_cast<double>(model::param_count(c)) * static_cast<double>(dt.block_bytes) / static_cast<double>(dt.block);
    const double ram = physical_memory();
    if (bytes > ram / 2)
      return make_error(Errc::out_of_range,
                        "a random {} model in {} takes {}, over half of this machine's memory ({}): give a smaller preset, "
                        "--dtype q4_0, or -m FILE",
                        spec.preset.empty() ? "custom" : spec.preset, spec.dtype, cli::human_bytes(bytes), cli::human_bytes(ram));
    const char* tmp = std::getenv("TMPDIR");
    r->temp = fmt::format("{}/kv-bench-{}-{}.gguf", tmp && *tmp ? tmp : "/tmp", getpid(), spec.preset.empty() ? "custom" : spec.preset);
    LMP_TRY(model::write_random_gguf(r->temp, c, *pdt, spec.seed));
    path = r->temp;
    r->name = fmt::format("{} (random weights, {})", spec.preset.empty() ? "custom" : spec.preset, spec.dtype);
  } else {
    r->name = spec.file;
  }
  LMP_ASSIGN(r->file, tensor_io::TensorFile::open(path));
  LMP_ASSIGN(r->model, model::Transformer::load(*r->file));
  return r;
}

kv::KvConfig cache_config(const model::Config& c, int n_ctx, kv::KvType t, kv::Layout layout, int block) {
  kv::KvConfig k;
  k.n_layer = c.n_layer;
  k.n_ctx = n_ctx;
  k.kv_dim = c.kv_dim();
  k.head_dim = c.head_dim();
  k.type = t;
  k.layout = layout;
  k.block_size = block;
  return k;
}

std::uint64_t heap_bytes() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

double physical_memory() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

TokenId filler_token(std::int64_t i, int n_vocab) {
  return n_vocab > 1 ? static_cast<TokenId>(1 + (i * 7919) % (n_vocab - 1)) : 0;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}


}  // namespace lmp::kvbench
