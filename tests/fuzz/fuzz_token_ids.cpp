// Token ids as text (one sequence per line) or as a stream of .npy int arrays.
#include "fuzz_common.h"
#include "lmpipe/tok/ids.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto input = lmp::fuzz::as_text(data, size);
  std::vector<lmp::TokenId> ids;
  (void)lmp::tok::parse_ids(input, "fuzz.ids", ids);
  const auto nl = input.find('\n');
  (void)lmp::tok::parse_id_line(input.substr(0, nl), "fuzz.ids", 1, ids);
  return 0;
}
