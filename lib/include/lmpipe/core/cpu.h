// What the CPU (and the OS, which must save the wider registers) supports, read once
// with CPUID and XGETBV. The kernels pick their AVX2 / AVX-512 paths from these.
#pragma once

namespace lmp::cpu {

// AVX2 with FMA and F16C: every AVX2 kernel assumes all three.
bool avx2();
// AVX-512 F and VL (with avx2()).
bool avx512();
// AVX-512 VNNI, BW and VL (with avx512()): int8 dot products.
bool avx512_vnni();
// AVX-512 VBMI (with avx512_vnni()): byte permutes across a 512-bit register.
bool avx512_vbmi();
// The CPU runs 512-bit instructions as two 256-bit halves (AMD family 19h: Zen 4). There
// the decode step's streaming dot products read memory faster from 256-bit registers
// (measured: docs/benchmarks.md, "Generation on AMD Zen 4"), so they take the AVX2 path.
bool avx512_halves();
// The processors this process may run on (its affinity mask), at least 1.
int processors();

}  // namespace lmp::cpu
