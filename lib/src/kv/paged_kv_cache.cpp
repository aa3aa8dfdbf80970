// PagedAttention's storage (Kwon et al., SOSP 2023): a pool of fixed-size blocks, each the
// keys and values of block_size consecutive tokens in every layer; a block table per
// sequence maps its logical block b (tokens b·bs .. b·bs + bs-1) to a block of the pool.
// Blocks are taken on demand from a free list, reference-counted (a fork shares all of
// its source's blocks) and copied before a write when shared (copy-on-write). Under
// eviction, a block whose tokens have all left goes back to the free list.
//
// The pool keeps a layer's keys of consecutive blocks next to each other (BlockPool), and
// a sequence asks for the block after its last: a sequence grown alone then reads each
// layer's keys and values as one run, as from the contiguous cache (blocks() joins them).
#include "paged_kv_cache.h"

#include <algorithm>
#include <cstring>

namespace lmp::kv {

namespace {

class PagedKvCache final : public KvCache {
 public:
  explicit PagedKvCache(const KvConfig& cfg, std::int64_t max_blocks)
      : KvCache(cfg),
        bs_(cfg.block_size),
        plane_(static_cast<std::size_t>(cfg.block_size) * fmt_.bytes),
        pool_(plane_, 2 * cfg.n_layer, max_blocks, cfg.block_size),
        seqs_(static_cast<std::size_t>(cfg.max_seqs)) {}

  Status append(int layer, SeqId seq, std::span<const float> k, std::span<const float> v) override {
    LMP_ASSIGN(const int i, begin_append(layer, seq));
    Seq& s = seqs_[static_cast<std::size_t>(seq)];
    const auto b = static_cast<std::size_t>(i / bs_);
    if (layer == 0) {  // the first layer of a token finds its slot
      // The block after the sequence's last, if free: its rows then continue the last's.
      const std::int32_t want = b > 0 && s.table[b - 1] >= 0 ? s.table[b - 1] + 1 : -1;
      if (b == s.table.size()) {
        LMP_ASSIGN(std::int32_t id, pool_.take(want));
        s.table.push_back(id);
      } else if (pool_.holders(s.table[b]) > 1) {  // shared: copy before writing
        LMP_ASSIGN(std::int32_t id, pool_.take(want));
        pool_.copy(id, s.table[b]);
        pool_.drop(s.table[b]);
        s.table[b] = id;
        ++copies_;
      }
    }
    const std::size_t r = static_cast<std::size_t>(i % bs_) * fmt_.bytes;
    store_row(fmt_, keys(s.table[b], layer) + r, k.data());
    store_row(fmt_, values(s.table[b], layer) + r, v.data());
    ++len_[static_cast<std::size_t>(seq)][static_cast<std::size_t>(layer)];
    if (layer + 1 == cfg_.n_layer) free_evicted(s, length(seq));
    return {};
  }

  void blocks(int layer, SeqId seq, std::vector<KvBlock>& out) const override {
    out.clear();
    const Seq& s = seqs_[static_cast<std::size_t>(seq)];
    const int len = len_[static_cast<std::size_t>(seq)][static_cast<std::size_t>(layer)];
    const LiveRanges lr = live_ranges(len);
    add_range(out, s, layer, 0, lr.s1, lr.evicted ? cfg_.n_ctx - 1 : -1);
    add_range(out, s, layer, lr.w0, len, -1);
  }

  Status truncate(SeqId seq, int n_keep) override {
    n_keep = std::max(n_keep, 0);
    LMP_ASSIGN(const bool cut, check_truncate(seq, n_keep));
    if (!cut) return {};
    Seq& s = seqs_[static_cast<std::size_t>(seq)];
    for (int& n : len_[static_cast<std::size_t>(seq)]) n = std::min(n, n_keep);
    const auto keep_blocks = static_cast<std::size_t>((n_keep + bs_ - 1) / bs_);
    pool_.drop_from(s.table, keep_blocks);
    return {};
  }

  Status fork(SeqId src, SeqId dst) override {
    if (src == dst) return check_seq(src);
    LMP_TRY(check_fork(src, dst));
    Seq& d = seqs_[static_cast<std::size_t>(dst)];
    d = seqs_[static_cast<std::size_t>(src)];
    len_[static_cast<std::size_t>(dst)] = len_[static_cast<std::size_t>(src)];
    pool_.hold_all(d.table);
    return {};
  }

  void release(SeqId seq) override {
    if (seq < 0 || seq >= cfg_.max_seqs) return;
    Seq& s = seqs_[static_cast<std::size_t>(seq)];
    pool_.drop_from(s.table, 0);
    s.freed_upto = 0;
    KvCache::release(seq);
  }

  KvStats stats() const override {
    KvStats st;
    // Used rows per pool block: the most any of its sequences has live in it (a shared
    // block counts once).
    std::vector<int> rows(static_cast<std::size_t>(pool_.taken()), 0);
    for (SeqId q = 0; q < cfg_.max_seqs; ++q) {
      st.tokens += live(q);
      const Seq& s = seqs_[static_cast<std::size_t>(q)];
      const int len = length(q);
      const LiveRanges lr = live_ranges(len);
      for (std::size_t b = 0; b < s.table.size(); ++b) {
        if (s.table[b] < 0) continue;
        const int b0 = static_cast<int>(b) * bs_, b1 = b0 + bs_;
        const int n = std::max(0, std::min(b1, lr.s1) - b0) + std::max(0, std::min(b1, len) - std::max(b0, lr.w0));
        int& r = rows[static_cast<std::size_t>(s.table[b])];
        r = std::max(r, n);
      }
    }
    std::uint64_t used_rows = 0;
    for (int r : rows) used_rows += static_cast<std::uint64_t>(r);
    st.used = used_rows * 2 * static_cast<std::uint64_t>(cfg_.n_layer) * fmt_.bytes;
    st.blocks_free = pool_.free_blocks();
    st.blocks_in_use = pool_.in_use();
    st.blocks_shared = pool_.shared();
    st.allocated = static_cast<std::uint64_t>(st.blocks_in_use) * pool_.block_bytes();
    st.reserved = static_cast<std::uint64_t>(pool_.taken()) * pool_.block_bytes();
    st.cow_copies = copies_;
    return st;
  }

  std::uint64_t bytes_held(SeqId seq) const override {
    if (seq < 0 || seq >= cfg_.max_seqs) return 0;
    const auto& t = seqs_[static_cast<std::size_t>(seq)].table;
    return static_cast<std::uint64_t>(std::count_if(t.begin(), t.end(), [](std::int32_t id) { return id >= 0; })) * pool_.block_bytes();
  }

 private:
  struct Seq {
    std::vector<std::int32_t> table;  // logical block → pool block, -1 once evicted
    int freed_upto = 0;               // logical blocks below this were checked for eviction
  };

  std::byte* keys(std::int32_t id, int layer) const { return pool_.data(id, 2 * layer); }
  std::byte* values(std::int32_t id, int layer) const { return pool_.data(id, 2 * layer + 1); }

  // Under eviction, the blocks whose tokens have all left (neither sinks nor in the window
  // of the last layer) go back to the pool.
  void free_evicted(Seq& s, int len) {
    const LiveRanges lr = live_ranges(len);
    if (!lr.evicted) return;
    const int first = (lr.s1 + bs_ - 1) / bs_;  // blocks before it hold sinks
    const int end = lr.w0 / bs_;                // blocks from it on hold window tokens
    for (int b = std::max(first, s.freed_upto); b < end; ++b) {
      std::int32_t& id = s.table[static_cast<std::size_t>(b)];
      if (id >= 0) pool_.drop(id);
      id = -1;
    }
    s.freed_upto = std::max(s.freed_upto, end);
  }

  // Tokens [lo, hi) as blocks; a block whose rows continue the previous one's in memory
  // (consecutive pool blocks of a chunk) lengthens it instead, so that the attention reads
  // the run in one pass.
  void add_range(std::vector<KvBlock>& out, const Seq& s, int layer, int lo, int hi, int q_pos) const {
    const std::size_t row = fmt_.bytes;
    for (int b = lo / bs_; lo < hi; ++b) {
      const int b0 = b * bs_, e = std::min(hi, b0 + bs_);
      const std::int32_t id = s.table[static_cast<std::size_t>(b)];
      const std::byte *k = keys(id, layer) + static_cast<std::size_t>(lo - b0) * row,
                      *v = values(id, layer) + static_cast<std::size_t>(lo - b0) * row;
      KvBlock* last = out.empty() ? nullptr : &out.back();
      if (last && last->q_pos == q_pos && last->k + static_cast<std::size_t>(last->end) * row == k &&
          last->v + static_cast<std::size_t>(last->end) * row == v) {
        last->end += e - lo;
      } else {
        out.push_back({k, v, 0, e - lo, q_pos});
      }
      lo = e;
    }
  }

  int bs_;
  std::size_t plane_;        // bytes of one block's K (or V) rows of one layer: (bs, row)
  BlockPool pool_;           // parts 2l and 2l + 1: layer l's keys and values, a plane each
  std::vector<Seq> seqs_;
  std::int64_t copies_ = 0;  // copy-on-write copies made
};

}  // namespace

Result<std::int32_t> BlockPool::take(std::int32_t want) {
  if (want >= 0 && want < fresh_ && ref_[static_cast<std::size_t>(want)] == 0) return claim(unlist(want));  // free or spare
  const bool next_fresh = want >= 0 && want == fresh_ && fresh_ < taken();  // the chunk's next block
  if (!next_fresh && !free_.empty()) return claim(unlist(free_.back()));
  if (fresh_ == taken()) {
    if (taken() >= max_blocks_ && !spare_.empty()) return claim(unlist(spare_.back()));
    LMP_TRY(grow());
  }
  // A fresh block, and the rest of its run (within its chunk) set aside.
  const std::int32_t id = fresh_++;
  const std::int64_t run = std::max(1, kRunTokens / block_tokens_);
  const auto end = static_cast<std::int32_t>(std::min<std::int64_t>(id + run, taken()));
  for (; fresh_ < end; ++fresh_) list(spare_, fresh_);
  return claim(id);
}

std::int32_t BlockPool::claim(std::int32_t id) {
  ref_[static_cast<std::size_t>(id)] = 1;
  ++in_use_;
  return id;
}

void BlockPool::list(std::vector<std::int32_t>& l, std::int32_t id) {
  at_[static_cast<std::size_t>(id)] = static_cast<std::int32_t>(l.size());
  spare_at_[static_cast<std::size_t>(id)] = &l == &spare_;
  l.push_back(id);
}

std::int32_t BlockPool::unlist(std::int32_t id) {
  std::vector<std::int32_t>& l = spare_at_[static_cast<std::size_t>(id)] ? spare_ : free_;
  const auto i = static_cast<std::size_t>(at_[static_cast<std::size_t>(id)]);
  l[i] = l.back();
  at_[static_cast<std::size_t>(l[i])] = static_cast<std::int32_t>(i);
  l.pop_back();
  at_[static_cast<std::size_t>(id)] = -1;
  return id;
}

Status BlockPool::grow() {
  const std::int64_t n0 = taken();
  if (n0 >= max_blocks_)
    return make_error(Errc::out_of_range,
                      "out of KV-cache memory: all {} blocks of {} tokens ({} bytes each) are in use; raise the budget "
                      "(--kv-memory) or shorten the sequences",
                      max_blocks_, block_tokens_, block_bytes());
  const auto most = static_cast<std::int64_t>(std::max<std::size_t>(1, kMaxChunkBytes / block_bytes()));
  const std::int64_t n = std::min({std::max(kMinChunkBlocks, n0 / 2), most, max_blocks_ - n0});
  const std::size_t stride = static_cast<std::size_t>(n) * part_bytes_;
  chunks_.push_back(std::make_unique_for_overwrite<std::byte[]>(stride * static_cast<std::size_t>(n_parts_)));
  std::byte* base = chunks_.back().get();
  for (std::int64_t i = 0; i < n; ++i) slot_.push_back({base + static_cast<std::size_t>(i) * part_bytes_, stride});
  ref_.resize(slot_.size(), 0);
  at_.resize(slot_.size(), -1);
  spare_at_.resize(slot_.size(), false);
  return {};
}

void BlockPool::copy(std::int32_t to, std::int32_t from) const {
  for (int p = 0; p < n_parts_; ++p) std::memcpy(data(to, p), data(from, p), part_bytes_);
}

std::int64_t BlockPool::shared() const {
  std::int64_t n = 0;
  for (int r : ref_) n += r > 1;
  return n;
}

Result<std::int64_t> pool_blocks(const KvConfig& cfg, std::uint64_t block_bytes, std::uint64_t reserved) {
  std::int64_t max_blocks;
  if (cfg.max_bytes) {
    max_blocks = cfg.max_bytes > reserved ? static_cast<std::int64_t>((cfg.max_bytes - reserved) / block_bytes) : 0;
    if (max_blocks == 0) {
      if (reserved)
        return make_error(Errc::out_of_range,
                          "KV cache: the budget of {} bytes is below one block ({} bytes) and the sequences' f32 windows "
                          "({} bytes)",
                          cfg.max_bytes, block_bytes, reserved);
      return make_error(Errc::out_of_range, "KV cache: the budget of {} bytes is below one block ({} bytes)", cfg.max_bytes,
                        block_bytes);
    }
  } else {
    max_blocks = static_cast<std::int64_t>(cfg.max_seqs) * ((cfg.n_ctx + cfg.block_size - 1) / cfg.block_size + 3);
  }
  return std::min<std::int64_t>(max_blocks, (std::int64_t{1} << 31) - 1);
}

Result<std::unique_ptr<KvCache>> make_paged_kv_cache(const KvConfig& cfg) {
  if (cfg.block_size <= 0) return make_error(Errc::invalid_argument, "KV cache: the block size must be positive, not {}", cfg.block_size);
  LMP_ASSIGN(std::int64_t max_blocks, pool_blocks(cfg, bytes_per_token(cfg) * static_cast<std::uint64_t>(cfg.block_size)));
  return std::unique_ptr<KvCache>(new PagedKvCache(cfg, max_blocks));
}

}  // namespace lmp::kv
