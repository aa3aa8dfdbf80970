// Model files for tests and benchmarks: LLaMA-shaped GGUF files with random weights for
// given hyperparameters and dtype (presets: the shapes of stories15M to Llama-2-70B), and
// conversion of a model file to GGUF in another dtype.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/model/transformer.h"
#include "lmpipe/tensor_io/tensor_file.h"

namespace lmp::model {

// The shapes of stories15M, stories110M, tinyllama-1.1b, llama2-7b, llama2-13b and
// llama2-70b (n_vocab 32000 each; 7b, 13b and 70b name the Llama-2 ones too); nullopt for
// other names.
std::optional<Config> preset(std::string_view name);
std::vector<std::string> preset_names();
// Parameters of a model of shape `c` (embedding, layers, final norm, output unless tied).
std::uint64_t param_count(const Config& c);

// A GGUF with random weights (uniform, standard deviation 0.02; norms 1) of shape `c`
// (c.arch llama, or qwen2: q/k/v biases too, and the halves RoPE layout) in
// `dtype` (norms stay f32), a SentencePiece-style placeholder vocabulary of c.n_vocab tokens
// (<unk> <s> </s>, the 256 byte tokens, then "▁t<i>"), so that llama.cpp loads it too;
// below 259 tokens there is no room for the byte tokens, and the file has no tokenizer.
// Written one tensor at a time: memory stays that of the largest tensor.
Status write_random_gguf(const std::string& path, const Config& c, DType dtype, std::uint64_t seed);

// `src` (GGUF or llama2.c) as a GGUF with its matrices in `dtype` (those whose rows are
// not whole blocks of it, and every vector, keep their type), its metadata and tokenizer.
Status convert_gguf(const std::string& path, const tensor_io::TensorFile& src, DType dtype);

}  // namespace lmp::model
