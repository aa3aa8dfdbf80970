#include "lmpipe/core/thread_pool.h"

#include <immintrin.h>

#include "lmpipe/core/cpu.h"

namespace lmp {

namespace {
// Waiting for another thread: a pause, or with more threads than processors, the
// processor handed over.
inline void relax(bool oversubscribed) {
  if (oversubscribed) std::this_thread::yield();
  else _mm_pause();
}
}  // namespace

ThreadPool::ThreadPool(int threads) : oversubscribed_(threads > cpu::processors()) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain(Job& j) {
  for (std::size_t i; (i = j.next.fetch_add(1)) < j.n;) {
    try {
      j.call(j.ctx, i);
    } catch (...) {
      if (!j.failed.exchange(true)) j.error = std::current_exception();
    }
    j.done.fetch_add(1);
  }
}

void ThreadPool::work() {
  std::uint64_t seen = 0;
  for (;;) {
    const int spins = oversubscribed_ ? 0 : 400000;
    for (int spin = 0; spin < spins && generation_.load() == seen; ++spin) _mm_pause();
    if (generation_.load() == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
    }
    seen = generation_.load();
    if (stop_) return;
    // Enter the job only while it is still the current one: run() clears it and then
    // waits for active_ to reach 0, so no worker touches a finished job.
    Job* j = job_.load();
    if (!j) continue;
    active_.fetch_add(1);
    if (job_.load() == j) drain(*j);
    active_.fetch_sub(1);
  }
}

void ThreadPool::run_erased(std::size_t n, Call call, void* ctx) {
  if (workers_.empty() || n <= 1) {
    for (std::size_t i = 0; i < n; ++i) call(ctx, i);
    return;
  }
  Job j;
  j.call = call;
  j.ctx = ctx;
  j.n = n;
  job_.store(&j);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  drain(j);
  while (j.done.load() < n) relax(oversubscribed_);
  job_.store(nullptr);
  while (active_.load() != 0) relax(oversubscribed_);
  if (j.failed.load()) std::rethrow_exception(j.error);
}

}  // namespace lmp
