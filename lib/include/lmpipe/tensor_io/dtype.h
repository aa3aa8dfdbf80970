// Element types of tensors and their conversion to and from f32.
//
// q8_0 and q4_0 are GGML's block formats (32 elements per block, an f16 scale first):
//   q8_0: 34 bytes = d (f16) + 32 × int8 q;          x = q · d,   d = max|x| / 127,  q = round(x / d)
//   q4_0: 18 bytes = d (f16) + 16 bytes of nibbles;  x = (q − 8) · d, d = m / −8 where m is the
//         element of largest magnitude with its sign, q = min(15, trunc(x / d + 8.5));
//         byte j holds element j in its low nibble and element j + 16 in its high nibble.
//   q4_1: 20 bytes = d, m (f16) + 16 bytes of nibbles (q4_0's order); x = q · d + m.
//   q5_0: 22 bytes = d (f16) + qh (4 bytes: bit j the fifth bit of number j) + 16 bytes of
//         nibbles; x = (q − 16) · d.   q5_1: 24 bytes = d, m, qh, nibbles; x = q · d + m.
// q2_K, q3_K, q4_K, q5_K and q6_K are its k-quants, super-blocks of 256, and iq4_nl
// (blocks of 32) and iq4_xs (super-blocks of 256) its non-linear 4-bit types (kquants.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lmp {

enum class DType : std::uint8_t {
  f32, f16, bf16, q8_0, q4_0, i32, i8, u8, i16, i64, f64, q4_K, q5_K, q6_K, q2_K, q3_K, iq4_nl, iq4_xs, q4_1, q5_0, q5_1
};
// GGML's block types, plain or k-quant.
inline bool is_quantized(DType t) { return t == DType::q8_0 || t == DType::q4_0 || t >= DType::q4_K; }
inline bool is_k_quant(DType t) { return t >= DType::q4_K && t <= DType::q3_K; }
inline bool is_iq4(DType t) { return t == DType::iq4_nl || t == DType::iq4_xs; }
// GGML's other blocks of 32: q4_1, q5_0, q5_1.
inline bool is_q45_legacy(DType t) { return t == DType::q4_1 || t == DType::q5_0 || t == DType::q5_1; }

struct DTypeInfo {
  std::string_view name;       // "f32", "q8_0", ...
  std::size_t block;           // elements per block (1 for plain types)
  std::size_t block_bytes;     // bytes per block
  bool is_float;               // converts to and from f32
};
const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
std::optional<DType> parse_dtype(std::string_view name);  // "f32", "F16", "q4_0", "Q4_K", ... (any case)
// The types weights can be written in (from_f32's), in the order the tools list them:
// f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K … q6_K, iq4_nl, iq4_xs; and the same as one string
// ("f32, f16, …, q6_K") for help texts and errors.
const std::vector<std::string>& weight_dtype_names();
const std::string& weight_dtype_list();

// Bytes of n elements; n must be a multiple of the block size (checked by callers that
// take sizes from files: see tensor_bytes).
inline std::size_t dtype_bytes(DType t, std::size_t n) {
  const DTypeInfo& d = dtype_info(t);
  return n / d.block * d.block_bytes;
}
// Bytes of a tensor of `count` elements whose rows hold `row` elements, or nullopt when
// a row is not a whole number of blocks or the size overflows 64 bits.
std::optional<std::uint64_t> tensor_bytes(DType t, std::uint64_t count, std::uint64_t row);

// Scalar conversions, IEEE binary16 and bfloat16 with round-to-nearest-even.
float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float f);
inline float bf16_to_f32(std::uint16_t h) {
  std::uint32_t b = static_cast<std::uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &b, 4);
  return f;
}
std::uint16_t f32_to_bf16(float f);

// n elements of type t at src → f32 (n a multiple of the block size; float types and
// the integer types, which convert exactly up to 2^24).
void to_f32(DType t, const void* src, float* dst, std::size_t n);
// f32 → n elements of type t (float types only: f32, f16, bf16, q8_0, q4_0 and the k-quants).
void from_f32(DType t, const float* src, void* dst, std::size_t n);

// Block layouts.
struct BlockQ8_0 {
  std::uint16_t d;  // f16 scale
  std::int8_t qs[32];
};
struct BlockQ4_0 {
  std::uint16_t d;  // f16 scale
  std::uint8_t qs[16];
};
struct BlockQ4_1 {
  std::uint16_t d, m;
  std::uint8_t qs[16];
};
struct BlockQ5_0 {
  std::uint16_t d;
  std::uint8_t qh[4];
  std::uint8_t qs[16];
};
struct BlockQ5_1 {
  std::uint16_t d, m;
  std::uint8_t qh[4];
  std::uint8_t qs[16];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 &&
                  sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24,
              "GGML block layouts");

}  // namespace lmp
