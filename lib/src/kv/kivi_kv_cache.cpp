// The int4-kivi cache (KIVI, Liu et al., ICML 2024): keys are quantized per channel, values
// per token. Keys have channels of very different sizes (and outlier channels), which a
// per-token scale spreads over the whole row; a per-channel scale fits each channel, but
// needs the channel's values over several tokens: the keys and values of a group of
// tokens wait in f32 (the full-precision window of the most recent tokens) until the group
// is complete; then the keys are quantized one scale per channel, the values per token
// (int4 rows, as in the int4 cache).
//
// Two layouts. Contiguous: groups of kGroup tokens (KIVI's G = 32) in rows reserved up
// front. Paged: the group is the block (--kv-block): a pool block holds a sealed group of
// every layer, shared between forked sequences and never written again (no copy-on-write:
// the tokens being added go to the sequence's own window); the window is per sequence.
#include "paged_kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lmpipe/tensor_io/dtype.h"

namespace lmp::kv {

namespace {

constexpr int kGroup = 32;  // tokens per key group of the contiguous layout (KIVI's G)

// The row formats of both layouts: sealed keys (unscaled int4), sealed values (int4
// rows), and the window (f32 rows).
struct KiviFormats {
  RowFormat kfmt, vfmt, wfmt;
  explicit KiviFormats(const KvConfig& cfg)
      : kfmt(RowFormat::unscaled_int4(cfg.kv_dim, cfg.head_dim)),
        vfmt(RowFormat::make(cfg.type, cfg.kv_dim, cfg.head_dim)),  // (the cache's format(): int4 rows)
        wfmt(RowFormat::make(KvType::f32, cfg.kv_dim, cfg.head_dim)) {}

  // The window's n tokens (kw, vw: n rows of kv_dim floats) become a sealed group: keys
  // per channel (d = max|x| / 7 over the group, f16, into ks: kv_dim of them) into kq (n
  // rows), values per token into v (n rows).
  void seal(int n, const float* kw, const float* vw, std::byte* kq, std::uint16_t* ks, std::byte* v) const {
    const auto kvd = static_cast<std::size_t>(kfmt.kv_dim);
    std::vector<float> inv(kvd);
    for (std::size_t c = 0; c < kvd; ++c) {
      float amax = 0;
      for (int t = 0; t < n; ++t) amax = std::max(amax, std::fabs(kw[static_cast<std::size_t>(t) * kvd + c]));
      const std::uint16_t dh = f32_to_f16(amax / 7.0f);
      ks[c] = dh;
      const float d = f16_to_f32(dh);
      inv[c] = d > 0 ? 1.0f / d : 0.0f;
    }
    for (int t = 0; t < n; ++t) {
      const auto tt = static_cast<std::size_t>(t);
      store_row_unscaled(kfmt, kq + tt * kfmt.bytes, kw + tt * kvd, inv.data());
      store_row(vfmt, v + tt * vfmt.bytes, vw + tt * kvd);
    }
  }

  // The first r tokens of a sealed group back into window rows, dequantized.
  void unseal(int r, const std::byte* kq, const std::uint16_t* ks, const std::byte* v, float* kw, float* vw) const {
    const auto kvd = static_cast<std::size_t>(kfmt.kv_dim);
    for (int t = 0; t < r; ++t) {
      const auto tt = static_cast<std::size_t>(t);
      float* key = kw + tt * kvd;
      load_row(kfmt, key, kq + tt * kfmt.bytes);
      for (std::size_t c = 0; c < kvd; ++c) key[c] *= f16_to_f32(ks[c]);
      load_row(vfmt, vw + tt * kvd, v + tt * vfmt.bytes);
    }
  }
};

class KiviKvCache final : public KvCache {
 public:
  explicit KiviKvCache(const KvConfig& cfg)
      : KvCache(cfg),
        f_(cfg),
        groups_((cfg.n_ctx + kGroup - 1) / kGroup),
        lanes_(static_cast<std::size_t>(cfg.max_seqs) * static_cast<std::size_t>(cfg.n_layer)) {
    const auto kvd = static_cast<std::size_t>(cfg.kv_dim), ctx = static_cast<std::size_t>(groups_) * kGroup;
    for (Lane& l : lanes_) {
      l.kq.resize(ctx * f_.kfmt.bytes);
      l.ks.resize(static_cast<std::size_t>(groups_) * kvd);
      l.kw.resize(kGroup * kvd);
      l.vw.resize(kGroup * kvd);
      l.v.resize(ctx * fmt_.bytes);
    }
  }

  Status append(int layer, SeqId seq, std::span<const float> k, std::span<const float> v) override {
    LMP_ASSIGN(const int i, begin_append(layer, seq));
    Lane& l = lane(seq, layer);
    const std::size_t slot = static_cast<std::size_t>(i % kGroup) * static_cast<std::size_t>(cfg_.kv_dim);
    std::memcpy(l.kw.data() + slot, k.data(), k.size_bytes());
    std::memcpy(l.vw.data() + slot, v.data(), v.size_bytes());
    if (i % kGroup == kGroup - 1) {
      const auto g = static_cast<std::size_t>(i / kGroup);
      f_.seal(kGroup, l.kw.data(), l.vw.data(), l.kq.data() + g * kGroup * f_.kfmt.bytes,
              l.ks.data() + g * static_cast<std::size_t>(cfg_.kv_dim), l.v.data() + g * kGroup * fmt_.bytes);
    }
    ++len_[static_cast<std::size_t>(seq)][static_cast<std::size_t>(layer)];
    return {};
  }

  void blocks(int layer, SeqId seq, std::vector<KvBlock>& out) const override {
    out.clear();
    const int len = len_[static_cast<std::size_t>(seq)][static_cast<std::size_t>(layer)];
    const Lane& l = lane(seq, layer);
    const int sealed = len / kGroup;
    for (int g = 0; g < sealed; ++g)
      out.push_back({l.kq.data() + static_cast<std::size_t>(g) * kGroup * f_.kfmt.bytes,
                     l.v.data() + static_cast<std::size_t>(g) * kGroup * fmt_.bytes, 0, kGroup, -1, &f_.kfmt, nullptr,
                     l.ks.data() + static_cast<std::size_t>(g) * static_cast<std::size_t>(cfg_.kv_dim)});
    if (len > sealed * kGroup)
      out.push_back({reinterpret_cast<const std::byte*>(l.kw.data()), reinterpret_cast<const std::byte*>(l.vw.data()), 0,
                     len - sealed * kGroup, -1, &f_.wfmt, &f_.wfmt, nullptr});
  }

  // Cutting into a sealed group brings its kept tokens back to the window, dequantized.
  Status truncate(SeqId seq, int n_keep) override {
    n_keep = std::max(n_keep, 0);
    LMP_ASSIGN(const bool cut, check_truncate(seq, n_keep));
    if (!cut) return {};
    std::vector<int>& len = len_[static_cast<std::size_t>(seq)];
    const int g = n_keep / kGroup, r = n_keep % kGroup;
    const auto kvd = static_cast<std::size_t>(cfg_.kv_dim);
    for (int layer = 0; layer < cfg_.n_layer; ++layer) {
      Lane& l = lane(seq, layer);
      if (r > 0 && len[static_cast<std::size_t>(layer)] >= (g + 1) * kGroup) {  // group g was sealed
        const auto row = static_cast<std::size_t>(g) * kGroup;
        f_.unseal(r, l.kq.data() + row * f_.kfmt.bytes, l.ks.data() + static_cast<std::size_t>(g) * kvd,
                  l.v.data() + row * fmt_.bytes, l.kw.data(), l.vw.data());
      }
      len[static_cast<std::size_t>(layer)] = std::min(len[static_cast<std::size_t>(layer)], n_keep);
    }
    return {};
  }

  Status fork(SeqId src, SeqId dst) override {
    if (src == dst) return check_seq(src);
    LMP_TRY(check_fork(src, dst));
    for (int layer = 0; layer < cfg_.n_layer; ++layer) lane(dst, layer) = lane(src, layer);
    len_[static_cast<std::size_t>(dst)] = len_[static_cast<std::size_t>(src)];
    return {};
  }

  KvStats stats() const override {
    KvStats s;
    for (SeqId q = 0; q < cfg_.max_seqs; ++q) s.tokens += live(q);
    s.used = static_cast<std::uint64_t>(s.tokens) * bytes_per_token(cfg_);
    s.allocated = s.reserved = bytes_held(0) * static_cast<std::uint64_t>(cfg_.max_seqs);
    return s;
  }

  std::uint64_t bytes_held(SeqId) const override {
    const Lane& l = lanes_.front();
    return static_cast<std::uint64_t>(cfg_.n_layer) *
           (l.kq.size() + 2 * l.ks.size() + 4 * l.kw.size() + 4 * l.vw.size() + l.v.size());
  }

 private:
  struct Lane {                     // one sequence's one layer
    std::vector<std::byte> kq;      // (groups · kGroup, kv_dim / 2): sealed keys, unscaled int4
    std::vector<std::uint16_t> ks;  // (groups, kv_dim): f16 scale per channel and group
    std::vector<float> kw, vw;      // (kGroup, kv_dim): the keys and values of the group being filled
    std::vector<std::byte> v;       // (groups · kGroup, row): sealed values, int4 rows
  };

  Lane& lane(SeqId seq, int layer) {
    return lanes_[static_cast<std::size_t>(seq) * static_cast<std::size_t>(cfg_.n_layer) + static_cast<std::size_t>(layer)];
  }
  const Lane& lane(SeqId seq, int layer) const {
    return lanes_[static_cast<std::size_t>(seq) * static_cast<std::size_t>(cfg_.n_layer) + static_cast<std::size_t>(layer)];
  }

  KiviFormats f_;
  int groups_;
  std::vector<Lane> lanes_;  // (max_seqs, n_layer)
};

// The paged layout. A pool block: for each layer, the sealed keys (bs unscaled int4
// rows), their per-channel scales (kv_dim f16) and the values (bs int4 rows). A sequence:
// its table of sealed blocks and its window (f32, every layer's K and V of the block
// being filled).
class PagedKiviKvCache final : public KvCache {
 public:
  PagedKiviKvCache(const KvConfig& cfg, std::int64_t max_blocks)
      : KvCache(cfg),
        f_(cfg),
        bs_(cfg.block_size),
        kvd_(static_cast<std::size_t>(cfg.kv_dim)),
        ks_at_(round8(static_cast<std::size_t>(cfg.block_size) * f_.kfmt.bytes)),
        v_at_(ks_at_ + round8(kvd_ * 2)),
        layer_bytes_(round8(v_at_ + static_cast<std::size_t>(cfg.block_size) * fmt_.bytes)),
        window_floats_(static_cast<std::size_t>(cfg.n_layer) * 2 * static_cast<std::size_t>(cfg.block_size) * kvd_),
        pool_(layer_bytes_, cfg.n_layer, max_blocks, cfg.block_size),
        seqs_(static_cast<std::size_t>(cfg.max_seqs)) {}

  static std::size_t round8(std::size_t n) { return (n + 7) & ~std::size_t{7}; }
  static std::size_t block_bytes_of(const KvConfig& cfg) {
    const KiviFormats f(cfg);
    const auto bs = static_cast<std::size_t>(cfg.block_size);
    const std::size_t ks_at = round8(bs * f.kfmt.bytes), v_at = ks_at + round8(static_cast<std::size_t>(cfg.kv_dim) * 2);
    return round8(v_at + bs * f.vfmt.bytes) * static_cast<std::size_t>(cfg.n_layer);
  }
  static std::size_t window_bytes_of(const KvConfig& cfg) {
    return static_cast<std::size_t>(cfg.n_layer) * 2 * static_cast<std::size_t>(cfg.block_size) *
           static_cast<std::size_t>(cfg.kv_dim) * sizeof(float);
  }

  Status append(int layer, SeqId seq, std::span<const float> k, std::span<const float> v) override {
    LMP_ASSIGN(const int i, begin_append(layer, seq));
    Seq& s = seqs_[static_cast<std::size_t>(seq)];
    const int slot = i % bs_;
    const auto g = static_cast<std::size_t>(i / bs_);
    if (layer == 0 && slot == bs_ - 1) {  // the group is complete with this token: its block
      LMP_ASSIGN(std::int32_t id, pool_.take(s.table.empty() ? -1 : s.table.back() + 1));  // (next to the last)
      s.table.push_back(id);
    }
    float* kw = window(s, layer);
    float* vw = kw + static_cast<std::size_t>(bs_) * kvd_;
    std::memcpy(kw + static_cast<std::size_t>(slot) * kvd_, k.data(), k.size_bytes());
    std::memcpy(vw + static_cast<std::size_t>(slot) * kvd_, v.data(), v.size_bytes());
    if (slot == bs_ - 1) {
      std::byte* base = layer_base(s.table[g], layer);
      f_.seal(bs_, kw, vw, base, scales(base), base + v_at_);
    }
    ++len_[static_cast<std::size_t>(seq)][static_cast<std::size_t>(layer)];
    return {};
  }

  void blocks(int layer, SeqId seq, std::vector<KvBlock>& out) const override {
    out.clear();
    const Seq& s = seqs_[static_cast<std::size_t>(seq)];
    const int len = len_[static_cast<std::size_t>(seq)][static_cast<std::size_t>(layer)];
    const int sealed = len / bs_;
    for (int g = 0; g < sealed; ++g) {
      const std::byte* base = layer_base(s.table[static_cast<std::size_t>(g)], layer);
      out.push_back({base, base + v_at_, 0, bs_, -1, &f_.kfmt, nullptr, scales(base)});
    }
    if (len > sealed * bs_) {
      const float* kw = window(s, layer);
      out.push_back({reinterpret_cast<const std::byte*>(kw),
                     reinterpret_cast<const std::byte*>(kw + static_cast<std::size_t>(bs_) * kvd_), 0, len - sealed * bs_,
                     -1, &f_.wfmt, &f_.wfmt, nullptr});
    }
  }

  // Cutting into a sealed block brings its kept tokens back to the window, dequantized,
  // and lets go of the block (others may still hold it: it is only read).
  Status truncate(SeqId seq, int n_keep) override {
    n_keep = std::max(n_keep, 0);
    LMP_ASSIGN(const bool cut, check_truncate(seq, n_keep));
    if (!cut) return {};
    Seq& s = seqs_[static_cast<std::size_t>(seq)];
    std::vector<int>& len = len_[static_cast<std::size_t>(seq)];
    const int g = n_keep / bs_, r = n_keep % bs_;
    for (int layer = 0; layer < cfg_.n_layer; ++layer) {
      if (r > 0 && len[static_cast<std::size_t>(layer)] >= (g + 1) * bs_) {  // block g was sealed in this layer
        const std::byte* base = layer_base(s.table[static_cast<std::size_t>(g)], layer);
        float* kw = window(s, layer);
        f_.unseal(r, base, scales(base), base + v_at_, kw, kw + static_cast<std::size_t>(bs_) * kvd_);
      }
      len[static_cast<std::size_t>(layer)] = std::min(len[static_cast<std::size_t>(layer)], n_keep);
    }
    pool_.drop_from(s.table, static_cast<std::size_t>(g));
    return {};
  }

  Status fork(SeqId src, SeqId dst) override {
    if (src == dst) return check_seq(src);
    LMP_TRY(check_fork(src, dst));
    Seq& d = seqs_[static_cast<std::size_t>(dst)];
    d = seqs_[static_cast<std::size_t>(src)];  // the table shared, the window copied
    pool_.hold_all(d.table);
    len_[static_cast<std::size_t>(dst)] = len_[static_cast<std::size_t>(src)];
    return {};
  }

  void release(SeqId seq) override {
    if (seq < 0 || seq >= cfg_.max_seqs) return;
    Seq& s = seqs_[static_cast<std::size_t>(seq)];
    pool_.drop_from(s.table, 0);
    std::vector<float>().swap(s.window);
    KvCache::release(seq);
  }

  // used: the sealed blocks' bytes (a shared block once) and the windows' live rows;
  // allocated: blocks in use and the windows; reserved: every block taken, and the windows.
  KvStats stats() const override {
    KvStats st;
    std::uint64_t windows = 0, window_rows = 0;
    for (SeqId q = 0; q < cfg_.max_seqs; ++q) {
      st.tokens += live(q);
      const Seq& s = seqs_[static_cast<std::size_t>(q)];
      windows += s.window.size() * sizeof(float);
      window_rows += static_cast<std::uint64_t>(length(q) % bs_);
    }
    st.blocks_free = pool_.free_blocks();
    st.blocks_in_use = pool_.in_use();
    st.blocks_shared = pool_.shared();
    st.used = static_cast<std::uint64_t>(st.blocks_in_use) * pool_.block_bytes() +
              window_rows * 2 * static_cast<std::uint64_t>(cfg_.n_layer) * kvd_ * sizeof(float);
    st.allocated = static_cast<std::uint64_t>(st.blocks_in_use) * pool_.block_bytes() + windows;
    st.reserved = static_cast<std::uint64_t>(pool_.taken()) * pool_.block_bytes() + windows;
    return st;
  }

  std::uint64_t bytes_held(SeqId seq) const override {
    if (seq < 0 || seq >= cfg_.max_seqs) return 0;
    const Seq& s = seqs_[static_cast<std::size_t>(seq)];
    return static_cast<std::uint64_t>(s.table.size()) * pool_.block_bytes() + s.window.size() * sizeof(float);
  }

 private:
  struct Seq {
    std::vector<std::int32_t> table;  // sealed block g → pool block
    std::vector<float> window;        // (n_layer, 2, bs, kv_dim): the block being filled; empty until used
  };

  std::byte* layer_base(std::int32_t id, int layer) const {
    return pool_.data(id, layer);
  }
  const std::uint16_t* scales(const std::byte* base) const { return reinterpret_cast<const std::uint16_t*>(base + ks_at_); }
  std::uint16_t* scales(std::byte* base) const { return reinterpret_cast<std::uint16_t*>(base + ks_at_); }
  float* window(Seq& s, int layer) const {
    if (s.window.empty()) s.window.resize(window_floats_);  // (taken on first use)
    return s.window.data() + static_cast<std::size_t>(layer) * 2 * static_cast<std::size_t>(bs_) * kvd_;
  }
  const float* window(const Seq& s, int layer) const {
    return s.window.data() + static_cast<std::size_t>(layer) * 2 * static_cast<std::size_t>(bs_) * kvd_;
  }

  KiviFormats f_;
  int bs_;
  std::size_t kvd_;
  std::size_t ks_at_, v_at_;    // offsets in a layer's part of a block: the scales, the values
  std::size_t layer_bytes_;     // one layer's part of a block (keys, scales, values; 8-byte aligned)
  std::size_t window_floats_;
  BlockPool pool_;
  std::vector<Seq> seqs_;
};

}  // namespace

Result<std::unique_ptr<KvCache>> make_kivi_kv_cache(const KvConfig& cfg) {
  if (cfg.eviction != Eviction::none) return make_error(Errc::unsupported, "the int4-kivi cache does not evict");
  if (cfg.layout == Layout::contiguous) return std::unique_ptr<KvCache>(new KiviKvCache(cfg));
  if (cfg.block_size <= 0) return make_error(Errc::invalid_argument, "KV cache: the block size must be positive, not {}", cfg.block_size);
  // The windows (one block of f32 per sequence) come out of a budget first.
  LMP_ASSIGN(std::int64_t max_blocks,
             pool_blocks(cfg, PagedKiviKvCache::block_bytes_of(cfg),
                         cfg.max_bytes ? PagedKiviKvCache::window_bytes_of(cfg) * static_cast<std::uint64_t>(cfg.max_seqs) : 0));
  return std::unique_ptr<KvCache>(new PagedKiviKvCache(cfg, max_blocks));
}

}  // namespace lmp::kv
