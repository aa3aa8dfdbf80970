#include "lmpipe/kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "paged_kv_cache.h"

namespace lmp::kv {

const char* eviction_name(Eviction e) {
  switch (e) {
    case Eviction::none: return "none";
    case Eviction::window: return "window";
    case Eviction::sinks: return "sinks";
  }
  return "?";
}

Result<Eviction> parse_eviction(std::string_view s) {
  if (s == "none") return Eviction::none;
  if (s == "window") return Eviction::window;
  if (s == "sinks") return Eviction::sinks;
  return make_error(Errc::invalid_argument, "unknown eviction '{}' (none, window, sinks)", s);
}

const char* layout_name(Layout l) { return l == Layout::paged ? "paged" : "contiguous"; }

Result<Layout> parse_layout(std::string_view s) {
  if (s == "contiguous") return Layout::contiguous;
  if (s == "paged") return Layout::paged;
  return make_error(Errc::invalid_argument, "unknown KV-cache layout '{}' (contiguous, paged)", s);
}

std::uint64_t bytes_per_token(const KvConfig& cfg) {
  return 2 * static_cast<std::uint64_t>(cfg.n_layer) * RowFormat::make(cfg.type, cfg.kv_dim, cfg.head_dim).bytes;
}

KvCache::KvCache(const KvConfig& cfg)
    : cfg_(cfg),
      fmt_(RowFormat::make(cfg.type, cfg.kv_dim, cfg.head_dim)),
      len_(static_cast<std::size_t>(cfg.max_seqs), std::vector<int>(static_cast<std::size_t>(cfg.n_layer), 0)) {}

Status KvCache::check_seq(SeqId seq) const {
  if (seq < 0 || seq >= cfg_.max_seqs)
    return make_error(Errc::out_of_range, "sequence {} is outside the cache's 0..{}", seq, cfg_.max_seqs - 1);
  return {};
}

int KvCache::length(SeqId seq) const {
  if (seq < 0 || seq >= cfg_.max_seqs) return 0;
  return len_[static_cast<std::size_t>(seq)].back();
}

void KvCache::release(SeqId seq) {
  if (seq >= 0 && seq < cfg_.max_seqs) std::fill(len_[static_cast<std::size_t>(seq)].begin(), len_[static_cast<std::size_t>(seq)].end(), 0);
}

Result<int> KvCache::begin_append(int layer, SeqId seq) const {
  LMP_TRY(check_seq(seq));
  const std::vector<int>& len = len_[static_cast<std::size_t>(seq)];
  const int i = len[static_cast<std::size_t>(layer)];
  if (layer > 0 && i >= len[static_cast<std::size_t>(layer) - 1])
    return make_error(Errc::internal, "KV cache: layer {} appended before layer {}", layer, layer - 1);
  if (cfg_.eviction == Eviction::none && i >= cfg_.n_ctx)
    return make_error(Errc::out_of_range, "the context is full: {} tokens (raise --ctx, or evict with --kv-evict)", cfg_.n_ctx);
  return i;
}

Status KvCache::check_fork(SeqId src, SeqId dst) const {
  LMP_TRY(check_seq(src));
  LMP_TRY(check_seq(dst));
  if (length(dst) != 0) return make_error(Errc::invalid_argument, "fork: sequence {} is not empty", dst);
  const auto& ls = len_[static_cast<std::size_t>(src)];
  if (ls.front() != ls.back()) return make_error(Errc::internal, "fork: sequence {} is in the middle of a token", src);
  return {};
}

Result<bool> KvCache::check_truncate(SeqId seq, int n_keep) const {
  LMP_TRY(check_seq(seq));
  if (n_keep >= length(seq)) return false;
  if (live_ranges(length(seq)).evicted)
    return make_error(Errc::unsupported, "sequence {}: cannot truncate to {} tokens, its oldest have been evicted", seq, n_keep);
  return true;
}

KvCache::LiveRanges KvCache::live_ranges(int len) const {
  LiveRanges r;
  if (cfg_.eviction == Eviction::none || len <= cfg_.n_ctx) return r;  // all of [0, len)
  const int sinks = cfg_.eviction == Eviction::sinks ? cfg_.n_sink : 0;
  r.s1 = sinks;
  r.w0 = len - (cfg_.n_ctx - sinks);
  r.evicted = true;
  return r;
}

int KvCache::live(SeqId seq) const {
  const int len = length(seq);
  const LiveRanges r = live_ranges(len);
  return r.s1 + (len - r.w0);
}

int KvCache::room(SeqId seq) const { return cfg_.n_ctx - live(seq); }

namespace {

// ---- contiguous ------------------------------------------------------------------------
// Per sequence and layer, K rows then V rows, n_ctx each: (max_seqs, n_layer, 2, n_ctx, row).
// With eviction the rows are a ring: the sinks keep rows 0..n_sink-1, token i >= n_sink
// goes to row n_sink + (i - n_sink) mod window.
class ContiguousKvCache final : public KvCache {
 public:
  explicit ContiguousKvCache(const KvConfig& cfg)
      : KvCache(cfg),
        plane_(static_cast<std::size_t>(cfg.n_ctx) * fmt_.bytes),
        data_(std::make_unique_for_overwrite<std::byte[]>(plane_ * 2 * static_cast<std::size_t>(cfg.n_layer) *
                                                          static_cast<std::size_t>(cfg.max_seqs))) {}

  Status append(int layer, SeqId seq, std::span<const float> k, std::span<const float> v) override {
    LMP_ASSIGN(const int i, begin_append(layer, seq));
    const std::size_t r = row(i);
    store_row(fmt_, plane(seq, layer, 0) + r * fmt_.bytes, k.data());
    store_row(fmt_, plane(seq, layer, 1) + r * fmt_.bytes, v.data());
    ++len_[static_cast<std::size_t>(seq)][static_cast<std::size_t>(layer)];
    return {};
  }

  void blocks(int layer, SeqId seq, std::vector<KvBlock>& out) const override {
    out.clear();
    const int len = len_[static_cast<std::size_t>(seq)][static_cast<std::size_t>(layer)];
    const LiveRanges lr = live_ranges(len);
    const std::byte* K = plane(seq, layer, 0);
    const std::byte* V = plane(seq, layer, 1);
    if (lr.s1 > 0) out.push_back({K, V, 0, lr.s1, lr.evicted ? cfg_.n_ctx - 1 : -1});
    if (len == lr.w0) return;
    const int a = static_cast<int>(row(lr.w0)), count = len - lr.w0;
    if (a + count <= cfg_.n_ctx) {
      out.push_back({K, V, a, a + count, -1});
    } else {  // the ring wraps
      out.push_back({K, V, a, cfg_.n_ctx, -1});
      out.push_back({K, V, lr.s1, lr.s1 + count - (cfg_.n_ctx - a), -1});
    }
  }

  Status truncate(SeqId seq, int n_keep) override {
    n_keep = std::max(n_keep, 0);
    LMP_ASSIGN(const bool cut, check_truncate(seq, n_keep));
    if (cut)
      for (int& n : len_[static_cast<std::size_t>(seq)]) n = std::min(n, n_keep);
    return {};
  }

  Status fork(SeqId src, SeqId dst) override {
    if (src == dst) return check_seq(src);
    LMP_TRY(check_fork(src, dst));
    const auto& ls = len_[static_cast<std::size_t>(src)];
    const std::size_t rows = static_cast<std::size_t>(std::min(ls.back(), cfg_.n_ctx));
    for (int l = 0; l < cfg_.n_layer; ++l)
      for (int kv = 0; kv < 2; ++kv) std::memcpy(plane(dst, l, kv), plane(src, l, kv), rows * fmt_.bytes);
    len_[static_cast<std::size_t>(dst)] = ls;
    return {};
  }

  KvStats stats() const override {
    KvStats s;
    for (SeqId q = 0; q < cfg_.max_seqs; ++q) s.tokens += live(q);
    s.used = static_cast<std::uint64_t>(s.tokens) * 2 * static_cast<std::uint64_t>(cfg_.n_layer) * fmt_.bytes;
    s.allocated = s.reserved = plane_ * 2 * static_cast<std::uint64_t>(cfg_.n_layer) * static_cast<std::uint64_t>(cfg_.max_seqs);
    return s;
  }

  std::uint64_t bytes_held(SeqId) const override { return plane_ * 2 * static_cast<std::uint64_t>(cfg_.n_layer); }

 private:
  std::size_t row(int i) const {
    if (cfg_.eviction == Eviction::none) return static_cast<std::size_t>(i);
    const int sinks = cfg_.eviction == Eviction::sinks ? cfg_.n_sink : 0;
    if (i < sinks) return static_cast<std::size_t>(i);
    return static_cast<std::size_t>(sinks + (i - sinks) % (cfg_.n_ctx - sinks));
  }
  std::byte* plane(SeqId seq, int layer, int kv) const {
    return data_.get() + ((static_cast<std::size_t>(seq) * static_cast<std::size_t>(cfg_.n_layer) + static_cast<std::size_t>(layer)) * 2 +
                          static_cast<std::size_t>(kv)) * plane_;
  }

  std::size_t plane_;                    // bytes of one (n_ctx, row) plane
  std::unique_ptr<std::byte[]> data_;    // (max_seqs, n_layer, 2, n_ctx, row), uninitialised
};

}  // namespace

Result<std::unique_ptr<KvCache>> make_kv_cache(const KvConfig& cfg) {
  if (cfg.n_layer <= 0 || cfg.n_ctx <= 0 || cfg.kv_dim <= 0 || cfg.max_seqs <= 0)
    return make_error(Errc::invalid_argument, "KV cache: layers {}, context {}, kv_dim {} and sequences {} must be positive",
                      cfg.n_layer, cfg.n_ctx, cfg.kv_dim, cfg.max_seqs);
  const int hd = cfg.head_dim > 0 ? cfg.head_dim : cfg.kv_dim;
  if (cfg.kv_dim % hd) return make_error(Errc::invalid_argument, "KV cache: head_dim {} does not divide kv_dim {}", hd, cfg.kv_dim);
  if ((cfg.type == KvType::int4 || cfg.type == KvType::int4_kivi) && (hd % 32 ? hd : 32) % 2)
    return make_error(Errc::invalid_argument, "KV cache: int4 needs an even head_dim, not {}", hd);
  if (cfg.eviction == Eviction::sinks && (cfg.n_sink < 0 || cfg.n_sink >= cfg.n_ctx))
    return make_error(Errc::invalid_argument, "KV cache: {} attention sinks leave no window in a context of {}", cfg.n_sink,
                      cfg.n_ctx);
  if (cfg.type == KvType::int4_kivi) return make_kivi_kv_cache(cfg);
  if (cfg.layout == Layout::paged) return make_paged_kv_cache(cfg);
  if (cfg.max_bytes) {
    const std::uint64_t need = bytes_per_token(cfg) * static_cast<std::uint64_t>(cfg.n_ctx) * static_cast<std::uint64_t>(cfg.max_seqs);
    if (need > cfg.max_bytes)
      return make_error(Errc::out_of_range, "KV cache: {} sequences × {} tokens need {} bytes, over the budget of {}",
                        cfg.max_seqs, cfg.n_ctx, need, cfg.max_bytes);
  }
  return std::unique_ptr<KvCache>(new ContiguousKvCache(cfg));
}

}  // namespace lmp::kv
