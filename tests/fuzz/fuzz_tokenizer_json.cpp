// HF tokenizer.json (byte-level BPE, WordPiece, unigram, SentencePiece-style BPE), loaded
// on one thread or, for every other input, on two (the parallel table builds).
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto input = lmp::fuzz::as_text(data, size);
  auto t = lmp::tok::load_tokenizer_json(std::string(input), "fuzz.json", 1 + static_cast<int>(size % 2));
  if (t) lmp::fuzz::exercise(**t, input);
  return 0;
}
