// The tools' operator new and delete: every heap block is reserved with lmp::memory
// (lmpipe/core/memory_limit.h) before it is taken, so that --max-memory can refuse it.
// Blocks are counted by their usable size, which delete can read back without being
// told the size.
#include <malloc.h>

#include <cstdlib>
#include <new>

#include "common/cli.h"
#include "lmpipe/core/memory_limit.h"

namespace {

void* take(std::size_t n, std::size_t align) {
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else if (::posix_memalign(&p, align, n) != 0) {
    p = nullptr;
  }
  if (p == nullptr) return nullptr;
  if (!lmp::memory::reserve(::malloc_usable_size(p))) {
    std::free(p);
    return nullptr;
  }
  return p;
}

void give(void* p) noexcept {
  if (p == nullptr) return;
  lmp::memory::release(::malloc_usable_size(p));
  std::free(p);
}

void* take_or_throw(std::size_t n, std::size_t align) {
  void* p = take(n, align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

namespace lmp::cli {
// Referenced by run_tool, so that the linker keeps this file (and its operators).
bool memory_guard_linked() { return true; }
}  // namespace lmp::cli

void* operator new(std::size_t n) { return take_or_throw(n, 0); }
void* operator new[](std::size_t n) { return take_or_throw(n, 0); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return take(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return take(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return take_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return take_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return take(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return take(n, static_cast<std::size_t>(a));
}

void operator delete(void* p) noexcept { give(p); }
void operator delete[](void* p) noexcept { give(p); }
void operator delete(void* p, std::size_t) noexcept { give(p); }
void operator delete[](void* p, std::size_t) noexcept { give(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { give(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { give(p); }
void operator delete(void* p, std::align_val_t) noexcept { give(p); }
void operator delete[](void* p, std::align_val_t) noexcept { give(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { give(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { give(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { give(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { give(p); }
