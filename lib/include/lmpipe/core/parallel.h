// Data parallelism over text: cut a chunk into per-thread slices at line ends, and
// run one function per slice on its own thread.
#pragma once

#include <exception>
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

}  // namespace lmp
