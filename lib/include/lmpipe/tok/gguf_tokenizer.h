// The tokenizer a GGUF file carries (tokenizer.ggml.*), as llama.cpp reads it:
//   model "llama": SentencePiece BPE by piece score, spaces as ▁, a space in front
//     (tokenizer.ggml.add_space_prefix, default true), byte fallback to <0xXX> pieces;
//   model "gpt2": byte-level BPE with tokenizer.ggml.merges, split as llama.cpp splits for
//     the name tokenizer.ggml.pre gives (gpt_pre_tokenizer below), control and
//     user-defined tokens (types 3, 4) matched whole;
//   model "bert": WordPiece, BERT's normalizer and pre-tokenizer (the ▁ and missing ## of
//     llama.cpp's converter undone).
// Built by handing the existing SentencePiece and tokenizer.json loaders the equivalent
// model, so the encoding is the one their conformance tests check.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/tensor_io/tensor_file.h"
#include "lmpipe/tok/tokenizer.h"

namespace lmp::tok {

Result<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const tensor_io::TensorFile& f);

// The tokenizer.ggml.pre names a byte-level GGUF vocabulary may give, and the split each
// stands for (its regexes applied in turn); an unknown name is an error.
std::vector<std::string_view> gguf_pre_names();
Result<std::unique_ptr<PreTokenizer>> gguf_pre_tokenizer(std::string_view name);

// llama2.c's tokenizer.bin (u32 max token length; per token f32 score, i32 length, bytes,
// to the end of the file): SentencePiece BPE by score, the space in its pieces read as ▁,
// id 0 unknown, <0xXX> byte pieces, BOS 1.
Result<std::unique_ptr<Tokenizer>> load_llama2c_tokenizer(const std::string& path);

}  // namespace lmp::tok
