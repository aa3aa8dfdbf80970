// The tokenizer a GGUF file carries (tokenizer.ggml.*), as llama.cpp reads it:
//   model "llama": SentencePiece BPE by piece score, spaces as ▁, a space in front
//     (tokenizer.ggml.add_space_prefix, default true), byte fallback to <0xXX> pieces;
//   model "gpt2": byte-level BPE with tokenizer.ggml.merges, split by the pattern that
//     tokenizer.ggml.pre names ("gpt-2"/"default": GPT-2's; "llama-bpe", "llama3":
//     Llama 3's), control tokens (type 3) matched whole.
// Built by handing the existing SentencePiece and tokenizer.json loaders the equivalent
// model, so the encoding is the one their conformance tests check.
#pragma once

#include <memory>

#include "lmpipe/core/result.h"
#include "lmpipe/tensor_io/tensor_file.h"
#include "lmpipe/tok/tokenizer.h"

namespace lmp::tok {

Result<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const tensor_io::TensorFile& f);

// llama2.c's tokenizer.bin (u32 max token length; per token f32 score, i32 length, bytes,
// to the end of the file): SentencePiece BPE by score, the space in its pieces read as ▁,
// id 0 unknown, <0xXX> byte pieces, BOS 1.
Result<std::unique_ptr<Tokenizer>> load_llama2c_tokenizer(const std::string& path);

}  // namespace lmp::tok
