// Data parallelism over text: cut a chunk into per-thread slices at line ends, and
// run one function per slice on its own thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace lmp {

// Cut `text` into `parts` slices of about equal size, each ending at a line end (the
// last one at the end of `text`). Slices may be empty; together they are all of `text`.
inline std::vector<std::string_view> split_at_lines(std::string_view text, int parts, char delim = '\n') {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  auto n = static_cast<std::size_t>(parts < 1 ? 1 : parts);
  for (std::size_t k = 0; k < n; ++k) {
    std::size_t target = text.size() * (k + 1) / n;
    std::size_t end = text.size();
    if (target < text.size()) {
      std::size_t nl = text.find(delim, target > start ? target : start);
      if (nl != std::string_view::npos) end = nl + 1;
    }
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}

// Call f(i) for i in [0, n): f(0) on the calling thread, the others on new threads. The
// first exception any call throws is rethrown once every thread has ended.
template <class F>
void run_parallel(std::size_t n, F&& f) {
  std::vector<std::exception_ptr> errors(n);
  auto guarded = [&f, &errors](std::size_t i) {
    try {
      f(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t i = 1; i < n; ++i) pool.emplace_back(guarded, i);
  if (n > 0) guarded(0);
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Call f(begin, end, part) for `parts` ranges that cut [0, n) into about equal pieces,
// each on its own thread (the first on the calling thread), as run_parallel does.
template <class F>
void parallel_ranges(std::size_t n, int parts, F&& f) {
  auto k = static_cast<std::size_t>(parts < 1 ? 1 : parts);
  run_parallel(k, [&](std::size_t p) { f(n * p / k, n * (p + 1) / k, p); });
}

// Items processed on `threads` workers, their outputs emitted in item order as soon as
// they are ready, through at most `window` buffers that are reused: a stream of any
// length runs in bounded memory and the first output leaves early.
//   take(worker, k) -> bool   item k's input for this worker (items come in order);
//                             false: no more items
//   work(worker, k, out)      item k's output into `out` (empty on entry)
//   emit(k, out) -> bool      write item k's output; false stops every worker
// take and emit run under one lock (emit by whichever worker completes the next item);
// work runs unlocked. The first exception any of them throws is rethrown once every
// worker has stopped.
template <class Take, class Work, class Emit>
void run_ordered(int threads, std::size_t window, Take&& take, Work&& work, Emit&& emit) {
  const auto n_workers = static_cast<std::size_t>(threads < 1 ? 1 : threads);
  if (window < n_workers) window = n_workers;
  std::mutex mu;
  std::condition_variable room;          // a slot of the window is free again
  std::vector<std::string> ring(window);  // item k's output waits in ring[k % window]
  std::vector<bool> ready(window, false);
  std::size_t next = 0, written = 0;      // items taken, items emitted
  bool stop = false, exhausted = false;
  std::exception_ptr error;
  auto fail = [&] {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) error = std::current_exception();
    stop = true;
    room.notify_all();
  };
  run_parallel(n_workers, [&](std::size_t w) {
    std::string out;
    for (;;) {
      std::size_t k;
      try {
        std::unique_lock<std::mutex> lock(mu);
        room.wait(lock, [&] { return stop || exhausted || next < written + window; });
        if (stop || exhausted) return;
        if (!take(w, next)) {
          exhausted = true;
          room.notify_all();
          return;
        }
        k = next++;
      } catch (...) {
        fail();
        return;
      }
      try {
        out.clear();
        work(w, k, out);
        std::lock_guard<std::mutex> lock(mu);
        if (stop) return;
        std::size_t slot = k % window;
        ring[slot].swap(out);  // (out takes back an emitted buffer, to reuse)
        ready[slot] = true;
        while (!stop && ready[written % window]) {
          std::size_t s = written % window;
          if (!emit(written, ring[s])) stop = true;
          ring[s].clear();
          ready[s] = false;
          ++written;
        }
        room.notify_all();
      } catch (...) {
        fail();
        return;
      }
    }
  });
  if (error) std::rethrow_exception(error);
}

}  // namespace lmp
