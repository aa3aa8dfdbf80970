// SentencePiece .model (protobuf: unigram or BPE, the precompiled character map).
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto input = lmp::fuzz::as_text(data, size);
  lmp::fuzz::MemFile f(input);
  auto t = lmp::tok::load_sentencepiece(f.path());
  if (t) lmp::fuzz::exercise(**t, input);
  return 0;
}
