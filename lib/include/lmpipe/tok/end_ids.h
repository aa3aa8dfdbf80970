// Where a generation ends: a tokenizer's end-of-sequence and end-of-turn tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/tok/tokenizer.h"

namespace lmp::tok {

// Whether `text` is a token that ends a text or a turn in a common vocabulary: </s>,
// <eos>, <|endoftext|>, <|end_of_text|>, <|eot_id|>, <|eom_id|>, <|im_end|>, <|end|>,
// <end_of_turn>, <|EOT|>.
bool is_end_marker(std::string_view text);

// The ids that end a generation with tokenizer `t`, which was loaded from `path`:
//  1. those its file names itself (Tokenizer::end_ids: a GGUF's eos/eot/eom keys and
//     its control tokens that are end markers, a .model's </s>, llama2.c's <s> and </s>);
//  2. else, beside a tokenizer.json or vocab.json, generation_config.json's eos_token_id
//     (a number or a list) and tokenizer_config.json's eos_token (a string, or an object
//     with "content"), as HF's generate reads them;
//  3. else its special tokens that are end markers.
// A config file that is there but malformed, or names a token the tokenizer does not
// have, is an error located in it. Empty when nothing ends a generation.
Result<std::vector<TokenId>> end_of_generation_ids(const Tokenizer& t, const std::string& path);

}  // namespace lmp::tok
