#include "lmpipe/model/synth.h"

#include <cmath>

#include "lmpipe/core/rng.h"

namespace lmp::model {

using tensor_io::MetaType;
using tensor_io::MetaValue;
using tensor_io::TensorOut;

std::optional<Config> preset(std::string_view name) {
  if (name == "7b" || name == "13b" || name == "70b") return preset(fmt::format("llama2-{}", name));
  Config c;
  c.arch = "llama";
  c.n_vocab = 32000;
  if (name == "stories15M") {
    c.n_embd = 288, c.n_layer = 6, c.n_head = 6, c.n_kv_head = 6, c.n_ff = 768, c.n_ctx_train = 256, c.tied = true;
  } else if (name == "stories110M") {
    c.n_embd = 768, c.n_layer = 12, c.n_head = 12, c.n_kv_head = 12, c.n_ff = 2048, c.n_ctx_train = 1024, c.tied = true;
  } else if (name == "tinyllama-1.1b") {
    c.n_embd = 2048, c.n_layer = 22, c.n_head = 32, c.n_kv_head = 4, c.n_ff = 5632, c.n_ctx_train = 2048, c.tied = false;
  } else if (name == "llama2-7b") {
    c.n_embd = 4096, c.n_layer = 32, c.n_head = 32, c.n_kv_head = 32, c.n_ff = 11008, c.n_ctx_train = 4096, c.tied = false;
  } else if (name == "llama2-13b") {
    c.n_embd = 5120, c.n_layer = 40, c.n_head = 40, c.n_kv_head = 40, c.n_ff = 13824, c.n_ctx_train = 4096, c.tied = false;
  } else if (name == "llama2-70b") {
    c.n_embd = 8192, c.n_layer = 80, c.n_head = 64, c.n_kv_head = 8, c.n_ff = 28672, c.n_ctx_train = 4096, c.tied = false;
  } else {
    return std::nullopt;
  }
  return c;
}

std::vector<std::string> preset_names() {
  return {"stories15M", "stories110M", "tinyllama-1.1b", "llama2-7b", "llama2-13b", "llama2-70b"};
}

std::uint64_t param_count(const Config& c) {
  const auto E = static_cast<std::uint64_t>(c.n_embd), F = static_cast<std::uint64_t>(c.n_ff),
             KV = static_cast<std::uint64_t>(c.kv_dim()), V = static_cast<std::uint64_t>(c.n_vocab);
  std::uint64_t layer = 2 * E * E + 2 * E * KV + 3 * E * F + 2 * E;  // wq wo, wk wv, gate up down, two norms
  if (c.arch == "qwen2") layer += E + 2 * KV;                        // q/k/v biases
  return V * E + static_cast<std::uint64_t>(c.n_layer) * layer + E + (c.tied ? 0 : V * E);
}

namespace {

std::uint32_t file_type(DType d) {  // llama.cpp's LLAMA_FTYPE_ALL_F32, MOSTLY_F16, ...
  switch (d) {
    case DType::f16: return 1;
    case DType::q4_0: return 2;
    case DType::q4_1: return 3;
    case DType::q5_0: return 8;
    case DType::q5_1: return 9;
    case DType::q8_0: return 7;
    case DType::q2_K: return 10;  // MOSTLY_Q2_K
    case DType::q3_K: return 11;  // MOSTLY_Q3_K_S: q3_K throughout
    case DType::q4_K: return 14;  // MOSTLY_Q4_K_S: q4_K throughout
    case DType::q5_K: return 16;  // MOSTLY_Q5_K_S
    case DType::q6_K: return 18;  // MOSTLY_Q6_K
    case DType::iq4_nl: return 25;  // MOSTLY_IQ4_NL
    case DType::iq4_xs: return 30;  // MOSTLY_IQ4_XS
    case DType::bf16: return 32;
    default: return 0;
  }
}

// The files written here align their tensors to 64 bytes, not GGUF's default 32: a cache
// line. A mapping puts the file's first byte on a page, so its rows then start on cache
// lines in memory too, and no 64-byte load of a row is split over two lines (the loaded
// copy of --no-mmap aligns any file, TensorFile::open).
constexpr std::uint32_t kRowAlignment = 64;

std::vector<std::pair<std::string, MetaValue>> llama_meta(const Config& c, DType dtype, const std::string& name) {
  auto u32 = [](int v) { return MetaValue::of_u32(static_cast<std::uint32_t>(v)); };
  std::vector<std::pair<std::string, MetaValue>> m = {
      {"general.architecture", MetaValue::of_string(c.arch)},
      {"general.name", MetaValue::of_string(name)},
      {"general.file_type", MetaValue::of_u32(file_type(dtype))},
      {c.arch + ".context_length", u32(c.n_ctx_train)},
      {c.arch + ".embedding_length", u32(c.n_embd)},
      {c.arch + ".block_count", u32(c.n_layer)},
      {c.arch + ".feed_forward_length", u32(c.n_ff)},
      {c.arch + ".attention.head_count", u32(c.n_head)},
      {c.arch + ".attention.head_count_kv", u32(c.n_kv_head)},
      {c.arch + ".rope.dimension_count", u32(c.head_dim())},
      {c.arch + ".rope.freq_base", MetaValue::of_f32(c.rope_theta)},
      {c.arch + ".attention.layer_norm_rms_epsilon", MetaValue::of_f32(c.rms_eps)},
  };
  if (is_quantized(dtype)) m.emplace_back("general.quantization_version", MetaValue::of_u32(2));
  m.emplace_back("general.alignment", MetaValue::of_u32(kRowAlignment));
  return m;
}

void placeholder_vocab(std::vector<std::pair<std::string, MetaValue>>& m, int n_vocab) {
  std::vector<MetaValue> tokens, scores, types;
  for (int i = 0; i < n_vocab; ++i) {
    std::string t;
    std::int32_t type = 1;  // normal
    if (i == 0) t = "<unk>", type = 2;
    else if (i == 1) t = "<s>", type = 3;
    else if (i == 2) t = "</s>", type = 3;
    else if (i < 259) t = fmt::format("<0x{:02X}>", i - 3), type = 6;
    else t = fmt::format("\u2581t{}", i);
    tokens.push_back(MetaValue::of_string(std::move(t)));
    scores.push_back(MetaValue::of_f32(-static_cast<float>(i)));
    types.push_back(MetaValue::of_i32(type));
  }
  m.emplace_back("tokenizer.ggml.model", MetaValue::of_string("llama"));
  m.emplace_back("tokenizer.ggml.tokens", MetaValue::of_array(MetaType::string, std::move(tokens)));
  m.emplace_back("tokenizer.ggml.scores", MetaValue::of_array(MetaType::f32, std::move(scores)));
  m.emplace_back("tokenizer.ggml.token_type", MetaValue::of_array(MetaType::i32, std::move(types)));
  m.emplace_back("tokenizer.ggml.bos_token_id", MetaValue::of_u32(1));
  m.emplace_back("tokenizer.ggml.eos_token_id", MetaValue::of_u32(2));
  m.emplace_back("tokenizer.ggml.unknown_token_id", MetaValue::of_u32(0));
}

// Fill `dst` with `rows` × `cols` random values (or ones) converted to `dtype`.
void random_rows(std::byte* dst, DType dtype, std::int64_t rows, std::int64_t cols, std::uint64_t seed, bool ones) {
  Rng rng(seed);
  std::vector<float> row(static_cast<std::size_t>(cols));
  const std::size_t rb = dtype_bytes(dtype, row.size());
  const float a = 0.02f * std::sqrt(3.0f);  // uniform(-a, a) has standard deviation 0.02
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < row.size(); j += 2) {
      std::uint64_t bits = rng.next();
      row[j] = ones ? 1.0f : (static_cast<float>(bits & 0xFFFFFFFFu) * 0x1.0p-32f * 2 - 1) * a;
      if (j + 1 < row.size()) row[j + 1] = ones ? 1.0f : (static_cast<float>(bits >> 32) * 0x1.0p-32f * 2 - 1) * a;
    }
    from_f32(dtype, row.data(), dst + static_cast<std::size_t>(r) * rb, row.size());
  }
}

}  // namespace

Status write_random_gguf(const std::string& path, const Config& c, DType dtype, std::uint64_t seed) {
  if (c.arch != "llama" && c.arch != "qwen2")
    return make_error(Errc::invalid_argument, "architecture '{}': llama or qwen2", c.arch);
  if (c.n_embd % c.n_head || c.n_head % c.n_kv_head || c.head_dim() % 2)
    return make_error(Errc::invalid_argument, "{} heads ({} kv) do not divide n_embd {} into even head sizes", c.n_head,
                      c.n_kv_head, c.n_embd);
  const std::size_t block = dtype_info(dtype).block;
  if (static_cast<std::size_t>(c.n_embd) % block || static_cast<std::size_t>(c.n_ff) % block)
    return make_error(Errc::invalid_argument, "{} needs n_embd and n_ff that are multiples of {}", dtype_name(dtype), block);
  auto meta = llama_meta(c, dtype, "lmpipe random");
  // A vocabulary too small for the 256 byte pieces gets no tokenizer: the model runs on ids.
  if (c.n_vocab >= 259) placeholder_vocab(meta, c.n_vocab);
  std::vector<TensorOut> ts;
  std::uint64_t k = 0;
  auto add = [&](std::string name, DType t, std::int64_t rows, std::int64_t cols, bool ones = false) {
    TensorOut o;
    o.name = std::move(name);
    o.dtype = t;
    o.shape = rows ? std::vector<std::int64_t>{rows, cols} : std::vector<std::int64_t>{cols};
    const std::uint64_t s = seed * 1000003 + k++;
    o.fill = [=](std::byte* dst) { random_rows(dst, t, rows ? rows : 1, cols, s, ones); };
    ts.push_back(std::move(o));
  };
  const int E = c.n_embd, F = c.n_ff, KV = c.kv_dim();
  add("token_embd.weight", dtype, c.n_vocab, E);
  add("output_norm.weight", DType::f32, 0, E, true);
  if (!c.tied) add("output.weight", dtype, c.n_vocab, E);
  for (int l = 0; l < c.n_layer; ++l) {
    auto n = [&](const char* s) { return fmt::format("blk.{}.{}", l, s); };
    add(n("attn_norm.weight"), DType::f32, 0, E, true);
    add(n("attn_q.weight"), dtype, E, E);
    add(n("attn_k.weight"), dtype, KV, E);
    add(n("attn_v.weight"), dtype, KV, E);
    if (c.arch == "qwen2") {  // Qwen2's q/k/v biases (f32 vectors)
      add(n("attn_q.bias"), DType::f32, 0, E);
      add(n("attn_k.bias"), DType::f32, 0, KV);
      add(n("attn_v.bias"), DType::f32, 0, KV);
    }
    add(n("attn_output.weight"), dtype, E, E);
    add(n("ffn_norm.weight"), DType::f32, 0, E, true);
    add(n("ffn_gate.weight"), dtype, F, E);
    add(n("ffn_up.weight"), dtype, F, E);
    add(n("ffn_down.weight"), dtype, E, F);
  }
  return tensor_io::write_gguf(path, meta, ts);
}

Status convert_gguf(const std::string& path, const tensor_io::TensorFile& src, DType dtype) {
  LMP_ASSIGN(auto m, Transformer::load(src));  // checks that it is a model we can run
  std::vector<std::pair<std::string, MetaValue>> meta;
  for (const auto& [key, v] : src.metadata())
    if (key != "general.file_type" && key != "general.quantization_version" && key != "general.alignment" &&
        key.rfind("llama2c.", 0) != 0 && key != "llama.vocab_size")
      meta.emplace_back(key, v);
  meta.emplace_back("general.file_type", MetaValue::of_u32(file_type(dtype)));
  if (is_quantized(dtype)) meta.emplace_back("general.quantization_version", MetaValue::of_u32(2));
  meta.emplace_back("general.alignment", MetaValue::of_u32(kRowAlignment));
  std::vector<TensorOut> ts;
  for (const auto& t : src.tensors()) {
    if (t.name.rfind("rope_freqs.", 0) == 0) continue;  // llama2.c's legacy tables
    TensorOut o;
    o.name = t.name;
    o.shape = t.shape;
    const bool matrix = t.shape.size() == 2 && static_cast<std::size_t>(t.shape[1]) % dtype_info(dtype).block == 0;
    o.dtype = matrix ? dtype : t.dtype;
    if (o.dtype == t.dtype) {
      o.data = src.data(t);
    } else {
      const tensor_io::TensorInfo* ti = &t;
      o.fill = [&src, ti, dtype](std::byte* dst) {
        const auto cols = static_cast<std::size_t>(ti->shape[1]);
        std::vector<float> row(cols);
        const std::size_t in_rb = dtype_bytes(ti->dtype, cols), out_rb = dtype_bytes(dtype, cols);
        for (std::int64_t r = 0; r < ti->shape[0]; ++r) {
          to_f32(ti->dtype, src.data(*ti) + static_cast<std::size_t>(r) * in_rb, row.data(), cols);
          from_f32(dtype, row.data(), dst + static_cast<std::size_t>(r) * out_rb, cols);
        }
      };
    }
    ts.push_back(std::move(o));
  }
  (void)m;
  return tensor_io::write_gguf(path, meta, ts);
}

}  // namespace lmp::model
