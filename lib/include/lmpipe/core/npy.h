// NumPy .npy arrays (NEP 1): v1.0/v2.0/v3.0 headers, a stream of arrays back to back.
// Token ids travel as 1-D int32 arrays, one per sequence.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"

namespace lmp::npy {

inline constexpr std::string_view kMagic = "\x93NUMPY";

struct Header {
  std::string descr;                 // '<i4', '<f4', ...
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
  std::size_t header_bytes = 0;      // magic through the header's '\n'
  std::size_t data_bytes = 0;        // element size × element count
};

// Append one array's header (v1.0, or v2.0 when the dict needs it) to `out`.
void append_header(std::string& out, std::string_view descr, const std::vector<std::int64_t>& shape);
// Append a 1-D int32 array.
void append_i32(std::string& out, const std::int32_t* data, std::size_t n);

// Parse the header at the start of `buf`; `name` and `offset` (the array's byte in the
// input) locate errors. With `require_data`, also checks that the data it announces
// follows in `buf`, before anything is allocated. Without it (a stream still arriving),
// a header that is not complete yet is reported by `incomplete` instead of an error.
Result<Header> parse_header(std::string_view buf, const std::string& name, std::size_t offset,
                            bool require_data = true, bool* incomplete = nullptr);

// Read a stream of 1-D integer arrays (int32 or int64, little-endian) from `buf`.
Status read_id_arrays(std::string_view buf, const std::string& name,
                      std::vector<std::vector<std::int32_t>>& out);

}  // namespace lmp::npy
