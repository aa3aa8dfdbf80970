#include "lmpipe/core/memory_limit.h"

#include <atomic>

namespace lmp::memory {

namespace {
std::atomic<std::uint64_t> g_limit{0}, g_in_use{0}, g_peak{0}, g_refused_asked{0}, g_refused_in_use{0};
}  // namespace

void set_limit(std::uint64_t bytes) { g_limit.store(bytes, std::memory_order_relaxed); }
std::uint64_t limit() { return g_limit.load(std::memory_order_relaxed); }
std::uint64_t in_use() { return g_in_use.load(std::memory_order_relaxed); }
std::uint64_t peak() { return g_peak.load(std::memory_order_relaxed); }

bool reserve(std::size_t bytes) noexcept {
  const std::uint64_t now = g_in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  const std::uint64_t lim = g_limit.load(std::memory_order_relaxed);
  if (lim != 0 && now > lim) {
    g_in_use.fetch_sub(bytes, std::memory_order_relaxed);
    g_refused_asked.store(bytes, std::memory_order_relaxed);
    g_refused_in_use.store(now - bytes, std::memory_order_relaxed);
    return false;
  }
  std::uint64_t p = g_peak.load(std::memory_order_relaxed);
  while (now > p && !g_peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
  return true;
}

void release(std::size_t bytes) noexcept { g_in_use.fetch_sub(bytes, std::memory_order_relaxed); }

Refusal last_refusal() {
  return {g_refused_asked.load(std::memory_order_relaxed), g_refused_in_use.load(std::memory_order_relaxed)};
}

}  // namespace lmp::memory
