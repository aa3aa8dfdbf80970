// One token's keys (or values) in the cache: a row of kv_dim = n_kv_head × head_dim
// numbers in a storage type, and the two kernels attention runs over rows in place.
//
//   f32   4 bytes per number
//   f16   2 bytes per number (IEEE half)
//   int8  symmetric per group: d = max|x| / 127, q = round(x / d) in -127..127; a row is
//         the group scales (f16, kv_dim / group of them) then kv_dim int8
//   int4  symmetric per group: d = max|x| / 7, q = round(x / d) in -7..7, stored q + 8 in a
//         nibble; a row is the scales then kv_dim / 2 bytes; in each group byte j holds
//         element j (low nibble) and element j + group/2 (high nibble), as q4_0 does
// The group is 32 numbers (q8_0's and q4_0's block) when head_dim is a multiple of 32,
// else head_dim, so a group never spans two heads. The error of one number is at most d/2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lmpipe/core/result.h"

namespace lmp::kv {

// int4_kivi: values as int4; keys quantized per channel (KIVI, Liu et al. 2024): a scale
// per channel for each group of tokens (32; paged: the block), the keys of the group
// being filled kept in f32 until it is complete (kv_cache.h). Its rows (values) are int4
// rows.
enum class KvType : std::uint8_t { f32, f16, int8, int4, int4_kivi };
const char* kv_type_name(KvType t);
// f32, f16, int8 (or q8_0), int4 (or q4_0), int4-kivi
Result<KvType> parse_kv_type(std::string_view s);

struct RowFormat {
  KvType type = KvType::f32;  // f32, f16, int8 or int4 (int4_kivi's rows are int4)
  int kv_dim = 0;
  int group = 0;           // numbers per scale (quantized types)
  std::size_t scales = 0;  // bytes of f16 scales at the start of a row
  std::size_t bytes = 0;   // bytes of a row, scales included
  bool unscaled = false;   // int4 numbers without scales (KIVI's keys: the scales are per channel)
  static RowFormat make(KvType t, int kv_dim, int head_dim);
  static RowFormat unscaled_int4(int kv_dim, int head_dim);
  // Bytes per number, scales included (4, 2, 1.0625, 0.5625 for groups of 32).
  double bytes_per_number() const { return static_cast<double>(bytes) / kv_dim; }
};

// row (fmt.bytes) = x (kv_dim) in the row's type
void store_row(const RowFormat& fmt, std::byte* row, const float* x);
// x (kv_dim) = row, dequantized (unscaled rows: the integers)
void load_row(const RowFormat& fmt, float* x, const std::byte* row);
// row (an unscaled int4 row) = round(x · inv_scale) clamped to -7..7: x (kv_dim), inv_scale (kv_dim)
void store_row_unscaled(const RowFormat& fmt, std::byte* row, const float* x, const float* inv_scale);

// Attention's two inner loops over n rows (consecutive, fmt.bytes apart) for H heads at
// once, head h on the numbers off[h] .. off[h]+hd-1 of each row (off and hd multiples of
// the group; heads may share a slice, as GQA's do):
//   att[h] (n) = scale · q[h] · K_j          (q[h]: hd floats)
//   out[h] (hd) += Σ_j att[h]_j · V_j
// Row by row, each row's slices of all H heads together, so that the rows are read in
// memory order rather than in one strided pass per head. Quantized rows are dequantized
// inside the dot products, group by group. A head's numbers are the same bits whatever
// heads come with it and wherever a block of rows starts.
// `next`: the rows that follow (the next block of the paged cache, which lies anywhere
// and so is not fetched ahead by the hardware), same format: the kernels fetch rows 16
// ahead of those they read, and past the end of these into those.
// Heads the kernels take in one pass over the rows (their int16 queries on the stack);
// more go in further passes.
inline constexpr int kHeadsPerPass = 16;
struct Ahead {
  const std::byte* rows = nullptr;
  int n = 0;
};
void row_scores(const RowFormat& fmt, float* const* att, const float* const* q, const int* off, int H,
                const std::byte* rows, int n, int hd, float scale, Ahead next = {});
void row_accumulate(const RowFormat& fmt, float* const* out, const float* const* att, const int* off, int H,
                    const std::byte* rows, int n, int hd, Ahead next = {});
// One head.
inline void row_scores(const RowFormat& fmt, float* att, const float* q, const std::byte* rows, int n, int off, int hd,
                       float scale) {
  row_scores(fmt, &att, &q, &off, 1, rows, n, hd, scale);
}
inline void row_accumulate(const RowFormat& fmt, float* out, const float* att, const std::byte* rows, int n, int off,
                           int hd) {
  row_accumulate(fmt, &out, &att, &off, 1, rows, n, hd);
}
// x (hd) = the numbers off .. off+hd-1 of a row, dequantized (unscaled rows: the integers),
// for prompt processing's attention, which multiplies tiles of keys and values in f32.
void load_slice(const RowFormat& fmt, float* x, const std::byte* row, int off, int hd);

}  // namespace lmp::kv
