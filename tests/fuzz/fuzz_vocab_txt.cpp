// BERT vocab.txt (WordPiece), cased and uncased.
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto input = lmp::fuzz::as_text(data, size);
  lmp::fuzz::MemFile f(input);
  lmp::tok::LoadOptions opts;
  if (size > 0) opts.lowercase = data[0] & 1;
  auto t = lmp::tok::load_vocab_txt(f.path(), opts);
  if (t) lmp::fuzz::exercise(**t, input);
  return 0;
}
