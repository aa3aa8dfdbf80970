// tok-train: train a byte-level BPE vocabulary (HF BpeTrainer semantics), a
// character-level BPE over words (the original GPT's, HF's CharBPETokenizer), a WordPiece
// vocabulary (BERT), SentencePiece-style BPE or unigram, or count pre-tokens into count
// files that add up across shards (`tok-train count`).
#include <chrono>
#include <thread>

#include "common/cli.h"
#include "lmpipe/tok/bpe_trainer.h"
#include "lmpipe/tok/sp_trainer.h"
#include "lmpipe/tok/wordpiece_trainer.h"

namespace {

using namespace lmp;

struct Options {
  std::string model = "bpe", output, format = "hf", pre_tokenizer = "gpt2", initial_alphabet, algo = "likelihood";
  bool cased = false, split_digits = false, no_byte_fallback = false;
  bool no_split_by_whitespace = false, no_whitespace_only_pieces = false;  // sp-bpe, unigram
  bool remove_extra_whitespaces = false;                                    // sp-bpe, unigram
  std::string normalization = "nfkc";
  std::string suffix = "</w>", prefix, unk_token = "<unk>";  // char-bpe
  std::vector<std::string> user_defined, control;
  double character_coverage = 0.9995;
  double dropout = 0;  // BPE into a tokenizer.json: the model's `dropout`
  std::vector<std::string> files, special_tokens;
  std::size_t vocab_size = 30000, limit_alphabet = 0, max_token_length = 0;
  std::uint64_t min_frequency = 0;
  int threads = 0;
};

constexpr std::string_view kCountsMagic = "#lmpipe-counts v1";

bool wordpiece(const Options& o) { return o.model == "wordpiece"; }
bool char_bpe(const Options& o) { return o.model == "char-bpe"; }

// How words are counted: the normalization, the split, and the name a count file records
// for the pair (count files add up only when it is the same). WordPiece: BERT normalization,
// uncased ("bert") or cased ("bert-cased"), and the BERT split. char-bpe: the split's name
// alone without normalization (as -m bpe), else the normalization's name, then ':' and the
// split's unless it is bert. "+digits" ends the name with --split-digits.
struct Counting {
  std::optional<text::BertNormalization> norm;
  std::string split, name;
};

Counting counting(const Options& o) {
  std::string digits = o.split_digits ? "+digits" : "";
  if (wordpiece(o))
    return {text::BertNormalization{true, true, !o.cased, !o.cased}, "bert" + digits,
            std::string(o.cased ? "bert-cased" : "bert") + digits};
  if (!char_bpe(o)) return {std::nullopt, o.pre_tokenizer + digits, o.pre_tokenizer + digits};
  const std::string& split = o.pre_tokenizer;
  if (o.normalization == "identity") return {std::nullopt, split + digits, (split == "bert" ? "identity:bert" : split) + digits};
  bool uncased = o.normalization == "bert-uncased";
  std::string norm = uncased ? "bert" : "bert-cased";
  return {text::BertNormalization{true, true, uncased, uncased}, split + digits,
          (split == "bert" ? norm : norm + ":" + split) + digits};
}

// Count the pre-tokens of text files, and add up count files, into `counts`.
Status gather(const Options& o, tok::WordCountMap& counts, std::string& pre_name, std::uint64_t& bytes,
              std::uint64_t& lines) {
  Counting how = counting(o);
  LMP_ASSIGN(auto pre, tok::make_pre_tokenizer(how.split));
  tok::WordCounter counter(*pre, o.threads, how.norm);
  std::string chunk;
  bool any_text = false;
  for (const auto& file : o.files) {
    LMP_ASSIGN(auto reader, io::ChunkReader::open(file));
    cli::Progress progress("counting " + reader->name());
    LMP_ASSIGN(bool more, reader->next(chunk, std::size_t{8} << 20));
    if (more && std::string_view(chunk).substr(0, kCountsMagic.size()) == kCountsMagic) {
      std::string all = chunk;
      for (;;) {
        LMP_ASSIGN(bool m, reader->next(chunk, std::size_t{8} << 20));
        if (!m) break;
        all += chunk;
      }
      std::string file_pre;
      LMP_TRY(tok::read_counts(all, reader->name(), counts, file_pre));
      if (file_pre != how.name) {
        const char* hint = "";
        auto digits = [](const std::string& p) { return p.find("+digits") != std::string::npos; };
        if (digits(file_pre) != digits(how.name)) hint = " (+digits: --split-digits)";
        else if (char_bpe(o) || file_pre.find(':') != std::string::npos)
          hint = " (char-bpe counts are named NORMALIZATION:SPLIT, the split alone without normalization; "
                 "bert-cased and bert are the BERT normalization, cased or not, with the bert split)";
        else if (file_pre.substr(0, 4) == "bert" || wordpiece(o)) hint = " (bert: -m wordpiece; bert-cased: --cased)";
        return make_error(Errc::invalid_argument, "{}: counted with --pre-tokenizer {}, training with {}{}",
                          reader->name(), file_pre, how.name, hint);
      }
      bytes += all.size();
      continue;
    }
    any_text = true;
    while (more) {
      counter.add(chunk);
      bytes += chunk.size();
      if (reader->size_hint())
        progress.update(static_cast<double>(reader->bytes_read()) / static_cast<double>(reader->size_hint()),
                        cli::human_bytes(static_cast<double>(reader->bytes_read())));
      LMP_ASSIGN(more, reader->next(chunk, std::size_t{8} << 20));
    }
  }
  if (any_text) {
    auto text_counts = counter.take();
    if (counts.empty()) counts = std::move(text_counts);
    else
      for (auto& [w, c] : text_counts) counts[w] += c;
  }
  lines = counter.lines();
  pre_name = how.name;
  return {};
}

const char* kExamples =
    "  tok-train --vocab-size 8000 --min-frequency 2 -o tok.json corpus.txt\n"
    "  tok-train --vocab-size 32000 --pre-tokenizer llama3 --special-token '<|endoftext|>' \\\n"
    "            --initial-alphabet bytes -j 2 -o tok.json en.txt zh.txt\n"
    "  tok-train --vocab-size 50000 --format gpt2 -o out/tokenizer.json corpus.txt  # + vocab.json, merges.txt\n"
    "  tok-train --vocab-size 32000 --split-digits -o code.json code.txt  # digits never merged (StarCoder)\n"
    "  # map-reduce: count shards anywhere, then train on the counts\n"
    "  ls shards/* | parallel tok-train count -o {}.counts {}\n"
    "  tok-train --vocab-size 32000 -o tok.json shards/*.counts\n"
    "  tok-train -m wordpiece --vocab-size 30522 --min-frequency 2 -o vocab.txt corpus.txt\n"
    "  tok-train -m wordpiece --algo hf --cased -o bert.json corpus.txt\n"
    "  # character-level BPE over words: HF's CharBPETokenizer (BERT normalizer and split, </w>)\n"
    "  tok-train -m char-bpe --vocab-size 30000 --min-frequency 2 --limit-alphabet 1000 -o char.json corpus.txt\n"
    "  # the original GPT's form (lowercased), and HF's quicktour BPE (no normalizer, no affixes)\n"
    "  tok-train -m char-bpe --normalization bert-uncased -o gpt.json corpus.txt\n"
    "  # BPE-dropout written into the file (HF's ByteLevelBPETokenizer(dropout=0.1)); draw with it\n"
    "  tok-train --vocab-size 8000 --dropout 0.1 -o drop.json corpus.txt\n"
    "  tok-encode -t drop.json --sample --seed 1 corpus.txt\n"
    "  tok-train -m char-bpe --normalization identity -P whitespace --suffix '' -S '[UNK]' \\\n"
    "            --unk-token '[UNK]' -S '[CLS]' -S '[SEP]' -o quicktour.json corpus.txt\n"
    "  # SentencePiece: Llama 2's settings (no normalization, each digit alone, runs of spaces as pieces)\n"
    "  tok-train -m sp-bpe --vocab-size 32000 --normalization identity --split-digits -o llama.model corpus.txt\n"
    "  tok-train -m unigram --vocab-size 8000 -o uni.model corpus.txt  # spm_encode reads it\n"
    "  tok-train -m unigram --no-split-by-whitespace -o phrases.model corpus.txt  # pieces across words (▁of▁the)\n"
    "  # spm_train's defaults: nmt_nfkc, extra spaces removed, every ▁ starting a piece\n"
    "  tok-train -m unigram --vocab-size 8000 --normalization nmt_nfkc --remove-extra-whitespaces \\\n"
    "            --no-whitespace-only-pieces -o t5like.model corpus.txt";

// The end-of-training report on stderr.
void report(const Options& o, const tok::TrainReport& rep, std::size_t vocab,
            std::chrono::steady_clock::time_point t0) {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string why;
  switch (rep.stop) {
    case tok::StopReason::vocab_full: why = fmt::format("vocabulary full ({} tokens)", cli::with_commas(rep.vocab)); break;
    case tok::StopReason::min_frequency:
      why = rep.stop_count > 0
                ? fmt::format("best pair count {} < min_frequency {} after {} merges", rep.stop_count, o.min_frequency,
                              cli::with_commas(rep.merges))
                : fmt::format("no pair occurring at least {} times left after {} merges", o.min_frequency,
                              cli::with_commas(rep.merges));
      break;
    case tok::StopReason::no_pairs: why = fmt::format("no pairs left to merge after {} merges", cli::with_commas(rep.merges)); break;
  }
  std::size_t n_special = !o.special_tokens.empty() ? o.special_tokens.size()
                          : wordpiece(o)                ? 5
                          : char_bpe(o)                 ? !o.unk_token.empty()
                                                        : 0;
  if (rep.alphabet + n_special >= o.vocab_size)
    cli::warn(fmt::format("the alphabet ({} {}) and specials fill the vocabulary size {}: no merges were "
                          "possible; raise --vocab-size or set --limit-alphabet",
                          rep.alphabet, o.model == "bpe" ? "bytes" : "characters", o.vocab_size));
  if (rep.invalid_bytes)
    cli::warn(fmt::format("{} bytes of the text are not UTF-8: left out of the words they were in ({}'s symbols "
                          "are characters)",
                          cli::with_commas(rep.invalid_bytes), o.model == "wordpiece" ? "WordPiece" : "char-bpe"));
  cli::note(fmt::format("stopped: {}", why));
  cli::note(fmt::format("alphabet {}{}, {} {}, vocabulary {}", rep.alphabet,
                        rep.alphabet_dropped ? fmt::format(" ({} dropped by --limit-alphabet)", rep.alphabet_dropped) : "",
                        o.model == "unigram" ? "EM and pruning rounds" : "merges", cli::with_commas(rep.merges),
                        cli::with_commas(vocab)));
  cli::note(fmt::format("time {:.2f} s, peak memory {}", secs, cli::human_bytes(static_cast<double>(cli::peak_rss_bytes()))));
}

// Training on no text at all is a mistake (a wrong path, an empty shard): say so rather than
// write a vocabulary of nothing but bytes or specials.
Status need_text(const Options& o, const tok::WordCountMap& counts, std::uint64_t bytes) {
  if (!counts.empty()) return {};
  std::string names;
  for (const auto& f : o.files) names += (names.empty() ? "" : ", ") + (f == "-" ? std::string("<stdin>") : f);
  return make_error(Errc::parse, "{}: {}: nothing to train on", names,
                    bytes ? "no words in it" : "empty input");
}

// -m sp-bpe: count the words of normalized lines, train, write the .model.
Status train_sp(const Options& o, std::chrono::steady_clock::time_point t0) {
  tok::WordCountMap counts;
  std::string chunk, norm;
  std::uint64_t bytes = 0, lines = 0;
  tok::UnigramTrainerConfig cfg;
  LMP_ASSIGN(cfg.normalizer, tok::make_sp_normalizer(o.normalization, o.remove_extra_whitespaces));
  cfg.vocab_size = o.vocab_size;
  cfg.min_frequency = o.min_frequency;
  cfg.character_coverage = o.character_coverage;
  cfg.byte_fallback = !o.no_byte_fallback;
  cfg.split_digits = o.split_digits;
  cfg.split_by_whitespace = !o.no_split_by_whitespace;
  cfg.allow_whitespace_only_pieces = !o.no_whitespace_only_pieces;
  if (o.max_token_length) cfg.max_piece_chars = o.max_token_length;
  cfg.threads = o.threads;
  cfg.user_defined = o.user_defined;
  cfg.control = o.control;
  cfg.dropout = o.dropout;
  for (const auto& file : o.files) {
    LMP_ASSIGN(auto reader, io::ChunkReader::open(file));
    cli::Progress progress("counting " + reader->name());
    for (;;) {
      LMP_ASSIGN(bool more, reader->next(chunk, std::size_t{8} << 20));
      if (!more) break;
      bytes += chunk.size();
      for (std::size_t pos = 0; pos < chunk.size();) {
        std::size_t nl = chunk.find('\n', pos);
        std::size_t end = nl == std::string::npos ? chunk.size() : nl + 1;
        tok::sp_normalize_line(std::string_view(chunk).substr(pos, end - pos), cfg.normalizer, norm);
        tok::sp_count_words(norm, cfg, counts);
        ++lines;
        pos = end;
      }
      if (reader->size_hint())
        progress.update(static_cast<double>(reader->bytes_read()) / static_cast<double>(reader->size_hint()));
    }
  }
  cli::note(fmt::format("read {} in {} lines: {} distinct words", cli::human_bytes(static_cast<double>(bytes)),
                        cli::with_commas(lines), cli::with_commas(counts.size())));
  LMP_TRY(need_text(o, counts, bytes));
  tok::SpTrainReport rep;
  cli::Progress progress("merging");
  std::string model;
  if (o.model == "unigram") {
    std::string json;
    bool json_out = o.output.size() > 5 && o.output.substr(o.output.size() - 5) == ".json";
    LMP_ASSIGN(model, tok::train_sp_unigram(
                          counts, cfg, rep,
                          [&](std::size_t round, std::size_t) {
                            progress.update(0.0, fmt::format("EM and pruning, round {}", round));
                          },
                          json_out ? &json : nullptr));
    if (json_out) model = std::move(json);
  } else {
    std::string json;
    bool json_out = o.output.size() > 5 && o.output.substr(o.output.size() - 5) == ".json";
    LMP_ASSIGN(model, tok::train_sp_bpe(
                          counts, cfg, rep,
                          [&](std::size_t done, std::size_t most) {
                            progress.update(most ? static_cast<double>(done) / static_cast<double>(most) : 1.0,
                                            cli::with_commas(done) + " merges");
                          },
                          json_out ? &json : nullptr));
    if (json_out) model = std::move(json);
  }
  progress.done();
  LMP_TRY(io::write_file_atomic(o.output, model));
  cli::note(fmt::format("characters: {} kept of {}, covering {:.4f}% of the text{}", rep.chars_kept,
                        rep.chars_total_distinct, 100.0 * rep.coverage,
                        cfg.byte_fallback ? " (the others encode as bytes)" : " (the others encode as <unk>)"));
  report(o, rep, rep.vocab, t0);
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app;
  app.add_option("FILE", o.files, "training text (UTF-8, one sequence per line) or count files");
  app.add_option("-o,--output", o.output,
                 "tokenizer.json to write (atomically); '-' for standard output; WordPiece: a name ending in .txt "
                 "writes a BERT vocab.txt (required)");
  app.add_option("-m,--model", o.model,
                 "model to train: bpe (byte-level BPE), char-bpe (character-level BPE over words, as the original "
                 "GPT and HF's CharBPETokenizer), wordpiece (BERT), sp-bpe (SentencePiece BPE, as Llama 2), unigram "
                 "(SentencePiece unigram)")
      ->check(CLI::IsMember({"bpe", "char-bpe", "wordpiece", "sp-bpe", "unigram"}));
  app.add_option("--character-coverage", o.character_coverage,
                 "sp-bpe: keep the most frequent characters covering this share of the text (0.9995)")
      ->check(cli::Range(0.5, 1.0));
  app.add_flag("--split-digits", o.split_digits,
               "every digit a piece of its own (bpe: HF's Digits pre-tokenizer before the split, as StarCoder; "
               "wordpiece: Digits with the BERT split; sp-bpe, unigram: spm's split_digits)");
  app.add_option("--user-defined-symbol", o.user_defined,
                 "sp-bpe, unigram: a piece matched whole in the text and never trained into (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--control-symbol", o.control,
                 "sp-bpe, unigram: a piece with an id that never comes from text, like <s> (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--normalization", o.normalization,
                 "sp-bpe, unigram: nfkc (default), nfkc_cf (NFKC and case folding), nmt_nfkc (spm_train's "
                 "default: also control characters dropped, tabs and invisible separators made spaces), "
                 "nmt_nfkc_cf (both) or identity (as Llama 2); char-bpe: bert (default: HF's BertNormalizer, cased), "
                 "bert-uncased (also lowercase and strip accents, as the original GPT) or identity")
      ->check(CLI::IsMember({"nfkc", "nfkc_cf", "nmt_nfkc", "nmt_nfkc_cf", "identity", "bert", "bert-uncased"}));
  app.add_option("--suffix", o.suffix,
                 "char-bpe: end_of_word_suffix, on the last character of every word ('</w>', the default, as the "
                 "original GPT; '' for none)");
  app.add_option("--prefix", o.prefix,
                 "char-bpe: continuing_subword_prefix, on every character of a word but the first (none by "
                 "default; '##' as WordPiece)");
  app.add_option("--unk-token", o.unk_token,
                 "char-bpe: the unknown token ('<unk>'), the only special token unless -S gives them; '' for none "
                 "(a character without a token is then left out)");
  app.add_flag("--no-byte-fallback", o.no_byte_fallback,
               "sp-bpe: no <0xXX> pieces; characters not kept become <unk>");
  app.add_flag("--no-whitespace-only-pieces", o.no_whitespace_only_pieces,
               "sp-bpe, unigram: every space starts a piece, so a run of spaces is that many ▁ pieces (spm_train's "
               "default; without it runs of spaces form pieces such as ▁▁▁▁, as in Llama 2)");
  app.add_flag("--remove-extra-whitespaces", o.remove_extra_whitespaces,
               "sp-bpe, unigram: no spaces at either end of a line, a run of them one space, in training and in "
               "the model's encoding (spm_train's default; without it spaces are kept, as in Llama 2)");
  app.add_flag("--no-split-by-whitespace", o.no_split_by_whitespace,
               "sp-bpe, unigram: pieces may span words (▁ inside a piece, never at its end: ▁of▁the); "
               "spm_train's split_by_whitespace=false");
  app.add_option("--algo", o.algo,
                 "WordPiece merge rule: likelihood (count(ab)/(count(a)count(b)), default) or hf (by count, "
                 "as HF's WordPieceTrainer)")
      ->check(CLI::IsMember({"likelihood", "hf"}));
  app.add_flag("--cased", o.cased, "WordPiece: keep case and accents (default: lowercase and strip them, as uncased BERT)");
  app.add_option("-V,--vocab-size", o.vocab_size, "target vocabulary size, specials and alphabet included (30000)")
      ->check(cli::Range(std::size_t{1}, std::size_t{1} << 30));
  app.add_option("-F,--min-frequency", o.min_frequency,
                 "stop merging when the best pair occurs fewer times than this (0)");
  app.add_option("-S,--special-token", o.special_tokens,
                 "special token, given the first ids in order; repeatable (WordPiece default: [PAD] [UNK] [CLS] [SEP] "
                 "[MASK]; char-bpe default: the --unk-token)")
      ->allow_extra_args(false);  // one token per -S; and "[UNK]" is a token, not CLI11's list syntax
  app.add_option("-P,--pre-tokenizer", o.pre_tokenizer,
                 "split before BPE: gpt2 (default), cl100k, llama3, o200k, whitespace, none; char-bpe: bert "
                 "(default, HF's BertPreTokenizer), whitespace (HF's Whitespace: \\w+ and [^\\w\\s]+ runs), "
                 "whitespace-split or none (a line is a word)")
      ->check(CLI::IsMember({"gpt2", "cl100k", "llama3", "o200k", "whitespace", "whitespace-split", "bert", "none"}));
  app.add_option("--limit-alphabet", o.limit_alphabet, "keep at most K initial characters (bytes), most frequent first");
  app.add_option("--initial-alphabet", o.initial_alphabet, "bytes: put all 256 bytes in the alphabet")
      ->check(CLI::IsMember({"bytes"}));
  app.add_option("--max-token-length", o.max_token_length,
                 "do not build tokens longer than this many bytes (char-bpe, wordpiece: characters, affixes not "
                 "counted; sp-bpe, unigram: characters, 16 by default as spm_train's max_sentencepiece_length)");
  app.add_option("--dropout", o.dropout,
                 "BPE models (bpe, char-bpe, sp-bpe into a .json): write this BPE-dropout probability into the "
                 "tokenizer.json, as HF's BPE(dropout=P); HF then skips each merge with it on every encoding, "
                 "tok-encode with --sample (default: none)")
      ->check(cli::Range(0.0, 1.0));
  app.add_option("-f,--format", o.format, "hf: tokenizer.json; gpt2: also vocab.json and merges.txt beside it")
      ->check(CLI::IsMember({"hf", "gpt2"}));
  app.add_option("-j,--threads", o.threads, "counting threads (default: the number of cores)")->check(cli::Range(1, 256));

  // `tok-train count`: the map step of a sharded run.
  bool count_quiet = false;
  CLI::App* count = app.add_subcommand("count", "count pre-tokens into a count file (no training)");
  count->add_option("FILE", o.files, "text files");
  count->add_option("-o,--output", o.output, "count file to write; '-' for standard output (required)");
  count->add_flag("-q,--quiet", count_quiet, "no progress or report on stderr");
  count->add_option("-P,--pre-tokenizer", o.pre_tokenizer, "as for training")
      ->check(CLI::IsMember({"gpt2", "cl100k", "llama3", "o200k", "whitespace", "whitespace-split", "bert", "none"}));
  count->add_option("-m,--model", o.model,
                    "as for training (wordpiece: BERT normalization and split; char-bpe: its --normalization and "
                    "--pre-tokenizer)")
      ->check(CLI::IsMember({"bpe", "char-bpe", "wordpiece"}));
  count->add_option("--normalization", o.normalization, "char-bpe: as for training")
      ->check(CLI::IsMember({"bert", "bert-uncased", "identity"}));
  count->add_flag("--cased", o.cased, "as for training");
  count->add_flag("--split-digits", o.split_digits, "as for training");
  count->add_option("-j,--threads", o.threads, "counting threads")->check(cli::Range(1, 256));

  cli::ToolSpec spec{
      "tok-train", "[OPTION]... -o TOKENIZER.json [FILE]...\n       tok-train count [OPTION]... -o COUNTS [FILE]...",
      "Train a byte-level BPE tokenizer (GPT-2 / Llama-3 style) with HF tokenizers' BpeTrainer semantics,\n"
      "a character-level BPE over words (the original GPT's, HF's CharBPETokenizer) with the same trainer,\n"
      "a WordPiece tokenizer (BERT) by the likelihood criterion or as HF's WordPieceTrainer does, or a\n"
      "SentencePiece-style BPE or unigram model over raw text.",
      "Each input line (with its newline) is one training sequence. --min-frequency is a stop\n"
      "threshold on pair counts, as in HF: training ends when the most frequent pair occurs fewer\n"
      "times. Ties between equally frequent pairs go to the smallest pair of ids, so the result is\n"
      "the same on every run and thread count. FILEs that are count files (from `tok-train count`)\n"
      "are added up instead of read as text. A report goes to stderr at the end (--quiet: none).\n"
      "WordPiece: text is BERT-normalized and split on whitespace and punctuation (each CJK\n"
      "ideograph a word); --min-frequency is a floor: no pair occurring fewer times is merged.\n"
      "char-bpe: the alphabet is the words' characters (--limit-alphabet keeps the most frequent);\n"
      "--suffix marks a word's last character, --prefix every other character but the first.",
      kExamples};

  return cli::run_tool(spec, app, argc, argv, [&]() -> Status {
    auto t0 = std::chrono::steady_clock::now();
    if (count_quiet) cli::set_quiet(true);
    if (o.output.empty()) throw cli::UsageError("--output is required");
    if (o.files.empty()) o.files.push_back("-");
    if (o.threads == 0) o.threads = cli::default_threads();
    bool sp = o.model == "sp-bpe" || o.model == "unigram";
    if ((app.count("--suffix") || app.count("--prefix") || app.count("--unk-token")) && !char_bpe(o))
      throw cli::UsageError("--suffix, --prefix and --unk-token are for -m char-bpe");
    bool bert_norm = o.normalization == "bert" || o.normalization == "bert-uncased";
    bool given_split = app.count("--pre-tokenizer") || count->count("--pre-tokenizer");
    if (sp) {
      if (count->parsed()) throw cli::UsageError("count files are for -m bpe, char-bpe and wordpiece");
      if (bert_norm) throw cli::UsageError("--normalization " + o.normalization + " is for -m char-bpe");
      if (app.count("--pre-tokenizer")) throw cli::UsageError(o.model + " has no pre-tokenizer; --pre-tokenizer is for -m bpe");
      if (!o.special_tokens.empty()) throw cli::UsageError(o.model + " has <unk>, <s> and </s>; -S is for -m bpe and wordpiece");
      bool json_out = o.output.size() > 5 && o.output.substr(o.output.size() - 5) == ".json";
      if (app.count("--dropout") && o.model == "unigram")
        throw cli::UsageError("--dropout is for BPE models; a unigram model samples at encoding time (tok-encode "
                              "--sample --alpha A)");
      if (app.count("--dropout") && !json_out)
        throw cli::UsageError("a SentencePiece .model has no dropout field (spm samples at encoding time): write a "
                              "*.json, or use tok-encode --sample --dropout P with the .model");
      if (!json_out && (o.output.size() < 7 || o.output.substr(o.output.size() - 6) != ".model"))
        throw cli::UsageError(o.model + " writes a SentencePiece model (*.model)" +
                              " or an HF tokenizer.json (*.json)");
      return train_sp(o, t0);
    }
    for (const char* opt : {"--character-coverage", "--no-byte-fallback", "--user-defined-symbol", "--control-symbol",
                            "--no-whitespace-only-pieces", "--no-split-by-whitespace", "--remove-extra-whitespaces"})
      if (app.count(opt)) throw cli::UsageError(std::string(opt) + " is for -m sp-bpe and unigram");
    if (char_bpe(o)) {
      if (!app.count("--normalization") && !count->count("--normalization")) o.normalization = "bert";
      else if (!bert_norm && o.normalization != "identity")
        throw cli::UsageError("char-bpe normalizes with --normalization bert, bert-uncased or identity");
      if (!given_split) o.pre_tokenizer = "bert";
      else if (o.pre_tokenizer != "bert" && o.pre_tokenizer != "whitespace" && o.pre_tokenizer != "whitespace-split" &&
               o.pre_tokenizer != "none")
        throw cli::UsageError("char-bpe splits words with --pre-tokenizer bert, whitespace, whitespace-split or none");
      if (!o.initial_alphabet.empty()) throw cli::UsageError("--initial-alphabet bytes is for byte-level BPE");
      if (o.format != "hf") throw cli::UsageError("--format gpt2 is for byte-level BPE; char-bpe writes a tokenizer.json");
    } else if (app.count("--normalization") || count->count("--normalization")) {
      throw cli::UsageError("--normalization is for -m char-bpe, sp-bpe and unigram");
    } else if (!wordpiece(o) && (o.pre_tokenizer == "bert" || o.pre_tokenizer == "whitespace-split")) {
      throw cli::UsageError("--pre-tokenizer " + o.pre_tokenizer + " is for -m char-bpe");
    }
    if (wordpiece(o)) {
      if (app.count("--dropout")) throw cli::UsageError("--dropout is for BPE models; WordPiece has no dropout");
      if (given_split) throw cli::UsageError("WordPiece uses the BERT split; --pre-tokenizer is for -m bpe and char-bpe");
      if (!o.initial_alphabet.empty()) throw cli::UsageError("--initial-alphabet bytes is for byte-level BPE");
      if (o.format != "hf") throw cli::UsageError("--format gpt2 is for byte-level BPE; name the output *.txt for a vocab.txt");
      if (o.split_digits && !count->parsed() && o.output.size() > 4 && o.output.substr(o.output.size() - 4) == ".txt")
        throw cli::UsageError("--split-digits needs a tokenizer.json output: a vocab.txt cannot keep the Digits split");
    } else if (app.count("--algo") || o.cased) {
      throw cli::UsageError("--algo and --cased are for -m wordpiece");
    }
    tok::WordCountMap counts;
    std::string pre_name;
    std::uint64_t bytes = 0, lines = 0;
    LMP_TRY(gather(o, counts, pre_name, bytes, lines));
    double count_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cli::note(fmt::format("read {} in {} lines: {} distinct pre-tokens ({:.2f} s)",
                          cli::human_bytes(static_cast<double>(bytes)), cli::with_commas(lines),
                          cli::with_commas(counts.size()), count_secs));
    if (count->parsed()) return io::write_file_atomic(o.output, tok::format_counts(counts, pre_name));
    LMP_TRY(need_text(o, counts, bytes));

    tok::TrainReport rep;
    cli::Progress progress("merging");
    auto on_merge = [&](std::size_t done, std::size_t most) {
      progress.update(most ? static_cast<double>(done) / static_cast<double>(most) : 1.0,
                      cli::with_commas(done) + " merges");
    };
    if (wordpiece(o)) {
      tok::WordPieceTrainerConfig wc;
      wc.vocab_size = o.vocab_size;
      wc.min_frequency = o.min_frequency;
      wc.special_tokens = o.special_tokens;
      if (wc.special_tokens.empty()) wc.special_tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
      if (o.limit_alphabet) wc.limit_alphabet = o.limit_alphabet;
      if (o.max_token_length) wc.max_token_length = o.max_token_length;
      wc.algo = o.algo == "hf" ? tok::WordPieceAlgo::hf : tok::WordPieceAlgo::likelihood;
      wc.normalization = *counting(o).norm;
      wc.split_digits = o.split_digits;
      LMP_ASSIGN(auto t, tok::train_wordpiece(counts, wc, rep, on_merge));
      progress.done();
      bool txt = o.output.size() > 4 && o.output.substr(o.output.size() - 4) == ".txt";
      LMP_TRY(io::write_file_atomic(o.output, txt ? tok::to_vocab_txt(*t) : tok::to_tokenizer_json(*t)));
      report(o, rep, t->vocab_size(), t0);
      return {};
    }

    Counting how = counting(o);
    LMP_ASSIGN(auto pre, tok::make_pre_tokenizer(how.split));
    std::unique_ptr<tok::Tokenizer> t;
    if (char_bpe(o)) {
      tok::CharBpeTrainerConfig cfg;
      cfg.vocab_size = o.vocab_size;
      cfg.min_frequency = o.min_frequency;
      cfg.special_tokens = o.special_tokens;
      if (cfg.special_tokens.empty() && !o.unk_token.empty()) cfg.special_tokens = {o.unk_token};
      cfg.unk_token = o.unk_token;
      if (o.limit_alphabet) cfg.limit_alphabet = o.limit_alphabet;
      if (o.max_token_length) cfg.max_token_length = o.max_token_length;
      cfg.prefix = o.prefix;
      cfg.suffix = o.suffix;
      cfg.normalization = how.norm;
      cfg.dropout = o.dropout;
      LMP_ASSIGN(t, tok::train_char_bpe(counts, cfg, std::move(pre), rep, on_merge));
    } else {
      tok::BpeTrainerConfig cfg;
      cfg.vocab_size = o.vocab_size;
      cfg.min_frequency = o.min_frequency;
      cfg.special_tokens = o.special_tokens;
      if (o.limit_alphabet) cfg.limit_alphabet = o.limit_alphabet;
      if (o.max_token_length) cfg.max_token_length = o.max_token_length;
      cfg.initial_alphabet_bytes = o.initial_alphabet == "bytes";
      cfg.dropout = o.dropout;
      LMP_ASSIGN(t, tok::train_bpe(counts, cfg, std::move(pre), rep, on_merge));
    }
    progress.done();
    counts = tok::WordCountMap();
    LMP_TRY(io::write_file_atomic(o.output, tok::to_tokenizer_json(*t)));
    if (o.format == "gpt2") {
      std::string dir = o.output == "-" ? "" : o.output.substr(0, o.output.find_last_of('/') + 1);
      LMP_TRY(io::write_file_atomic(dir + "vocab.json", tok::to_vocab_json(*t)));
      LMP_TRY(io::write_file_atomic(dir + "merges.txt", tok::to_merges_txt(*t)));
    }
    report(o, rep, t->vocab_size(), t0);
    return {};
  });
}
