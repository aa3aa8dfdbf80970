// The kernels of the decode step. Output first (llm.c's convention); shapes in comments.
// Dimension names: n_embd (model width), n_ff (feed-forward width), head_dim, n_head,
// n_kv_head, n_vocab, n_ctx.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lmpipe/tensor_io/dtype.h"

namespace lmp::model {

// A 2-D weight (rows, cols) in any dtype: row r holds the weights of output r.
struct Weight {
  DType dtype = DType::f32;
  const std::byte* data = nullptr;
  std::int64_t rows = 0, cols = 0;
  std::size_t row_bytes = 0;
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(rows) * row_bytes; }
};

// An activation vector quantized to q8_0-style blocks (32 int8 and a float scale), the
// other operand of the int8 dot products of q8_0, q4_0 and k-quant weights.
struct QuantizedVec {
  std::vector<std::int8_t> q;  // (n)
  std::vector<float> d;        // (n / 32)
  std::vector<float> sum;      // (n / 32) d · Σ q of each block: q4_K's and q5_K's offsets meet it
  std::vector<float> sum16;    // (n / 16) d · Σ q of each half block: q2_K's offsets meet it
  // (n / 4) −8 · Σ q, −128 · Σ q and −32 · Σ q over each 4: the offsets that make q4_0,
  // q8_0 and q6_K (and, an eighth of it, q3_K) weights unsigned for the int8 multiply-add
  // (ops.cpp, LMP_DOTS_INT8, LMP_DOT_K16)
  std::vector<std::int32_t> bias_q4, bias_q8, bias_q6;
};
void quantize_activation(QuantizedVec& out, const float* x, std::size_t n);

// Many tokens' activations quantized as QuantizedVec's blocks, for the int8 matrix
// products of prompt processing: bytes x_q + 128 in VNNI order, per group of 16 tokens
// 4 columns of the 16 tokens side by side.
struct QuantizedBatch {
  std::size_t n = 0, cols = 0, blocks = 0, groups = 0;  // tokens, columns, cols/32, ceil(n/16)
  std::vector<std::uint8_t> q;  // (groups, cols/4, 16, 4)
  std::vector<float> d;         // (groups, blocks, 16) scales; 0 for tokens past n
  std::vector<float> s;         // (groups, blocks, 16) d · Σ x_q of each token's block (k-quant offsets)
  std::vector<float> s16;       // (groups, blocks, 2, 16) d · Σ x_q of each half of a token's block (q2_K's offsets)
};

// out (hi - lo) = W[lo:hi] · x, x (cols); `xq` is x quantized (needed for the block types,
// is_quantized).
void matvec(float* out, const Weight& w, const float* x, const QuantizedVec* xq, std::int64_t lo, std::int64_t hi);

// Many tokens at once (prompt processing): out (n, hi - lo) = X (n, cols) · W[lo:hi]^T,
// row-major, out's rows `ld` floats apart. Rows of any dtype are converted to f32 four at
// a time into `scratch` and multiplied with the tokens four at a time in registers, so
// each weight is read once per block of tokens, not once per token.
void matmul(float* out, std::size_t ld, const Weight& w, const float* x, std::int64_t n, std::int64_t lo, std::int64_t hi,
            std::vector<float>& scratch);

// A few tokens (short prompts, where packing the weights for a GEMM costs more than the
// products): out (n, hi - lo) = X (n, cols) · W[lo:hi]ᵀ with the weights read from memory
// once for all n tokens. f32, f16 and bf16 rows: 4 rows × 4 tokens in registers (AVX2).
// q4_0 rows (and q8_0 rows with VNNI): each block unpacked once for 4 tokens at a time;
// q8_0 rows without VNNI, and k-quant rows: the decode step's products token after token
// over blocks of rows that stay in L2. `xq` holds the n tokens quantized, and each token's sums are the
// decode step's, bit for bit. matmul_few_available says whether n tokens of type t take
// this path.
bool matmul_few_available(DType t, std::int64_t n);
void matmul_few(float* out, std::size_t ld, const Weight& w, const float* x, const QuantizedVec* xq, std::int64_t n,
                std::int64_t lo, std::int64_t hi, std::vector<float>& scratch);

// The AVX-512 matrix-matrix kernels that matmul() passes prompt processing to (gemm.cpp).
struct GemmScratch {
  std::vector<float> panel;        // (128, 32) packed f32 rows
  std::vector<float> row;          // one converted row slice
  std::vector<std::int32_t> corr;  // (4, cols/32) -128 · Σ w of each row block (q6_K, q3_K: of each half of 16)
  std::vector<float> dw;           // (4, cols/32) the row blocks' scales (q6_K, q3_K: two a block)
  std::vector<BlockQ8_0> unpacked; // (4, cols/32) q4_0 and k-quant rows as q8_0 blocks
  std::vector<float> offs;         // (4, cols/32) q4_K and q5_K rows' offsets (dmin · m) per block (q2_K: two a block)
};
bool gemm_f32_available();  // AVX-512F
bool gemm_q8_available();   // AVX-512 VNNI
// gemm_q8 is available and takes weights of type t: q8_0, q4_0, the k-quants, iq4_nl and
// iq4_xs.
bool gemm_q8_takes(DType t);
// out (n, hi - lo) = X (n, cols) · W[lo:hi]ᵀ for f32, f16 and bf16 weights, out's rows `ld`
// floats apart: 32 rows packed as f32 at a time, multiplied with 8 tokens in registers.
void gemm_f32(float* out, std::size_t ld, const Weight& w, const float* x, std::int64_t n, std::int64_t lo,
              std::int64_t hi, GemmScratch& s);
// Size `xq` for n tokens of `cols` (a multiple of 32); then quantize tokens [t_lo, t_hi)
// of X (n, cols) into it (threads may take disjoint ranges).
void prepare_batch(QuantizedBatch& xq, std::int64_t n, std::int64_t cols);
void quantize_batch(QuantizedBatch& xq, const float* x, std::int64_t cols, std::int64_t t_lo, std::int64_t t_hi);
// out (n, hi - lo) = X · W[lo:hi]ᵀ for q8_0, q4_0, k-quant and iq4 weights, X given
// quantized: int8 products (vpdpbusd), 4 rows × 32 tokens at a time.
void gemm_q8(float* out, std::size_t ld, const Weight& w, const QuantizedBatch& xq, std::int64_t lo, std::int64_t hi,
             GemmScratch& s);

// Prompt processing's attention as matrix products on the same micro-kernel (AVX-512F),
// for a tile of r query rows of one kv head, in f32:
//   S (r, c) = Q (r, hd) · Kᵀ for c ≤ 32 keys given packed by pack_keys as Kt (hd, 32);
//     S's rows lds floats apart
//   O (r, w) (+)= P (r, c) · Vp (c, 32), w ≤ 32 of the panel's columns: Vp holds 32 columns
//     of c values, one row of 32 floats per key (zero past the head); P's rows ldp floats
//     apart, O's ldo; accumulate: add to O
// Each score is one dot product summed in d order, and each output number its keys'
// products in key order (per call, then added to O): neither depends on r or on where
// the keys were stored.
constexpr std::size_t kAttnKeys = 32;
void pack_keys(float* Kt, const float* K, std::size_t c, std::size_t hd);  // Kt (hd, 32) = K (c, hd)ᵀ, zero past c
void attn_scores_f32(float* S, std::size_t lds, const float* Q, std::size_t r, const float* Kt, std::size_t c,
                     std::size_t hd);
void attn_values_f32(float* O, std::size_t ldo, std::size_t w, const float* P, std::size_t ldp, std::size_t r,
                     const float* Vp, std::size_t c, bool accumulate);

// a · b (n floats): the inner loop of matmul, where prompt processing has no GEMM kernel.
float dot(const float* a, const float* b, int n);

// out (n) = x / rms(x) * w
void rmsnorm(float* out, const float* x, const float* w, int n, float eps);
// x (n) = softmax(x), the maximum subtracted; returns that maximum and the sum of the
// exponentials, which softmaxes over parts of a row need to be combined.
struct SoftmaxStats {
  float max, sum;
};
SoftmaxStats softmax(float* x, int n);

// SwiGLU's product: g (n) = silu(g) · u, silu(x) = x / (1 + e^-x) (vectorised exponential,
// relative error under 2e-7; the decode step and prompt processing share it).
void swiglu(float* g, const float* u, std::size_t n);

// Rotary position embedding of the heads of v (n_head, head_dim) at position pos.
// Adjacent pairs (x[2i], x[2i+1]): llama.cpp's LLaMA layout (GGUF files and llama2.c
// checkpoints, whose q/k rows are permuted so); halves (x[i], x[i + head_dim/2]): HF's
// rotate_half layout, which GGUF keeps for Qwen2 (llama.cpp's NEOX).
enum class RopeLayout { adjacent, halves };
void rope(float* v, int n_head, int head_dim, int pos, float theta, RopeLayout layout);

// The decode step's software prefetch: matvec's dot products ask for the weight bytes
// this far ahead of those they read (0: none, the hardware prefetcher alone). The loads
// of a q8_0 or f16 row wait on memory: the out-of-order window covers only some hundred
// bytes ahead, so without a prefetch far enough ahead a core keeps too few lines in
// flight to reach the memory bandwidth. Process-wide. By default kDefaultPrefetch for
// every row type, except f32, f16 and bf16 rows on a CPU that splits AVX-512 in halves
// (cpu::avx512_halves: Zen 4), which go without: there the hardware prefetcher keeps up
// with them and the prefetches cost 15-25% of the speed (the distances measured:
// docs/benchmarks.md). set_prefetch_distance (generate --prefetch) sets one distance for
// every row type; reset_prefetch_distance goes back to the defaults. Long rows on the AVX2
// path (4096 numbers or more, read in column tiles) fetch their next block into L2 whatever
// the distance: their reading order needs it.
inline constexpr std::size_t kDefaultPrefetch = 4096;
void set_prefetch_distance(std::size_t bytes);
void reset_prefetch_distance();
// The distance in force for f32, f16 and bf16 rows (float_rows) or for the block types'.
std::size_t prefetch_distance(bool float_rows);

// How matvec streams f32, f16 and bf16 rows: automatic = 512-bit registers where the CPU
// has AVX-512 and runs it whole (f32 rows 4 at a time), 256-bit ones (the AVX2 kernels)
// where it splits it in halves.
// Process-wide; the unit tests take each path in turn on any CPU. avx512 without AVX-512
// is avx2.
enum class FloatRows { automatic, avx2, avx512 };
void set_float_rows(FloatRows k);

// The q8_0 and q4_0 rows' decode-step and few-token products: VNNI's multiply-adds where
// the CPU has them (automatic; q4_0's decode step in 512-bit registers where the CPU has
// VBMI and does not split them in halves), VNNI in 256-bit registers alone (ymm: the
// few-token products' order, bit for bit), or AVX2's (two instructions for one) on any AVX2
// CPU. Process-wide, for the unit tests, which take every path the CPU has.
enum class Int8Dots { automatic, ymm, avx2 };
void set_int8_dots(Int8Dots k);
// Whether q4_0's decode step runs in 512-bit registers now (CPU and set_int8_dots): it adds a
// row's blocks in another order than the few-token products, which then match it to rounding.
bool q4_decode_zmm();

// Which kernels this CPU runs: "avx512-vnni", "avx512-vnni (f32, f16, bf16: avx2)", "avx2",
// or "scalar".
const char* kernel_name();

}  // namespace lmp::model
