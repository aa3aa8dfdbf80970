// A stream of .npy arrays back to back (sample's and generate's logits), read to the end.
#include "fuzz_common.h"
#include "lmpipe/tensor_io/npy_stream.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  lmp::fuzz::MemFile f(lmp::fuzz::as_text(data, size));
  auto r = lmp::tensor_io::NpyStreamReader::open(f.path());
  if (!r) return 0;
  lmp::tensor_io::NpyArray a;
  for (int i = 0; i < 1000; ++i) {
    auto more = (*r)->next(a);
    if (!more || !*more) break;
  }
  return 0;
}
