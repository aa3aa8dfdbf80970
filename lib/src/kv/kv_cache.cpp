#include "lmpipe/kv/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace lmp::kv {

ContiguousKvCache::ContiguousKvCache(const KvConfig& cfg)
    : cfg_(cfg),
      k_(static_cast<std::size_t>(cfg.n_layer) * static_cast<std::size_t>(cfg.n_ctx) * static_cast<std::size_t>(cfg.kv_dim)),
      v_(k_.size()),
      len_(static_cast<std::size_t>(cfg.n_layer), 0) {}

Status ContiguousKvCache::append(int layer, SeqId seq, std::span<const float> k, std::span<const float> v) {
  if (seq != 0) return make_error(Errc::unsupported, "the contiguous cache holds one sequence (0), not {}", seq);
  int& n = len_[static_cast<std::size_t>(layer)];
  if (n >= cfg_.n_ctx)
    return make_error(Errc::out_of_range, "the context is full: {} tokens (raise --ctx, or use an evicting cache)", cfg_.n_ctx);
  const std::size_t off =
      (static_cast<std::size_t>(layer) * static_cast<std::size_t>(cfg_.n_ctx) + static_cast<std::size_t>(n)) *
      static_cast<std::size_t>(cfg_.kv_dim);
  std::memcpy(k_.data() + off, k.data(), k.size_bytes());
  std::memcpy(v_.data() + off, v.data(), v.size_bytes());
  ++n;
  return {};
}

void ContiguousKvCache::blocks(int layer, SeqId, std::vector<KvBlock>& out) const {
  out.clear();
  const std::size_t off = static_cast<std::size_t>(layer) * static_cast<std::size_t>(cfg_.n_ctx) *
                          static_cast<std::size_t>(cfg_.kv_dim);
  out.push_back({DType::f32, k_.data() + off, v_.data() + off, len_[static_cast<std::size_t>(layer)]});
}

int ContiguousKvCache::length(SeqId) const { return len_.empty() ? 0 : len_.back(); }

void ContiguousKvCache::truncate(SeqId, int n_keep) {
  for (int& n : len_) n = std::min(n, std::max(n_keep, 0));
}

Status ContiguousKvCache::fork(SeqId, SeqId) {
  return make_error(Errc::unsupported, "the contiguous cache holds one sequence; forking needs the paged cache");
}

std::size_t ContiguousKvCache::bytes_used() const {
  return 2 * static_cast<std::size_t>(length(0)) * static_cast<std::size_t>(cfg_.n_layer) *
         static_cast<std::size_t>(cfg_.kv_dim) * sizeof(float);
}

std::size_t ContiguousKvCache::bytes_reserved() const { return (k_.size() + v_.size()) * sizeof(float); }

}  // namespace lmp::kv
