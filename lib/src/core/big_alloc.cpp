#include "lmpipe/core/big_alloc.h"

#include <sys/mman.h>

#include <cstdint>

#include "lmpipe/core/memory_limit.h"

namespace lmp {

namespace {
std::size_t round_up(std::size_t n) { return (n + kHugePage - 1) & ~(kHugePage - 1); }
}  // namespace

void* big_allocate(std::size_t bytes) {
  std::size_t len = round_up(bytes);
  if (len < bytes || !memory::reserve(len)) throw std::bad_alloc();
  // Map one huge page more than needed, then trim to a 2 MiB-aligned block.
  void* raw = ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    memory::release(len);
    throw std::bad_alloc();
  }
  auto base = reinterpret_cast<std::uintptr_t>(raw);
  std::uintptr_t aligned = (base + kHugePage - 1) & ~(std::uintptr_t{kHugePage} - 1);
  if (aligned > base) ::munmap(raw, aligned - base);
  std::size_t tail = (base + len + kHugePage) - (aligned + len);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + len), tail);
  // Advice only: without transparent huge pages the block works the same.
  ::madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void big_free(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  ::munmap(p, round_up(bytes));
  memory::release(round_up(bytes));
}

}  // namespace lmp
