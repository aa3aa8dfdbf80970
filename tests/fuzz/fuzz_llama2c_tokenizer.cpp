// llama2.c tokenizer.bin, for the vocabulary sizes a checkpoint would ask for.
#include "fuzz_common.h"
#include "lmpipe/tensor_io/tensor_file.h"
#include "lmpipe/tok/gguf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto input = lmp::fuzz::as_text(data, size);
  lmp::fuzz::MemFile f(input);
  (void)lmp::tensor_io::read_llama2c_tokenizer(f.path(), size > 0 ? data[0] : 0);
  auto t = lmp::tok::load_llama2c_tokenizer(f.path());
  if (t) lmp::fuzz::exercise(**t, input);
  return 0;
}
