// embed-inspect: the token-embedding matrix of a model file — sizes, tying, memory at
// other vocabulary sizes, rows, nearest neighbours, norm statistics.
#include <chrono>
#include <cstring>
#include <cmath>
#include <unordered_map>

#include "common/cli.h"
#include "lmpipe/core/json.h"
#include "lmpipe/embed/inspect.h"
#include "lmpipe/tensor_io/tensor_file.h"
#include "lmpipe/tok/ids.h"
#include "lmpipe/tok/tokenizer.h"

namespace {

using namespace lmp;
using tensor_io::TensorFile;

struct Options {
  std::string model, tokenizer, tensor, ids, text, output = "-", dtype, training;
  std::vector<std::string> tokens;
  std::vector<std::int64_t> what_if;
  std::int64_t hidden = 0;
  std::size_t k = 10, top = 10;
  int threads = 1;
  bool json = false, force = false, output_matrix = false, timing = false;
};

// Token strings for reports and lookups: from -t, or the model file's own vocabulary
// (GGUF tokenizer.ggml.tokens); empty when there is none.
struct Names {
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::vector<std::string> tokens;
  std::unordered_map<std::string, TokenId> index;

  bool empty() const { return tokens.empty(); }
  std::string of(TokenId id) const {
    auto i = static_cast<std::size_t>(id);
    return i < tokens.size() ? tokens[i] : std::string();
  }
};

Result<Names> load_names(const Options& o, const TensorFile& f, std::int64_t n_vocab) {
  Names n;
  if (!o.tokenizer.empty()) {
    auto ends = [&](std::string_view s) { return o.tokenizer.size() >= s.size() && o.tokenizer.ends_with(s); };
    if (ends(".bin")) {  // llama2.c tokenizer.bin: its size is the model's
      LMP_ASSIGN(auto v, tensor_io::read_llama2c_tokenizer(o.tokenizer, static_cast<std::size_t>(n_vocab)));
      n.tokens = std::move(v.tokens);
    } else {
      LMP_ASSIGN(n.tokenizer, tok::load_tokenizer(o.tokenizer));
      for (std::size_t i = 0; i < n.tokenizer->vocab_size(); ++i)
        n.tokens.push_back(n.tokenizer->token_string(static_cast<TokenId>(i)));
    }
  } else if (const auto* v = f.meta("tokenizer.ggml.tokens"); v && v->type == tensor_io::MetaType::array) {
    for (const auto& t : v->items) n.tokens.push_back(t.s);
  }
  for (std::size_t i = 0; i < n.tokens.size(); ++i) n.index.emplace(n.tokens[i], static_cast<TokenId>(i));
  return n;
}

// TOKEN: an id, or a token as the vocabulary spells it, or text that encodes to one token.
Result<TokenId> resolve_token(const std::string& s, const Names& names, std::int64_t n_vocab) {
  if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() < 10) {
    auto id = std::stoll(s);
    if (id >= n_vocab)
      return make_error(Errc::out_of_range, "token id {} is outside the vocabulary (0..{})", id, n_vocab - 1);
    return static_cast<TokenId>(id);
  }
  if (auto it = names.index.find(s); it != names.index.end()) return it->second;
  if (names.tokenizer) {
    tok::Session session(*names.tokenizer);
    std::vector<TokenId> ids;
    names.tokenizer->encode(s, ids, session);
    if (ids.size() == 1) return ids[0];
    return make_error(Errc::invalid_argument, "'{}' is not one token: it encodes to {} tokens ({})", s, ids.size(),
                      fmt::join(ids, " "));
  }
  if (names.empty())
    return make_error(Errc::invalid_argument, "'{}' is not a token id, and there is no vocabulary to look it up in (-t)", s);
  return make_error(Errc::invalid_argument, "'{}' is not in the vocabulary", s);
}

std::string js(std::string_view s) {
  std::string o;
  json::append_string(o, s);
  return o;
}
std::string shape_str(const std::vector<std::int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }
std::string hb(double b) { return cli::human_bytes(b); }

// ---- the summary and --what-if-vocab ---------------------------------------------------

std::string what_if_text(const std::vector<embed::VocabCost>& costs, bool training) {
  std::string o;
  const auto& c0 = costs.front();
  o += fmt::format("\nmemory of the embedding and output matrices (hidden {}, {}: {} bytes per parameter)\n", c0.hidden,
                   dtype_name(c0.dtype), c0.bytes_per_param);
  o += fmt::format("  parameters per matrix = vocab × hidden; inference = parameters × {} bytes (× 2 untied)\n",
                   c0.bytes_per_param);
  if (training)
    o += fmt::format("  Adam training = parameters × {} bytes (weights {} + gradients {} + two f32 moments 8{})\n",
                     c0.adam_bytes_per_param, c0.bytes_per_param, c0.bytes_per_param,
                     c0.dtype == DType::f32 ? "" : " + f32 master weights 4");
  o += fmt::format("  {:>10}  {:>16}  {:>12}  {:>12}", "vocab", "params/matrix", "tied", "untied");
  if (training) o += fmt::format("  {:>12}  {:>12}", "Adam tied", "Adam untied");
  o += "\n";
  for (const auto& c : costs) {
    o += fmt::format("  {:>10}  {:>16}  {:>12}  {:>12}", cli::with_commas(static_cast<std::uint64_t>(c.vocab)),
                     cli::with_commas(c.params), hb(c.inference_tied), hb(c.inference_untied));
    if (training) o += fmt::format("  {:>12}  {:>12}", hb(c.adam_tied), hb(c.adam_untied));
    o += "\n";
  }
  if (costs.size() > 1) {
    const auto& a = costs.front();
    const auto& b = costs.back();
    const bool more = b.params >= a.params;
    o += fmt::format("  {} → {}: {}{} parameters per matrix, {} {} for inference tied",
                     cli::with_commas(static_cast<std::uint64_t>(a.vocab)),
                     cli::with_commas(static_cast<std::uint64_t>(b.vocab)), more ? "+" : "-",
                     cli::with_commas(more ? b.params - a.params : a.params - b.params),
                     hb(std::fabs(b.inference_tied - a.inference_tied)), more ? "more" : "less");
    if (training)
      o += fmt::format(", {} {} for Adam training tied", hb(std::fabs(b.adam_tied - a.adam_tied)), more ? "more" : "less");
    o += "\n";
  }
  return o;
}

std::string what_if_json(const std::vector<embed::VocabCost>& costs) {
  std::string o = "[";
  for (std::size_t i = 0; i < costs.size(); ++i) {
    const auto& c = costs[i];
    o += fmt::format(
        "{}{{\"vocab\":{},\"hidden\":{},\"dtype\":\"{}\",\"params_per_matrix\":{},\"bytes_per_param\":{},"
        "\"adam_bytes_per_param\":{},\"inference_tied_bytes\":{},\"inference_untied_bytes\":{},"
        "\"adam_tied_bytes\":{},\"adam_untied_bytes\":{}}}",
        i ? "," : "", c.vocab, c.hidden, dtype_name(c.dtype), c.params, c.bytes_per_param, c.adam_bytes_per_param,
        c.inference_tied, c.inference_untied, c.adam_tied, c.adam_untied);
  }
  return o + "]";
}

Status summary(const Options& o, cli::Output& out) {
  std::unique_ptr<TensorFile> f;
  embed::ModelEmbedding m;
  std::int64_t hidden = o.hidden;
  std::optional<DType> dtype;
  if (!o.dtype.empty()) dtype = parse_dtype(o.dtype);
  if (!o.model.empty()) {
    LMP_ASSIGN(f, TensorFile::open(o.model));
    LMP_ASSIGN(m, embed::find_embedding(*f, o.tensor));
    if (!hidden) hidden = m.n_embd;
    if (!dtype) dtype = m.embedding->dtype;
  }
  if (!dtype) dtype = DType::f32;
  std::vector<embed::VocabCost> costs;
  if (!o.what_if.empty()) {
    if (f) costs.push_back(embed::vocab_cost(m.n_vocab, hidden, *dtype));
    for (auto v : o.what_if) costs.push_back(embed::vocab_cost(v, hidden, *dtype));
  }
  bool training = o.training == "adam";
  std::string s;
  if (o.json) {
    s = "{";
    if (f) {
      const auto& e = *m.embedding;
      s += fmt::format("\"file\":{},\"format\":\"{}\",\"file_bytes\":{},\"vocab\":{},\"hidden\":{},", js(f->name()),
                       tensor_io::format_name(f->format()), f->file_size(), m.n_vocab, m.n_embd);
      s += fmt::format("\"embedding\":{{\"tensor\":{},\"dtype\":\"{}\",\"shape\":{},\"params\":{},\"bytes\":{}}},",
                       js(e.name), dtype_name(e.dtype), shape_str(e.shape), e.count(), e.nbytes);
      if (m.output)
        s += fmt::format("\"output\":{{\"tensor\":{},\"dtype\":\"{}\",\"shape\":{},\"params\":{},\"bytes\":{}}},",
                         js(m.output->name), dtype_name(m.output->dtype), shape_str(m.output->shape),
                         m.output->count(), m.output->nbytes);
      else
        s += "\"output\":null,";
      std::uint64_t ep = e.count() + (m.output ? m.output->count() : 0);
      s += fmt::format("\"tied\":{},\"tie_reason\":{},\"model_params\":{},\"model_bytes\":{},\"embedding_share\":{:.6f}",
                       m.tied, js(m.tie_reason), m.model_params, m.model_bytes,
                       m.model_params ? static_cast<double>(ep) / static_cast<double>(m.model_params) : 0.0);
    }
    if (!costs.empty()) s += fmt::format("{}\"what_if\":{}", f ? "," : "", what_if_json(costs));
    s += "}\n";
    return out.write(s);
  }
  if (f) {
    const auto& e = *m.embedding;
    s += fmt::format("file        {} ({}, {})\n", f->name(), tensor_io::format_name(f->format()),
                     hb(static_cast<double>(f->file_size())));
    s += fmt::format("vocabulary  {}\nhidden      {}\n", cli::with_commas(static_cast<std::uint64_t>(m.n_vocab)), m.n_embd);
    s += fmt::format("embedding   {} {} {}: {} parameters, {}\n", e.name, shape_str(e.shape), dtype_name(e.dtype),
                     cli::with_commas(e.count()), hb(static_cast<double>(e.nbytes)));
    if (m.output)
      s += fmt::format("output      {} {} {}: {} parameters, {}\n", m.output->name, shape_str(m.output->shape),
                       dtype_name(m.output->dtype), cli::with_commas(m.output->count()),
                       hb(static_cast<double>(m.output->nbytes)));
    else if (m.tied)
      s += "output      the embedding matrix (tied)\n";
    else
      s += "output      none in the file\n";
    s += fmt::format("tied        {} ({})\n", m.tied ? "yes" : "no", m.tie_reason);
    std::uint64_t ep = e.count() + (m.output ? m.output->count() : 0), eb = e.nbytes + (m.output ? m.output->nbytes : 0);
    if (f->format() != tensor_io::Format::npy)
      s += fmt::format("model       {} parameters, {}; embedding and output hold {:.1f}% of the parameters ({})\n",
                       cli::with_commas(m.model_params), hb(static_cast<double>(m.model_bytes)),
                       m.model_params ? 100.0 * static_cast<double>(ep) / static_cast<double>(m.model_params) : 0.0,
                       hb(static_cast<double>(eb)));
  }
  if (!costs.empty()) s += what_if_text(costs, training);
  return out.write(s);
}

// ---- rows, neighbors, stats ------------------------------------------------------------

Status rows(const Options& o, cli::Output& out) {
  LMP_ASSIGN(auto f, TensorFile::open(o.model));
  LMP_ASSIGN(auto m, embed::find_embedding(*f, o.tensor));
  LMP_ASSIGN(auto e, embed::embedding_view(*f, *m.embedding));
  std::vector<TokenId> ids;
  if (!o.text.empty()) {
    LMP_ASSIGN(auto t, tok::load_tokenizer(o.tokenizer));
    tok::Session session(*t);
    t->encode(o.text, ids, session);
  } else {
    LMP_ASSIGN(auto buf, io::read_file(o.ids));
    LMP_TRY(tok::parse_ids(buf, o.ids == "-" ? "<stdin>" : o.ids, ids));
  }
  std::vector<float> r(ids.size() * static_cast<std::size_t>(e.n_embd()));
  LMP_TRY(e.lookup(ids, r.data()));
  tensor_io::TensorOut t{"rows", DType::f32, {static_cast<std::int64_t>(ids.size()), e.n_embd()}, r.data()};
  LMP_ASSIGN(auto bytes, tensor_io::npy_bytes(t));
  return out.write(bytes);
}

Status neighbors(const Options& o, cli::Output& out) {
  LMP_ASSIGN(auto f, TensorFile::open(o.model));
  LMP_ASSIGN(auto m, embed::find_embedding(*f, o.tensor));
  LMP_ASSIGN(auto e, embed::embedding_view(*f, *m.embedding));
  LMP_ASSIGN(auto names, load_names(o, *f, e.n_vocab()));
  std::vector<TokenId> ids;
  for (const auto& t : o.tokens) {
    LMP_ASSIGN(TokenId id, resolve_token(t, names, e.n_vocab()));
    ids.push_back(id);
  }
  std::vector<float> q(static_cast<std::size_t>(e.n_embd()));
  for (std::size_t k = 0; k < ids.size(); ++k) {
    const TokenId id = ids[k];
    e.row(id, q.data());
    auto t0 = std::chrono::steady_clock::now();
    auto nb = embed::nearest(e, q.data(), o.k, id, o.threads);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.timing)  // the first scan also maps the file's pages; later ones find them mapped
      cli::note(fmt::format("scan {}: {} in {:.4f} s: {:.2f} GB/s{}", k + 1, hb(static_cast<double>(e.bytes())), secs,
                            static_cast<double>(e.bytes()) / secs / 1e9, k == 0 ? " (pages mapped on the way)" : ""));
    std::string s;
    if (o.json) {  // one JSON object per token (JSON lines)
      s = fmt::format("{{\"token\":{},\"id\":{},\"neighbors\":[", js(names.of(id)), id);
      for (std::size_t i = 0; i < nb.size(); ++i)
        s += fmt::format("{}{{\"id\":{},\"token\":{},\"cosine\":{:.6f}}}", i ? "," : "", nb[i].id,
                         js(names.of(nb[i].id)), nb[i].cosine);
      s += "]}\n";
    } else {
      s = fmt::format("{}nearest to {}{} by cosine similarity ({} rows of {}):\n", k ? "\n" : "", id,
                      names.empty() ? "" : " " + js(names.of(id)),
                      cli::with_commas(static_cast<std::uint64_t>(e.n_vocab())), e.n_embd());
      for (std::size_t i = 0; i < nb.size(); ++i)
        s += fmt::format("{:4}  {:8}  {:.4f}{}\n", i + 1, nb[i].id, nb[i].cosine,
                         names.empty() ? "" : "  " + js(names.of(nb[i].id)));
    }
    LMP_TRY(out.write(s));
    LMP_TRY(out.flush_stdout());
  }
  return {};
}

Status stats(const Options& o, cli::Output& out) {
  LMP_ASSIGN(auto f, TensorFile::open(o.model));
  LMP_ASSIGN(auto m, embed::find_embedding(*f, o.tensor));
  const tensor_io::TensorInfo* t = o.output_matrix ? m.output : m.embedding;
  if (!t) return make_error(Errc::invalid_argument, "{}: the output projection is the embedding (tied)", f->name());
  LMP_ASSIGN(auto e, embed::embedding_view(*f, *t));
  LMP_ASSIGN(auto names, load_names(o, *f, e.n_vocab()));
  auto st = embed::row_stats(e, o.top, o.threads);
  auto tokname = [&](TokenId id) { return names.empty() ? std::string() : " " + js(names.of(id)); };
  std::string s;
  if (o.json) {
    s = fmt::format(
        "{{\"tensor\":{},\"rows\":{},\"norm\":{{\"min\":{},\"p01\":{},\"p05\":{},\"p25\":{},\"median\":{},\"p75\":{},"
        "\"p95\":{},\"p99\":{},\"max\":{},\"mean\":{},\"mad\":{}}},\"small_threshold\":{},\"small_rows\":{},"
        "\"zero_rows\":{},\"smallest\":[",
        js(t->name), e.n_vocab(), st.min, st.p01, st.p05, st.p25, st.median, st.p75, st.p95, st.p99, st.max, st.mean,
        st.mad, st.small_threshold, st.n_small, st.n_zero);
    for (std::size_t i = 0; i < st.smallest.size(); ++i)
      s += fmt::format("{}{{\"id\":{},\"token\":{},\"norm\":{}}}", i ? "," : "", st.smallest[i].first,
                       js(names.of(st.smallest[i].first)), st.smallest[i].second);
    s += fmt::format("],\"duplicate_groups\":{},\"duplicate_rows\":{},\"duplicates\":[", st.n_duplicate_groups,
                     st.n_duplicate_rows);
    for (std::size_t i = 0; i < st.duplicates.size(); ++i) s += fmt::format("{}[{}]", i ? "," : "", fmt::join(st.duplicates[i], ","));
    s += fmt::format("],\"parallel_groups\":{},\"parallel_rows\":{},\"parallel\":[", st.n_parallel_groups,
                     st.n_parallel_rows);
    for (std::size_t i = 0; i < st.parallel.size(); ++i) s += fmt::format("{}[{}]", i ? "," : "", fmt::join(st.parallel[i], ","));
    s += "]}\n";
    return out.write(s);
  }
  s += fmt::format("{} {} {}: {} rows\n", t->name, shape_str(t->shape), dtype_name(t->dtype),
                   cli::with_commas(static_cast<std::uint64_t>(e.n_vocab())));
  s += fmt::format("row norm    min {:.4g}  p1 {:.4g}  p5 {:.4g}  p25 {:.4g}  median {:.4g}  p75 {:.4g}  p95 {:.4g}  p99 {:.4g}  max {:.4g}\n",
                   st.min, st.p01, st.p05, st.p25, st.median, st.p75, st.p95, st.p99, st.max);
  s += fmt::format("            mean {:.4g}  MAD {:.4g}\n", st.mean, st.mad);
  s += fmt::format("small rows  {} with norm <= {:.4g} (median - 4 x 1.4826 x MAD: likely under-trained tokens){}\n",
                   cli::with_commas(st.n_small), st.small_threshold,
                   st.n_zero ? fmt::format(", {} all zero", cli::with_commas(st.n_zero)) : "");
  for (const auto& [id, n] : st.smallest) s += fmt::format("  {:8}  {:.4g}{}\n", id, n, tokname(id));
  s += fmt::format("duplicates  {} groups of identical rows, {} rows in all\n", cli::with_commas(st.n_duplicate_groups),
                   cli::with_commas(st.n_duplicate_rows));
  auto groups = [&](const std::vector<std::vector<TokenId>>& gs) {
    for (const auto& g : gs) {
      s += fmt::format("  {} rows:", g.size());
      for (std::size_t i = 0; i < g.size() && i < 12; ++i) s += fmt::format("{}{}{}", i ? ", " : " ", g[i], tokname(g[i]));
      if (g.size() > 12) s += ", …";
      s += "\n";
    }
  };
  groups(st.duplicates);
  s += fmt::format("parallel    {} groups of rows with cosine >= 0.999, {} rows in all (rows trained only as a block: "
                   "tokens that never occur)\n",
                   cli::with_commas(st.n_parallel_groups), cli::with_commas(st.n_parallel_rows));
  groups(st.parallel);
  return out.write(s);
}

// A metadata value as JSON: scalars as themselves, arrays as their element type, count
// and first `head` elements.
std::string meta_json(const tensor_io::MetaValue& v, std::size_t head = 16) {
  using tensor_io::MetaType;
  switch (v.type) {
    case MetaType::string: return js(v.s);
    case MetaType::boolean: return v.u ? "true" : "false";
    case MetaType::f32: case MetaType::f64: return std::isfinite(v.f) ? v.to_string() : js(v.to_string());
    case MetaType::array: {
      std::string o = fmt::format("{{\"elem\":\"{}\",\"count\":{},\"head\":[", tensor_io::meta_type_name(v.elem), v.items.size());
      for (std::size_t i = 0; i < v.items.size() && i < head; ++i) o += (i ? "," : "") + meta_json(v.items[i], head);
      return o + "]}";
    }
    default: return v.to_string();
  }
}

// list: every metadata key and every tensor of a tensor file.
Status list(const Options& o, cli::Output& out) {
  LMP_ASSIGN(auto f, TensorFile::open(o.model));
  std::string s;
  if (o.json) {
    s = fmt::format("{{\"file\":{},\"format\":\"{}\",\"version\":{},\"metadata\":{{", js(f->name()),
                    tensor_io::format_name(f->format()), f->version());
    for (std::size_t i = 0; i < f->metadata().size(); ++i) {
      const auto& [k, v] = f->metadata()[i];
      s += fmt::format("{}{}:{{\"type\":\"{}\",\"value\":{}}}", i ? "," : "", js(k), tensor_io::meta_type_name(v.type),
                       meta_json(v));
    }
    s += "},\"tensors\":[";
    for (std::size_t i = 0; i < f->tensors().size(); ++i) {
      const auto& t = f->tensors()[i];
      s += fmt::format("{}{{\"name\":{},\"dtype\":\"{}\",\"shape\":{},\"offset\":{},\"bytes\":{}}}", i ? "," : "",
                       js(t.name), dtype_name(t.dtype), shape_str(t.shape), t.offset, t.nbytes);
    }
    s += "]}\n";
    return out.write(s);
  }
  s += fmt::format("{} ({}{}, {}): {} metadata keys, {} tensors\n", f->name(), tensor_io::format_name(f->format()),
                   f->format() == tensor_io::Format::gguf ? fmt::format(" v{}", f->version()) : "",
                   hb(static_cast<double>(f->file_size())), f->metadata().size(), f->tensors().size());
  for (const auto& [k, v] : f->metadata())
    s += fmt::format("  {:<40} {:<6} {}\n", k, tensor_io::meta_type_name(v.type), v.to_string());
  if (!f->tensors().empty()) s += fmt::format("  {:<40} {:<6} {:<20} {:>14} {:>12}\n", "tensor", "dtype", "shape", "offset", "bytes");
  for (const auto& t : f->tensors())
    s += fmt::format("  {:<40} {:<6} {:<20} {:>14} {:>12}\n", t.name, dtype_name(t.dtype), shape_str(t.shape), t.offset,
                     t.nbytes);
  return out.write(s);
}

// export: the embedding (and an untied output projection) as .npy, safetensors or GGUF,
// converted to --dtype; the format follows the output's name.
Status export_matrix(const Options& o) {
  LMP_ASSIGN(auto f, TensorFile::open(o.model));
  LMP_ASSIGN(auto m, embed::find_embedding(*f, o.tensor));
  auto ends = [&](std::string_view s) { return o.output.ends_with(s); };
  enum { npy, st, gguf } kind = ends(".npy") ? npy : ends(".safetensors") ? st : gguf;
  std::vector<const tensor_io::TensorInfo*> src{m.embedding};
  if (m.output && kind != npy) src.push_back(m.output);
  if (o.output_matrix) {
    if (!m.output) return make_error(Errc::invalid_argument, "{}: the output projection is the embedding (tied)", f->name());
    src = {m.output};
  }
  std::vector<std::vector<std::byte>> blobs;
  std::vector<tensor_io::TensorOut> outs;
  for (const auto* t : src) {
    LMP_ASSIGN(auto e, embed::embedding_view(*f, *t));
    DType to = o.dtype.empty() ? t->dtype : *parse_dtype(o.dtype);
    const DTypeInfo& d = dtype_info(to);
    if (static_cast<std::size_t>(e.n_embd()) % d.block != 0)
      return make_error(Errc::invalid_argument, "{}: rows of {} are not whole {}-element blocks of {}", t->name,
                        e.n_embd(), d.block, d.name);
    blobs.emplace_back(dtype_bytes(to, static_cast<std::size_t>(e.n_embd())) * static_cast<std::size_t>(e.n_vocab()));
    std::vector<float> row(static_cast<std::size_t>(e.n_embd()));
    const std::size_t rb = dtype_bytes(to, row.size());
    for (std::int64_t r = 0; r < e.n_vocab(); ++r) {
      e.row(static_cast<TokenId>(r), row.data());
      if (to == t->dtype)  // unchanged bytes, not a round trip through f32
        std::memcpy(blobs.back().data() + static_cast<std::size_t>(r) * rb, e.data() + static_cast<std::size_t>(r) * e.row_bytes(), rb);
      else
        from_f32(to, row.data(), blobs.back().data() + static_cast<std::size_t>(r) * rb, row.size());
    }
    bool is_out = t == m.output;
    outs.push_back({is_out ? "output.weight" : "token_embd.weight", to, t->shape, blobs.back().data()});
  }
  if (kind == npy) return tensor_io::write_npy(o.output, outs.front());
  if (kind == st)
    return tensor_io::write_safetensors(o.output, outs, {{"source", f->name().substr(f->name().rfind('/') + 1)}});
  std::vector<std::pair<std::string, tensor_io::MetaValue>> meta;
  const auto* arch = f->meta("general.architecture");
  meta.emplace_back("general.architecture", arch ? *arch : tensor_io::MetaValue::of_string("llama"));
  bool quantized = false;
  for (const auto& t : outs) quantized |= is_quantized(t.dtype);
  if (quantized) meta.emplace_back("general.quantization_version", tensor_io::MetaValue::of_u32(2));
  for (const auto& [k, v] : f->metadata())
    if (k.rfind("tokenizer.", 0) == 0) meta.emplace_back(k, v);  // the vocabulary travels with the matrix
  return tensor_io::write_gguf(o.output, meta, outs);
}

const char* kExamples =
    "  embed-inspect model.gguf                       # sizes, dtype, tied or not, share of the model\n"
    "  embed-inspect stories260K.bin --what-if-vocab 32000 64000 --training adam\n"
    "  embed-inspect --hidden 4096 --dtype f32 --what-if-vocab 32000 64000 --training adam\n"
    "  tok-encode -t tok.json text.txt | embed-inspect rows model.gguf --ids - > rows.npy\n"
    "  embed-inspect rows model.safetensors -t tokenizer.json --text 'Hello world' > rows.npy\n"
    "  embed-inspect neighbors model.gguf king -k 10\n"
    "  embed-inspect stats model.gguf --json\n"
    "  embed-inspect export model.safetensors -o emb.gguf --dtype q8_0\n"
    "  embed-inspect list model.gguf                  # every metadata key and tensor";

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app;
  app.add_option("MODEL", o.model, "GGUF, safetensors, llama2.c checkpoint or .npy matrix");
  app.add_option("--what-if-vocab", o.what_if, "memory of embedding and output at these vocabulary sizes")
      ->check(cli::Range(std::int64_t{1}, std::int64_t{1} << 32));
  app.add_option("--hidden", o.hidden, "hidden size for --what-if-vocab (default: the model's)")
      ->check(cli::Range(std::int64_t{1}, std::int64_t{1} << 24));
  app.add_option("--dtype", o.dtype, "element type for --what-if-vocab: " + weight_dtype_list() + " (default: the model's, or f32)")
      ->check(CLI::IsMember(weight_dtype_names()));
  app.add_option("--training", o.training, "adam: also the memory of training with Adam")->check(CLI::IsMember({"adam"}));
  app.add_flag("--json", o.json, "report as JSON");
  app.add_option("--tensor", o.tensor, "the embedding tensor's name, when it is not found by name");
  app.add_option("-o,--output", o.output, "write here instead of standard output");

  CLI::App* rows_cmd = app.add_subcommand("rows", "write the rows of tokens as one .npy [n, hidden] f32 array");
  rows_cmd->add_option("MODEL", o.model, "model file")->required();
  rows_cmd->add_option("--ids", o.ids, "token ids (text lines or .npy; '-' for standard input)");
  rows_cmd->add_option("-t,--tokenizer", o.tokenizer, "tokenizer for --text");
  rows_cmd->add_option("--text", o.text, "text to encode with -t");
  rows_cmd->add_option("--tensor", o.tensor, "the embedding tensor's name");
  rows_cmd->add_option("-o,--output", o.output, ".npy to write ('-': standard output, the default)");
  rows_cmd->add_flag("--force", o.force, "write binary output to a terminal");

  CLI::App* nb_cmd = app.add_subcommand("neighbors", "the nearest tokens to TOKEN by cosine similarity");
  nb_cmd->add_option("MODEL", o.model, "model file")->required();
  nb_cmd->add_option("TOKEN", o.tokens, "token ids, tokens as the vocabulary spells them, or texts that are one token")
      ->required();
  nb_cmd->add_option("-k", o.k, "how many (default 10)")->check(cli::Range(std::size_t{1}, std::size_t{1} << 24));
  nb_cmd->add_option("-t,--tokenizer", o.tokenizer, "token strings from this tokenizer (GGUF files carry their own)");
  nb_cmd->add_option("--tensor", o.tensor, "the embedding tensor's name");
  nb_cmd->add_option("-j,--threads", o.threads, "threads for the scan (default 1)")->check(cli::Range(1, 256));
  nb_cmd->add_flag("--json", o.json, "as JSON");
  nb_cmd->add_flag("--timing", o.timing, "print each scan's time and memory bandwidth on stderr");
  nb_cmd->add_option("-o,--output", o.output, "write here instead of standard output");

  CLI::App* st_cmd = app.add_subcommand("stats", "row-norm distribution, under-trained tokens, duplicate rows");
  st_cmd->add_option("MODEL", o.model, "model file")->required();
  st_cmd->add_option("-t,--tokenizer", o.tokenizer, "token strings from this tokenizer (GGUF files carry their own)");
  st_cmd->add_option("--tensor", o.tensor, "the matrix's tensor name");
  st_cmd->add_flag("--output-matrix", o.output_matrix, "the output projection instead of the embedding (untied models)");
  st_cmd->add_option("--top", o.top, "how many small rows and duplicate groups to list (default 10)");
  st_cmd->add_option("-j,--threads", o.threads, "threads (default 1)")->check(cli::Range(1, 256));
  st_cmd->add_flag("--json", o.json, "as JSON");
  st_cmd->add_option("-o,--output", o.output, "write here instead of standard output");

  CLI::App* ls_cmd = app.add_subcommand("list", "every metadata key and tensor of the file (name, dtype, shape, offset, bytes)");
  ls_cmd->add_option("MODEL", o.model, "model file")->required();
  ls_cmd->add_flag("--json", o.json, "as JSON");
  ls_cmd->add_option("-o,--output", o.output, "write here instead of standard output");

  CLI::App* ex_cmd = app.add_subcommand("export", "write the embedding (and an untied output) as .npy, safetensors or GGUF");
  ex_cmd->add_option("MODEL", o.model, "model file")->required();
  ex_cmd->add_option("-o,--output", o.output, "OUT.npy, OUT.safetensors or OUT.gguf (required)")->required();
  ex_cmd->add_option("--dtype", o.dtype, "convert to " + weight_dtype_list() + " (default: as stored)")
      ->check(CLI::IsMember(weight_dtype_names()));
  ex_cmd->add_option("--tensor", o.tensor, "the embedding tensor's name");
  ex_cmd->add_flag("--output-matrix", o.output_matrix, "only the output projection (untied models)");

  cli::ToolSpec spec{
      "embed-inspect",
      "[OPTION]... MODEL\n       embed-inspect --hidden H --what-if-vocab N... [OPTION]...\n"
      "       embed-inspect rows MODEL (--ids FILE | -t TOKENIZER --text TEXT) [-o OUT.npy]\n"
      "       embed-inspect neighbors MODEL TOKEN... [-k K] [-t TOKENIZER]\n"
      "       embed-inspect stats MODEL [-t TOKENIZER] [--top N]\n"
      "       embed-inspect export MODEL -o OUT.{npy,safetensors,gguf} [--dtype T]\n"
      "       embed-inspect list MODEL [--json]",
      "Inspect the token-embedding matrix [vocab, hidden] of a model: sizes, dtype, whether the output\n"
      "projection is the same matrix (tied), memory at other vocabulary sizes, rows, neighbours, norms.",
      "MODEL is a GGUF file, a safetensors file, a llama2.c checkpoint or a 2-D .npy matrix; the format\n"
      "is found from the file's first bytes. Tied: GGUF without output.weight, HF files without\n"
      "lm_head.weight, llama2.c with a positive vocab_size, or both matrices holding the same bytes.\n"
      "--what-if-vocab prints the arithmetic: parameters = vocab × hidden per matrix, times the bytes\n"
      "per parameter of the dtype (inference), or of weights, gradients and two f32 Adam moments\n"
      "(--training adam). Rows are written as f32 whatever the stored dtype (f16, bf16, q8_0, q4_0, k-quants\n"
      "are converted). See docs/embed-inspect.md.",
      kExamples};

  return cli::run_tool(spec, app, argc, argv, [&]() -> Status {
    if (ex_cmd->parsed()) {
      if (o.output == "-") throw cli::UsageError("export writes a file: -o OUT.npy, OUT.safetensors or OUT.gguf");
      return export_matrix(o);
    }
    bool is_rows = rows_cmd->parsed();
    if (is_rows) {
      if (o.ids.empty() == o.text.empty()) throw cli::UsageError("rows needs --ids FILE or -t TOKENIZER --text TEXT");
      if (!o.text.empty() && o.tokenizer.empty()) throw cli::UsageError("--text needs -t TOKENIZER");
    } else if (!nb_cmd->parsed() && !st_cmd->parsed()) {
      if (o.model.empty() && (o.what_if.empty() || !o.hidden))
        throw cli::UsageError("give a MODEL, or --hidden H with --what-if-vocab N");
      if (!o.training.empty() && o.what_if.empty()) throw cli::UsageError("--training is for --what-if-vocab");
    }
    LMP_ASSIGN(auto out, cli::Output::open(o.output, is_rows, o.force));
    if (is_rows) LMP_TRY(rows(o, *out));
    else if (nb_cmd->parsed()) LMP_TRY(neighbors(o, *out));
    else if (st_cmd->parsed()) LMP_TRY(stats(o, *out));
    else if (ls_cmd->parsed()) LMP_TRY(list(o, *out));
    else LMP_TRY(summary(o, *out));
    return out->close();
  });
}
