// A persistent pool of worker threads for the decode loop: run(n, f) calls f(i) for i in
// [0, n) on the pool and the calling thread, and returns when all are done. Workers spin
// briefly for the next job (a decode step dispatches hundreds of small jobs per token),
// then sleep. No allocation per job. With more threads than the processors this process
// may run on, spinning would take the processors from the threads with work (a 260K-
// parameter model: 74 tok/s on 64 threads of 2 processors, against 22,000 on 1), so then
// workers sleep at once and waits yield.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace lmp {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads in all, the caller included (>= 1)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // f(i) for i in [0, n), spread over the threads; blocks until every call returned.
  // Takes any callable by reference: nothing is allocated per call. An exception thrown
  // by a call (std::bad_alloc under --max-memory) is rethrown here once all have ended.
  template <class F>
  void run(std::size_t n, F&& f) {
    run_erased(n, [](void* ctx, std::size_t i) { (*static_cast<std::remove_reference_t<F>*>(ctx))(i); },
               const_cast<void*>(static_cast<const void*>(&f)));
  }

 private:
  using Call = void (*)(void*, std::size_t);
  void run_erased(std::size_t n, Call call, void* ctx);
  struct Job {
    Call call;
    void* ctx;
    std::size_t n;
    std::atomic<std::size_t> next{0}, done{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;  // the first exception, set by the call that made `failed` true
  };
  void work();
  static void drain(Job& j);
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<Job*> job_{nullptr};    // the job being run, or null
  std::atomic<int> active_{0};        // workers inside a job
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  bool oversubscribed_ = false;  // more threads than processors: no spinning
};

}  // namespace lmp
