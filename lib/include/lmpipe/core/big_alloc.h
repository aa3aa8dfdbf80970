// BigAllocator: a std::allocator for large, long-lived tables (JSON nodes, vocabulary
// indexes, merge tables). Blocks of 2 MiB or more come from mmap, aligned to 2 MiB and
// marked MADV_HUGEPAGE, so that the kernel can back them with huge pages: the ~50 MB of
// tables behind a Llama-3 tokenizer then fault in a few dozen huge pages instead of
// ~12,000 small ones (a fifth of its load time). Smaller blocks use operator new.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace lmp {

inline constexpr std::size_t kHugePage = std::size_t{2} << 20;

// Raw blocks: big_allocate throws std::bad_alloc on failure; big_free takes the same size.
void* big_allocate(std::size_t bytes);
void big_free(void* p, std::size_t bytes) noexcept;

template <class T>
struct BigAllocator {
  using value_type = T;
  BigAllocator() = default;
  template <class U>
  BigAllocator(const BigAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_alloc();
    std::size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return static_cast<T*>(::operator new(bytes, std::align_val_t{alignof(T)}));
    return static_cast<T*>(big_allocate(bytes));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    std::size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) ::operator delete(p, std::align_val_t{alignof(T)});
    else big_free(p, bytes);
  }
  template <class U>
  bool operator==(const BigAllocator<U>&) const noexcept { return true; }
};

template <class T>
using big_vector = std::vector<T, BigAllocator<T>>;

}  // namespace lmp
