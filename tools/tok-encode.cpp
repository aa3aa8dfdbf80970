// tok-encode: text → token ids (one line of ids per input line), and back with --decode.
#include <sys/stat.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstring>
#include <limits>

#include "common/cli.h"
#include "lmpipe/core/mmap.h"
#include "lmpipe/core/npy.h"
#include "lmpipe/core/parallel.h"
#include "lmpipe/core/rng.h"
#include "lmpipe/tensor_io/npy_stream.h"
#include "lmpipe/tok/byte_level.h"
#include "lmpipe/tok/ids.h"
#include "lmpipe/tok/sentencepiece.h"
#include "lmpipe/tok/stats.h"
#include "lmpipe/tok/tokenizer.h"

namespace {

using namespace lmp;

struct Options {
  std::string tokenizer, output = "-", format = "text", pre_tokenizer;
  std::vector<std::string> files, special_tokens;
  bool decode = false, pieces = false, stats = false, json = false, no_special = false, skip_special = false;
  bool force = false, add_special = false, lowercase = false, no_lowercase = false, sample = false, zero = false;
  bool verbose = false, offsets = false;
  char delim = '\n';  // input records end here ('\0' with -z)
  int threads = 0;  // 0: cli::default_threads(), or 1 with --sample
  std::size_t nbest = 0;
  double alpha = 0.1;    // --sample, unigram
  int nbest_size = -1;   // --sample, unigram: draw among all segmentations (< 0) or the N best
  double dropout = 0.1;  // --sample, BPE (the tokenizer.json's own when it sets one)
  std::uint64_t seed = 1;
};

// Append one id in decimal (std::to_string builds a string per id: a tenth of the run
// on Chinese text).
void append_id(std::string& out, TokenId id) {
  char buf[16];
  auto r = std::to_chars(buf, buf + sizeof buf, id);
  out.append(buf, r.ptr);
}

// Shown for --pieces: the text HF tokenizers shows (Ġ for a space in byte-level BPE).
std::string piece_text(const tok::Tokenizer& t, TokenId id) { return t.token_string(id); }

struct Worker {
  Worker(const tok::Tokenizer& t, std::uint64_t seed) : session(t), rng(seed) {}
  tok::Session session;
  std::vector<tok::SentencePieceModel::Segmentation> alternatives;  // --nbest
  Rng rng;
  std::vector<TokenId> ids;
  std::vector<tok::Range> spans;  // --offsets
  std::uint64_t line_no = 0;      // --offsets (one worker)
  std::vector<tok::PieceCount> pieces;
  tok::EncodeStats stats;
  std::uint64_t tokens = 0, bytes = 0;  // encoded (for --verbose)
};

// --offsets: one row per token of `line` (line, begin, end, id, token, the text).
void offset_rows(const tok::Tokenizer& t, const Options& o, std::string_view line, Worker& w, std::string& out) {
  ++w.line_no;
  w.ids.clear();
  w.spans.clear();
  if (o.add_special) {  // template tokens cover no text (HF's (0, 0))
    w.ids.assign(t.template_prefix().begin(), t.template_prefix().end());
    w.spans.assign(w.ids.size(), {0, 0});
  }
  t.encode_with_offsets(line, w.ids, w.spans, w.session, !o.no_special);
  if (o.add_special) {
    w.ids.insert(w.ids.end(), t.template_suffix().begin(), t.template_suffix().end());
    w.spans.resize(w.ids.size(), {0, 0});
  }
  w.tokens += w.ids.size();
  for (std::size_t k = 0; k < w.ids.size(); ++k) {
    const tok::Range r = w.spans[k];
    out += fmt::format("{}\t{}\t{}\t{}\t{}\t{}\n", w.line_no, r.begin, r.end, w.ids[k],
                       cli::tsv_field(t.token_string(w.ids[k])), cli::tsv_field(line.substr(r.begin, r.end - r.begin)));
  }
}

// Encode the lines of `slice`, appending to `out`.
void encode_slice(const tok::Tokenizer& t, const Options& o, std::string_view slice, Worker& w, std::string& out) {
  w.bytes += slice.size();
  w.session.pieces = o.stats ? &w.pieces : nullptr;
  std::size_t pos = 0;
  while (pos < slice.size()) {
    std::size_t nl = slice.find(o.delim, pos);
    bool terminated = nl != std::string_view::npos;
    std::string_view line = slice.substr(pos, (terminated ? nl : slice.size()) - pos);
    pos = terminated ? nl + 1 : slice.size();
    w.ids.clear();
    w.pieces.clear();
    std::uint64_t dropped = w.session.dropped_bytes(), unknown = w.session.unknown_words();
    if (o.nbest) {  // unigram models (checked before)
      Status st = t.nbest(line, o.nbest, w.alternatives, w.session, !o.no_special);
      LMP_ASSERT(st.ok(), "{}", st.error().message);
      for (auto& [score, ids] : w.alternatives) {
        if (o.add_special) {
          ids.insert(ids.begin(), t.template_prefix().begin(), t.template_prefix().end());
          ids.insert(ids.end(), t.template_suffix().begin(), t.template_suffix().end());
        }
        if (o.format == "npy") {
          npy::append_i32(out, ids.data(), ids.size());
          continue;
        }
        for (std::size_t k = 0; k < ids.size(); ++k) {
          if (k) out += ' ';
          if (o.pieces) out += piece_text(t, ids[k]);
          else append_id(out, ids[k]);
        }
        if (terminated || &ids != &w.alternatives.back().ids) out += '\n';
      }
      continue;
    }
    if (o.offsets) {
      offset_rows(t, o, line, w, out);
      continue;
    }
    if (o.add_special) w.ids.assign(t.template_prefix().begin(), t.template_prefix().end());
    t.encode(line, w.ids, w.session, !o.no_special);
    if (o.add_special) w.ids.insert(w.ids.end(), t.template_suffix().begin(), t.template_suffix().end());
    w.tokens += w.ids.size();
    if (o.stats) {
      w.stats.add_line(line, w.ids.size(), w.pieces);
      w.stats.dropped_bytes += w.session.dropped_bytes() - dropped;
      w.stats.unknown_words += w.session.unknown_words() - unknown;
    }
    if (o.format == "npy") {
      npy::append_i32(out, w.ids.data(), w.ids.size());
      continue;
    }
    for (std::size_t k = 0; k < w.ids.size(); ++k) {
      if (k) out += ' ';
      if (o.pieces) out += piece_text(t, w.ids[k]);
      else append_id(out, w.ids[k]);
    }
    if (terminated) out += '\n';
  }
}

// Input is cut into slices of about this many bytes at line ends, which the workers
// take as they finish the last (lines differ in cost), their ids written in order.
constexpr std::size_t kSliceBytes = std::size_t{1} << 17;

// A regular file, mapped: no copy, and no chunk to read before the first slice starts.
Status encode_mapped(const tok::Tokenizer& t, const Options& o, std::string_view text, cli::Output* out,
                     std::vector<std::unique_ptr<Worker>>& workers, cli::Progress& progress) {
  std::size_t pos = 0;
  std::vector<std::string_view> slice(workers.size());
  Status st;
  run_ordered(o.threads, 4 * workers.size(),
      [&](std::size_t w, std::size_t) {
        if (pos >= text.size()) return false;
        std::size_t end = std::min(text.size(), pos + kSliceBytes);
        if (end < text.size()) {
          std::size_t nl = text.find(o.delim, end - 1);
          end = nl == std::string_view::npos ? text.size() : nl + 1;
        }
        slice[w] = text.substr(pos, end - pos);
        pos = end;
        return true;
      },
      [&](std::size_t w, std::size_t, std::string& ids) { encode_slice(t, o, slice[w], *workers[w], ids); },
      [&](std::size_t, std::string& ids) {
        if (out) st = out->write(ids);
        progress.update(static_cast<double>(pos) / static_cast<double>(text.size()));
        return st.ok();
      });
  return st;
}

// A pipe, a terminal or standard input: chunks as they arrive, so that a pipeline runs
// line by line.
Status encode_stream(const tok::Tokenizer& t, const Options& o, io::ChunkReader& reader, cli::Output* out,
                     std::vector<std::unique_ptr<Worker>>& workers, cli::Progress& progress, char& last) {
  std::string chunk;
  const std::size_t chunk_bytes = static_cast<std::size_t>(o.threads) << 22;
  for (;;) {
    LMP_ASSIGN(bool more, reader.next(chunk, chunk_bytes));
    if (!more) return {};
    last = chunk.back();
    const int n_slices = o.threads == 1 ? 1 : static_cast<int>(std::max<std::size_t>(1, chunk.size() / kSliceBytes));
    std::vector<std::string_view> slices = split_at_lines(chunk, n_slices, o.delim);
    Status st;
    run_ordered(o.threads, 4 * workers.size(),
        [&](std::size_t, std::size_t k) { return k < slices.size(); },
        [&](std::size_t w, std::size_t k, std::string& ids) { encode_slice(t, o, slices[k], *workers[w], ids); },
        [&](std::size_t, std::string& ids) {
          if (out) st = out->write(ids);
          return st.ok();
        });
    LMP_TRY(st);
    if (out) LMP_TRY(out->flush_stdout());
    if (reader.size_hint())
      progress.update(static_cast<double>(reader.bytes_read()) / static_cast<double>(reader.size_hint()));
  }
}

Status encode_all(const tok::Tokenizer& t, const Options& o, cli::Output* out, tok::EncodeStats& total,
                  std::uint64_t& dropped, std::uint64_t& tokens, std::uint64_t& bytes) {
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < o.threads; ++i) {
    workers.push_back(std::make_unique<Worker>(t, o.seed));
    if (o.sample) workers.back()->session.sample(&workers.back()->rng, o.dropout, o.alpha, o.nbest_size);
  }
  for (const auto& file : o.files) {
    char last = o.delim;  // the input's last byte
    struct stat sb {};
    if (file != "-" && ::stat(file.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0) {
      LMP_ASSIGN(auto mapped, MappedFile::open(file));
      cli::Progress progress("encoding " + file);
      LMP_TRY(encode_mapped(t, o, mapped.view(), out, workers, progress));
      if (!mapped.view().empty()) last = mapped.view().back();
    } else {
      LMP_ASSIGN(auto reader, io::ChunkReader::open(file));
      reader->set_delimiter(o.delim);
      cli::Progress progress("encoding " + reader->name());
      LMP_TRY(encode_stream(t, o, *reader, out, workers, progress, last));
    }
    // A file that ends without a newline still ends its last sequence.
    if (out && o.format == "text" && last != o.delim && &file != &o.files.back()) LMP_TRY(out->write("\n"));
  }
  for (auto& w : workers) {
    total.merge(w->stats);
    dropped += w->session.dropped_bytes();
    tokens += w->tokens;
    bytes += w->bytes;
  }
  return {};
}

// One line of ids → text; `where` locates errors ("file:line").
Status decode_line(const tok::Tokenizer& t, const Options& o, std::string_view line, const std::string& name,
                   std::size_t line_no, std::vector<TokenId>& ids, std::string& text) {
  LMP_TRY(tok::parse_id_line(line, name, line_no, ids));
  auto st = t.decode(ids.data(), ids.size(), text, o.skip_special);
  if (!st.ok()) return make_error(Errc::parse, "{}:{}: {}", name, line_no, st.error().message);
  return {};
}

// A stream of .npy id arrays (int32 or int64, 1-D), decoded array by array as they arrive.
Status decode_npy_stream(const tok::Tokenizer& t, const Options& o, tensor_io::NpyStreamReader& in, cli::Output& out) {
  std::string text;
  std::vector<TokenId> ids;
  tensor_io::NpyArray a;
  for (;;) {
    LMP_ASSIGN(bool got, in.next(a));
    if (!got) return {};
    if ((a.dtype != DType::i32 && a.dtype != DType::i64) || a.shape.size() > 1)
      return make_error(Errc::parse, "{}: array {} (byte {}): token ids must be a 1-D int32 or int64 array, not {} [{}]",
                        in.name(), a.index, a.offset, dtype_name(a.dtype), fmt::join(a.shape, ", "));
    ids.resize(a.count());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      std::int64_t v;
      if (a.dtype == DType::i32) {
        std::int32_t x;
        std::memcpy(&x, a.data.data() + 4 * i, 4);
        v = x;
      } else {
        std::memcpy(&v, a.data.data() + 8 * i, 8);
      }
      if (v < std::numeric_limits<TokenId>::min() || v > std::numeric_limits<TokenId>::max())
        return make_error(Errc::parse, "{}: array {}: token id {} is out of range", in.name(), a.index, v);
      ids[i] = static_cast<TokenId>(v);
    }
    text.clear();
    auto st = t.decode(ids.data(), ids.size(), text, o.skip_special);
    if (!st.ok()) return make_error(Errc::parse, "{}: array {}: {}", in.name(), a.index, st.error().message);
    text += '\n';
    LMP_TRY(out.write(text));
    LMP_TRY(out.flush_stdout());
  }
}

Status decode_all(const tok::Tokenizer& t, const Options& o, cli::Output& out) {
  std::string chunk, text;
  std::vector<TokenId> ids;
  for (const auto& file : o.files) {
    LMP_ASSIGN(auto reader, io::ChunkReader::open(file));
    const std::string& name = reader->name();
    std::size_t line_no = 0;
    bool first = true;
    for (;;) {
      LMP_ASSIGN(bool more, reader->next(chunk, std::size_t{1} << 20));
      if (!more) break;
      if (first && std::string_view(chunk).substr(0, npy::kMagic.size()) == npy::kMagic) {
        auto in = tensor_io::NpyStreamReader::from(std::move(reader), std::move(chunk));
        LMP_TRY(decode_npy_stream(t, o, *in, out));
        break;
      }
      first = false;
      std::size_t pos = 0;
      while (pos < chunk.size()) {
        std::size_t nl = chunk.find(o.delim, pos);
        bool terminated = nl != std::string::npos;
        std::string_view line(chunk.data() + pos, (terminated ? nl : chunk.size()) - pos);
        pos = terminated ? nl + 1 : chunk.size();
        text.clear();
        LMP_TRY(decode_line(t, o, line, name, ++line_no, ids, text));
        if (terminated) text += '\n';
        LMP_TRY(out.write(text));
      }
      LMP_TRY(out.flush_stdout());
    }
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app;
  app.add_option("-t,--tokenizer", o.tokenizer,
                 "tokenizer: HF tokenizer.json, GPT-2 vocab.json (merges.txt beside it), .tiktoken, vocab.txt, .model, "
                 "GGUF, or a model directory holding one")
      ->required();
  app.add_option("FILE", o.files, "input files (default: standard input)");
  app.add_option("-o,--output", o.output, "write to FILE instead of standard output (atomically)");
  app.add_flag("-d,--decode", o.decode, "read token ids (text or .npy), write the text they encode");
  app.add_flag("-p,--pieces", o.pieces, "print token strings (byte-level text, Ġ = space) instead of ids");
  app.add_flag("-z,--zero-terminated", o.zero,
               "input records end with NUL, not newline (texts that contain newlines); one output line each");
  app.add_flag("-s,--stats", o.stats, "print statistics (compression, fertility, most fragmented words) on stdout");
  app.add_flag("--json", o.json, "with --stats: print the statistics as JSON");
  app.add_option("-f,--format", o.format, "id output format: text (default) or npy (one int32 array per line)")
      ->check(CLI::IsMember({"text", "npy"}));
  app.add_option("-j,--threads", o.threads,
                 "threads for encoding, and for building a large tokenizer's tables (default: the number of cores; "
                 "1 with --sample)")
      ->check(cli::Range(1, 256));
  app.add_flag("--no-special", o.no_special, "treat special-token text in the input as ordinary text");
  app.add_flag("--skip-special", o.skip_special, "with --decode: leave special tokens out of the text");
  app.add_option("--pre-tokenizer", o.pre_tokenizer,
                 "for tiktoken files not named after their encoding: gpt2, cl100k, o200k");
  app.add_option("--special-token", o.special_tokens, "for tiktoken files: TEXT=ID, repeatable")
      ->allow_extra_args(false);
  app.add_flag("--force", o.force, "write .npy to a terminal anyway");
  app.add_flag("--add-special", o.add_special,
               "add the tokenizer's sequence template ([CLS] ... [SEP] for BERT); default: none, like spm_encode");
  app.add_flag("--lowercase", o.lowercase, "BERT vocab.txt: lowercase and strip accents (default: guessed from the vocabulary)");
  app.add_flag("--no-lowercase", o.no_lowercase, "BERT vocab.txt: keep case and accents");
  app.add_option("--nbest", o.nbest, "unigram models: the N best segmentations of each line, N lines each, best first")
      ->check(cli::Range(std::size_t{1}, std::size_t{1024}));
  app.add_flag("--sample", o.sample,
               "draw a segmentation instead of the best one (subword regularization): unigram models with "
               "probability ∝ exp(alpha · score), BPE models by BPE-dropout");
  app.add_option("--alpha", o.alpha, "with --sample, unigram: the smoothing exponent (0.1; 0 = uniform over segmentations)")
      ->check(cli::Range(0.0, 100.0));
  app.add_option("--nbest-size", o.nbest_size,
                 "with --sample, unigram: draw among the N best segmentations (spm_encode's --nbest_size: -1, the "
                 "default, draws among all of them; 0 or 1 gives the best one; at most 512)")
      ->check(cli::Range(-1, 512));
  app.add_option("--dropout", o.dropout,
                 "with --sample, BPE: the probability of skipping each merge (the tokenizer.json's dropout, else 0.1; "
                 "spm_encode calls it --alpha for BPE models)")
      ->check(cli::Range(0.0, 1.0));
  app.add_option("--seed", o.seed, "with --sample: the seed of lmpipe's generator (1): the same draws on every platform");
  app.add_flag("--offsets", o.offsets,
               "print one tab-separated row per token: line, begin and end byte offsets in the line (end "
               "exclusive), id, token, the text it covers (encodes on one thread)");
  app.add_flag("-v,--verbose", o.verbose,
               "report on stderr how long the tokenizer took to load and how fast the text was encoded");

  lmp::cli::ToolSpec spec{
      "tok-encode", "[OPTION]... -t TOKENIZER [FILE]...",
      "Encode UTF-8 text into token ids, one output line per input line; --decode reverses it.",
      "Ids are written as decimal numbers separated by single spaces; an empty line stays empty,\n"
      "and the last line ends in a newline only if the input's did, so that\n"
      "decode(encode(x)) == x byte for byte, invalid UTF-8 included.",
      "  tok-encode -t tokenizer.json corpus.txt > corpus.ids\n"
      "  echo 'Hello world' | tok-encode -t gpt2/tokenizer.json --pieces\n"
      "  tok-encode -t cl100k_base.tiktoken --stats -j 2 wiki.txt\n"
      "  tok-encode -t tok.json notes.txt | tok-encode -t tok.json --decode | cmp - notes.txt\n"
      "  tok-encode -t tok.json -f npy corpus.txt -o corpus.npy\n"
      "  echo 'Hello, world!' | tok-encode -t bert-base-uncased/vocab.txt --add-special --pieces\n"
      "  tok-encode -t gpt2/tokenizer.json --sample --dropout 0.1 --seed 7 train.txt   # BPE-dropout\n"
      "  tok-encode -t t5.model --sample --nbest-size 64 --alpha 0.1 train.txt  # Kudo (2018)'s l=64\n"
      "  echo 'Ünïcode ﬁne' | tok-encode -t bert-base-uncased/tokenizer.json --offsets"};

  return cli::run_tool(spec, app, argc, argv, [&]() -> Status {
    if (o.files.empty()) o.files.push_back("-");
    if (o.zero) {
      if (o.decode) throw cli::UsageError("-z is for encoding (ids are one sequence per line)");
      o.delim = '\0';
    }
    if (o.decode && (o.pieces || o.stats || o.format == "npy"))
      throw cli::UsageError("--decode does not combine with --pieces, --stats or --format npy");
    if (o.pieces && o.format == "npy") throw cli::UsageError("--pieces writes text; it does not combine with --format npy");
    if (o.json && !o.stats) throw cli::UsageError("--json goes with --stats");
    if (o.sample && o.threads > 1) throw cli::UsageError("--sample draws one stream of numbers: use -j 1");
    if (o.offsets) {
      if (o.decode || o.stats || o.pieces || o.format == "npy" || o.nbest)
        throw cli::UsageError("--offsets writes its own rows: not with --decode, --stats, --pieces, --format npy "
                              "or --nbest");
      if (o.threads > 1) throw cli::UsageError("--offsets numbers the lines in order: use -j 1");
      o.threads = 1;
    }
    if (o.threads == 0) o.threads = o.sample ? 1 : cli::default_threads();
    tok::LoadOptions lo;
    lo.pre_tokenizer = o.pre_tokenizer;
    lo.threads = o.threads;
    if (o.lowercase && o.no_lowercase) throw cli::UsageError("--lowercase and --no-lowercase contradict each other");
    if (o.lowercase) lo.lowercase = true;
    if (o.no_lowercase) lo.lowercase = false;
    for (const auto& s : o.special_tokens) {
      auto eq = s.rfind('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
        throw cli::UsageError("--special-token takes TEXT=ID, got '" + s + "'");
      lo.special_tokens.emplace_back(s.substr(0, eq), std::stoi(s.substr(eq + 1)));
    }
    auto loading = std::chrono::steady_clock::now();
    LMP_ASSIGN(auto t, tok::load_tokenizer(o.tokenizer, lo));
    auto encoding = std::chrono::steady_clock::now();
    if (o.verbose)
      cli::note(fmt::format("loaded {} ({} tokens) in {:.0f} ms", o.tokenizer, t->vocab_size(),
                            std::chrono::duration<double, std::milli>(encoding - loading).count()));
    if (o.nbest && o.sample) throw cli::UsageError("--nbest and --sample: one or the other");
    if ((o.nbest || o.sample) && o.decode) throw cli::UsageError("--nbest and --sample encode: not with --decode");
    if (o.nbest && o.stats) throw cli::UsageError("--nbest writes several segmentations: not with --stats");
    if (!o.sample && (app.count("--alpha") || app.count("--dropout") || app.count("--seed") || app.count("--nbest-size")))
      throw cli::UsageError("--alpha, --nbest-size, --dropout and --seed go with --sample");
    const auto* sp = t->model().type() == tok::ModelType::sentencepiece
                         ? static_cast<const tok::SentencePieceModel*>(&t->model())
                         : nullptr;
    const bool unigram = sp && sp->kind() == tok::SentencePieceModel::Kind::unigram;
    if (o.nbest && !unigram)
      return make_error(Errc::invalid_argument,
                        "{}: --nbest needs a unigram model (a SentencePiece .model or an HF Unigram tokenizer.json)",
                        o.tokenizer);
    if (o.sample) {
      if (t->model().type() == tok::ModelType::wordpiece)
        return make_error(Errc::invalid_argument,
                          "{}: --sample needs a BPE or unigram model (WordPiece's greedy longest match has no "
                          "sampling)",
                          o.tokenizer);
      if (unigram && app.count("--dropout"))
        throw cli::UsageError("--dropout is for BPE models; a unigram model samples with --alpha");
      if (!unigram && app.count("--nbest-size"))
        throw cli::UsageError("--nbest-size is for unigram models; a BPE model samples by BPE-dropout (--dropout P)");
      if (!unigram && app.count("--alpha"))
        throw cli::UsageError("a BPE model samples by BPE-dropout: --dropout P (spm_encode's --alpha for BPE models)");
      if (!app.count("--dropout") && t->bpe() && t->bpe()->dropout() > 0) o.dropout = t->bpe()->dropout();
    } else if (t->bpe() && t->bpe()->dropout() > 0) {
      cli::note(fmt::format("{} sets BPE dropout {}, which HF tokenizers applies to every encoding; these are the "
                            "deterministic ids (--sample draws as HF does)",
                            o.tokenizer, t->bpe()->dropout()));
    }
    bool ids_out = !o.stats || o.output != "-";
    std::unique_ptr<cli::Output> out;
    if (ids_out) {
      LMP_ASSIGN(out, cli::Output::open(o.output, o.format == "npy", o.force));
    }
    if (o.decode) {
      LMP_TRY(decode_all(*t, o, *out));
      return out->close();
    }
    tok::EncodeStats stats;
    std::uint64_t dropped = 0, tokens = 0, bytes = 0;
    LMP_TRY(encode_all(*t, o, out.get(), stats, dropped, tokens, bytes));
    if (out) LMP_TRY(out->close());
    if (o.verbose) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - encoding).count();
      cli::note(fmt::format("encoded {:.2f} MB into {} tokens in {:.3f} s: {:.1f} MB/s on {} thread{}", bytes / 1e6,
                            tokens, s, s > 0 ? bytes / 1e6 / s : 0.0, o.threads, o.threads == 1 ? "" : "s"));
    }
    if (dropped) {
      const bool chars = t->bpe() && t->bpe()->char_level();
      cli::warn(fmt::format("{} input bytes have no token in this vocabulary and were left out (as HF "
                            "tokenizers does); {}",
                            dropped,
                            chars ? "this character-level BPE has no unknown token (HF fails instead when the file "
                                    "names an unk_token the vocabulary lacks, and its offsets after a left-out "
                                    "character are shifted; lmpipe's are not)"
                                  : "a vocabulary trained with --initial-alphabet bytes covers all"));
    }
    if (o.stats) {
      std::string r = o.json ? stats.report_json(*t) : stats.report(*t);
      fmt::print("{}", r);
    }
    return {};
  });
}
