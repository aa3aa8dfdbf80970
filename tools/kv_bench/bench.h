// kv-bench: the modes (speedup, memory, paged, quality, plan) and what they share: the
// model they measure (a file, a preset shape, or hyperparameters) and the report.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/report.h"
#include "lmpipe/core/result.h"
#include "lmpipe/kv/kv_cache.h"
#include "lmpipe/model/transformer.h"
#include "lmpipe/tensor_io/tensor_file.h"

namespace lmp::kvbench {

// The model: -m FILE, --preset NAME, or the hyperparameters (over a preset's when both).
struct ModelSpec {
  std::string file, preset, dtype = "f32";
  model::Config shape;      // hyperparameters given on the command line (0 = not given)
  std::uint64_t seed = 1;   // of a synthesized model's weights
};

struct Common {
  ModelSpec spec;
  int threads = 1;
  cli::ReportFormat format = cli::ReportFormat::text;
  std::string plot;  // an SVG to write, or empty
};

// The model's shape without its weights.
Result<model::Config> resolve_shape(const ModelSpec& spec);
std::string shape_name(const ModelSpec& spec, const model::Config& c);

// A model that runs: the file, or random weights of the shape written to a temporary GGUF
// (removed again when this goes).
struct Runnable {
  std::unique_ptr<tensor_io::TensorFile> file;
  std::unique_ptr<model::Transformer> model;
  std::string temp;
  std::string name;
  ~Runnable();
};
Result<std::unique_ptr<Runnable>> load_runnable(const ModelSpec& spec);

// A KV-cache config for the model's shape.
kv::KvConfig cache_config(const model::Config& c, int n_ctx, kv::KvType t = kv::KvType::f32,
                          kv::Layout layout = kv::Layout::contiguous, int block = 16);

// Bytes in use by malloc now (glibc's mallinfo2: small blocks and mmapped ones).
std::uint64_t heap_bytes();
// This machine's physical memory, in bytes.
double physical_memory();
// The i-th token of a synthetic prompt or continuation: ids spread over 1..n_vocab-1 (0,
// often a special token, only when the vocabulary has nothing else).
TokenId filler_token(std::int64_t i, int n_vocab);
double median(std::vector<double> v);

struct SpeedupOptions {
  std::vector<int> lengths{128, 512, 2048};
  int prompt = 1;
  int repeats = 1;
};
struct MemoryOptions {
  int ctx = 0;      // 0: the model's context
  int tokens = 256; // tokens stored to measure the allocator
};
struct PagedOptions {
  int requests = 256;
  int prompt_min = 32, prompt_max = 1024, output_min = 32, output_max = 512;
  int ctx = 2048;
  std::string memory = "4GiB";
  std::vector<int> blocks{1, 8, 16, 32, 64, 128};
  std::string kv_type = "f16";
  int decode = 256;      // tokens decoded in all to compare paged and contiguous speed (0: skip)
  int decode_seqs = 4;   // sequences decoding together in that comparison
  std::uint64_t seed = 1;
};
struct QualityOptions {
  std::string ids;  // token ids to score (file or -); default: sampled from the model
  int tokens = 256;
  std::uint64_t seed = 1;
  std::vector<std::string> types{"f16", "int8", "int4", "int4-kivi"};
};
struct PlanOptions {
  std::string memory = "24GiB";
  int ctx = 0;
  std::string weights = "f16";
  std::string reserve = "0";
};

Result<cli::Report> run_speedup(const Common& c, const SpeedupOptions& o);
Result<cli::Report> run_memory(const Common& c, const MemoryOptions& o);
Result<cli::Report> run_paged(const Common& c, const PagedOptions& o);
Result<cli::Report> run_quality(const Common& c, const QualityOptions& o);
Result<cli::Report> run_plan(const Common& c, const PlanOptions& o);

}  // namespace lmp::kvbench
