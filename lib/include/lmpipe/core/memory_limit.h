// Process-wide memory accounting for --max-memory.
//
// Every heap block the program takes is reserved here first: the blocks of
// big_allocate(), and, in the tools, every operator new (tools/common/memory_guard.cpp
// replaces it). With a limit set, a reservation that would pass it is refused and the
// allocation throws std::bad_alloc, which the tool's boundary reports as "memory limit
// reached" (exit 1) instead of the kernel's OOM killer ending the process. Memory-mapped
// input files are not counted: the kernel pages them in and out on its own.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lmp::memory {

void set_limit(std::uint64_t bytes);  // 0: no limit (the default)
std::uint64_t limit();
std::uint64_t in_use();               // bytes reserved now
std::uint64_t peak();                 // the most ever reserved at once

// Reserve `bytes`; false (and nothing reserved) when the limit would be passed.
bool reserve(std::size_t bytes) noexcept;
void release(std::size_t bytes) noexcept;

// The last refused reservation: its size and what was in use then (0 when none).
struct Refusal {
  std::uint64_t asked = 0, in_use = 0;
};
Refusal last_refusal();

}  // namespace lmp::memory
