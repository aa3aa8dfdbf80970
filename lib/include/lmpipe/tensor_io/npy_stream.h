// .npy arrays back to back on a file or pipe (what `generate --emit logits` writes and
// `sample` reads, and what `tok-encode -f npy` writes): read one at a time, as they
// arrive. Memory grows with the bytes actually received, never with what a header
// announces, so a lying header ends in a located "truncated" error, not an allocation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lmpipe/core/io.h"
#include "lmpipe/core/result.h"
#include "lmpipe/tensor_io/dtype.h"

namespace lmp::tensor_io {

struct NpyArray {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::string data;         // the array's bytes (little-endian, C order)
  std::size_t index = 0;    // 1 for the first array of the stream
  std::uint64_t offset = 0; // its first byte in the stream
  std::uint64_t count() const;
};

class NpyStreamReader {
 public:
  static Result<std::unique_ptr<NpyStreamReader>> open(const std::string& path);
  // Continue a reader whose first bytes (`head`) were already taken, to sniff the format.
  static std::unique_ptr<NpyStreamReader> from(std::unique_ptr<io::ChunkReader> reader, std::string head);
  // The next array into `out`; false at the end of the input (after a whole array).
  Result<bool> next(NpyArray& out);
  const std::string& name() const { return reader_->name(); }

 private:
  NpyStreamReader() = default;
  std::unique_ptr<io::ChunkReader> reader_;
  std::string buf_;            // received bytes; those from pos_ on are not handed out yet
  std::size_t pos_ = 0;
  std::uint64_t consumed_ = 0; // stream bytes before buf_
  std::size_t index_ = 0;
  bool eof_ = false;
  Result<bool> fill();         // read more into buf_; false at end of input
};

// The DType of a .npy descr ('<f4', '<f2', '|i1', ...), or nullopt.
std::optional<DType> npy_dtype(std::string_view descr);

}  // namespace lmp::tensor_io
