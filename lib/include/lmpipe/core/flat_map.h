// FlatMap64: an open-addressing hash map from 64-bit keys to small values, for the
// hot lookups of BPE (pair → merge) where std::unordered_map's node chasing costs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "lmpipe/core/big_alloc.h"
#include "lmpipe/core/parallel.h"

namespace lmp {

template <class V>
class FlatMap64 {
 public:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};

  FlatMap64() { rehash(16); }
  std::size_t size() const { return size_; }
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    if (cap > keys_.size()) rehash(cap);
  }
  // Insert or overwrite. kEmpty is not a valid key.
  void set(std::uint64_t key, const V& v) {
    if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.size() * 2);
    std::size_t i = slot(key);
    if (keys_[i] == kEmpty) {
      keys_[i] = key;
      ++size_;
    }
    vals_[i] = v;
  }
  const V* find(std::uint64_t key) const {
    std::size_t i = slot(key);
    return keys_[i] == kEmpty ? nullptr : &vals_[i];
  }
  V* find(std::uint64_t key) {
    std::size_t i = slot(key);
    return keys_[i] == kEmpty ? nullptr : &vals_[i];
  }
  // Value for key, default-inserted if absent.
  V& operator[](std::uint64_t key) {
    if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.size() * 2);
    std::size_t i = slot(key);
    if (keys_[i] == kEmpty) {
      keys_[i] = key;
      vals_[i] = V{};
      ++size_;
    }
    return vals_[i];
  }
  void clear() {
    keys_.assign(16, kEmpty);
    vals_.clear();
    vals_.resize(16);
    size_ = 0;
  }
  template <class F>
  void for_each(F&& f) {
    for (std::size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] != kEmpty) f(keys_[i], vals_[i]);
  }
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] != kEmpty) f(keys_[i], vals_[i]);
  }

  static std::uint64_t hash(std::uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
  }

 private:
  std::size_t slot(std::uint64_t key) const {
    std::size_t mask = keys_.size() - 1;
    std::size_t i = static_cast<std::size_t>(hash(key)) & mask;
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask;
    return i;
  }
  void rehash(std::size_t cap) {
    std::vector<std::uint64_t> ok = std::move(keys_);
    std::vector<V> ov = std::move(vals_);
    keys_.assign(cap, kEmpty);
    vals_.clear();
    vals_.resize(cap);
    size_ = 0;
    for (std::size_t i = 0; i < ok.size(); ++i)
      if (ok[i] != kEmpty) {
        std::size_t j = slot(ok[i]);
        keys_[j] = ok[i];
        vals_[j] = std::move(ov[i]);
        ++size_;
      }
  }
  std::vector<std::uint64_t> keys_;
  std::vector<V> vals_;
  std::size_t size_ = 0;
};

// InlineMap64: the same map with each key stored beside its (small) value, so that a
// lookup touches one cache line, not two. For read-mostly tables probed at random,
// such as BPE's merge table of 280k pairs (Llama-3) during encoding.
template <class V>
class InlineMap64 {
 public:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};

  InlineMap64() { rehash(16); }
  std::size_t size() const { return size_; }
  // Room for n keys at a load factor of at most 2/3.
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap * 2 < n * 3) cap <<= 1;
    if (cap > e_.size()) rehash(cap);
  }
  // Insert or overwrite. kEmpty is not a valid key.
  void set(std::uint64_t key, const V& v) {
    if ((size_ + 1) * 3 > e_.size() * 2) rehash(e_.size() * 2);
    Entry& e = e_[slot(key)];
    if (e.nkey == 0) {
      e.nkey = ~key;
      ++size_;
    }
    e.val = v;
  }
  const V* find(std::uint64_t key) const {
    const Entry& e = e_[slot(key)];
    return e.nkey == 0 ? nullptr : &e.val;
  }
  // set(keys[i], vals[i]) for i = 0, 1, ... in order (a later value overwrites), on
  // `threads` threads, each owning a share of the slots; a probe that would leave its
  // share is set afterwards, in order (see StringIdMap::insert_all). kEmpty is no key.
  void set_all(const std::uint64_t* keys, const V* vals, std::size_t n, int threads) {
    reserve(size_ + n);
    const std::size_t cap = e_.size(), mask = cap - 1;
    const auto parts = static_cast<std::size_t>(threads < 1 ? 1 : threads);
    std::vector<std::vector<std::uint32_t>> spilled(parts);
    std::vector<std::size_t> added(parts, 0);
    std::vector<std::uint32_t> home(n);
    parallel_ranges(n, threads, [&](std::size_t b, std::size_t e, std::size_t) {
      for (std::size_t i = b; i < e; ++i) home[i] = static_cast<std::uint32_t>(FlatMap64<V>::hash(keys[i]) & mask);
    });
    run_parallel(parts, [&](std::size_t part) {
      const std::size_t lo = cap * part / parts, hi = cap * (part + 1) / parts;
      e_.prefault(lo, hi);
      // This share's keys first, in order and branch-free (see StringIdMap::insert_all).
      std::vector<std::uint32_t> mine(n);
      std::size_t m = 0;
      for (std::size_t i = 0; i < n; ++i) {
        mine[m] = static_cast<std::uint32_t>(i);
        m += home[i] >= lo && home[i] < hi;
      }
      constexpr std::size_t kAhead = 16;
      for (std::size_t q = 0; q < m; ++q) {
        if (q + kAhead < m) __builtin_prefetch(&e_[home[mine[q + kAhead]]]);
        std::size_t i = mine[q];
        for (std::size_t j = home[i];; ++j) {
          if (j == hi) {
            spilled[part].push_back(static_cast<std::uint32_t>(i));
            break;
          }
          Entry& e = e_[j];
          if (e.nkey == 0) {
            e.nkey = ~keys[i];
            ++added[part];
          }
          if (e.nkey == ~keys[i]) {
            e.val = vals[i];
            break;
          }
        }
      }
    });
    std::vector<std::uint32_t> rest;
    for (std::size_t p = 0; p < parts; ++p) {
      size_ += added[p];
      rest.insert(rest.end(), spilled[p].begin(), spilled[p].end());
    }
    std::sort(rest.begin(), rest.end());
    for (std::uint32_t i : rest) set(keys[i], vals[i]);
  }

 private:
  // The key is stored complemented, so that an entry of zero bytes is empty (kEmpty is
  // no key) and a ZeroedArray starts empty without being written.
  struct Entry {
    std::uint64_t nkey;  // ~key; 0: empty
    V val;
  };
  std::size_t slot(std::uint64_t key) const {
    std::size_t mask = e_.size() - 1;
    std::size_t i = static_cast<std::size_t>(FlatMap64<V>::hash(key)) & mask;
    while (e_[i].nkey != 0 && e_[i].nkey != ~key) i = (i + 1) & mask;
    return i;
  }
  void rehash(std::size_t cap) {
    ZeroedArray<Entry> old = std::move(e_);
    e_ = ZeroedArray<Entry>(cap);
    if (!old.empty()) e_.prefault(0, cap);  // (an empty table: the threads of a bulk insert do it)
    size_ = 0;
    for (const Entry& o : old)
      if (o.nkey != 0) {
        e_[slot(~o.nkey)] = o;
        ++size_;
      }
  }
  ZeroedArray<Entry> e_;
  std::size_t size_ = 0;
};

inline std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

}  // namespace lmp
