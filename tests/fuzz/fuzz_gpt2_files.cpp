// GPT-2 vocab.json + merges.txt: the input is the two files, split at the first NUL byte.
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto input = lmp::fuzz::as_text(data, size);
  const auto cut = input.find('\0');
  if (cut == std::string_view::npos) return 0;
  lmp::fuzz::MemFile vocab(input.substr(0, cut)), merges(input.substr(cut + 1));
  auto t = lmp::tok::load_gpt2_files(vocab.path(), merges.path());
  if (t) lmp::fuzz::exercise(**t, input.substr(cut + 1));
  return 0;
}
