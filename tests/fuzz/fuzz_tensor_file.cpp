// Tensor files (GGUF, safetensors, .npy, llama2.c checkpoints, told apart by their first
// bytes): every tensor's bytes touched; then the embedded tokenizer and the model, and
// one decode step when the model is small.
#include "fuzz_common.h"
#include "lmpipe/core/thread_pool.h"
#include "lmpipe/kv/kv_cache.h"
#include "lmpipe/model/transformer.h"
#include "lmpipe/tensor_io/tensor_file.h"
#include "lmpipe/tok/gguf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace lmp;
  auto input = fuzz::as_text(data, size);
  fuzz::MemFile mf(input);
  auto f = tensor_io::TensorFile::open(mf.path());
  if (!f) return 0;
  const auto& file = **f;
  unsigned sum = 0;
  for (const auto& t : file.tensors()) {
    const std::byte* p = file.data(t);
    for (std::uint64_t i = 0; i < t.nbytes; i += 61) sum += static_cast<unsigned>(p[i]);
  }
  for (const auto& [key, value] : file.metadata()) sum += static_cast<unsigned>(value.to_string().size());
  if (file.format() == tensor_io::Format::gguf) {
    auto t = tok::load_gguf_tokenizer(file);
    if (t) fuzz::exercise(**t, input);
  }
  if (file.format() == tensor_io::Format::llama2c) (void)tensor_io::llama2c_config(file);
  auto m = model::Transformer::load(file);
  if (!m) return static_cast<int>(sum & 0);
  const auto& c = (*m)->config();
  if (static_cast<std::uint64_t>(c.n_vocab) * static_cast<std::uint64_t>(c.n_embd) > (1u << 20)) return 0;
  kv::KvConfig kc;
  kc.n_layer = c.n_layer;
  kc.n_ctx = 2;
  kc.kv_dim = c.kv_dim();
  kc.head_dim = c.head_dim();
  auto cache = kv::make_kv_cache(kc);
  if (!cache) return 0;
  ThreadPool pool(1);
  std::vector<float> logits(static_cast<std::size_t>(c.n_vocab));
  (void)(*m)->forward(0, 0, **cache, logits.data(), pool);
  (void)(*m)->forward(c.n_vocab - 1, 1, **cache, logits.data(), pool);
  return 0;
}
