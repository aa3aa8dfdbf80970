// Sampling benchmark (scripts/bench/sampling): the time of each strategy on one row of
// 32K, 128K and 256K logits, as a multiple of one plain softmax pass over the same row
// (maximum, exp and sum, normalize: the floor any sampler that needs probabilities pays).
// Each figure is the median of many repetitions; rows are "peaked" (a few tokens hold most
// of the mass, as in a trained model) and "flat" (normal logits, sd 1).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "lmpipe/core/rng.h"
#include "lmpipe/sample/sampler.h"

using namespace lmp;
using namespace lmp::sample;

namespace {
double median_us(const std::function<void()>& f, int reps) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
double normal(Rng& r) {  // Box-Muller
  double u = r.uniform(), v = r.uniform();
  return std::sqrt(-2 * std::log(1 - u)) * std::cos(6.283185307179586 * v);
}
volatile float sink;
}  // namespace

int main() {
  std::printf("| row | vocab | softmax µs | greedy | top-k 40 | top-p 0.9 | min-p 0.05 | llama.cpp defaults | full sort + top-p 0.9 |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const char* kind : {"peaked", "flat"}) {
    for (std::size_t V : {std::size_t{32000}, std::size_t{128256}, std::size_t{256000}}) {
      Rng r(V);
      std::vector<float> row(V), probs(V);
      for (auto& x : row) x = static_cast<float>(normal(r) * (kind[0] == 'p' ? 2.0 : 1.0));
      if (kind[0] == 'p')
        for (int k = 0; k < 20; ++k) row[static_cast<std::size_t>(r.next() % V)] += static_cast<float>(10 + 5 * r.uniform());
      const int reps = V > 100000 ? 300 : 1000;
      double soft = median_us([&] {
        float m = row[0];
        for (float x : row) m = std::max(m, x);
        float z = 0;
        for (std::size_t i = 0; i < V; ++i) z += (probs[i] = std::exp(row[i] - m));
        const float inv = 1 / z;
        for (float& p : probs) p *= inv;
        sink = probs[V / 2];
      }, reps);
      Candidates c;
      Rng rng(1);
      auto strategy = [&](Config cfg) {
        auto ch = Chain::make(cfg);
        return median_us([&] {
          (void)c.load(row.data(), V);
          sink = static_cast<float>(ch->sample(c, rng));
        }, reps) / soft;
      };
      Config g; g.temperature = 0;
      Config k; k.top_k = 40;
      Config p; p.top_p = 0.9f;
      Config mp; mp.min_p = 0.05f;
      Config ll; ll.order = "llama"; ll.top_k = 40; ll.top_p = 0.95f; ll.min_p = 0.05f; ll.temperature = 0.8f;
      double full = median_us([&] {
        (void)c.load(row.data(), V);
        c.sort();
        std::vector<float> pr;
        c.probabilities(pr);
        float cum = 0;
        std::size_t n = 0;
        while (n < pr.size() && cum < 0.9f) cum += pr[n++];
        sink = static_cast<float>(n);
      }, reps) / soft;
      std::printf("| %s | %zu | %.0f | %.2f× | %.2f× | %.2f× | %.2f× | %.2f× | %.2f× |\n", kind, V, soft, strategy(g), strategy(k),
                  strategy(p), strategy(mp), strategy(ll), full);
    }
  }
  return 0;
}
