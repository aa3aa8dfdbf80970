// The factories make_kv_cache calls: the paged cache, and the int4-kivi cache (either layout).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lmpipe/kv/kv_cache.h"

namespace lmp::kv {

// The block pool of the paged caches: blocks taken on demand (up to max_blocks),
// reference-counted, and back on a free list when nobody holds them. A block is n_parts
// parts of part_bytes (the paged cache: a part per layer's keys and per layer's values).
//
// The blocks live in chunks of consecutive ids, each chunk's storage part by part: part p
// of blocks b and b + 1 of a chunk lie next to each other. A sequence whose blocks are
// consecutive ids then keeps each layer's keys (and values) in one run of memory, which
// the attention reads as one stream, as in a contiguous cache: take(want) hands out the
// id a sequence asks for (the one after its last block) when it is free. Chunks grow
// with the pool, by half of what it holds (at least kMinChunkBlocks blocks, at most
// kMaxChunkBytes, never past max_blocks); their untouched pages cost no memory.
//
// Sequences that grow together would take the fresh blocks in turn, each of them a block
// apart from its next. So a block taken from the fresh ones starts a run: the blocks after
// it, kRunTokens tokens' worth, are set aside (spare) for the sequence that asks for them
// by `want`. A spare block is free: it is counted so, and it is handed to anyone once no
// other block is left, so the runs never cost a block of the budget.
class BlockPool {
 public:
  BlockPool(std::size_t part_bytes, int n_parts, std::int64_t max_blocks, int block_tokens)
      : part_bytes_(part_bytes), n_parts_(n_parts), max_blocks_(max_blocks), block_tokens_(block_tokens) {}
  // A block held once: `want` if it is free (-1: any); else a block freed before, else a
  // fresh one (starting a run), else a spare one; an error naming the budget when all
  // max_blocks are in use.
  Result<std::int32_t> take(std::int32_t want = -1);
  void hold(std::int32_t id) { ++ref_[static_cast<std::size_t>(id)]; }
  void drop(std::int32_t id) {
    if (--ref_[static_cast<std::size_t>(id)] == 0) {
      list(free_, id);
      --in_use_;
    }
  }
  // A block table's blocks (-1: none, as after eviction): one more holder each; or
  // entries from `keep` on let go of and erased, the last first (so that the free list
  // hands the first one out first, and its successors to whoever then asks for them).
  void hold_all(const std::vector<std::int32_t>& table) {
    for (std::int32_t id : table)
      if (id >= 0) hold(id);
  }
  void drop_from(std::vector<std::int32_t>& table, std::size_t keep) {
    for (std::size_t i = table.size(); i-- > keep;)
      if (table[i] >= 0) drop(table[i]);
    if (table.size() > keep) table.resize(keep);
  }
  int holders(std::int32_t id) const { return ref_[static_cast<std::size_t>(id)]; }
  std::byte* data(std::int32_t id, int part) const {
    const Slot& s = slot_[static_cast<std::size_t>(id)];
    return s.base + static_cast<std::size_t>(part) * s.stride;
  }
  void copy(std::int32_t to, std::int32_t from) const;  // every part of a block
  std::size_t block_bytes() const { return part_bytes_ * static_cast<std::size_t>(n_parts_); }
  std::int64_t taken() const { return static_cast<std::int64_t>(slot_.size()); }  // from the system
  std::int64_t free_blocks() const { return taken() - in_use_; }
  std::int64_t in_use() const { return in_use_; }
  std::int64_t shared() const;  // blocks with two holders or more

  static constexpr std::int64_t kMinChunkBlocks = 16;
  static constexpr int kRunTokens = 256;
  static constexpr std::size_t kMaxChunkBytes = std::size_t{1} << 30;

 private:
  struct Slot {
    std::byte* base;     // part 0 of the block
    std::size_t stride;  // from one part to the next: the chunk's blocks × part_bytes
  };
  Status grow();
  std::int32_t claim(std::int32_t id);
  // Free lists: `id` onto one, or off the one it is on (free_ or spare_).
  void list(std::vector<std::int32_t>& l, std::int32_t id);
  std::int32_t unlist(std::int32_t id);

  std::size_t part_bytes_;
  int n_parts_;
  std::int64_t max_blocks_;
  int block_tokens_;  // (for the error)
  std::vector<std::unique_ptr<std::byte[]>> chunks_;  // (n_parts, the chunk's blocks, part_bytes) each
  std::vector<Slot> slot_;                            // per block
  std::vector<int> ref_;                              // per block: its holders
  std::vector<std::int32_t> at_;                      // per block: its index in free_ or spare_, -1 when held
  std::vector<bool> spare_at_;                        // per block: on spare_ (not free_)
  std::vector<std::int32_t> free_;                    // blocks once used, now free
  std::vector<std::int32_t> spare_;                   // fresh blocks set aside for a run
  std::int32_t fresh_ = 0;                            // blocks from here on were never handed out
  std::int64_t in_use_ = 0;
};

// The number of blocks a budget allows (0 = max_seqs × n_ctx tokens' worth, plus a few per
// sequence), after `reserved` bytes held outside the pool; an error below one block.
Result<std::int64_t> pool_blocks(const KvConfig& cfg, std::uint64_t block_bytes, std::uint64_t reserved = 0);

Result<std::unique_ptr<KvCache>> make_paged_kv_cache(const KvConfig& cfg);
Result<std::unique_ptr<KvCache>> make_kivi_kv_cache(const KvConfig& cfg);

}  // namespace lmp::kv
