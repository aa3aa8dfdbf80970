#include "lmpipe/model/transformer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

namespace lmp::model {

using tensor_io::MetaValue;
using tensor_io::TensorFile;
using tensor_io::TensorInfo;

namespace {

// How prompt processing multiplies n tokens by weights of type t: a few tokens read each
// row once for all (matmul_few); more go to the AVX-512 GEMMs, int8 ones (q8_0; q4_0 and
// the k-quants and iq4 types unpacked to q8_0 blocks) or f32 ones (f32, f16, bf16; q4_1,
// q5_0 and q5_1; the others without VNNI, converted as they are packed); without AVX-512, rows converted to f32 (matmul).
enum class Product { few, gemm_f32, gemm_q8, generic };
Product product_for(DType t, std::int64_t n) {
  if (matmul_few_available(t, n)) return Product::few;
  if (gemm_q8_takes(t)) return Product::gemm_q8;
  if ((t == DType::f32 || t == DType::f16 || t == DType::bf16 || is_k_quant(t) || is_iq4(t) || is_q45_legacy(t)) &&
      gemm_f32_available())
    return Product::gemm_f32;
  return Product::generic;
}

std::optional<std::int64_t> meta_int(const TensorFile& f, const std::string& key) {
  const MetaValue* v = f.meta(key);
  return v ? v->as_int() : std::nullopt;
}
std::optional<double> meta_num(const TensorFile& f, const std::string& key) {
  const MetaValue* v = f.meta(key);
  return v ? v->as_double() : std::nullopt;
}

Result<Weight> weight(const TensorFile& f, const std::string& name, std::int64_t rows, std::int64_t cols) {
  const TensorInfo* t = f.find(name);
  if (!t) return make_error(Errc::parse, "{}: tensor '{}' is missing", f.name(), name);
  if (t->shape != std::vector<std::int64_t>{rows, cols})
    return make_error(Errc::parse, "{}: tensor '{}' has shape [{}], expected [{}, {}]", f.name(), name,
                      fmt::join(t->shape, ", "), rows, cols);
  switch (t->dtype) {
    case DType::f32: case DType::f16: case DType::bf16: case DType::q8_0: case DType::q4_0:
    case DType::q2_K: case DType::q3_K: case DType::q4_K: case DType::q5_K: case DType::q6_K:
    case DType::iq4_nl: case DType::iq4_xs: case DType::q4_1: case DType::q5_0: case DType::q5_1: break;
    default:
      return make_error(Errc::unsupported,
                        "{}: tensor '{}' is {}; weights must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, "
                        "q4_K, q5_K, q6_K, iq4_nl or iq4_xs",
                        f.name(), name, dtype_name(t->dtype));
  }
  Weight w;
  w.dtype = t->dtype;
  w.data = f.data(*t);
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = dtype_bytes(t->dtype, static_cast<std::size_t>(cols));
  return w;
}

// A vector (norm weights, biases) as f32, converted from the file's dtype.
Result<std::vector<float>> vec(const TensorFile& f, const std::string& name, std::int64_t n, bool optional = false) {
  const TensorInfo* t = f.find(name);
  if (!t) {
    if (optional) return std::vector<float>{};
    return make_error(Errc::parse, "{}: tensor '{}' is missing", f.name(), name);
  }
  if (t->shape != std::vector<std::int64_t>{n} || !dtype_info(t->dtype).is_float || dtype_info(t->dtype).block != 1)
    return make_error(Errc::parse, "{}: tensor '{}' must be a float vector of {} elements", f.name(), name, n);
  std::vector<float> v(static_cast<std::size_t>(n));
  to_f32(t->dtype, f.data(*t), v.data(), v.size());
  return v;
}

}  // namespace

Result<std::unique_ptr<Transformer>> Transformer::load(const TensorFile& f) {
  std::unique_ptr<Transformer> m(new Transformer());
  Config& c = m->cfg_;
  const MetaValue* arch = f.meta("general.architecture");
  if (!arch || arch->type != tensor_io::MetaType::string)
    return make_error(Errc::parse, "{}: no general.architecture: not a model file", f.name());
  c.arch = arch->s;
  if (c.arch != "llama" && c.arch != "qwen2")
    return make_error(Errc::unsupported, "{}: architecture '{}' is not supported (llama, qwen2 are)", f.name(), c.arch);
  auto need = [&](const std::string& key) -> Result<int> {
    auto v = meta_int(f, c.arch + "." + key);
    if (!v || *v <= 0 || *v > (1 << 30)) return make_error(Errc::parse, "{}: {}.{} is missing or invalid", f.name(), c.arch, key);
    return static_cast<int>(*v);
  };
  LMP_ASSIGN(c.n_embd, need("embedding_length"));
  LMP_ASSIGN(c.n_layer, need("block_count"));
  LMP_ASSIGN(c.n_head, need("attention.head_count"));
  LMP_ASSIGN(c.n_ff, need("feed_forward_length"));
  c.n_kv_head = static_cast<int>(meta_int(f, c.arch + ".attention.head_count_kv").value_or(c.n_head));
  c.n_ctx_train = static_cast<int>(meta_int(f, c.arch + ".context_length").value_or(2048));
  c.rope_theta = static_cast<float>(meta_num(f, c.arch + ".rope.freq_base").value_or(10000.0));
  c.rms_eps = static_cast<float>(meta_num(f, c.arch + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
  c.rope = c.arch == "qwen2" ? RopeLayout::halves : RopeLayout::adjacent;
  if (c.n_embd % c.n_head || c.n_kv_head <= 0 || c.n_head % c.n_kv_head || c.head_dim() % 2)
    return make_error(Errc::parse, "{}: {} heads ({} kv) do not divide n_embd {} into even head sizes", f.name(), c.n_head,
                      c.n_kv_head, c.n_embd);
  if (c.head_dim() > kMaxHeadDim)
    return make_error(Errc::unsupported, "{}: head_dim {} is over the {} supported", f.name(), c.head_dim(), kMaxHeadDim);
  if (auto rd = meta_int(f, c.arch + ".rope.dimension_count"); rd && *rd != c.head_dim())
    return make_error(Errc::unsupported, "{}: partial rotary embedding ({} of {} dimensions) is not supported", f.name(),
                      *rd, c.head_dim());
  if (f.tensors().empty())
    return make_error(Errc::parse, "{}: the file holds no tensors (a vocabulary-only file?): no model to run", f.name());
  const TensorInfo* emb = f.find("token_embd.weight");
  if (!emb) return make_error(Errc::parse, "{}: no token_embd.weight tensor", f.name());
  if (emb->shape.size() != 2 || emb->shape[1] != c.n_embd)
    return make_error(Errc::parse, "{}: token_embd.weight must be [n_vocab, {}]", f.name(), c.n_embd);
  c.n_vocab = static_cast<int>(emb->shape[0]);
  LMP_ASSIGN(m->embedding_, embed::Embedding::view(emb->dtype, f.data(*emb), c.n_vocab, c.n_embd));
  if (f.find("output.weight")) {
    LMP_ASSIGN(m->output_, weight(f, "output.weight", c.n_vocab, c.n_embd));
  } else {  // tied: the embedding matrix is the output projection
    c.tied = true;
    LMP_ASSIGN(m->output_, weight(f, "token_embd.weight", c.n_vocab, c.n_embd));
  }
  LMP_ASSIGN(m->output_norm_, vec(f, "output_norm.weight", c.n_embd));
  const int kv = c.kv_dim();
  for (int l = 0; l < c.n_layer; ++l) {
    LayerWeights w;
    auto n = [&](const char* s) { return fmt::format("blk.{}.{}", l, s); };
    LMP_ASSIGN(w.attn_norm, vec(f, n("attn_norm.weight"), c.n_embd));
    LMP_ASSIGN(w.ffn_norm, vec(f, n("ffn_norm.weight"), c.n_embd));
    LMP_ASSIGN(w.wq, weight(f, n("attn_q.weight"), c.n_embd, c.n_embd));
    LMP_ASSIGN(w.wk, weight(f, n("attn_k.weight"), kv, c.n_embd));
    LMP_ASSIGN(w.wv, weight(f, n("attn_v.weight"), kv, c.n_embd));
    LMP_ASSIGN(w.wo, weight(f, n("attn_output.weight"), c.n_embd, c.n_embd));
    LMP_ASSIGN(w.w_gate, weight(f, n("ffn_gate.weight"), c.n_ff, c.n_embd));
    LMP_ASSIGN(w.w_up, weight(f, n("ffn_up.weight"), c.n_ff, c.n_embd));
    LMP_ASSIGN(w.w_down, weight(f, n("ffn_down.weight"), c.n_embd, c.n_ff));
    LMP_ASSIGN(w.bq, vec(f, n("attn_q.bias"), c.n_embd, true));
    LMP_ASSIGN(w.bk, vec(f, n("attn_k.bias"), kv, true));
    LMP_ASSIGN(w.bv, vec(f, n("attn_v.bias"), kv, true));
    for (const Weight* x : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down})
      m->quantized_ |= is_quantized(x->dtype);
    m->layers_.push_back(std::move(w));
  }
  m->quantized_ |= is_quantized(m->output_.dtype);
  const auto E = static_cast<std::size_t>(c.n_embd), F = static_cast<std::size_t>(c.n_ff);
  m->x_.resize(E);
  m->xb_.resize(E);
  m->xb2_.resize(E);
  m->q_.resize(E);
  m->k_.resize(static_cast<std::size_t>(kv));
  m->v_.resize(static_cast<std::size_t>(kv));
  m->hb_.resize(F);
  m->hb2_.resize(F);
  return m;
}

std::uint64_t Transformer::weight_bytes_per_token() const {
  std::uint64_t b = output_.bytes();
  for (const auto& l : layers_)
    b += l.wq.bytes() + l.wk.bytes() + l.wv.bytes() + l.wo.bytes() + l.w_gate.bytes() + l.w_up.bytes() + l.w_down.bytes();
  return b;
}

std::string Transformer::describe() const {
  const Config& c = cfg_;
  return fmt::format("{}: {} layer{}, n_embd {}, {} heads ({} kv, head_dim {}), n_ff {}, vocab {}, {} output, {} weights",
                     c.arch, c.n_layer, c.n_layer == 1 ? "" : "s", c.n_embd, c.n_head, c.n_kv_head, c.head_dim(), c.n_ff, c.n_vocab,
                     c.tied ? "tied" : "own", dtype_name(layers_.empty() ? output_.dtype : layers_[0].wq.dtype));
}

// Several matrix-vector products of the same input, spread over the pool by row ranges.
void Transformer::matvecs(std::span<const std::pair<const Weight*, float*>> jobs, const float* x, ThreadPool& pool) {
  std::int64_t total = 0;
  for (const auto& [w, out] : jobs) total += w->rows;
  bool quant = false;
  for (const auto& [w, out] : jobs) quant |= is_quantized(w->dtype);
  if (quant) quantize_activation(xq_, x, static_cast<std::size_t>(jobs[0].first->cols));
  // Chunks of about 64 KB of weights each, at least one per thread.
  std::uint64_t bytes = 0;
  for (const auto& [w, out] : jobs) bytes += w->bytes();
  std::size_t chunks = static_cast<std::size_t>(pool.size());
  if (bytes < (1u << 16)) chunks = 1;  // too small to share
  pool.run(chunks, [&](std::size_t i) {
    std::int64_t lo = total * static_cast<std::int64_t>(i) / static_cast<std::int64_t>(chunks);
    std::int64_t hi = total * static_cast<std::int64_t>(i + 1) / static_cast<std::int64_t>(chunks);
    std::int64_t base = 0;
    for (const auto& [w, out] : jobs) {
      std::int64_t a = std::max(lo, base), b = std::min(hi, base + w->rows);
      if (a < b) matvec(out + (a - base), *w, x, quant ? &xq_ : nullptr, a - base, b - base);
      base += w->rows;
    }
  });
}

// Heads [h0, h1) of the query at `pos` over cached tokens [t_lo, t_hi) of `blocks`: q and
// out (n_head, head_dim) hold every head; att (h1 - h0, ld ≥ t_hi) takes the weights at
// the tokens' indices; qbuf ((h1 - h0) · head_dim) is scratch; stats, if given, takes each
// head's softmax maximum and sum. Up to 16 heads at a time read each block row by row,
// their slices together: the scores, a softmax per head, the values. Keys of a block with
// q_pos >= 0 (the sinks, after eviction) meet the query rotated to q_pos instead of pos.
void Transformer::attend_heads(int h0, int h1, int pos, int t_lo, int t_hi, const float* q, float* out, float* att,
                               std::size_t ld, float* qbuf, SoftmaxStats* stats, const kv::RowFormat& fmt,
                               const std::vector<kv::KvBlock>& blocks) const {
  const Config& c = cfg_;
  const int hd = c.head_dim(), group = c.n_head / c.n_kv_head;
  const auto uhd = static_cast<std::size_t>(hd);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  constexpr int kHeads = kv::kHeadsPerPass;  // one kernel pass per group of heads
  // The blocks' rows within [t_lo, t_hi): f(block, first row in the block, rows, token).
  auto each_block = [&](auto&& f) {
    int t = 0;
    for (std::size_t bi = 0; bi < blocks.size() && t < t_hi; ++bi) {
      const kv::KvBlock& b = blocks[bi];
      const int s = std::max(t, t_lo), e = std::min(t + b.size(), t_hi);
      if (e > s) f(bi, b.begin + (s - t), e - s, s);
      t += b.size();
    }
  };
  for (int g0 = h0; g0 < h1; g0 += kHeads) {
    const int H = std::min(kHeads, h1 - g0);
    int off[kHeads];
    float* a[kHeads];
    float* o[kHeads];
    const float* qq[kHeads];
    for (int i = 0; i < H; ++i) {
      const int h = g0 + i;
      off[i] = (h / group) * hd;
      a[i] = att + static_cast<std::size_t>(h - h0) * ld;
      o[i] = out + static_cast<std::size_t>(h) * uhd;
      std::fill(o[i], o[i] + hd, 0.0f);
    }
    // The next block's rows (paged blocks lie anywhere: the kernels fetch into them ahead).
    auto ahead = [&](std::size_t bi, int t_next, bool keys) -> kv::Ahead {
      if (bi + 1 >= blocks.size() || t_next >= t_hi) return {};
      const kv::KvBlock& b = blocks[bi], &nb = blocks[bi + 1];
      const kv::RowFormat* f = keys ? b.kfmt : b.vfmt;
      if (f != (keys ? nb.kfmt : nb.vfmt)) return {};  // (KIVI: f32 window after sealed int4)
      const std::size_t bytes = (f ? *f : fmt).bytes;
      return {(keys ? nb.k : nb.v) + static_cast<std::size_t>(nb.begin) * bytes, std::min(nb.size(), t_hi - t_next)};
    };
    each_block([&](std::size_t bi, int row, int m, int t) {
      const kv::KvBlock& b = blocks[bi];
      const kv::RowFormat& kf = b.kfmt ? *b.kfmt : fmt;
      const bool moved = b.q_pos >= 0 && b.q_pos != pos;
      float* at[kHeads];
      for (int i = 0; i < H; ++i) {
        at[i] = a[i] + t;
        const float* src = q + static_cast<std::size_t>(g0 + i) * uhd;
        qq[i] = src;
        if (!moved && !b.kscale) continue;
        float* dst = qbuf + static_cast<std::size_t>(g0 + i - h0) * uhd;
        std::copy(src, src + hd, dst);
        if (moved) rope(dst, 1, hd, b.q_pos - pos, c.rope_theta, c.rope);  // rotations compose: pos + (q_pos - pos)
        if (b.kscale)  // per-channel key scales (int4-kivi): q · (s ⊙ k) = (q ⊙ s) · k
          for (int k = 0; k < hd; ++k) dst[k] *= f16_to_f32(b.kscale[off[i] + k]);
        qq[i] = dst;
      }
      kv::row_scores(kf, at, qq, off, H, b.k + static_cast<std::size_t>(row) * kf.bytes, m, hd, scale, ahead(bi, t + m, true));
    });
    for (int i = 0; i < H; ++i) {
      const SoftmaxStats st = softmax(a[i] + t_lo, t_hi - t_lo);
      if (stats) stats[g0 + i - h0] = st;
    }
    each_block([&](std::size_t bi, int row, int m, int t) {
      const kv::KvBlock& b = blocks[bi];
      const kv::RowFormat& vf = b.vfmt ? *b.vfmt : fmt;
      const float* at[kHeads];
      for (int i = 0; i < H; ++i) at[i] = a[i] + t;
      kv::row_accumulate(vf, o, at, off, H, b.v + static_cast<std::size_t>(row) * vf.bytes, m, hd, ahead(bi, t + m, false));
    });
  }
}

// The decode step's attention. The keys are taken in parts of kAttnPart tokens (their
// number depends on the context alone, not on the threads, so neither do the bits), each
// part with its own softmax and weighted sum of values, all of a row's heads read
// together; the parts are then combined, each weighted by its share of the exponentials'
// sum (a context of one part: its result as is). Threads take (part, heads) pairs: with
// fewer parts than threads the heads are split as well, whole kv groups where possible.
void Transformer::attention(int layer, int pos, kv::SeqId seq, const kv::KvCache& cache, ThreadPool& pool) {
  const Config& c = cfg_;
  cache.blocks(layer, seq, blocks_);
  int total = 0;
  for (const auto& b : blocks_) total += b.size();
  const auto n = static_cast<std::size_t>(total), E = static_cast<std::size_t>(c.n_embd),
             NH = static_cast<std::size_t>(c.n_head), hd = static_cast<std::size_t>(c.head_dim());
  constexpr std::size_t kAttnPart = 256;
  const std::size_t parts = std::max<std::size_t>(1, (n + kAttnPart - 1) / kAttnPart);
  att_.resize(NH * n);
  qbuf_.resize(parts * E);
  part_out_.resize(parts > 1 ? parts * E : 0);
  part_stats_.resize(parts * NH);
  const bool serial = static_cast<std::int64_t>(n) * c.n_embd < (1 << 15);
  const auto T = static_cast<std::size_t>(pool.size());
  const std::size_t splits = serial ? 1 : std::min(NH, std::max<std::size_t>(1, (T + parts - 1) / parts));
  const int group = c.n_head / c.n_kv_head;
  auto bound = [&](std::size_t i) {  // heads [bound(i), bound(i + 1)) form split i
    if (static_cast<std::size_t>(c.n_kv_head) >= splits)
      return static_cast<int>(static_cast<std::size_t>(c.n_kv_head) * i / splits) * group;
    return static_cast<int>(NH * i / splits);
  };
  auto item = [&](std::size_t k) {
    const std::size_t p = k / splits, sp = k % splits;
    const int h0 = bound(sp), h1 = bound(sp + 1);
    const auto t_lo = static_cast<int>(p * kAttnPart), t_hi = static_cast<int>(std::min(n, (p + 1) * kAttnPart));
    float* out = parts > 1 ? part_out_.data() + p * E : xb_.data();
    attend_heads(h0, h1, pos, t_lo, t_hi, q_.data(), out, att_.data() + static_cast<std::size_t>(h0) * n, n,
                 qbuf_.data() + p * E + static_cast<std::size_t>(h0) * hd, part_stats_.data() + p * NH + static_cast<std::size_t>(h0),
                 cache.format(), blocks_);
  };
  if (serial) {
    for (std::size_t k = 0; k < parts * splits; ++k) item(k);
  } else {
    pool.run(parts * splits, item);
  }
  if (parts == 1) return;
  for (std::size_t h = 0; h < NH; ++h) {
    float m = part_stats_[h].max;
    for (std::size_t p = 1; p < parts; ++p) m = std::max(m, part_stats_[p * NH + h].max);
    float z = 0;
    for (std::size_t p = 0; p < parts; ++p) {
      SoftmaxStats& st = part_stats_[p * NH + h];
      st.sum *= std::exp(st.max - m);  // the part's exponentials on the common maximum
      z += st.sum;
    }
    float* out = xb_.data() + h * hd;
    std::fill(out, out + hd, 0.0f);
    for (std::size_t p = 0; p < parts; ++p) {
      const float w = part_stats_[p * NH + h].sum / z;
      const float* o = part_out_.data() + p * E + h * hd;
      for (std::size_t i = 0; i < hd; ++i) out[i] += w * o[i];
    }
  }
}

void Transformer::attention_tiles(std::int64_t n, int total, const kv::RowFormat& fmt, ThreadPool& pool) {
  const Config& c = cfg_;
  const auto hd = static_cast<std::size_t>(c.head_dim()), E = static_cast<std::size_t>(c.n_embd);
  const int G = c.n_head / c.n_kv_head;  // query heads per kv head
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  rows_.clear();
  for (const kv::KvBlock& b : blocks_) {
    const kv::RowFormat* kf = b.kfmt ? b.kfmt : &fmt;
    const kv::RowFormat* vf = b.vfmt ? b.vfmt : &fmt;
    for (int t = b.begin; t < b.end; ++t)
      rows_.push_back({b.k + static_cast<std::size_t>(t) * kf->bytes, b.v + static_cast<std::size_t>(t) * vf->bytes, kf, vf,
                       b.kscale});
  }
  // One kv head at a time, its keys and values dequantized to f32 (KIVI's per-channel key
  // scales applied) and packed for the micro-kernel: keys in chunks of 32, Kt (hd, 32)
  // each; values in panels of 32 columns, one row of 32 per key. Scratch of
  // total · head_dim · 8 bytes, not a copy of the layer's cache.
  const auto keys = static_cast<std::size_t>(total);
  const std::size_t chunks = (keys + kAttnKeys - 1) / kAttnKeys, keys_pad = chunks * kAttnKeys;
  const std::size_t panels = (hd + kAttnKeys - 1) / kAttnKeys;
  kpack_.resize(chunks * hd * kAttnKeys);
  vpack_.resize(panels * keys_pad * kAttnKeys);
  auto kt = [&](std::size_t chunk) { return kpack_.data() + chunk * hd * kAttnKeys; };
  auto vp = [&](std::size_t p) { return vpack_.data() + p * keys_pad * kAttnKeys; };
  // A tile: bt tokens × the G query heads of the kv head, about 64 rows, fewer tokens
  // when that leaves threads without work.
  const auto T = static_cast<std::int64_t>(pool.size());
  std::int64_t bt = std::max(1, 64 / G);
  while (bt > 1 && (n + bt - 1) / bt < 4 * T) bt /= 2;
  const std::int64_t n_tiles = (n + bt - 1) / bt;
  tiles_.resize(static_cast<std::size_t>(T));
  for (std::size_t g = 0; g < static_cast<std::size_t>(c.n_kv_head); ++g) {
    const int off = static_cast<int>(g * hd);
    pool.run(chunks, [&](std::size_t chunk) {
      const std::size_t c0 = chunk * kAttnKeys, m = std::min(kAttnKeys, keys - c0);
      float rows[kAttnKeys * kMaxHeadDim], v[kMaxHeadDim];
      for (std::size_t j = 0; j < m; ++j) {
        const CacheRow& r = rows_[c0 + j];
        float* k = rows + j * hd;
        kv::load_slice(*r.kfmt, k, r.k, off, static_cast<int>(hd));
        if (r.kscale)
          for (std::size_t i = 0; i < hd; ++i) k[i] *= f16_to_f32(r.kscale[static_cast<std::size_t>(off) + i]);
        kv::load_slice(*r.vfmt, v, r.v, off, static_cast<int>(hd));
        for (std::size_t i = 0; i < hd; ++i) vp(i / kAttnKeys)[(c0 + j) * kAttnKeys + i % kAttnKeys] = v[i];
      }
      pack_keys(kt(chunk), rows, m, hd);
    });
    std::atomic<std::int64_t> next{0};
    pool.run(static_cast<std::size_t>(T), [&](std::size_t slot) {
      TileScratch& ts = tiles_[slot];
      // The last tiles see the most keys: handed out first.
      for (std::int64_t tile; (tile = next.fetch_add(1)) < n_tiles;) {
        const std::int64_t t0 = (n_tiles - 1 - tile) * bt, t1 = std::min(n, t0 + bt);
        const auto rows = static_cast<std::size_t>((t1 - t0) * G);
        auto visible = [&](std::int64_t t) { return static_cast<std::size_t>(total - n + t + 1); };
        const std::size_t cmax = visible(t1 - 1);
        ts.q.resize(rows * hd);
        ts.o.resize(rows * hd);
        ts.s.resize(rows * cmax);
        for (std::int64_t t = t0; t < t1; ++t)  // row (t - t0) · G + j: token t, head g · G + j
          std::copy_n(bq_.data() + static_cast<std::size_t>(t) * E + g * static_cast<std::size_t>(G) * hd, G * hd,
                      ts.q.data() + static_cast<std::size_t>((t - t0) * G) * hd);
        for (std::size_t c0 = 0; c0 < cmax; c0 += kAttnKeys)
          attn_scores_f32(ts.s.data() + c0, cmax, ts.q.data(), rows, kt(c0 / kAttnKeys), std::min(kAttnKeys, cmax - c0), hd);
        for (std::size_t r = 0; r < rows; ++r) {
          float* s = ts.s.data() + r * cmax;
          const std::size_t vis = visible(t0 + static_cast<std::int64_t>(r) / G);
          for (std::size_t j = 0; j < vis; ++j) s[j] *= scale;
          softmax(s, static_cast<int>(vis));
          std::fill(s + vis, s + cmax, 0.0f);  // keys after the token: weight 0
        }
        // The values 64 keys at a time, each panel's columns.
        for (std::size_t c0 = 0; c0 < cmax; c0 += 2 * kAttnKeys)
          for (std::size_t p = 0; p < panels; ++p)
            attn_values_f32(ts.o.data() + p * kAttnKeys, hd, std::min(kAttnKeys, hd - p * kAttnKeys), ts.s.data() + c0,
                            cmax, rows, vp(p) + c0 * kAttnKeys, std::min(2 * kAttnKeys, cmax - c0), c0 > 0);
        for (std::int64_t t = t0; t < t1; ++t)
          std::copy_n(ts.o.data() + static_cast<std::size_t>((t - t0) * G) * hd, G * hd,
                      bxb_.data() + static_cast<std::size_t>(t) * E + g * static_cast<std::size_t>(G) * hd);
      }
    });
  }
}

Status Transformer::forward(TokenId token, int pos, kv::KvCache& cache, float* logits, ThreadPool& pool, kv::SeqId seq) {
  const Config& c = cfg_;
  if (token < 0 || token >= c.n_vocab)
    return make_error(Errc::out_of_range, "token id {} is outside the model's vocabulary (0..{})", token, c.n_vocab - 1);
  embedding_.row(token, x_.data());
  const auto E = static_cast<std::size_t>(c.n_embd);
  for (int l = 0; l < c.n_layer; ++l) {
    LayerWeights& w = layers_[static_cast<std::size_t>(l)];
    rmsnorm(xb_.data(), x_.data(), w.attn_norm.data(), c.n_embd, c.rms_eps);
    const std::pair<const Weight*, float*> qkv[] = {{&w.wq, q_.data()}, {&w.wk, k_.data()}, {&w.wv, v_.data()}};
    matvecs(qkv, xb_.data(), pool);
    if (!w.bq.empty())
      for (std::size_t i = 0; i < E; ++i) q_[i] += w.bq[i];
    if (!w.bk.empty())
      for (std::size_t i = 0; i < k_.size(); ++i) k_[i] += w.bk[i];
    if (!w.bv.empty())
      for (std::size_t i = 0; i < v_.size(); ++i) v_[i] += w.bv[i];
    rope(q_.data(), c.n_head, c.head_dim(), pos, c.rope_theta, c.rope);
    rope(k_.data(), c.n_kv_head, c.head_dim(), pos, c.rope_theta, c.rope);
    LMP_TRY(cache.append(l, seq, k_, v_));
    attention(l, pos, seq, cache, pool);  // → xb_ (n_head × head_dim)
    if (probe_) probe_->insert(probe_->end(), xb_.begin(), xb_.end());
    const std::pair<const Weight*, float*> o[] = {{&w.wo, xb2_.data()}};
    matvecs(o, xb_.data(), pool);
    for (std::size_t i = 0; i < E; ++i) x_[i] += xb2_[i];
    rmsnorm(xb_.data(), x_.data(), w.ffn_norm.data(), c.n_embd, c.rms_eps);
    const std::pair<const Weight*, float*> gu[] = {{&w.w_gate, hb_.data()}, {&w.w_up, hb2_.data()}};
    matvecs(gu, xb_.data(), pool);
    swiglu(hb_.data(), hb2_.data(), hb_.size());  // SwiGLU: silu(gate) · up
    const std::pair<const Weight*, float*> d[] = {{&w.w_down, xb2_.data()}};
    matvecs(d, hb_.data(), pool);
    for (std::size_t i = 0; i < E; ++i) x_[i] += xb2_[i];
  }
  rmsnorm(xb_.data(), x_.data(), output_norm_.data(), c.n_embd, c.rms_eps);
  const std::pair<const Weight*, float*> out[] = {{&output_, logits}};
  matvecs(out, xb_.data(), pool);
  return {};
}

void Transformer::matmuls(std::span<const Mm> jobs, const float* x, std::int64_t n, ThreadPool& pool) {
  const auto T = static_cast<std::size_t>(pool.size());
  scratch_.resize(T);
  gemm_.resize(T);
  // q8_0 and q4_0 weights multiply int8 activations: X quantized once for all the jobs
  // (they share it), the tokens split between the threads.
  bool int8 = false, few_int8 = false;
  for (const auto& j : jobs) {
    const Product p = product_for(j.w->dtype, n);
    few_int8 = few_int8 || (p == Product::few && is_quantized(j.w->dtype));
    int8 = int8 || p == Product::gemm_q8;
  }
  if (few_int8) {  // a few tokens: each quantized as the decode step quantizes it
    const auto cols = static_cast<std::size_t>(jobs[0].w->cols);
    bxv_.resize(static_cast<std::size_t>(n));
    for (std::size_t t = 0; t < bxv_.size(); ++t) quantize_activation(bxv_[t], x + t * cols, cols);
  }
  if (int8) {
    const std::int64_t cols = jobs[0].w->cols;
    prepare_batch(bxq_, n, cols);
    pool.run(T, [&](std::size_t i) {
      quantize_batch(bxq_, x, cols, n * static_cast<std::int64_t>(i) / static_cast<std::int64_t>(T),
                     n * static_cast<std::int64_t>(i + 1) / static_cast<std::int64_t>(T));
    });
  }
  for (const auto& j : jobs) {
    // Row ranges in multiples of 4 (the kernels' blocks), one per thread.
    const std::int64_t rows = j.w->rows;
    const Product p = product_for(j.w->dtype, n);
    pool.run(T, [&](std::size_t i) {
      std::int64_t lo = rows * static_cast<std::int64_t>(i) / static_cast<std::int64_t>(T) / 4 * 4;
      std::int64_t hi = i + 1 == T ? rows : rows * static_cast<std::int64_t>(i + 1) / static_cast<std::int64_t>(T) / 4 * 4;
      if (lo >= hi) return;
      switch (p) {
        case Product::few: return matmul_few(j.out + lo, j.ld, *j.w, x, bxv_.data(), n, lo, hi, scratch_[i]);
        case Product::gemm_q8: return gemm_q8(j.out + lo, j.ld, *j.w, bxq_, lo, hi, gemm_[i]);
        case Product::gemm_f32: return gemm_f32(j.out + lo, j.ld, *j.w, x, n, lo, hi, gemm_[i]);
        case Product::generic: return matmul(j.out + lo, j.ld, *j.w, x, n, lo, hi, scratch_[i]);
      }
    });
  }
}

Status Transformer::forward_batch(std::span<const TokenId> tokens, int pos0, kv::KvCache& cache, float* logits,
                                  ThreadPool& pool, kv::SeqId seq, bool all_logits) {
  const Config& c = cfg_;
  const auto n = static_cast<std::int64_t>(tokens.size());
  const auto V = static_cast<std::size_t>(c.n_vocab);
  if (n == 0) return {};
  if (n == 1) return forward(tokens[0], pos0, cache, logits, pool, seq);
  if (cache.config().eviction != kv::Eviction::none && n > cache.room(seq)) {
    // Within a batch every token's keys are in the cache before attention; past the
    // cache's room they would evict keys that earlier tokens of the batch still see.
    const auto fit = static_cast<std::size_t>(std::max(cache.room(seq), 0));
    if (fit > 1) LMP_TRY(forward_batch(tokens.first(fit), pos0, cache, logits, pool, seq, all_logits));
    for (std::size_t i = fit > 1 ? fit : 0; i < tokens.size(); ++i)
      LMP_TRY(forward(tokens[i], pos0 + static_cast<int>(i), cache, all_logits ? logits + i * V : logits, pool, seq));
    return {};
  }
  const auto E = static_cast<std::size_t>(c.n_embd), F = static_cast<std::size_t>(c.n_ff),
             KV = static_cast<std::size_t>(c.kv_dim()), N = static_cast<std::size_t>(n);
  bx_.resize(N * E);
  bxb_.resize(N * E);
  bxb2_.resize(N * E);
  bq_.resize(N * E);
  bk_.resize(N * KV);
  bv_.resize(N * KV);
  bh_.resize(N * F);
  bh2_.resize(N * F);
  for (std::size_t t = 0; t < N; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.n_vocab)
      return make_error(Errc::out_of_range, "token id {} is outside the model's vocabulary (0..{})", tokens[t], c.n_vocab - 1);
    embedding_.row(tokens[t], bx_.data() + t * E);
  }
  batt_.resize(static_cast<std::size_t>(pool.size()));
  // The element-wise work between the products, split between the threads too (perf,
  // stories110M f16, 512 tokens on 2 threads: the idle workers' share of the samples went
  // from 12% to 7%).
  const auto T = static_cast<std::size_t>(pool.size());
  auto split = [&](std::size_t total, auto&& f) {
    pool.run(T, [&](std::size_t i) { f(total * i / T, total * (i + 1) / T); });
  };
  auto norm = [&](const std::vector<float>& weight) {
    split(N, [&](std::size_t a, std::size_t b) {
      for (std::size_t t = a; t < b; ++t) rmsnorm(bxb_.data() + t * E, bx_.data() + t * E, weight.data(), c.n_embd, c.rms_eps);
    });
  };
  auto residual = [&] {
    split(N * E, [&](std::size_t a, std::size_t b) {
      for (std::size_t i = a; i < b; ++i) bx_[i] += bxb2_[i];
    });
  };
  for (int l = 0; l < c.n_layer; ++l) {
    LayerWeights& w = layers_[static_cast<std::size_t>(l)];
    norm(w.attn_norm);
    const Mm qkv[] = {{&w.wq, bq_.data(), E}, {&w.wk, bk_.data(), KV}, {&w.wv, bv_.data(), KV}};
    matmuls(qkv, bxb_.data(), n, pool);
    split(N, [&](std::size_t a, std::size_t b) {
      for (std::size_t t = a; t < b; ++t) {
        float* q = bq_.data() + t * E;
        float* k = bk_.data() + t * KV;
        float* v = bv_.data() + t * KV;
        if (!w.bq.empty())
          for (std::size_t i = 0; i < E; ++i) q[i] += w.bq[i];
        if (!w.bk.empty())
          for (std::size_t i = 0; i < KV; ++i) k[i] += w.bk[i];
        if (!w.bv.empty())
          for (std::size_t i = 0; i < KV; ++i) v[i] += w.bv[i];
        const int pos = pos0 + static_cast<int>(t);
        rope(q, c.n_head, c.head_dim(), pos, c.rope_theta, c.rope);
        rope(k, c.n_kv_head, c.head_dim(), pos, c.rope_theta, c.rope);
      }
    });
    for (std::size_t t = 0; t < N; ++t)  // in order: the cache takes a sequence's tokens one after another
      LMP_TRY(cache.append(l, seq, std::span<const float>(bk_.data() + t * KV, KV), std::span<const float>(bv_.data() + t * KV, KV)));
    cache.blocks(l, seq, blocks_);
    int total = 0;
    for (const auto& b : blocks_) total += b.size();
    // Causal attention: token t sees the cached tokens before the batch and the batch's
    // first t + 1. As matrix products where the CPU has them and no block needs its own
    // query rotation (the sinks after eviction); else token by token, threads in turn.
    const bool tiled = gemm_f32_available() && std::none_of(blocks_.begin(), blocks_.end(), [](const kv::KvBlock& b) {
      return b.q_pos >= 0;
    });
    if (tiled) {
      attention_tiles(n, total, cache.format(), pool);
    } else pool.run(T, [&](std::size_t i) {
      for (std::size_t t = i; t < N; t += T) {
        const int pos = pos0 + static_cast<int>(t);
        const int visible = total - static_cast<int>(N) + static_cast<int>(t) + 1;
        const auto vis = static_cast<std::size_t>(visible);
        batt_[i].resize(static_cast<std::size_t>(c.n_head) * vis + E);  // scores, then the moved queries
        attend_heads(0, c.n_head, pos, 0, visible, bq_.data() + t * E, bxb_.data() + t * E, batt_[i].data(), vis,
                     batt_[i].data() + static_cast<std::size_t>(c.n_head) * vis, nullptr, cache.format(), blocks_);
      }
    });
    const Mm o[] = {{&w.wo, bxb2_.data(), E}};
    matmuls(o, bxb_.data(), n, pool);
    residual();
    norm(w.ffn_norm);
    const Mm gu[] = {{&w.w_gate, bh_.data(), F}, {&w.w_up, bh2_.data(), F}};
    matmuls(gu, bxb_.data(), n, pool);
    split(N * F, [&](std::size_t a, std::size_t b) { swiglu(bh_.data() + a, bh2_.data() + a, b - a); });
    const Mm d[] = {{&w.w_down, bxb2_.data(), E}};
    matmuls(d, bh_.data(), n, pool);
    residual();
  }
  if (all_logits) {  // every token's logits: (n, n_vocab), the output matrix read once per block
    norm(output_norm_);
    const Mm out[] = {{&output_, logits, V}};
    matmuls(out, bxb_.data(), n, pool);
    return {};
  }
  // Only the last token's logits are needed.
  std::copy(bx_.end() - static_cast<std::ptrdiff_t>(E), bx_.end(), x_.begin());
  rmsnorm(xb_.data(), x_.data(), output_norm_.data(), c.n_embd, c.rms_eps);
  const std::pair<const Weight*, float*> out[] = {{&output_, logits}};
  matvecs(out, xb_.data(), pool);
  return {};
}

}  // namespace lmp::model
