// Embedding::project, the one user of OpenBLAS in the embedding code, in a file of its own:
// a tool that never projects (generate runs its own kernels) then does not link OpenBLAS,
// whose idle threads would otherwise spin beside the decode threads at start-up.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "lmpipe/core/parallel.h"
#include "lmpipe/embed/embedding.h"

extern "C" void openblas_set_num_threads(int);  // OpenBLAS: threads of the next calls

namespace lmp::embed {

void Embedding::project(const float* hidden, float* logits, int threads) const {
  const auto n = static_cast<std::size_t>(n_embd_);
  if (dtype_ == DType::f32) {  // OpenBLAS threads the rows itself
    openblas_set_num_threads(std::max(threads, 1));
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n_vocab_), static_cast<blasint>(n), 1.0f,
                reinterpret_cast<const float*>(data_), static_cast<blasint>(n), hidden, 1, 0.0f, logits, 1);
    return;
  }
  openblas_set_num_threads(1);  // our threads split the rows; each converts one row at a time
  const auto rows = static_cast<std::size_t>(n_vocab_);
  const std::size_t t = rows < 1024 ? 1 : static_cast<std::size_t>(std::clamp(threads, 1, 64));
  run_parallel(t, [&](std::size_t i) {
    std::vector<float> buf(n);
    for (std::size_t r = rows * i / t; r < rows * (i + 1) / t; ++r) {
      row(static_cast<TokenId>(r), buf.data());
      logits[r] = cblas_sdot(static_cast<blasint>(n), buf.data(), 1, hidden, 1);
    }
  });
}

}  // namespace lmp::embed
