// Tensor files: .npy, safetensors, GGUF v3 and llama2.c checkpoints behind one type.
//
// open_tensor_file() sniffs the format (GGUF magic, .npy magic, safetensors' u64 header
// length followed by '{', or a llama2.c header whose sizes add up to the file's), maps
// the file (nothing is read up front) and checks every header against the file size
// before anything is allocated: a lying header gets a located error.
//
// Shapes are in row-major (NumPy / PyTorch) order for every format: the last dimension
// varies fastest. GGUF stores ggml order (ne[0] fastest) and is reversed on read and
// write, so GGUF's token_embd.weight {n_embd, n_vocab} reads as [n_vocab, n_embd].
//
// A llama2.c checkpoint reads as GGUF-named tensors (token_embd.weight,
// blk.N.attn_q.weight, ..., output.weight when the classifier is not shared) and
// llama.* metadata keys, each tensor a view into the file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/mmap.h"
#include "lmpipe/core/result.h"
#include "lmpipe/tensor_io/dtype.h"

namespace lmp::tensor_io {

enum class Format { npy, safetensors, gguf, llama2c };
std::string_view format_name(Format f);

// GGUF metadata value types, numbered as GGUF numbers them.
enum class MetaType : std::uint32_t { u8, i8, u16, i16, u32, i32, f32, boolean, string, array, u64, i64, f64 };
std::string_view meta_type_name(MetaType t);

struct MetaValue {
  MetaType type = MetaType::u32;
  std::uint64_t u = 0;  // unsigned integers and bool
  std::int64_t i = 0;   // signed integers
  double f = 0;         // f32, f64
  std::string s;        // string
  MetaType elem = MetaType::u8;  // array: element type
  std::vector<MetaValue> items;  // array: elements (which may be arrays)

  static MetaValue of_u32(std::uint32_t v);
  static MetaValue of_u64(std::uint64_t v);
  static MetaValue of_i32(std::int32_t v);
  static MetaValue of_f32(float v);
  static MetaValue of_bool(bool v);
  static MetaValue of_string(std::string v);
  static MetaValue of_array(MetaType elem, std::vector<MetaValue> items);

  bool is_integer() const;
  std::optional<std::int64_t> as_int() const;  // any integer type that fits
  std::optional<double> as_double() const;     // any number
  std::string to_string(std::size_t max_items = 8) const;  // for reports
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;  // row-major
  std::uint64_t offset = 0;         // from the start of the file
  std::uint64_t nbytes = 0;
  std::uint64_t count() const;      // elements
};

class TensorFile {
 public:
  // Open and check a tensor file ("-" reads standard input into memory); mapped, or with
  // MappedFile::Load::copy read into huge-page memory (mmap.h).
  static Result<std::unique_ptr<TensorFile>> open(const std::string& path, MappedFile::Load how = MappedFile::Load::map);
  // Parse bytes already in memory (the file keeps `map`).
  static Result<std::unique_ptr<TensorFile>> from(MappedFile map);

  Format format() const { return format_; }
  const std::string& name() const { return map_.name(); }
  std::uint64_t file_size() const { return map_.size(); }
  int version() const { return version_; }  // npy 1–3, GGUF 2–3, llama2.c 0
  std::uint64_t alignment() const { return alignment_; }  // GGUF
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  const std::vector<std::pair<std::string, MetaValue>>& metadata() const { return meta_; }
  const MetaValue* meta(std::string_view key) const;
  const std::byte* data(const TensorInfo& t) const { return map_.data() + t.offset; }

 private:
  friend struct Parsers;
  TensorFile() = default;
  MappedFile map_;
  Format format_ = Format::npy;
  int version_ = 0;
  std::uint64_t alignment_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::vector<std::pair<std::string, MetaValue>> meta_;
  std::map<std::string, std::size_t, std::less<>> meta_index_;
};

inline Result<std::unique_ptr<TensorFile>> open_tensor_file(const std::string& path) { return TensorFile::open(path); }

// ---- writers (temp file + rename; "-" writes to standard output) ---------------------

// A tensor to write: row-major shape, `data` holds its bytes in `dtype`.
struct TensorOut {
  TensorOut() = default;
  TensorOut(std::string n, DType t, std::vector<std::int64_t> s, const void* d)
      : name(std::move(n)), dtype(t), shape(std::move(s)), data(d) {}
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  // GGUF only: with data null, the writer asks for the bytes when it reaches the tensor
  // (fill(dst) writes them), so a multi-GB file is written with one tensor in memory.
  std::function<void(std::byte* dst)> fill;
};

// .npy: f32, f16, f64, i8, u8, i16, i32, i64 (NumPy has no bf16 or block types).
Status write_npy(const std::string& path, const TensorOut& t);
// The bytes of one .npy array (for streams of arrays on a pipe).
Result<std::string> npy_bytes(const TensorOut& t);
// safetensors: every type but the block types; `metadata` is the __metadata__ map.
Status write_safetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                         const std::vector<std::pair<std::string, std::string>>& metadata = {});
// GGUF v3, every dtype; general.alignment in `metadata` (u32) sets the alignment (32).
Status write_gguf(const std::string& path, const std::vector<std::pair<std::string, MetaValue>>& metadata,
                  const std::vector<TensorOut>& tensors);

// llama2.c legacy checkpoint: the 7-int header, then the f32 tensors in run.c's order.
struct Llama2cConfig {
  std::int32_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;  // written as a positive vocab_size
};
// Reads the configuration of a llama2.c checkpoint opened as a TensorFile.
Result<Llama2cConfig> llama2c_config(const TensorFile& f);
// Writes `f`'s tensors (as named when a llama2.c file is read) as a llama2.c checkpoint.
Status write_llama2c(const std::string& path, const TensorFile& f);

// llama2.c tokenizer.bin: u32 max_token_length, then per token f32 score, i32 length,
// bytes. The token count is not in the file: it comes from the checkpoint.
struct Llama2cVocab {
  std::uint32_t max_token_length = 0;
  std::vector<std::string> tokens;
  std::vector<float> scores;
};
Result<Llama2cVocab> read_llama2c_tokenizer(const std::string& path, std::size_t vocab_size);
Status write_llama2c_tokenizer(const std::string& path, const Llama2cVocab& v);

}  // namespace lmp::tensor_io
