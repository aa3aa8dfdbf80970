#include <catch2/catch.hpp>

#include <tuple>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "lmpipe/core/rng.h"
#include "lmpipe/core/thread_pool.h"
#include "lmpipe/model/ops.h"
#include "lmpipe/model/perplexity.h"
#include "lmpipe/model/synth.h"
#include "lmpipe/model/transformer.h"

using namespace lmp;
using namespace lmp::model;

namespace {
std::string temp_path(const std::string& name) { return "/tmp/lmp_model_" + std::to_string(::getpid()) + "_" + name; }

Config tiny_config() {
  Config c;
  c.arch = "llama";
  c.n_vocab = 100, c.n_embd = 64, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_ff = 128, c.n_ctx_train = 64;
  c.tied = true;
  return c;
}

std::unique_ptr<kv::KvCache> new_cache(const kv::KvConfig& kc) {
  auto c = kv::make_kv_cache(kc);
  REQUIRE(c.ok());
  return std::move(*c);
}

// A random model of shape `c` written to a temporary GGUF, opened and loaded; the file
// goes when this does.
struct RandomModel {
  std::string path;
  std::unique_ptr<tensor_io::TensorFile> file;
  std::unique_ptr<Transformer> model;
  RandomModel(const std::string& name, const Config& c, std::uint64_t seed) : path(temp_path(name)) {
    REQUIRE(write_random_gguf(path, c, DType::f32, seed).ok());
    auto f = tensor_io::TensorFile::open(path);
    REQUIRE(f.ok());
    file = std::move(*f);
    auto m = Transformer::load(*file);
    REQUIRE(m.ok());
    model = std::move(*m);
  }
  ~RandomModel() { std::remove(path.c_str()); }
};

double max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}
// matvec of w on every int8 path this CPU has (automatic, VNNI in 256 bits, AVX2's)
// against `want`, within `rel` of each row's sum of term sizes.
void check_int8_paths(const Weight& w, const std::vector<float>& x, const QuantizedVec& xq, const std::vector<double>& want,
                      const std::vector<double>& size, double rel, const std::string& label) {
  for (auto [name, k] : {std::pair{"automatic", Int8Dots::automatic}, std::pair{"VNNI in 256 bits", Int8Dots::ymm},
                         std::pair{"AVX2", Int8Dots::avx2}}) {
    set_int8_dots(k);
    std::vector<float> got(static_cast<std::size_t>(w.rows));
    matvec(got.data(), w, x.data(), &xq, 0, w.rows);
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO(label << ", row " << i << ", " << name);
      CHECK(static_cast<double>(got[i]) == Approx(want[i]).margin(rel * size[i] + 1e-6));
    }
  }
  set_int8_dots(Int8Dots::automatic);
}
}  // namespace

TEST_CASE("the thread pool runs every index once, again and again", "[model][pool]") {
  // The last count is more threads than this machine has processors: the pool then waits
  // without spinning.
  const int over = static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) + 2;
  for (int threads : {1, 2, 3, over}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 2000; ++rep) {
      const std::size_t n = static_cast<std::size_t>(rep % 7);
      std::vector<std::atomic<int>> hits(n);
      pool.run(n, [&](std::size_t i) { hits[i].fetch_add(1); });
      for (auto& h : hits) REQUIRE(h.load() == 1);
    }
  }
}

TEST_CASE("matvec and matmul agree with the dequantized weights", "[model][ops]") {
  Rng r(3);
  // Row lengths that reach every loop of the kernels: 96 = 64 + 2·16; 288 (stories15M) =
  // 4·64 + 2·16; 109 = 64 + 2·16 + 8 + 5 (the float types only: q8_0 and q4_0 come in 32s);
  // 4123 = 257·16 + 8 + 3, a long row (blocks of rows in column tiles on the AVX2 path);
  // 768 (three k-quant super-blocks).
  // With AVX-512 run whole, f32 rows up to 1024 go one at a time, longer ones 4 at a time.
  for (const int cols : {96, 288, 109, 4123, 768}) {
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K, DType::iq4_nl, DType::iq4_xs}) {
      if (static_cast<std::size_t>(cols) % dtype_info(t).block != 0) continue;
      INFO(dtype_name(t) << ", " << cols << " columns");
      const int rows = 12, n = 7;
      std::vector<float> W(static_cast<std::size_t>(rows * cols)), X(static_cast<std::size_t>(n * cols));
      for (auto& v : W) v = static_cast<float>(r.uniform() * 2 - 1);
      for (auto& v : X) v = static_cast<float>(r.uniform() * 2 - 1);
      const std::size_t rb = dtype_bytes(t, cols);
      std::vector<std::byte> q(rb * rows);
      for (int i = 0; i < rows; ++i) from_f32(t, W.data() + i * cols, q.data() + static_cast<std::size_t>(i) * rb, cols);
      Weight w{t, q.data(), rows, cols, rb};
      std::vector<float> batch(static_cast<std::size_t>(n * rows)), scratch;
      matmul(batch.data(), rows, w, X.data(), n, 0, rows, scratch);
      for (int tok = 0; tok < n; ++tok) {
        const float* x = X.data() + tok * cols;
        QuantizedVec xq;
        quantize_activation(xq, x, cols);
        std::vector<float> one(rows);
        matvec(one.data(), w, x, &xq, 0, rows);
        // The prefetch distance changes what is fetched early, never the sums (far past the
        // weights included: a prefetch does not fault).
        for (std::size_t pd : {std::size_t{0}, std::size_t{64}, std::size_t{1} << 20}) {
          set_prefetch_distance(pd);
          CHECK(prefetch_distance(false) == pd);
          CHECK(prefetch_distance(true) == pd);
          std::vector<float> again(rows);
          matvec(again.data(), w, x, &xq, 0, rows);
          CHECK(again == one);
        }
        reset_prefetch_distance();
        // The f32 and f16 rows' 256-bit and 512-bit kernels, each whatever this CPU would pick.
        std::vector<std::pair<const char*, std::vector<float>>> widths;
        for (auto [name, k] : {std::pair{"256-bit", FloatRows::avx2}, std::pair{"512-bit", FloatRows::avx512}}) {
          set_float_rows(k);
          widths.emplace_back(name, std::vector<float>(rows));
          matvec(widths.back().second.data(), w, x, &xq, 0, rows);
          for (int cut : {1, 5, 6}) {  // each kernel: rows split between threads give the same bits
            std::vector<float> split(rows);
            matvec(split.data(), w, x, &xq, 0, cut);
            matvec(split.data() + cut, w, x, &xq, cut, rows);
            INFO(name << ", rows split at " << cut);
            CHECK(split == widths.back().second);
          }
        }
        set_float_rows(FloatRows::automatic);
        // Rows split between threads at any row give the same bits.
        for (int cut : {1, 5, 6}) {
          std::vector<float> split(rows);
          matvec(split.data(), w, x, &xq, 0, cut);
          matvec(split.data() + cut, w, x, &xq, cut, rows);
          CHECK(split == one);
        }
        for (int i = 0; i < rows; ++i) {
          std::vector<float> row(cols);
          to_f32(t, q.data() + static_cast<std::size_t>(i) * rb, row.data(), cols);
          double want = 0;
          for (int k = 0; k < cols; ++k) want += static_cast<double>(row[static_cast<std::size_t>(k)]) * static_cast<double>(x[k]);
          // The batched path multiplies f32 rows; the single-token path of the block types
          // also quantizes the activations (error up to about |row|·|x|/127 per block; a
          // random walk over the columns: 0.1 at 288, 4.6 standard deviations).
          const double tol = is_quantized(t) ? 0.006 * std::sqrt(static_cast<double>(cols)) : 1e-4;
          CHECK(static_cast<double>(batch[static_cast<std::size_t>(tok * rows + i)]) == Approx(want).margin(1e-4));
          CHECK(static_cast<double>(one[static_cast<std::size_t>(i)]) == Approx(want).margin(tol));
          for (const auto& [name, other] : widths) {
            INFO(name << " streams");
            CHECK(static_cast<double>(other[static_cast<std::size_t>(i)]) == Approx(want).margin(tol));
          }
        }
      }
    }
  }
}

TEST_CASE("the AVX-512 GEMMs agree with the reference products, at every edge of their tiles", "[model][ops]") {
  if (!gemm_f32_available()) SUCCEED("no AVX-512 on this CPU: matmul keeps its own kernels");
  Rng r(11);
  // Tokens, rows and columns that are not multiples of the tiles (8 and 16 tokens, 32
  // and 4 rows, 128 columns), row ranges that start inside the matrix.
  // The k-quants go through the int8 GEMM with VNNI, else through the f32 one in panels of
  // 256 columns: 512 and 768 columns; both are checked.
  for (auto [n, rows, cols, lo] : {std::tuple{1, 4, 32, 0}, std::tuple{7, 12, 96, 4}, std::tuple{17, 37, 160, 0},
                                    std::tuple{33, 70, 288, 4}, std::tuple{40, 64, 128, 32}, std::tuple{9, 37, 512, 4},
                                    std::tuple{3, 33, 768, 0}}) {
    std::vector<float> W(static_cast<std::size_t>(rows * cols)), X(static_cast<std::size_t>(n * cols));
    for (auto& v : W) v = static_cast<float>(r.uniform() * 2 - 1);
    for (auto& v : X) v = static_cast<float>(r.uniform() * 2 - 1);
    X[3] = 0;  // a zero block scale must not divide by zero
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K, DType::iq4_nl, DType::iq4_xs}) {
      if (static_cast<std::size_t>(cols) % dtype_info(t).block != 0) continue;
      const std::size_t rb = dtype_bytes(t, cols);
      std::vector<std::byte> q(rb * static_cast<std::size_t>(rows));
      for (int i = 0; i < rows; ++i) from_f32(t, W.data() + i * cols, q.data() + static_cast<std::size_t>(i) * rb, cols);
      Weight w{t, q.data(), rows, cols, rb};
      // The k-quants through the int8 GEMM (sub-blocks unpacked; q4_K's and q5_K's offsets
      // from the token blocks' sums, q6_K's, q3_K's and q2_K's two scales a block applied
      // half by half, q2_K's two offsets from the token half blocks' sums) and through the
      // f32 one; q8_0 and q4_0 through the int8 one only, floats the f32 one.
      const bool int8_only = t == DType::q8_0 || t == DType::q4_0;
      const bool int8_ok = gemm_q8_takes(t);
      for (const bool int8 : {false, true}) {
        if (int8 ? !int8_ok : int8_only) continue;
        INFO((int8 ? "int8 GEMM" : "f32 GEMM"));
        const std::size_t ld = static_cast<std::size_t>(rows - lo);
        std::vector<float> got(static_cast<std::size_t>(n) * ld, -999.0f);
        GemmScratch gs;
        if (int8) {
          QuantizedBatch xq;
          prepare_batch(xq, n, cols);
          quantize_batch(xq, X.data(), cols, 0, n / 2);  // in two ranges, as two threads would
          quantize_batch(xq, X.data(), cols, n / 2, n);
          gemm_q8(got.data(), ld, w, xq, lo, rows, gs);
        } else {
          gemm_f32(got.data(), ld, w, X.data(), n, lo, rows, gs);
        }
        for (int tok = 0; tok < n; ++tok) {
          const float* x = X.data() + tok * cols;
          QuantizedVec xv;
          quantize_activation(xv, x, static_cast<std::size_t>(cols));
          std::vector<float> one(static_cast<std::size_t>(rows));
          matvec(one.data(), w, x, &xv, 0, rows);  // the decode step's product
          for (int i = lo; i < rows; ++i) {
            std::vector<float> row(static_cast<std::size_t>(cols));
            to_f32(t, q.data() + static_cast<std::size_t>(i) * rb, row.data(), static_cast<std::size_t>(cols));
            double want = 0;
            for (int k = 0; k < cols; ++k) want += static_cast<double>(row[static_cast<std::size_t>(k)]) * static_cast<double>(x[k]);
            const double g = got[static_cast<std::size_t>(tok) * ld + static_cast<std::size_t>(i - lo)];
            INFO(dtype_name(t) << " n " << n << " rows " << rows << " cols " << cols << " token " << tok << " row " << i);
            if (int8) {
              // int8 activations, as the decode step quantizes them: the same integer sums
              // (q4_0 rows unpacked to q8_0 blocks of the same values).
              REQUIRE(g == Approx(one[static_cast<std::size_t>(i)]).margin(1e-4));
              REQUIRE(g == Approx(want).margin(0.1));
            } else {
              REQUIRE(g == Approx(want).margin(1e-4));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("a few tokens at once: each row read once for all of them, the same bits at any split of the rows",
          "[model][ops]") {
  Rng r(17);
  // Columns: 96, 109 (a tail of 8 and one of 5), 2048 (one tile for 2 tokens, two for 8),
  // 4123 (a long row in three tiles and a tail); rows 13 (blocks of 4 with 1 left) and 70
  // with row ranges that start inside the matrix; tokens 1..9 and 16 (groups of 4 or 8 and what is left).
  // q8_0 and q4_0 rows (whole blocks of 32 only) and k-quant rows (2048 columns) give the
  // decode step's sums exactly, with VNNI's int8 products and with AVX2's.
  for (auto [rows, cols] : {std::pair{13, 96}, std::pair{13, 109}, std::pair{70, 2048}, std::pair{7, 4123}}) {
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K, DType::iq4_nl, DType::iq4_xs}) {
      const bool int8 = is_quantized(t);
      if (static_cast<std::size_t>(cols) % dtype_info(t).block != 0) continue;
      std::vector<float> W(static_cast<std::size_t>(rows * cols));
      for (auto& v : W) v = static_cast<float>(r.uniform() * 2 - 1);
      const std::size_t rb = dtype_bytes(t, cols);
      std::vector<std::byte> q(rb * static_cast<std::size_t>(rows));
      for (int i = 0; i < rows; ++i) from_f32(t, W.data() + i * cols, q.data() + static_cast<std::size_t>(i) * rb, cols);
      Weight w{t, q.data(), rows, cols, rb};
      std::vector<float> deq(static_cast<std::size_t>(rows * cols));
      for (int i = 0; i < rows; ++i)
        to_f32(t, q.data() + static_cast<std::size_t>(i) * rb, deq.data() + static_cast<std::size_t>(i * cols), static_cast<std::size_t>(cols));
      for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16})
        for (Int8Dots k8 : {Int8Dots::automatic, Int8Dots::ymm, Int8Dots::avx2}) {
          if (!int8 && k8 != Int8Dots::automatic) continue;
          set_int8_dots(k8);
          if (!matmul_few_available(t, n)) continue;
          INFO(dtype_name(t) << ", " << rows << " rows of " << cols << ", " << n << " tokens"
                             << (k8 == Int8Dots::avx2 ? ", AVX2's int8 products" : k8 == Int8Dots::ymm ? ", VNNI in 256 bits" : ""));
          // q4_0's decode step in 512-bit registers adds a row's blocks in another order.
          const bool zmm_decode = t == DType::q4_0 && q4_decode_zmm();
          std::vector<float> X(static_cast<std::size_t>(n * cols));
          for (auto& v : X) v = static_cast<float>(r.uniform() * 2 - 1);
          const auto ld = static_cast<std::size_t>(rows);
          std::vector<QuantizedVec> xq(static_cast<std::size_t>(n));
          for (int tok = 0; tok < n; ++tok) quantize_activation(xq[static_cast<std::size_t>(tok)], X.data() + tok * cols, static_cast<std::size_t>(cols));
          std::vector<float> whole(static_cast<std::size_t>(n) * ld, -999.0f), split(whole.size(), -999.0f), scratch;
          matmul_few(whole.data(), ld, w, X.data(), xq.data(), n, 0, rows, scratch);
          for (int cut : {1, 5, rows / 2}) {
            matmul_few(split.data(), ld, w, X.data(), xq.data(), n, 0, cut, scratch);
            matmul_few(split.data() + cut, ld, w, X.data(), xq.data(), n, cut, rows, scratch);
            REQUIRE(split == whole);
          }
          for (int tok = 0; tok < n; ++tok) {
            if (int8) {  // the decode step's product, bit for bit (to rounding after the 512-bit q4_0 step)
              std::vector<float> one(ld);
              matvec(one.data(), w, X.data() + tok * cols, &xq[static_cast<std::size_t>(tok)], 0, rows);
              const auto few = whole.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(tok) * ld);
              if (!zmm_decode) REQUIRE(std::equal(one.begin(), one.end(), few));
              else
                for (std::size_t i = 0; i < ld; ++i) REQUIRE(one[i] == Approx(few[static_cast<std::ptrdiff_t>(i)]).margin(1e-5));
              continue;
            }
            for (int i = 0; i < rows; ++i) {
              double want = 0;
              for (int k = 0; k < cols; ++k)
                want += static_cast<double>(deq[static_cast<std::size_t>(i * cols + k)]) * static_cast<double>(X[static_cast<std::size_t>(tok * cols + k)]);
              REQUIRE(static_cast<double>(whole[static_cast<std::size_t>(tok) * ld + static_cast<std::size_t>(i)]) ==
                      Approx(want).margin(1e-4 * std::sqrt(static_cast<double>(cols))));
            }
          }
        }
      set_int8_dots(Int8Dots::automatic);
    }
  }
}

TEST_CASE("rope: the adjacent and the halves layouts are one rotation under a permutation", "[model][ops]") {
  const int hd = 8;
  std::vector<float> a(hd), b(hd);
  for (int i = 0; i < hd; ++i) a[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  // halves layout of the same pairs: (x0, x1, x2, x3 | y0, y1, y2, y3) ↔ adjacent (x0, y0, x1, y1, ...)
  for (int i = 0; i < hd / 2; ++i) {
    b[static_cast<std::size_t>(i)] = a[static_cast<std::size_t>(2 * i)];
    b[static_cast<std::size_t>(i + hd / 2)] = a[static_cast<std::size_t>(2 * i + 1)];
  }
  rope(a.data(), 1, hd, 5, 10000.0f, RopeLayout::adjacent);
  rope(b.data(), 1, hd, 5, 10000.0f, RopeLayout::halves);
  for (int i = 0; i < hd / 2; ++i) {
    CHECK(a[static_cast<std::size_t>(2 * i)] == Approx(b[static_cast<std::size_t>(i)]));
    CHECK(a[static_cast<std::size_t>(2 * i + 1)] == Approx(b[static_cast<std::size_t>(i + hd / 2)]));
  }
  // Position 0 changes nothing.
  std::vector<float> c(a);
  rope(c.data(), 1, hd, 0, 10000.0f, RopeLayout::adjacent);
  CHECK(c == a);
}

TEST_CASE("a random model: one token at a time equals the batch, cached equals recomputed, errors", "[model]") {
  RandomModel rm("tiny.gguf", tiny_config(), 5);
  auto& m = rm.model;
  const Config& c = m->config();
  CHECK(c.n_kv_head == 2);
  CHECK(c.tied);
  ThreadPool pool(2);
  const std::vector<TokenId> seq = {1, 5, 17, 42, 99, 3, 7, 8, 9, 10};
  kv::KvConfig kc{c.n_layer, 32, c.kv_dim()};
  // Token by token with the cache.
  auto cache = new_cache(kc);
  std::vector<float> step(static_cast<std::size_t>(c.n_vocab)), batch(step.size());
  for (std::size_t i = 0; i < seq.size(); ++i) REQUIRE(m->forward(seq[i], static_cast<int>(i), *cache, step.data(), pool).ok());
  CHECK(cache->length(0) == static_cast<int>(seq.size()));
  CHECK(cache->stats().used == 2 * seq.size() * static_cast<std::size_t>(c.n_layer * c.kv_dim()) * 4);
  // The whole sequence at once (what --no-cache recomputes every step).
  auto fresh = new_cache(kc);
  REQUIRE(m->forward_batch(seq, 0, *fresh, batch.data(), pool).ok());
  double range = *std::max_element(step.begin(), step.end()) - *std::min_element(step.begin(), step.end());
  CHECK(max_abs(step, batch) <= 1e-4 * std::max(range, 1e-3));
  // Errors: an id outside the vocabulary, a full context.
  CHECK_FALSE(m->forward(100, static_cast<int>(seq.size()), *cache, step.data(), pool).ok());
  auto small = new_cache(kv::KvConfig{c.n_layer, 2, c.kv_dim()});
  REQUIRE(m->forward(1, 0, *small, step.data(), pool).ok());
  REQUIRE(m->forward(2, 1, *small, step.data(), pool).ok());
  auto full = m->forward(3, 2, *small, step.data(), pool);
  REQUIRE_FALSE(full.ok());
  CHECK_THAT(full.error().message, Catch::Contains("context is full"));
}

TEST_CASE("a model file without the tensors it needs: errors that say what is missing", "[model][errors]") {
  using tensor_io::MetaValue;
  const std::vector<std::pair<std::string, MetaValue>> meta{
      {"general.architecture", MetaValue::of_string("llama")},
      {"llama.embedding_length", MetaValue::of_u32(64)},
      {"llama.block_count", MetaValue::of_u32(2)},
      {"llama.attention.head_count", MetaValue::of_u32(4)},
      {"llama.feed_forward_length", MetaValue::of_u32(128)}};
  auto load_error = [](const std::string& path) {
    auto f = tensor_io::TensorFile::open(path);
    REQUIRE(f.ok());
    auto m = Transformer::load(**f);
    REQUIRE_FALSE(m.ok());
    return m.error().message;
  };
  // A vocabulary-only file (llama.cpp's ggml-vocab-*.gguf): metadata and no tensors.
  const std::string vocab_only = temp_path("vocab_only.gguf");
  REQUIRE(tensor_io::write_gguf(vocab_only, meta, {}).ok());
  CHECK_THAT(load_error(vocab_only), Catch::Contains("holds no tensors (a vocabulary-only file?)"));
  std::remove(vocab_only.c_str());
  // Tensors, but no token embedding.
  const std::string no_emb = temp_path("no_emb.gguf");
  std::vector<float> w(64, 1.0f);
  tensor_io::TensorOut norm("output_norm.weight", DType::f32, {64}, w.data());
  REQUIRE(tensor_io::write_gguf(no_emb, meta, {norm}).ok());
  CHECK_THAT(load_error(no_emb), Catch::Contains("no token_embd.weight tensor"));
  std::remove(no_emb.c_str());
}

TEST_CASE("q8_0 and f16 weights stay close to f32 on the same random model", "[model]") {
  const std::string pf = temp_path("f32.gguf"), pq = temp_path("q.gguf");
  Config c = tiny_config();
  REQUIRE(write_random_gguf(pf, c, DType::f32, 9).ok());
  auto f32 = tensor_io::TensorFile::open(pf);
  REQUIRE(f32.ok());
  // Written with tensors on 64-byte offsets: mapped, every row starts on a cache line.
  CHECK((*f32)->alignment() == 64);
  for (const auto& t : (*f32)->tensors()) CHECK(reinterpret_cast<std::uintptr_t>((*f32)->data(t)) % 64 == 0);
  auto ref = Transformer::load(**f32);
  REQUIRE(ref.ok());
  ThreadPool pool(1);
  kv::KvConfig kc{c.n_layer, 16, c.kv_dim()};
  std::vector<float> want(static_cast<std::size_t>(c.n_vocab)), got(want.size());
  {
    auto cache = new_cache(kc);
    for (int i = 0; i < 5; ++i) REQUIRE((*ref)->forward(i + 1, i, *cache, want.data(), pool).ok());
  }
  const double range = *std::max_element(want.begin(), want.end()) - *std::min_element(want.begin(), want.end());
  for (auto [t, bound] : {std::pair{DType::f16, 0.002}, {DType::q8_0, 0.05}, {DType::q4_0, 0.3}}) {
    REQUIRE(convert_gguf(pq, **f32, t).ok());
    auto fq = tensor_io::TensorFile::open(pq);
    REQUIRE(fq.ok());
    auto m = Transformer::load(**fq);
    REQUIRE(m.ok());
    auto cache = new_cache(kc);
    for (int i = 0; i < 5; ++i) REQUIRE((*m)->forward(i + 1, i, *cache, got.data(), pool).ok());
    INFO(dtype_name(t) << ": max |logit - f32| " << max_abs(want, got) << " of range " << range);
    CHECK(max_abs(want, got) <= bound * range);
  }
  std::remove(pf.c_str());
  std::remove(pq.c_str());
}

// k-quant weights (n_embd and n_ff multiples of 256): the steps, the batch of a prompt
// (a GEMM past the few-token products' limit, those below it) and the same weights
// converted to f32 all agree to the activations' int8 rounding.
TEST_CASE("k-quant, iq4, q4_1 and q5 models: steps, batches and their f32 conversion agree", "[model]") {
  Config c = tiny_config();
  c.n_embd = 256, c.n_ff = 512, c.n_head = 4, c.n_kv_head = 2;
  ThreadPool pool(2);
  kv::KvConfig kc{c.n_layer, 48, c.kv_dim()};
  const auto V = static_cast<std::size_t>(c.n_vocab);
  for (DType t : {DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K, DType::iq4_nl, DType::iq4_xs}) {
    INFO(dtype_name(t));
    const std::string pq = temp_path("kq.gguf"), pf = temp_path("kq_f32.gguf");
    REQUIRE(write_random_gguf(pq, c, t, 21).ok());
    auto fq = tensor_io::TensorFile::open(pq);
    REQUIRE(fq.ok());
    REQUIRE(convert_gguf(pf, **fq, DType::f32).ok());  // the same numbers, as f32
    auto ff = tensor_io::TensorFile::open(pf);
    REQUIRE(ff.ok());
    auto mq = Transformer::load(**fq);
    auto mf = Transformer::load(**ff);
    REQUIRE(mq.ok());
    REQUIRE(mf.ok());
    std::vector<TokenId> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back((i * 7 + 3) % c.n_vocab);
    // the few-token products; the GEMM (int8 with VNNI), or without VNNI q6_K's few-token
    // products and the others' f32 GEMM; every type's GEMM
    for (std::size_t n : {std::size_t{5}, std::size_t{24}, prompt.size()}) {
      INFO(n << " tokens");
      std::vector<float> steps(V * n), batch(V * n), ref(V * n);
      auto c1 = new_cache(kc), c2 = new_cache(kc), c3 = new_cache(kc);
      for (std::size_t i = 0; i < n; ++i) REQUIRE((*mq)->forward(prompt[i], static_cast<int>(i), *c1, steps.data() + i * V, pool).ok());
      REQUIRE((*mq)->forward_batch(std::span(prompt).first(n), 0, *c2, batch.data(), pool, 0, true).ok());
      REQUIRE((*mf)->forward_batch(std::span(prompt).first(n), 0, *c3, ref.data(), pool, 0, true).ok());
      const double range = *std::max_element(ref.begin(), ref.end()) - *std::min_element(ref.begin(), ref.end());
      INFO("range " << range << ", steps - f32 " << max_abs(steps, ref) << ", batch - f32 " << max_abs(batch, ref));
      CHECK(max_abs(steps, ref) <= 0.02 * range);
      CHECK(max_abs(batch, ref) <= 0.02 * range);
      // Past the few-token products without VNNI: the f32 GEMM, f32's sums. Otherwise int8
      // activations, as the steps: near the steps, though not to float rounding (an
      // activation a rounding away from its step's value moves by a quantum; the GEMM
      // against the decode step's products: "the AVX-512 GEMMs agree").
      const bool f32_gemm = !matmul_few_available(t, static_cast<std::int64_t>(n)) && !gemm_q8_takes(t);
      if (f32_gemm) CHECK(max_abs(batch, ref) <= 1e-5 * range);
      else CHECK(max_abs(batch, steps) <= 0.005 * range);
    }
    std::remove(pq.c_str());
    std::remove(pf.c_str());
  }
}

TEST_CASE("the model on every cache: paged equals contiguous, quantized caches stay close, eviction runs on", "[model][kv]") {
  RandomModel rm("kvs.gguf", tiny_config(), 11);
  auto& m = rm.model;
  const Config& c = m->config();
  ThreadPool pool(2);
  std::vector<TokenId> seq;
  for (int i = 0; i < 40; ++i) seq.push_back((i * 37 + 11) % c.n_vocab);
  auto run = [&](kv::KvConfig kc, std::size_t prompt) {
    kc.n_layer = c.n_layer;
    kc.kv_dim = c.kv_dim();
    kc.head_dim = c.head_dim();
    auto cache = new_cache(kc);
    std::vector<float> logits(static_cast<std::size_t>(c.n_vocab)), all;
    REQUIRE(m->forward_batch(std::span<const TokenId>(seq).first(prompt), 0, *cache, logits.data(), pool).ok());
    all = logits;
    for (std::size_t i = prompt; i < seq.size(); ++i) {
      REQUIRE(m->forward(seq[i], static_cast<int>(i), *cache, logits.data(), pool).ok());
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  };
  kv::KvConfig kc;
  kc.n_ctx = 64;
  const auto want = run(kc, 7);
  const double range = *std::max_element(want.begin(), want.end()) - *std::min_element(want.begin(), want.end());
  kc.layout = kv::Layout::paged;
  for (int bs : {1, 5, 16}) {
    kc.block_size = bs;
    CHECK(run(kc, 7) == want);  // the same numbers in the same order: bit for bit
  }
  for (auto [t, bound] : {std::pair{kv::KvType::f16, 0.002}, {kv::KvType::int8, 0.02}, {kv::KvType::int4, 0.2},
                          {kv::KvType::int4_kivi, 0.2}}) {
    kc.type = t;
    kc.layout = t == kv::KvType::int4_kivi ? kv::Layout::contiguous : kv::Layout::paged;
    INFO(kv::kv_type_name(t) << ": max |logit - f32 cache| " << max_abs(want, run(kc, 7)) << " of range " << range);
    CHECK(max_abs(want, run(kc, 7)) <= bound * range);
  }
  // Eviction: a context of 16 runs through 40 tokens; until the 16th the logits are exact,
  // and a prompt longer than the context goes in one token at a time past it.
  kc.type = kv::KvType::f32;
  kc.n_ctx = 16;
  for (auto e : {kv::Eviction::window, kv::Eviction::sinks}) {
    kc.eviction = e;
    for (auto lay : {kv::Layout::contiguous, kv::Layout::paged}) {
      kc.layout = lay;
      const auto got = run(kc, 7);
      REQUIRE(got.size() == want.size());
      const auto n16 = static_cast<std::ptrdiff_t>(10 * c.n_vocab);  // outputs for tokens 7..16
      CHECK(std::equal(got.begin(), got.begin() + n16, want.begin()));
      CHECK_FALSE(std::equal(got.begin(), got.end(), want.begin()));
      // (the batch's sums run in another order than the steps': close, not bit-equal)
      const auto long_prompt = run(kc, 30);
      const std::vector<float> a(long_prompt.end() - static_cast<std::ptrdiff_t>(c.n_vocab), long_prompt.end()),
          b(got.end() - static_cast<std::ptrdiff_t>(c.n_vocab), got.end());
      CHECK(max_abs(a, b) <= 1e-4 * range);
    }
  }
}

TEST_CASE("softmax: the vectorised exponential within 1e-6 of std::exp, any length", "[model][ops]") {
  for (int n : {1, 3, 8, 9, 17, 100, 1000}) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(i * 1.7) * 40.0 - (i % 7) * 3.0);
    std::vector<double> want(x.size());
    const float m = *std::max_element(x.begin(), x.end());
    double z = 0;  // from x - m rounded to float, as softmax computes it
    for (std::size_t i = 0; i < x.size(); ++i) z += want[i] = std::exp(static_cast<double>(x[i] - m));
    softmax(x.data(), n);
    double sum = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK(static_cast<double>(x[i]) == Approx(want[i] / z).epsilon(1e-6).margin(1e-30));
      sum += static_cast<double>(x[i]);
    }
    CHECK(sum == Approx(1.0).epsilon(1e-6));
  }
  std::vector<float> big = {0.0f, -200.0f, -1000.0f};  // underflow to 0, not NaN
  softmax(big.data(), 3);
  CHECK(big[0] == 1.0f);
  CHECK(big[2] >= 0.0f);
  CHECK(big[2] < 1e-30f);
}

// Prompt processing's attention runs as matrix products over tiles of tokens and chunks
// of 32 keys and 64 values (gemm.cpp's micro-kernel): a prompt of 150 tokens crosses every
// chunk edge, and the split 90 + 60 starts a batch after cached tokens. Against the same
// tokens one step at a time, on every cache type; paged equals contiguous bit for bit,
// and the thread count changes no bit.
TEST_CASE("a prompt's attention as matrix products equals the steps on every cache", "[model][kv]") {
  Config mq = tiny_config();
  mq.n_embd = 128, mq.n_head = 4, mq.n_kv_head = 1, mq.n_ctx_train = 256;  // head_dim 32, four heads on one kv head
  RandomModel rm("mq.gguf", mq, 17);
  auto& m = rm.model;
  const Config& c = m->config();
  std::vector<TokenId> seq;
  for (int i = 0; i < 150; ++i) seq.push_back((i * 53 + 7) % c.n_vocab);
  auto run = [&](kv::KvConfig kc, std::vector<std::size_t> parts, int threads) {
    kc.n_layer = c.n_layer, kc.kv_dim = c.kv_dim(), kc.head_dim = c.head_dim(), kc.n_ctx = 256;
    auto cache = new_cache(kc);
    ThreadPool pool(threads);
    std::vector<float> logits(static_cast<std::size_t>(c.n_vocab));
    std::size_t at = 0;
    for (std::size_t p : parts) {
      const auto part = std::span<const TokenId>(seq).subspan(at, p);
      if (p == 1) REQUIRE(m->forward(part[0], static_cast<int>(at), *cache, logits.data(), pool).ok());
      else REQUIRE(m->forward_batch(part, static_cast<int>(at), *cache, logits.data(), pool).ok());
      at += p;
    }
    REQUIRE(at == seq.size());
    return logits;
  };
  const std::vector<std::size_t> steps(seq.size(), 1), whole = {150}, split = {90, 60};
  // int4-kivi's keys stay in f32 until their group of 32 is complete. In a batch all keys
  // are stored before attention, so earlier tokens meet keys already quantized that one
  // step at a time they met in f32: 0.52% of the range apart, measured the same with the
  // token-by-token attention. Split after whole groups (96 + 54), the batch is exact.
  for (auto [t, bound] : {std::pair{kv::KvType::f32, 1e-4}, {kv::KvType::f16, 1e-4}, {kv::KvType::int8, 1e-3},
                          {kv::KvType::int4, 1e-3}, {kv::KvType::int4_kivi, 1e-2}}) {
    kv::KvConfig kc;
    kc.type = t;
    const auto want = run(kc, steps, 1);
    const double range = *std::max_element(want.begin(), want.end()) - *std::min_element(want.begin(), want.end());
    const auto got = run(kc, whole, 2);
    INFO(kv::kv_type_name(t) << ": max |batch - steps| " << max_abs(want, got) << " of range " << range);
    CHECK(max_abs(want, got) <= bound * range);
    CHECK(max_abs(want, run(kc, split, 2)) <= bound * range);
    CHECK(run(kc, whole, 1) == got);
    if (t == kv::KvType::int4_kivi) {
      CHECK(run(kc, {96, 54}, 2) == got);
    } else {
      kc.layout = kv::Layout::paged;
      for (int bs : {5, 16}) {
        kc.block_size = bs;
        CHECK(run(kc, whole, 2) == got);
      }
    }
  }
}

// The decode step takes the context in parts of 256 tokens, each with its own softmax,
// and combines them: 700 tokens one at a time against the same tokens in one batch (whose
// attention is one softmax over all), at 1 and 3 threads and on paged blocks of 5.
TEST_CASE("decode over more than 256 tokens: the parts combined equal one softmax", "[model][kv]") {
  Config mq = tiny_config();
  mq.n_embd = 128, mq.n_head = 4, mq.n_kv_head = 2, mq.n_ctx_train = 1024;  // head_dim 32
  RandomModel rm("long.gguf", mq, 23);
  auto& m = rm.model;
  const Config& c = m->config();
  std::vector<TokenId> seq;
  for (int i = 0; i < 700; ++i) seq.push_back((i * 29 + 3) % c.n_vocab);
  auto run = [&](kv::KvConfig kc, bool batch, int threads) {
    kc.n_layer = c.n_layer, kc.kv_dim = c.kv_dim(), kc.head_dim = c.head_dim(), kc.n_ctx = 1024;
    auto cache = new_cache(kc);
    ThreadPool pool(threads);
    std::vector<float> logits(static_cast<std::size_t>(c.n_vocab));
    if (batch) REQUIRE(m->forward_batch(seq, 0, *cache, logits.data(), pool).ok());
    else
      for (std::size_t i = 0; i < seq.size(); ++i) REQUIRE(m->forward(seq[i], static_cast<int>(i), *cache, logits.data(), pool).ok());
    return logits;
  };
  for (auto t : {kv::KvType::f32, kv::KvType::int8}) {
    kv::KvConfig kc;
    kc.type = t;
    const auto steps = run(kc, false, 1);
    const auto batch = run(kc, true, 2);
    const double range = *std::max_element(batch.begin(), batch.end()) - *std::min_element(batch.begin(), batch.end());
    INFO(kv::kv_type_name(t) << ": max |steps - batch| " << max_abs(steps, batch) << " of range " << range);
    // Measured: 2.4e-7 (f32) and 5.6e-6 (int8: the steps meet keys with q in int16) of
    // the range; parts combined without their exponentials' rescaling were 2.5e-4 off.
    CHECK(max_abs(steps, batch) <= (t == kv::KvType::f32 ? 1e-5 : 1e-4) * range);
    CHECK(run(kc, false, 3) == steps);
    kc.layout = kv::Layout::paged;
    kc.block_size = 5;
    CHECK(run(kc, false, 2) == steps);
  }
}

TEST_CASE("a random Qwen2 model (q/k/v biases, halves RoPE): steps equal the batch, paged equals contiguous", "[model]") {
  Config q = tiny_config();
  q.arch = "qwen2";
  RandomModel rm("qwen2.gguf", q, 13);
  auto& m = rm.model;
  const Config& c = m->config();
  CHECK(c.arch == "qwen2");
  CHECK(c.rope == RopeLayout::halves);
  CHECK_THAT(m->describe(), Catch::StartsWith("qwen2:"));
  ThreadPool pool(2);
  const std::vector<TokenId> seq = {1, 5, 17, 42, 99, 3, 7, 8};
  kv::KvConfig kc{c.n_layer, 16, c.kv_dim()};
  kc.head_dim = c.head_dim();
  auto steps = new_cache(kc);
  std::vector<float> step(static_cast<std::size_t>(c.n_vocab)), batch(step.size()), paged(step.size());
  for (std::size_t i = 0; i < seq.size(); ++i) REQUIRE(m->forward(seq[i], static_cast<int>(i), *steps, step.data(), pool).ok());
  auto whole = new_cache(kc);
  REQUIRE(m->forward_batch(seq, 0, *whole, batch.data(), pool).ok());
  const double range = *std::max_element(step.begin(), step.end()) - *std::min_element(step.begin(), step.end());
  CHECK(max_abs(step, batch) <= 1e-4 * std::max(range, 1e-3));
  kc.layout = kv::Layout::paged;
  kc.block_size = 3;
  auto pc = new_cache(kc);
  for (std::size_t i = 0; i < seq.size(); ++i) REQUIRE(m->forward(seq[i], static_cast<int>(i), *pc, paged.data(), pool).ok());
  CHECK(paged == step);
}

// The decode step's q8_0 product is the blocks' exact integer sums, each times its two
// scales: at row lengths that end the kernels' loops at every place (pairs of blocks and
// a last odd one; long rows), with activations of both signs at the int8 extremes (the
// multiply-adds take one operand unsigned: the sign handling must be exact).
TEST_CASE("q8_0 and q4_0 matvec equal their integer sums at every row length, with VNNI and with AVX2", "[model][ops]") {
  Rng r(29);
  for (DType t : {DType::q8_0, DType::q4_0})
    for (const int nb : {1, 2, 3, 5, 7, 8, 9, 17, 255, 256, 257, 300, 520}) {
      const int cols = 32 * nb, rows = 3;
      std::vector<float> W(static_cast<std::size_t>(rows * cols)), x(static_cast<std::size_t>(cols));
      for (auto& v : W) v = static_cast<float>(r.uniform() * 2 - 1);
      for (auto& v : x) v = static_cast<float>(r.uniform() * 2 - 1);
      for (int k = 0; k < cols; k += 7) x[static_cast<std::size_t>(k)] = k % 2 ? -1.0f : 1.0f;  // (±127)
      const std::size_t rb = dtype_bytes(t, cols);
      std::vector<std::byte> q(rb * rows);
      for (int i = 0; i < rows; ++i) from_f32(t, W.data() + i * cols, q.data() + static_cast<std::size_t>(i) * rb, cols);
      Weight w{t, q.data(), rows, cols, rb};
      QuantizedVec xq;
      quantize_activation(xq, x.data(), static_cast<std::size_t>(cols));
      // The blocks' products in double, and the sum of their sizes: the float sums' rounding
      // is relative to that, not to a total that may cancel.
      std::vector<double> want(rows), size(rows);
      for (int i = 0; i < rows; ++i)
        for (int b = 0; b < nb; ++b) {
          const std::byte* block = q.data() + static_cast<std::size_t>(i) * rb + static_cast<std::size_t>(b) * dtype_bytes(t, 32);
          std::uint16_t d = 0;
          std::memcpy(&d, block, 2);
          long sum = 0;
          for (int k = 0; k < 32; ++k) {
            // q8_0: 32 signed bytes; q4_0: element k < 16 in the low nibble of byte k, the
            // others in the high nibble of byte k − 16, each minus 8.
            const auto byte = std::to_integer<int>(block[2 + (t == DType::q8_0 ? k : k % 16)]);
            const long wk = t == DType::q8_0 ? static_cast<std::int8_t>(byte) : (k < 16 ? byte & 15 : byte >> 4) - 8;
            sum += wk * long{xq.q[static_cast<std::size_t>(b * 32 + k)]};
          }
          const double term =
              static_cast<double>(f16_to_f32(d)) * static_cast<double>(xq.d[static_cast<std::size_t>(b)]) * static_cast<double>(sum);
          want[static_cast<std::size_t>(i)] += term;
          size[static_cast<std::size_t>(i)] += std::fabs(term);
        }
      check_int8_paths(w, x, xq, want, size, 1e-6, fmt::format("{}, {} blocks", dtype_name(t), nb));
    }
}

// The k-quants' decode step: each sub-block's integer sums times its scales, the offsets
// of q4_K and q5_K through the activation blocks' sums. Against the dequantized row times
// the quantized activation in double, at 1 to 9 super-blocks, activations at the int8
// extremes and rows of one sign (offsets at their largest), on every int8 path.
TEST_CASE("k-quant, iq4, q4_1 and q5 matvec equal the dequantized rows times the quantized activation", "[model][ops]") {
  Rng r(37);
  for (DType t : {DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K, DType::iq4_nl, DType::iq4_xs})
    for (const int nsb : {1, 2, 3, 9}) {
      const int cols = 256 * nsb, rows = 4;
      std::vector<float> W(static_cast<std::size_t>(rows * cols)), x(static_cast<std::size_t>(cols));
      for (int i = 0; i < rows; ++i)
        for (int k = 0; k < cols; ++k) {
          const double u = r.uniform();
          // row 0 mixed signs, row 1 positive, row 2 negative, row 3 mixed and spiky
          W[static_cast<std::size_t>(i * cols + k)] =
              static_cast<float>(i == 1 ? u : i == 2 ? -u : i == 3 && k % 37 == 0 ? (u - 0.5) * 40 : u * 2 - 1);
        }
      for (auto& v : x) v = static_cast<float>(r.uniform() * 2 - 1);
      for (int k = 0; k < cols; k += 5) x[static_cast<std::size_t>(k)] = k % 2 ? -1.0f : 1.0f;  // (±127)
      const std::size_t rb = dtype_bytes(t, cols);
      std::vector<std::byte> q(rb * rows);
      for (int i = 0; i < rows; ++i) from_f32(t, W.data() + i * cols, q.data() + static_cast<std::size_t>(i) * rb, cols);
      Weight w{t, q.data(), rows, cols, rb};
      QuantizedVec xq;
      quantize_activation(xq, x.data(), static_cast<std::size_t>(cols));
      std::vector<double> want(rows), size(rows);
      for (int i = 0; i < rows; ++i) {
        std::vector<float> row(static_cast<std::size_t>(cols));
        to_f32(t, q.data() + static_cast<std::size_t>(i) * rb, row.data(), static_cast<std::size_t>(cols));
        for (int k = 0; k < cols; ++k) {
          const double term = static_cast<double>(row[static_cast<std::size_t>(k)]) *
                               static_cast<double>(xq.q[static_cast<std::size_t>(k)]) * static_cast<double>(xq.d[static_cast<std::size_t>(k / 32)]);
          want[static_cast<std::size_t>(i)] += term;
          size[static_cast<std::size_t>(i)] += std::fabs(term);
        }
      }
      check_int8_paths(w, x, xq, want, size, 2e-6, fmt::format("{}, {} super-blocks", dtype_name(t), nsb));
    }
}

TEST_CASE("quantize_activation: q = lround(x / d), d = max |x| / 127 per block of 32, halves away from zero, the biases and sums", "[model][ops]") {
  Rng r(31);
  auto check = [](const std::vector<float>& x) {
    QuantizedVec xq;
    quantize_activation(xq, x.data(), x.size());
    REQUIRE(xq.q.size() == x.size() / 32 * 32);
    for (std::size_t b = 0; b < x.size() / 32; ++b) {
      float amax = 0;
      for (std::size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      REQUIRE(xq.d[b] == d);
      for (std::size_t j = 0; j < 32; ++j) {
        INFO("block " << b << ", x = " << x[b * 32 + j]);
        REQUIRE(int{xq.q[b * 32 + j]} == static_cast<int>(std::lround(x[b * 32 + j] * id)));
      }
    }
    // The biases that make q4_0, q8_0 and q6_K weights unsigned: −8, −128 and −32 times
    // each 4's sum.
    REQUIRE(xq.bias_q4.size() == x.size() / 32 * 8);
    REQUIRE(xq.bias_q8.size() == x.size() / 32 * 8);
    REQUIRE(xq.bias_q6.size() == x.size() / 32 * 8);
    for (std::size_t g = 0; g < xq.bias_q4.size(); ++g) {
      const int sum = xq.q[4 * g] + xq.q[4 * g + 1] + xq.q[4 * g + 2] + xq.q[4 * g + 3];
      INFO("group " << g);
      REQUIRE(xq.bias_q4[g] == -8 * sum);
      REQUIRE(xq.bias_q8[g] == -128 * sum);
      REQUIRE(xq.bias_q6[g] == -32 * sum);
    }
    // Each block's d · Σ q, which q4_K's and q5_K's offsets multiply, and each half's,
    // which q2_K's multiply.
    REQUIRE(xq.sum.size() == x.size() / 32);
    REQUIRE(xq.sum16.size() == x.size() / 16);
    for (std::size_t b = 0; b < xq.sum.size(); ++b) {
      int half[2] = {0, 0};
      for (std::size_t j = 0; j < 32; ++j) half[j / 16] += xq.q[b * 32 + j];
      REQUIRE(xq.sum[b] == xq.d[b] * static_cast<float>(half[0] + half[1]));
      REQUIRE(xq.sum16[2 * b] == xq.d[b] * static_cast<float>(half[0]));
      REQUIRE(xq.sum16[2 * b + 1] == xq.d[b] * static_cast<float>(half[1]));
    }
  };
  // amax 127 makes d = 1: the numbers are their own quotients, halfway cases included.
  std::vector<float> halves = {127.0f, 2.5f,  -2.5f, 0.5f,  -0.5f, 1.5f, -1.5f, 0.49999997f, -0.49999997f, 126.5f,
                               -126.5f, 1.4999999f, 0.0f, -0.0f, 3.5000002f, -64.5f};
  halves.resize(32, 7.5f);
  check(halves);
  CHECK(int{[&] { QuantizedVec q; quantize_activation(q, halves.data(), 32); return q.q[1]; }()} == 3);
  check(std::vector<float>(64, 0.0f));  // all zero: d = 0, q = 0
  for (const std::size_t n : {32u, 64u, 96u, 768u, 2048u, 5632u}) {
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>((r.uniform() * 2 - 1) * std::pow(10.0, r.uniform() * 6 - 3));
    check(x);
  }
}

TEST_CASE("long rows: blocks of rows in column tiles, the same bits however the rows are split", "[model][ops]") {
  Rng r(37);
  // 120 rows make several blocks of about 192 KB (f32 rows of 5632: 8 a block), so that the
  // splits below fall inside blocks and on their edges, and the next block is prefetched.
  for (const int cols : {4123, 5632}) {
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      INFO(dtype_name(t) << ", " << cols << " columns");
      const int rows = 120;
      std::vector<float> W(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols)), x(static_cast<std::size_t>(cols));
      for (auto& v : W) v = static_cast<float>(r.uniform() * 2 - 1);
      for (auto& v : x) v = static_cast<float>(r.uniform() * 2 - 1);
      const std::size_t rb = dtype_bytes(t, static_cast<std::size_t>(cols));
      std::vector<std::byte> q(rb * rows);
      for (int i = 0; i < rows; ++i)
        from_f32(t, W.data() + static_cast<std::size_t>(i) * static_cast<std::size_t>(cols), q.data() + static_cast<std::size_t>(i) * rb,
                 static_cast<std::size_t>(cols));
      Weight w{t, q.data(), rows, cols, rb};
      std::vector<float> all(rows);
      matvec(all.data(), w, x.data(), nullptr, 0, rows);
      for (int i = 0; i < rows; ++i) {
        std::vector<float> row(static_cast<std::size_t>(cols));
        to_f32(t, q.data() + static_cast<std::size_t>(i) * rb, row.data(), static_cast<std::size_t>(cols));
        double want = 0;
        for (int k = 0; k < cols; ++k) want += static_cast<double>(row[static_cast<std::size_t>(k)]) * static_cast<double>(x[static_cast<std::size_t>(k)]);
        CHECK(static_cast<double>(all[static_cast<std::size_t>(i)]) == Approx(want).margin(1e-3));
      }
      for (const int a : {1, 8, 11, 37, 64}) {
        for (const int b : {a + 1, a + 9, rows}) {
          if (b > rows) continue;
          INFO("rows " << a << ".." << b);
          std::vector<float> part(static_cast<std::size_t>(b - a));
          matvec(part.data(), w, x.data(), nullptr, a, b);
          CHECK(std::equal(part.begin(), part.end(), all.begin() + a));
        }
      }
    }
  }
}

TEST_CASE("perplexity: every token scored once from the steps' own logits, in windows and batches", "[model][ppl]") {
  RandomModel rm("ppl.gguf", tiny_config(), 21);
  auto& m = rm.model;
  const Config& c = m->config();
  ThreadPool pool(2);
  Rng rng(3);
  std::vector<TokenId> ids(40);
  for (auto& id : ids) id = static_cast<TokenId>(rng.next() % static_cast<std::uint64_t>(c.n_vocab));
  // The reference: each window token by token with forward(), log-softmax in double.
  auto reference = [&](std::size_t s, std::size_t e, std::size_t from, std::vector<double>& lp) {
    auto cache = new_cache(kv::KvConfig{c.n_layer, static_cast<int>(e - s), c.kv_dim()});
    std::vector<float> row(static_cast<std::size_t>(c.n_vocab));
    for (std::size_t j = s; j + 1 < e; ++j) {
      REQUIRE(m->forward(ids[j], static_cast<int>(j - s), *cache, row.data(), pool).ok());
      if (j + 1 < from) continue;
      double mx = *std::max_element(row.begin(), row.end()), sum = 0;
      for (float x : row) sum += std::exp(static_cast<double>(x) - mx);
      lp[j + 1] = static_cast<double>(row[static_cast<std::size_t>(ids[j + 1])]) - mx - std::log(sum);
    }
  };
  struct Case {
    int window, stride, batch;
  };
  for (const Case& k : {Case{64, 32, 64}, Case{64, 64, 5}, Case{16, 16, 16}, Case{16, 16, 3}, Case{16, 5, 4},
                        Case{16, 5, 1}, Case{2, 1, 7}}) {
    CAPTURE(k.window, k.stride, k.batch);
    PerplexityOptions o;
    o.window = k.window, o.stride = k.stride, o.batch = k.batch;
    std::vector<double> want(ids.size(), NAN);
    std::vector<int> ctx_want(ids.size(), -1);
    std::size_t windows = 0, scored_to = 1;
    for (std::size_t s = 0;; s += static_cast<std::size_t>(k.stride)) {
      const std::size_t e = std::min(s + static_cast<std::size_t>(k.window), ids.size());
      const std::size_t from = std::max(scored_to, s + 1);
      reference(s, e, from, want);
      for (std::size_t p = from; p < e; ++p) ctx_want[p] = static_cast<int>(p - s);
      ++windows;
      scored_to = e;
      if (e == ids.size()) break;
    }
    std::vector<TokenScore> got;
    std::size_t last_progress = 0;
    auto r = perplexity(*m, ids, o, pool, [&](const TokenScore& t) { got.push_back(t); return Status{}; },
                        [&](std::size_t done) { last_progress = done; });
    REQUIRE(r.ok());
    CHECK(r->windows == windows);
    CHECK(r->scored == got.size());
    CHECK(last_progress == got.size());
    std::size_t expected = 0;
    for (double w : want) expected += !std::isnan(w);
    CHECK(got.size() == expected);
    if (k.stride < k.window) CHECK(got.size() == ids.size() - 1);  // overlapping windows: all but the first token
    double nll = 0;
    std::size_t prev = 0;
    for (const auto& t : got) {
      CHECK(t.pos > prev);  // in order, each once
      prev = t.pos;
      CHECK(t.id == ids[t.pos]);
      CHECK(t.context == ctx_want[t.pos]);
      CHECK(std::fabs(t.logprob - want[t.pos]) <= 1e-4);
      if (k.stride < k.window && t.pos >= static_cast<std::size_t>(k.window))
        CHECK(t.context >= k.window - k.stride);
      nll -= t.logprob;
    }
    CHECK(r->nll_sum == Approx(nll));
    CHECK(r->perplexity() == Approx(std::exp(nll / static_cast<double>(got.size()))));
  }
  // A random model predicts no better than chance, give or take: the vocabulary is 100.
  auto whole = perplexity(*m, ids, PerplexityOptions{}, pool);
  REQUIRE(whole.ok());
  CHECK(whole->perplexity() > 50);
  CHECK(whole->perplexity() < 200);
  // Errors.
  CHECK_FALSE(perplexity(*m, std::span<const TokenId>(ids).first(1), PerplexityOptions{}, pool).ok());
  PerplexityOptions bad;
  bad.window = 8, bad.stride = 9;
  CHECK_FALSE(perplexity(*m, ids, bad, pool).ok());
  bad.stride = 0;
  CHECK_FALSE(perplexity(*m, ids, bad, pool).ok());
  std::vector<TokenId> out_of_vocab = {1, 2, 100};
  auto oov = perplexity(*m, out_of_vocab, PerplexityOptions{}, pool);
  REQUIRE_FALSE(oov.ok());
  CHECK_THAT(oov.error().message, Catch::Contains("token 3 (id 100)"));
  // The callback's error stops the run.
  auto stopped = perplexity(*m, ids, PerplexityOptions{}, pool,
                            [](const TokenScore&) { return Status(make_error(Errc::io, "write error")); });
  REQUIRE_FALSE(stopped.ok());
  CHECK(stopped.error().message == "write error");
}
