// The int4-kivi cache (KIVI, Liu et al., ICML 2024): keys are quantized per channel, values
// per token. Keys have channels of very different sizes (and outlier channels), which a
// per-token scale spreads over the whole row; a per-channel scale fits each channel, but
// needs the channel's values over several tokens: the keys and values of a group of kGroup
// tokens wait in f32 (the full-precision window of the most recent tokens) until the group
// is complete; then the keys are quantized one scale per channel, the values per token
// (int4 rows, as in the int4 cache).
#include "paged_kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lmpipe/tensor_io/dtype.h"

namespace lmp::kv {

namespace {

constexpr int kGroup = 32;  // tokens per key group (KIVI's G)

class KiviKvCache final : public KvCache {
 public:
  explicit KiviKvCache(const KvConfig& cfg)
      : KvCache(cfg),
        kfmt_(RowFormat::unscaled_int4(cfg.kv_dim, cfg.head_dim)),
        wfmt_(RowFormat::make(KvType::f32, cfg.kv_dim, cfg.head_dim)),
        groups_((cfg.n_ctx + kGroup - 1) / kGroup),
        lanes_(static_cast<std::size_t>(cfg.max_seqs) * static_cast<std::size_t>(cfg.n_layer)) {
    const auto kvd = static_cast<std::size_t>(cfg.kv_dim), ctx = static_cast<std::size_t>(groups_) * kGroup;
    for (Lane& l : lanes_) {
      l.kq.resize(ctx * kfmt_.bytes);
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
    if (i % kGroup == kGroup - 1) seal(l, i / kGroup);
    ++len_[static_cast<std::size_t>(seq)][static_cast<std::size_t>(layer)];
    return {};
  }

  void blocks(int layer, SeqId seq, std::vector<KvBlock>& out) const override {
    out.clear();
    const int len = len_[static_cast<std::size_t>(seq)][static_cast<std::size_t>(layer)];
    const Lane& l = lane(seq, layer);
    const int sealed = len / kGroup;
    for (int g = 0; g < sealed; ++g)
      out.push_back({l.kq.data() + static_cast<std::size_t>(g) * kGroup * kfmt_.bytes,
                     l.v.data() + static_cast<std::size_t>(g) * kGroup * fmt_.bytes, 0, kGroup, -1, &kfmt_, nullptr,
                     l.ks.data() + static_cast<std::size_t>(g) * static_cast<std::size_t>(cfg_.kv_dim)});
    if (len > sealed * kGroup)
      out.push_back({reinterpret_cast<const std::byte*>(l.kw.data()), reinterpret_cast<const std::byte*>(l.vw.data()), 0,
                     len - sealed * kGroup, -1, &wfmt_, &wfmt_, nullptr});
  }

  // Cutting into a sealed group brings its kept keys back to the window, dequantized.
  Status truncate(SeqId seq, int n_keep) override {
    n_keep = std::max(n_keep, 0);
    LMP_ASSIGN(const bool cut, check_truncate(seq, n_keep));
    if (!cut) return {};
    std::vector<int>& len = len_[static_cast<std::size_t>(seq)];
    const int g = n_keep / kGroup, r = n_keep % kGroup;
    for (int layer = 0; layer < cfg_.n_layer; ++layer) {
      Lane& l = lane(seq, layer);
      if (r > 0 && len[static_cast<std::size_t>(layer)] >= (g + 1) * kGroup) {  // group g was sealed
        const auto kvd = static_cast<std::size_t>(cfg_.kv_dim);
        for (int t = 0; t < r; ++t) {
          const std::size_t row = static_cast<std::size_t>(g) * kGroup + static_cast<std::size_t>(t);
          float* w = l.kw.data() + static_cast<std::size_t>(t) * kvd;
          load_row(kfmt_, w, l.kq.data() + row * kfmt_.bytes);
          for (std::size_t c = 0; c < kvd; ++c) w[c] *= f16_to_f32(l.ks[static_cast<std::size_t>(g) * kvd + c]);
          load_row(fmt_, l.vw.data() + static_cast<std::size_t>(t) * kvd, l.v.data() + row * fmt_.bytes);
        }
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

  // The window's kGroup tokens become group g: keys per channel (d = max|x| / 7 over the
  // group), values per token.
  void seal(Lane& l, int g) {
    const auto kvd = static_cast<std::size_t>(cfg_.kv_dim);
    std::vector<float> inv(kvd);
    for (std::size_t c = 0; c < kvd; ++c) {
      float amax = 0;
      for (int t = 0; t < kGroup; ++t) amax = std::max(amax, std::fabs(l.kw[static_cast<std::size_t>(t) * kvd + c]));
      const std::uint16_t dh = f32_to_f16(amax / 7.0f);
      l.ks[static_cast<std::size_t>(g) * kvd + c] = dh;
      const float d = f16_to_f32(dh);
      inv[c] = d > 0 ? 1.0f / d : 0.0f;
    }
    for (int t = 0; t < kGroup; ++t) {
      const std::size_t row = static_cast<std::size_t>(g) * kGroup + static_cast<std::size_t>(t);
      store_row_unscaled(kfmt_, l.kq.data() + row * kfmt_.bytes, l.kw.data() + static_cast<std::size_t>(t) * kvd, inv.data());
      store_row(fmt_, l.v.data() + row * fmt_.bytes, l.vw.data() + static_cast<std::size_t>(t) * kvd);
    }
  }

  RowFormat kfmt_, wfmt_;
  int groups_;
  std::vector<Lane> lanes_;  // (max_seqs, n_layer)
};

}  // namespace

Result<std::unique_ptr<KvCache>> make_kivi_kv_cache(const KvConfig& cfg) {
  if (cfg.layout != Layout::contiguous)
    return make_error(Errc::unsupported, "the int4-kivi cache is contiguous: use --kv contiguous");
  if (cfg.eviction != Eviction::none) return make_error(Errc::unsupported, "the int4-kivi cache does not evict");
  return std::unique_ptr<KvCache>(new KiviKvCache(cfg));
}

}  // namespace lmp::kv
