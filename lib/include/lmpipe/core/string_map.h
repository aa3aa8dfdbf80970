// StringIdMap: string → id, open addressing over views (the caller keeps the bytes
// alive). Vocabulary lookups are on every load and every cache miss; std::unordered_map
// with std::hash costs a third of loading a 128K-token vocabulary.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "lmpipe/core/big_alloc.h"

namespace lmp {

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
  std::uint64_t v = 0;
  std::memcpy(&v, p, n);
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
    if (slots_[i].id >= 0) return false;
    slots_[i] = Slot{prefix(key), key.data(), static_cast<std::uint32_t>(key.size()), id};
    ++size_;
    return true;
  }
  std::int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    return slots_[probe(key, hash_bytes(key.data(), key.size()))].id;
  }

 private:
  // The first 8 bytes live in the slot: most tokens are that short, so a lookup
  // touches one slot and never the key's own bytes (a second cache miss).
  struct Slot {
    std::uint64_t head = 0;  // first min(8, len) bytes, zero-padded
    const char* p = nullptr;
    std::uint32_t len = 0;
    std::int32_t id = -1;
  };
  static std::uint64_t prefix(std::string_view k) {
    std::uint64_t v = 0;
    std::memcpy(&v, k.data(), k.size() < 8 ? k.size() : 8);
    return v;
  }
  std::size_t probe(std::string_view key, std::uint64_t h) const {
    std::size_t mask = slots_.size() - 1;
    std::size_t i = static_cast<std::size_t>(h >> 7) & mask;
    std::uint64_t head = prefix(key);
    for (;;) {
      const Slot& s = slots_[i];
      if (s.id < 0) return i;
      if (s.head == head && s.len == key.size() &&
          (key.size() <= 8 || std::memcmp(s.p + 8, key.data() + 8, key.size() - 8) == 0))
        return i;
      i = (i + 1) & mask;
    }
  }
  void rehash(std::size_t cap) {
    big_vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    size_ = 0;
    for (const Slot& s : old)
      if (s.id >= 0) {
        std::string_view k(s.p, s.len);
        slots_[probe(k, hash_bytes(s.p, s.len))] = s;
        ++size_;
      }
  }
  big_vector<Slot> slots_;
  std::size_t size_ = 0;
};

}  // namespace lmp
