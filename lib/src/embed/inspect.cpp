#include "lmpipe/embed/inspect.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <unordered_map>

#include "lmpipe/core/string_map.h"

namespace lmp::embed {

using tensor_io::Format;
using tensor_io::TensorFile;
using tensor_io::TensorInfo;

namespace {
constexpr const char* kEmbeddingNames[] = {
    "token_embd.weight", "model.embed_tokens.weight", "embed_tokens.weight", "transformer.wte.weight", "wte.weight",
    "tok_embeddings.weight", "bert.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight",
    "model.embed_tokens", "gpt_neox.embed_in.weight", "transformer.word_embeddings.weight"};
constexpr const char* kOutputNames[] = {"output.weight", "lm_head.weight", "model.lm_head.weight",
                                        "embed_out.weight", "transformer.lm_head.weight"};
}  // namespace

Result<ModelEmbedding> find_embedding(const TensorFile& f, const std::string& name) {
  ModelEmbedding m;
  if (!name.empty()) {
    m.embedding = f.find(name);
    if (!m.embedding) return make_error(Errc::invalid_argument, "{}: no tensor named '{}'", f.name(), name);
  } else if (f.format() == Format::npy) {
    m.embedding = &f.tensors().front();
  } else {
    for (const char* n : kEmbeddingNames)
      if ((m.embedding = f.find(n))) break;
    if (f.tensors().empty())
      return make_error(Errc::invalid_argument, "{}: the file holds no tensors ({} metadata keys; a vocabulary-only file?); "
                        "`embed-inspect list` shows them", f.name(), f.metadata().size());
    if (!m.embedding)
      return make_error(Errc::invalid_argument,
                        "{}: no token-embedding tensor found (looked for token_embd.weight, model.embed_tokens.weight, "
                        "wte.weight, ...); name it with --tensor (`embed-inspect list` shows the tensors)",
                        f.name());
  }
  const TensorInfo& e = *m.embedding;
  if (e.shape.size() != 2)
    return make_error(Errc::invalid_argument, "{}: tensor '{}' has {} dimensions; an embedding matrix has 2", f.name(),
                      e.name, e.shape.size());
  m.n_vocab = e.shape[0];
  m.n_embd = e.shape[1];
  for (const auto& t : f.tensors())
    if (t.name.rfind("rope_freqs.", 0) != 0 || f.format() != Format::llama2c) {
      m.model_params += t.count();
      m.model_bytes += t.nbytes;
    }
  if (f.format() == Format::npy) {
    m.tied = false;
    m.tie_reason = "a bare matrix: nothing to tie it to";
    return m;
  }
  for (const char* n : kOutputNames)
    if (const TensorInfo* o = f.find(n); o && o != m.embedding) {
      m.output = o;
      break;
    }
  if (f.format() == Format::llama2c) {
    m.tied = !m.output;
    m.tie_reason = m.tied ? "llama2.c header: positive vocab_size (shared classifier)"
                          : "llama2.c header: negative vocab_size (own classifier)";
    return m;
  }
  if (!m.output) {
    m.tied = true;
    m.tie_reason = f.format() == Format::gguf ? "no output.weight: the embedding is the output projection"
                                              : "no lm_head.weight: the embedding is the output projection";
    return m;
  }
  const TensorInfo& o = *m.output;
  if (o.shape == e.shape && o.dtype == e.dtype && o.nbytes == e.nbytes &&
      std::memcmp(f.data(o), f.data(e), e.nbytes) == 0) {
    m.tied = true;
    m.tie_reason = fmt::format("{} and {} hold the same bytes (stored twice)", e.name, o.name);
    return m;
  }
  m.tied = false;
  m.tie_reason = fmt::format("{} is a separate matrix", o.name);
  return m;
}

Result<Embedding> embedding_view(const TensorFile& f, const TensorInfo& t) {
  if (t.shape.size() != 2)
    return make_error(Errc::invalid_argument, "{}: tensor '{}' is not a matrix", f.name(), t.name);
  auto e = Embedding::view(t.dtype, f.data(t), t.shape[0], t.shape[1]);
  if (!e) return with_context(std::move(e).error(), f.name() + ": tensor '" + t.name + "'");
  return e;
}

VocabCost vocab_cost(std::int64_t vocab, std::int64_t hidden, DType dtype) {
  VocabCost c;
  c.vocab = vocab;
  c.hidden = hidden;
  c.dtype = dtype;
  c.params = static_cast<std::uint64_t>(vocab) * static_cast<std::uint64_t>(hidden);
  const DTypeInfo& d = dtype_info(dtype);
  c.bytes_per_param = static_cast<double>(d.block_bytes) / static_cast<double>(d.block);
  c.adam_bytes_per_param = 2 * c.bytes_per_param + 8 + (dtype == DType::f32 ? 0 : 4);
  auto p = static_cast<double>(c.params);
  c.inference_tied = p * c.bytes_per_param;
  c.inference_untied = 2 * c.inference_tied;
  c.adam_tied = p * c.adam_bytes_per_param;
  c.adam_untied = 2 * c.adam_tied;
  return c;
}

RowStats row_stats(const Embedding& e, std::size_t top, int threads) {
  const auto V = static_cast<std::size_t>(e.n_vocab());
  std::vector<float> zero(static_cast<std::size_t>(e.n_embd()), 0.0f), dots(V), norms2(V);
  e.dots_and_norms(zero.data(), dots.data(), norms2.data(), threads);
  std::vector<float> norm(V);
  for (std::size_t i = 0; i < V; ++i) norm[i] = std::sqrt(norms2[i]);
  RowStats s;
  std::vector<float> sorted = norm;
  std::sort(sorted.begin(), sorted.end());
  auto q = [&](double p) { return sorted[static_cast<std::size_t>(p * static_cast<double>(V - 1) + 0.5)]; };
  s.min = sorted.front();
  s.max = sorted.back();
  s.p01 = q(0.01);
  s.p05 = q(0.05);
  s.p25 = q(0.25);
  s.median = q(0.5);
  s.p75 = q(0.75);
  s.p95 = q(0.95);
  s.p99 = q(0.99);
  s.mean = std::accumulate(norm.begin(), norm.end(), 0.0) / static_cast<double>(V);
  std::vector<float> dev(V);
  for (std::size_t i = 0; i < V; ++i) dev[i] = std::fabs(norm[i] - s.median);
  std::nth_element(dev.begin(), dev.begin() + static_cast<std::ptrdiff_t>(V / 2), dev.end());
  s.mad = dev[V / 2];
  s.small_threshold = std::max(0.0f, s.median - 4.0f * 1.4826f * s.mad);
  std::vector<TokenId> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    return norm[static_cast<std::size_t>(a)] < norm[static_cast<std::size_t>(b)];
  });
  for (TokenId id : order) {
    float n = norm[static_cast<std::size_t>(id)];
    if (n == 0) ++s.n_zero;
    if (n <= s.small_threshold) {
      ++s.n_small;
      if (s.smallest.size() < top) s.smallest.emplace_back(id, n);
    }
  }
  // Duplicate rows: group by a hash of the bytes, then confirm byte by byte.
  std::unordered_map<std::uint64_t, std::vector<TokenId>> by_hash;
  by_hash.reserve(V);
  for (std::size_t i = 0; i < V; ++i)
    by_hash[hash_bytes(e.data() + i * e.row_bytes(), e.row_bytes())].push_back(static_cast<TokenId>(i));
  std::vector<std::vector<TokenId>> groups;
  for (auto& [h, ids] : by_hash) {
    if (ids.size() < 2) continue;
    std::vector<bool> used(ids.size(), false);
    for (std::size_t a = 0; a < ids.size(); ++a) {
      if (used[a]) continue;
      std::vector<TokenId> g{ids[a]};
      const std::byte* ra = e.data() + static_cast<std::size_t>(ids[a]) * e.row_bytes();
      for (std::size_t b = a + 1; b < ids.size(); ++b)
        if (!used[b] && std::memcmp(ra, e.data() + static_cast<std::size_t>(ids[b]) * e.row_bytes(), e.row_bytes()) == 0) {
          used[b] = true;
          g.push_back(ids[b]);
        }
      if (g.size() > 1) {
        std::sort(g.begin(), g.end());
        groups.push_back(std::move(g));
      }
    }
  }
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    return a.size() != b.size() ? a.size() > b.size() : a.front() < b.front();
  });
  s.n_duplicate_groups = groups.size();
  for (const auto& g : groups) s.n_duplicate_rows += g.size();
  if (groups.size() > top) groups.resize(top);
  s.duplicates = std::move(groups);

  // Nearly parallel rows: bucket unit rows by their rounded coordinates, then keep the
  // members of each bucket within cosine 0.999 of its first row.
  const auto n = static_cast<std::size_t>(e.n_embd());
  std::unordered_map<std::uint64_t, std::vector<TokenId>> buckets;
  std::vector<float> a(n), b(n);
  std::vector<std::int8_t> key(n);
  for (std::size_t i = 0; i < V; ++i) {
    if (norm[i] == 0) continue;
    e.row(static_cast<TokenId>(i), a.data());
    for (std::size_t j = 0; j < n; ++j)
      key[j] = static_cast<std::int8_t>(std::lround(std::clamp(a[j] / norm[i] * 16.0f, -127.0f, 127.0f)));
    buckets[hash_bytes(key.data(), n)].push_back(static_cast<TokenId>(i));
  }
  // The grid cuts a cluster where it crosses a cell boundary, so a bucket only proposes a
  // direction: the group is every row within cosine 0.999 of the bucket's first row (one
  // pass over the matrix for each of the 64 largest buckets).
  std::vector<std::vector<TokenId>> seeds;
  for (auto& [h, ids] : buckets)
    if (ids.size() > 1) seeds.push_back(std::move(ids));
  std::sort(seeds.begin(), seeds.end(), [](const auto& x, const auto& y) {
    return x.size() != y.size() ? x.size() > y.size() : x.front() < y.front();
  });
  if (seeds.size() > 64) seeds.resize(64);
  std::vector<bool> taken(V, false);
  std::vector<float> pdots(V), unused(V);
  std::vector<std::vector<TokenId>> par;
  for (const auto& seed : seeds) {
    auto rep = static_cast<std::size_t>(seed.front());
    if (taken[rep]) continue;
    e.row(seed.front(), a.data());
    e.dots_and_norms(a.data(), pdots.data(), unused.data(), threads);
    std::vector<TokenId> g;
    for (std::size_t i = 0; i < V; ++i)
      if (!taken[i] && norm[i] > 0 && static_cast<double>(pdots[i]) >= 0.999 * static_cast<double>(norm[i]) * static_cast<double>(norm[rep])) {
        g.push_back(static_cast<TokenId>(i));
        taken[i] = true;
      }
    if (g.size() > 1) par.push_back(std::move(g));
  }
  std::sort(par.begin(), par.end(), [](const auto& x, const auto& y) {
    return x.size() != y.size() ? x.size() > y.size() : x.front() < y.front();
  });
  s.n_parallel_groups = par.size();
  for (const auto& g : par) s.n_parallel_rows += g.size();
  if (par.size() > top) par.resize(top);
  s.parallel = std::move(par);
  return s;
}

std::vector<Neighbor> nearest(const Embedding& e, const float* query, std::size_t k, TokenId exclude, int threads) {
  const auto V = static_cast<std::size_t>(e.n_vocab());
  std::vector<float> dots(V), norms2(V);
  e.dots_and_norms(query, dots.data(), norms2.data(), threads);
  double qn = 0;
  for (std::int64_t j = 0; j < e.n_embd(); ++j) qn += static_cast<double>(query[j]) * static_cast<double>(query[j]);
  const auto qnorm = static_cast<float>(std::sqrt(qn));
  std::vector<Neighbor> all;
  all.reserve(V);
  for (std::size_t i = 0; i < V; ++i) {
    if (static_cast<TokenId>(i) == exclude) continue;
    float d = std::sqrt(norms2[i]) * qnorm;
    all.push_back({static_cast<TokenId>(i), d > 0 ? dots[i] / d : 0.0f});
  }
  auto better = [](const Neighbor& a, const Neighbor& b) { return a.cosine != b.cosine ? a.cosine > b.cosine : a.id < b.id; };
  k = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), better);
  all.resize(k);
  return all;
}

}  // namespace lmp::embed
