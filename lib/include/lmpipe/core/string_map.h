// StringIdMap: string → id, open addressing over views (the caller keeps the bytes
// alive). Vocabulary lookups are on every load and every cache miss; std::unordered_map
// with std::hash costs a third of loading a 128K-token vocabulary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "lmpipe/core/big_alloc.h"
#include "lmpipe/core/parallel.h"

namespace lmp {

// The first min(n, 8) bytes at p as a little-endian integer, zero-padded: the value a
// memcpy of n bytes into a zeroed uint64 gives. Keys are a few bytes long and their
// lengths vary at random, so a branch on the length mispredicts every other key: 8 bytes
// are loaded at once and masked, unless they would cross into the next page (which may
// not be mapped), where only the key's own bytes are read (and none of an empty key's).
// The bytes past the key belong to something else: not read, as far as a sanitizer is
// concerned. (Measured on Llama-3's 560k merge tokens: hashing 8.9 -> 5.3 ms, lookups
// 13.5 -> 9.5 ms.)
#if defined(__GNUC__) || defined(__clang__)
#define LMP_NO_SANITIZE_OVERREAD __attribute__((no_sanitize("address", "thread")))
#else
#define LMP_NO_SANITIZE_OVERREAD
#endif
LMP_NO_SANITIZE_OVERREAD inline std::uint64_t load_upto8(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (n > 8) n = 8;
  if (n == 0) return 0;  // (p may be the end of a buffer, at the start of an unmapped page)
  if ((reinterpret_cast<std::uintptr_t>(p) & 4095) <= 4096 - 8) [[likely]] {
    const unsigned char* q = p;
#if defined(__GNUC__) || defined(__clang__)
    asm("" : "+r"(q));  // (the compiler no longer knows which object q points into: no bounds warning)
#endif
    std::uint64_t v;
    std::memcpy(&v, q, 8);
    static constexpr std::uint64_t kMask[9] = {0,
                                               0xFF,
                                               0xFFFF,
                                               0xFFFFFF,
                                               0xFFFFFFFF,
                                               0xFFFFFFFFFF,
                                               0xFFFFFFFFFFFF,
                                               0xFFFFFFFFFFFFFF,
                                               0xFFFFFFFFFFFFFFFF};
    return v & kMask[n];
  }
  if (n >= 4) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    return std::uint64_t{lo} | ((std::uint64_t{hi} >> (8 * (8 - n))) << 32);
  }
  std::uint64_t v = p[0];
  if (n >= 2) v |= std::uint64_t{p[1]} << 8;
  if (n == 3) v |= std::uint64_t{p[2]} << 16;
  return v;
}

inline std::uint64_t hash_bytes(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  constexpr std::uint64_t k = 0x9E3779B97F4A7C15ULL;
  std::uint64_t h = 0x2545F4914F6CDD1DULL ^ (n * k);
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ (v * k)) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  std::uint64_t v = load_upto8(p, n);
  h = (h ^ (v * k)) * 0x94D049BB133111EBULL;
  h ^= h >> 32;
  return h;
}

class StringIdMap {
 public:
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    if (cap > slots_.size()) rehash(cap);
  }
  std::size_t size() const { return size_; }
  // Insert; returns false (and changes nothing) if the key is present.
  bool insert(std::string_view key, std::int32_t id) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    std::uint64_t h = hash_bytes(key.data(), key.size());
    std::size_t i = probe(key, h);
    if (slots_[i].id1 != 0) return false;
    slots_[i] = Slot{prefix(key), key.data(), static_cast<std::uint32_t>(key.size()), static_cast<std::uint32_t>(id) + 1};
    ++size_;
    return true;
  }
  std::int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    return slots_[probe(key, hash_bytes(key.data(), key.size()))].id();
  }
  // find() with the key's hash_bytes already computed, and a prefetch of its first slot:
  // a batch of lookups that prefetches a few keys ahead waits for memory once, not per key.
  std::int32_t find(std::string_view key, std::uint64_t h) const {
    return slots_.empty() ? -1 : slots_[probe(key, h)].id();
  }
  void prefetch(std::uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[static_cast<std::size_t>(h >> 7) & (slots_.size() - 1)]);
  }

  // insert(keys[i], ids[i]) for i = 0, 1, ... in order, on `threads` threads; inserted[i]
  // says whether key i went in (0: an earlier key is equal). Each thread takes the keys
  // whose home slot lies in its share of the table, so that their probes stay there; a
  // probe that would leave the share goes in afterwards, in order. Lookups then answer as
  // after the sequential inserts. The keys' bytes must outlive the map, as for insert().
  void insert_all(const std::vector<std::string_view>& keys, const std::int32_t* ids,
                  std::vector<std::uint8_t>& inserted, int threads) {
    const std::size_t n = keys.size();
    reserve(size_ + n);
    inserted.assign(n, 0);
    std::vector<std::uint64_t> hashes(n);
    parallel_ranges(n, threads, [&](std::size_t b, std::size_t e, std::size_t) {
      for (std::size_t i = b; i < e; ++i) hashes[i] = hash_bytes(keys[i].data(), keys[i].size());
    });
    const std::size_t cap = slots_.size(), mask = cap - 1;
    const auto parts = static_cast<std::size_t>(threads < 1 ? 1 : threads);
    std::vector<std::vector<std::uint32_t>> spilled(parts);
    std::vector<std::size_t> placed(parts, 0);
    run_parallel(parts, [&](std::size_t part) {
      const std::size_t lo = cap * part / parts, hi = cap * (part + 1) / parts;
      slots_.prefault(lo, hi);
      // This share's keys first, in order and without a branch per key (a test per key
      // mispredicts every other time on two threads: it cost as much as the inserts).
      std::vector<std::uint32_t> mine(n);
      std::size_t m = 0;
      for (std::size_t i = 0; i < n; ++i) {
        std::size_t home = static_cast<std::size_t>(hashes[i] >> 7) & mask;
        mine[m] = static_cast<std::uint32_t>(i);
        m += home >= lo && home < hi;
      }
      constexpr std::size_t kAhead = 16;
      for (std::size_t q = 0; q < m; ++q) {
        if (q + kAhead < m) __builtin_prefetch(&slots_[static_cast<std::size_t>(hashes[mine[q + kAhead]] >> 7) & mask]);
        std::size_t i = mine[q];
        std::size_t j = static_cast<std::size_t>(hashes[i] >> 7) & mask;
        std::string_view key = keys[i];
        std::uint64_t head = prefix(key);
        for (;; ++j) {
          if (j == hi) {
            spilled[part].push_back(static_cast<std::uint32_t>(i));
            break;
          }
          Slot& s = slots_[j];
          if (s.id1 == 0) {
            s = Slot{head, key.data(), static_cast<std::uint32_t>(key.size()), static_cast<std::uint32_t>(ids[i]) + 1};
            inserted[i] = 1;
            ++placed[part];
            break;
          }
          if (s.head == head && s.len == key.size() && (key.size() <= 8 || same_tail(s.p, key))) break;
        }
      }
    });
    std::vector<std::uint32_t> rest;
    for (std::size_t p = 0; p < parts; ++p) {
      size_ += placed[p];
      rest.insert(rest.end(), spilled[p].begin(), spilled[p].end());
    }
    std::sort(rest.begin(), rest.end());
    for (std::uint32_t i : rest) inserted[i] = insert(keys[i], ids[i]) ? 1 : 0;
  }

 private:
  // The first 8 bytes live in the slot: most tokens are that short, so a lookup
  // touches one slot and never the key's own bytes (a second cache miss).
  // All zero bytes: an empty slot (a ZeroedArray starts empty without being written).
  struct Slot {
    std::uint64_t head;  // first min(8, len) bytes, zero-padded
    const char* p;
    std::uint32_t len;
    std::uint32_t id1;   // the id + 1; 0: empty
    std::int32_t id() const { return static_cast<std::int32_t>(id1) - 1; }
  };
  static std::uint64_t prefix(std::string_view k) { return load_upto8(k.data(), k.size()); }
  // Bytes 8.. of a stored key of key.size() (> 8) bytes at p equal key's: 8 at a time
  // inline (tokens are short; a call to memcmp cost more than the compare).
  static bool same_tail(const char* p, std::string_view key) {
    for (std::size_t i = 8, n = key.size(); i < n; i += 8) {
      std::size_t k = n - i < 8 ? n - i : 8;
      if (load_upto8(p + i, k) != load_upto8(key.data() + i, k)) return false;
    }
    return true;
  }
  std::size_t probe(std::string_view key, std::uint64_t h) const {
    std::size_t mask = slots_.size() - 1;
    std::size_t i = static_cast<std::size_t>(h >> 7) & mask;
    std::uint64_t head = prefix(key);
    for (;;) {
      const Slot& s = slots_[i];
      if (s.id1 == 0) return i;
      if (s.head == head && s.len == key.size() && (key.size() <= 8 || same_tail(s.p, key))) return i;
      i = (i + 1) & mask;
    }
  }
  void rehash(std::size_t cap) {
    ZeroedArray<Slot> old = std::move(slots_);
    slots_ = ZeroedArray<Slot>(cap);
    if (!old.empty()) slots_.prefault(0, cap);  // (an empty table: the threads of a bulk insert do it)
    size_ = 0;
    for (const Slot& s : old)
      if (s.id1 != 0) {
        std::string_view k(s.p, s.len);
        slots_[probe(k, hash_bytes(s.p, s.len))] = s;
        ++size_;
      }
  }
  ZeroedArray<Slot> slots_;
  std::size_t size_ = 0;
};

}  // namespace lmp
