// The factories make_kv_cache calls: the paged cache, and the int4-kivi cache (either layout).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lmpipe/kv/kv_cache.h"

namespace lmp::kv {

// The block pool of the paged caches: blocks of block_bytes taken on demand (up to
// max_blocks), reference-counted, and back on a free list when nobody holds them.
class BlockPool {
 public:
  BlockPool(std::size_t block_bytes, std::int64_t max_blocks, int block_tokens)
      : block_bytes_(block_bytes), max_blocks_(max_blocks), block_tokens_(block_tokens) {}
  // A block held once; an error naming the budget when all max_blocks are in use.
  Result<std::int32_t> take();
  void hold(std::int32_t id) { ++ref_[static_cast<std::size_t>(id)]; }
  void drop(std::int32_t id) {
    if (--ref_[static_cast<std::size_t>(id)] == 0) free_.push_back(id);
  }
  // A block table's blocks (-1: none, as after eviction): one more holder each; or
  // entries from `keep` on let go of and erased.
  void hold_all(const std::vector<std::int32_t>& table) {
    for (std::int32_t id : table)
      if (id >= 0) hold(id);
  }
  void drop_from(std::vector<std::int32_t>& table, std::size_t keep) {
    for (std::size_t i = keep; i < table.size(); ++i)
      if (table[i] >= 0) drop(table[i]);
    if (table.size() > keep) table.resize(keep);
  }
  int holders(std::int32_t id) const { return ref_[static_cast<std::size_t>(id)]; }
  std::byte* data(std::int32_t id) const { return storage_[static_cast<std::size_t>(id)].get(); }
  std::size_t block_bytes() const { return block_bytes_; }
  std::int64_t taken() const { return static_cast<std::int64_t>(storage_.size()); }  // from the system
  std::int64_t free_blocks() const { return static_cast<std::int64_t>(free_.size()); }
  std::int64_t in_use() const { return taken() - free_blocks(); }
  std::int64_t shared() const;  // blocks with two holders or more

 private:
  std::size_t block_bytes_;
  std::int64_t max_blocks_;
  int block_tokens_;  // (for the error)
  std::vector<std::unique_ptr<std::byte[]>> storage_;  // grown on demand
  std::vector<int> ref_;                               // per block: its holders
  std::vector<std::int32_t> free_;
};

// The number of blocks a budget allows (0 = max_seqs × n_ctx tokens' worth, plus a few per
// sequence), after `reserved` bytes held outside the pool; an error below one block.
Result<std::int64_t> pool_blocks(const KvConfig& cfg, std::uint64_t block_bytes, std::uint64_t reserved = 0);

Result<std::unique_ptr<KvCache>> make_paged_kv_cache(const KvConfig& cfg);
Result<std::unique_ptr<KvCache>> make_kivi_kv_cache(const KvConfig& cfg);

}  // namespace lmp::kv
