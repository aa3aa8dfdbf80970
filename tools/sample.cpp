// sample: logits → token ids through a sampler chain (temperature, top-k, top-p, min-p,
// typical, penalties), one row at a time, from a .npy file or a stream of arrays.
#include <cmath>
#include <cstring>
#include <random>

#include "common/cli.h"
#include "lmpipe/core/json.h"
#include "lmpipe/core/npy.h"
#include "lmpipe/sample/sampler.h"
#include "lmpipe/tensor_io/npy_stream.h"
#include "lmpipe/tok/ids.h"
#include "lmpipe/tok/tokenizer.h"

namespace {

using namespace lmp;

struct Options {
  std::vector<std::string> files;
  std::string output = "-", format = "text", tokenizer, history, ties;
  sample::Config cfg;
  std::optional<std::uint64_t> seed;
  std::size_t n = 1, stats = 0, show_top = 10;
  bool greedy = false, show = false, force = false, json = false;
};

std::string piece(const tok::Tokenizer* t, TokenId id) {
  if (!t) return "";
  std::string s;
  json::append_string(s, t->token_string(id));
  return s;
}

// The candidates after a stage: the top rows with probabilities, the count, the entropy.
std::string table(std::string_view stage, const sample::Candidates& c, const tok::Tokenizer* t, std::size_t top) {
  sample::Candidates sorted = c;
  sorted.sort();
  std::vector<float> p;
  sorted.probabilities(p);
  double h = 0;
  for (float x : p)
    if (x > 0) h -= static_cast<double>(x) * std::log(static_cast<double>(x));
  std::string o = fmt::format("after {:<12} {} candidates, entropy {:.3f} nats, perplexity {:.2f}\n", stage,
                              cli::with_commas(sorted.items.size()), h, std::exp(h));
  if (stage == "loading")
    o += fmt::format("  {:>4} {:>8}  {:>10}  {:>8}  {:>8}{}\n", "rank", "id", "logit", "prob", "cumul.", t ? "  token" : "");
  double cum = 0;
  for (std::size_t i = 0; i < sorted.items.size() && i < top; ++i) {
    cum += static_cast<double>(p[i]);
    o += fmt::format("  {:>4} {:>8}  {:>10.4f}  {:>8.5f}  {:>8.5f}{}\n", i + 1, sorted.items[i].id, sorted.items[i].logit,
                     p[i], cum, t ? "  " + piece(t, sorted.items[i].id) : "");
  }
  if (sorted.items.size() > top) o += fmt::format("  … {} more\n", cli::with_commas(sorted.items.size() - top));
  return o;
}

// The seed's pitfall: a large top-p keeps a long tail of unlikely tokens.
std::string tail_warning(const Options& o, const sample::Candidates& c) {
  if (o.cfg.top_p <= 0.95f || o.cfg.top_p >= 1.0f) return {};
  std::vector<float> p;
  c.probabilities(p);
  float top = *std::max_element(p.begin(), p.end());
  std::size_t tail = 0;
  double mass = 0;
  for (float x : p)
    if (x < top * 0.01f) {
      ++tail;
      mass += static_cast<double>(x);
    }
  if (tail < 20) return {};
  return fmt::format(
      "warning: top-p {} keeps {} candidates, {} of them below 1% of the top probability ({:.1f}% of the mass "
      "together): a long tail of unlikely tokens, where nonsense comes from. Consider --top-p 0.9 or --min-p 0.05.\n",
      o.cfg.top_p, cli::with_commas(c.items.size()), cli::with_commas(tail), 100 * mass);
}

struct Run {
  const Options& o;
  sample::Chain chain;
  Rng rng;
  const tok::Tokenizer* tok = nullptr;
  sample::Candidates cand;
  std::vector<TokenId> drawn;

  // Sample row `r` of array `a`; append the ids to `drawn`, reports to `text`.
  Status row(const float* logits, std::size_t vocab, const std::string& where, std::string& text) {
    auto st = cand.load(logits, vocab);
    if (!st) return make_error(Errc::parse, "{}: {}", where, st.error().message);
    if (o.show) {
      text += fmt::format("{}: {} logits; chain: {}; seed {}\n", where, cli::with_commas(vocab), chain.describe(),
                          *o.seed);
      text += table("loading", cand, tok, o.show_top);
    }
    chain.apply(cand, [&](std::string_view stage, const sample::Candidates& c) {
      if (o.show) text += table(stage, c, tok, o.show_top);
    });
    if (o.show) text += tail_warning(o, cand);
    std::vector<float> p;
    if (o.show || o.stats) cand.probabilities(p);
    if (o.stats) {
      std::vector<std::size_t> hits(cand.items.size(), 0);
      for (std::size_t k = 0; k < o.stats; ++k) {
        TokenId id = chain.draw(cand, rng);
        for (std::size_t i = 0; i < cand.items.size(); ++i)
          if (cand.items[i].id == id) {
            ++hits[i];
            break;
          }
      }
      std::vector<std::size_t> order(cand.items.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p[a] != p[b] ? p[a] > p[b] : cand.items[a].id < cand.items[b].id; });
      double chi = 0;
      std::size_t dof = 0;
      for (std::size_t i = 0; i < p.size(); ++i) {
        double e = static_cast<double>(p[i]) * static_cast<double>(o.stats);
        if (e <= 0) continue;
        chi += (static_cast<double>(hits[i]) - e) * (static_cast<double>(hits[i]) - e) / e;
        ++dof;
      }
      text += fmt::format("{}: {} draws; expected (after the chain) beside observed:\n", where, cli::with_commas(o.stats));
      text += fmt::format("  {:>8}  {:>10}  {:>10}{}\n", "id", "expected", "observed", tok ? "  token" : "");
      for (std::size_t k = 0; k < order.size() && k < o.show_top; ++k) {
        std::size_t i = order[k];
        text += fmt::format("  {:>8}  {:>10.5f}  {:>10.5f}{}\n", cand.items[i].id, p[i],
                            static_cast<double>(hits[i]) / static_cast<double>(o.stats), tok ? "  " + piece(tok, cand.items[i].id) : "");
      }
      if (dof > 1)
        text += fmt::format("  chi-square {:.2f} on {} degrees of freedom: p = {:.4f}{}\n", chi, dof - 1,
                            sample::chi_square_p(chi, static_cast<double>(dof - 1)),
                            sample::chi_square_p(chi, static_cast<double>(dof - 1)) < 0.001 ? " (the draws do not fit!)" : "");
    }
    for (std::size_t k = 0; k < o.n; ++k) {
      TokenId id = chain.draw(cand, rng);
      if (o.show) {
        std::size_t rank = 0;
        sample::Candidates sorted = cand;
        sorted.sort();
        while (rank < sorted.items.size() && sorted.items[rank].id != id) ++rank;
        std::size_t i = 0;
        while (cand.items[i].id != id) ++i;
        text += fmt::format("chose {}{} with probability {:.5f} (rank {} of {}){}\n", id, tok ? " " + piece(tok, id) : "",
                            p[i], rank + 1, cli::with_commas(cand.items.size()),
                            chain.greedy() ? ", greedy" : ", drawn");
      }
      drawn.push_back(id);
    }
    chain.accept(drawn.back());
    return {};
  }
};

Status run(const Options& o, cli::Output& out) {
  std::unique_ptr<tok::Tokenizer> tok;
  if (!o.tokenizer.empty()) {
    LMP_ASSIGN(tok, tok::load_tokenizer(o.tokenizer));
  }
  LMP_ASSIGN(auto chain, sample::Chain::make(o.cfg));
  Run r{o, std::move(chain), Rng(*o.seed), tok.get(), {}, {}};
  if (!o.history.empty()) {
    LMP_ASSIGN(auto buf, io::read_file(o.history));
    std::vector<TokenId> ids;
    LMP_TRY(tok::parse_ids(buf, o.history, ids));
    for (TokenId id : ids) r.chain.accept(id);
  }
  std::vector<float> row;
  std::size_t vocab0 = 0;  // the row length of the first array: every row must match it
  std::string first;
  for (const auto& file : o.files) {
    LMP_ASSIGN(auto in, tensor_io::NpyStreamReader::open(file));
    tensor_io::NpyArray a;
    for (std::size_t arrays = 0;; ++arrays) {
      LMP_ASSIGN(bool got, in->next(a));
      if (!got && arrays == 0) return make_error(Errc::parse, "{}: empty input: no .npy array of logits", in->name());
      if (!got) break;
      const std::string where0 = fmt::format("{}: array {}", in->name(), a.index);
      if (a.dtype != DType::f32 && a.dtype != DType::f16)
        return make_error(Errc::parse, "{}: logits must be f32 or f16, not {}", where0, dtype_name(a.dtype));
      if (a.shape.empty() || a.shape.size() > 2)
        return make_error(Errc::parse, "{}: logits must be 1-D [vocab] or 2-D [rows, vocab], not {}-D", where0, a.shape.size());
      const auto vocab = static_cast<std::size_t>(a.shape.back());
      const std::size_t rows = a.shape.size() == 2 ? static_cast<std::size_t>(a.shape[0]) : 1;
      if (vocab == 0) return make_error(Errc::parse, "{}: rows of 0 logits", where0);
      if (vocab0 && vocab != vocab0)
        return make_error(Errc::parse, "{}: rows of {} logits, but {} had rows of {} (ragged input)", where0, vocab, first,
                          vocab0);
      if (!vocab0) {
        vocab0 = vocab;
        first = where0;
      }
      if (tok && tok->vocab_size() != vocab)
        return make_error(Errc::parse, "{}: rows have {} logits, but the tokenizer has {} tokens", where0, vocab,
                          tok->vocab_size());
      row.resize(vocab);
      r.drawn.clear();
      std::string text;
      for (std::size_t i = 0; i < rows; ++i) {
        const std::size_t esz = a.dtype == DType::f32 ? 4 : 2;
        to_f32(a.dtype, a.data.data() + i * vocab * esz, row.data(), vocab);
        std::string where = rows > 1 || a.shape.size() == 2 ? fmt::format("{}, row {}", where0, i + 1) : where0;
        LMP_TRY(r.row(row.data(), vocab, where, text));
        if (o.format == "text" && !o.stats) {
          for (std::size_t k = 0; k < o.n; ++k) text += fmt::format("{}{}", k ? " " : "", r.drawn[i * o.n + k]);
          text += '\n';
        }
        if (text.size() > (1u << 16)) {
          LMP_TRY(out.write(text));
          text.clear();
        }
      }
      if (o.format == "npy" && !o.stats) {
        std::vector<std::int64_t> shape = a.shape.size() == 2 ? std::vector<std::int64_t>{static_cast<std::int64_t>(rows), static_cast<std::int64_t>(o.n)}
                                                              : std::vector<std::int64_t>{static_cast<std::int64_t>(o.n)};
        npy::append_header(text, "<i4", shape);
        text.append(reinterpret_cast<const char*>(r.drawn.data()), r.drawn.size() * 4);
      }
      LMP_TRY(out.write(text));
      LMP_TRY(out.flush_stdout());  // a stream: each array's ids as soon as they are drawn
    }
  }
  return {};
}

const char* kExamples =
    "  sample --top-p 0.9 --seed 1 logits.npy                 # one id per row\n"
    "  sample --order llama --top-k 40 --top-p 0.95 --min-p 0.05 --temperature 0.8 logits.npy\n"
    "  sample --temperature 0 logits.npy                      # greedy: the first maximum\n"
    "  sample --show -t tokenizer.json --top-p 0.99 logits.npy # every stage, and why this token\n"
    "  sample --stats 100000 --top-k 5 --seed 7 logits.npy     # empirical vs expected distribution\n"
    "  generate -m model.gguf -p 'Once' --emit logits | sample --top-p 0.9 | tok-encode -t tok.json --decode";

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app;
  app.add_option("FILE", o.files, "logits: .npy [vocab] or [rows, vocab], f32 or f16, or a stream of such arrays");
  app.add_option("-n,--draws", o.n, "ids drawn per row (default 1)")->check(cli::Range(std::size_t{1}, std::size_t{1} << 20));
  app.add_option("--temperature", o.cfg.temperature, "divide logits by T; 0 = greedy (default 1)")->check(cli::Range(0.0f, 1e6f));
  app.add_flag("--greedy", o.greedy, "the first maximum (same as --temperature 0)");
  app.add_option("--top-k", o.cfg.top_k, "keep the K most likely (0 = off)")->check(cli::Range(0, 1 << 30));
  app.add_option("--top-k-ties", o.ties, "keep every candidate tied with the K-th (HF, default with --order hf) or cut to K by lowest id (llama.cpp)")
      ->check(CLI::IsMember({"keep", "cut"}));
  app.add_option("--top-p", o.cfg.top_p, "keep the smallest set of most likely candidates whose mass reaches P (1 = off)")
      ->check(cli::Range(0.0f, 1.0f));
  app.add_option("--min-p", o.cfg.min_p, "keep candidates with probability >= P × the top one (0 = off)")->check(cli::Range(0.0f, 1.0f));
  app.add_option("--typical", o.cfg.typical, "locally typical sampling with mass P (1 = off)")->check(cli::Range(0.0001f, 1.0f));
  app.add_option("--repeat-penalty", o.cfg.repeat_penalty, "penalize tokens of the last --penalty-last-n (1 = off)")
      ->check(cli::Range(0.0001f, 100.0f));
  app.add_option("--frequency-penalty", o.cfg.frequency_penalty, "subtract count × F from repeated tokens' logits");
  app.add_option("--presence-penalty", o.cfg.presence_penalty, "subtract P from the logits of tokens seen");
  app.add_option("--penalty-last-n", o.cfg.penalty_last_n, "the penalties' window of tokens (default 64)")->check(cli::Range(0, 1 << 20));
  app.add_option("--history", o.history, "token ids (text or .npy) already in the context, for the penalties");
  app.add_option("--min-keep", o.cfg.min_keep, "every truncation keeps at least this many (default 1)");
  app.add_option("--order", o.cfg.order, "hf (default), llama, or a comma list of penalties,temperature,top-k,top-p,min-p,typical");
  app.add_option("--seed", o.seed, "random seed (default: a random one, printed by --show)");
  app.add_flag("--show", o.show, "print the candidates after every stage and explain the choice");
  app.add_option("--show-top", o.show_top, "rows of each --show and --stats table (default 10)");
  app.add_option("-t,--tokenizer", o.tokenizer, "show token strings; its vocabulary must match the rows");
  app.add_option("--stats", o.stats, "draw N times from each row and compare with the expected distribution");
  app.add_option("-f,--format", o.format, "text (default: one line of ids per row) or npy (int32, one array per input array)")
      ->check(CLI::IsMember({"text", "npy"}));
  app.add_option("-o,--output", o.output, "write here instead of standard output");
  app.add_flag("--force", o.force, "write .npy to a terminal");

  cli::ToolSpec spec{
      "sample", "[OPTION]... [FILE]...",
      "Draw token ids from logits through a chain of samplers: penalties, temperature, top-k, top-p,\n"
      "min-p, typical, then a draw (or greedy).",
      "--order hf (default): penalties, temperature, top-k, top-p, min-p, typical: HF transformers'\n"
      "order, so truncation sees the distribution that is sampled. --order llama: penalties, top-k,\n"
      "typical, top-p, min-p, temperature last, as llama.cpp. Inactive stages are skipped.\n"
      "Temperature 0 is greedy (the first maximum). NaN or +inf logits are errors; -inf masks a token.\n"
      "The random generator is lmpipe's own (xoshiro256**), so a seed gives the same ids everywhere.\n"
      "See docs/sample.md.",
      kExamples};

  return cli::run_tool(spec, app, argc, argv, [&]() -> Status {
    if (o.files.empty()) o.files.push_back("-");
    if (o.greedy) o.cfg.temperature = 0.0f;
    if (!o.ties.empty()) o.cfg.ties = o.ties == "keep" ? sample::Ties::keep : sample::Ties::cut;
    if (!o.seed) o.seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
    if (o.stats && o.format == "npy") throw cli::UsageError("--stats prints a report; it does not write ids");
    LMP_ASSIGN(auto out, cli::Output::open(o.output, o.format == "npy", o.force));
    LMP_TRY(run(o, *out));
    return out->close();
  });
}
