#include "lmpipe/core/cpu.h"

#include <cpuid.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <thread>

namespace lmp::cpu {

namespace {

struct Features {
  bool avx2 = false, avx512 = false, vnni = false, vbmi = false, halves = false;
};

std::uint64_t xgetbv0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

Features detect() {
  Features f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  const std::uint64_t xcr0 = xgetbv0();
  if ((xcr0 & 0x6) != 0x6) return f;  // the OS saves XMM and YMM state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
  const bool vnni = c & (1u << 11), vbmi = c & (1u << 1);
  f.avx2 = avx2 && fma && f16c;
  const bool zmm_state = (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  f.avx512 = f.avx2 && zmm_state && avx512f && avx512vl;
  f.vnni = f.avx512 && avx512bw && vnni;
  f.vbmi = f.vnni && vbmi;
  // Vendor "AuthenticAMD" (in EBX, EDX, ECX of leaf 0), family 19h (base 0xF + extended 0xA).
  unsigned top = 0, v0 = 0, v1 = 0, v2 = 0;
  if (f.avx512 && __get_cpuid(0, &top, &v0, &v2, &v1) && v0 == 0x68747541u && v1 == 0x69746e65u && v2 == 0x444d4163u &&
      __get_cpuid(1, &a, &b, &c, &d)) {
    const unsigned family = ((a >> 8) & 0xFu) + ((a >> 20) & 0xFFu);
    f.halves = family == 0x19;
  }
  return f;
}

const Features& features() {
  static const Features f = detect();
  return f;
}

}  // namespace

bool avx2() { return features().avx2; }
bool avx512() { return features().avx512; }
bool avx512_vnni() { return features().vnni; }
bool avx512_vbmi() { return features().vbmi; }
bool avx512_halves() { return features().halves; }

int processors() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace lmp::cpu
