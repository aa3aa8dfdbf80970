// tiktoken rank files (base64 token, rank), with each known split pattern.
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto input = lmp::fuzz::as_text(data, size);
  lmp::fuzz::MemFile f(input);
  static const char* const kPre[] = {"gpt2", "cl100k", "o200k"};
  lmp::tok::LoadOptions opts;
  opts.pre_tokenizer = kPre[size % 3];
  opts.special_tokens = {{"<|endoftext|>", static_cast<lmp::TokenId>(size % 300)}};
  auto t = lmp::tok::load_tiktoken(f.path(), opts);
  if (t) lmp::fuzz::exercise(**t, input);
  return 0;
}
