// The byte-level BPE trainer, with the semantics of HF tokenizers' BpeTrainer:
// the same vocabulary and merges, in the same order, from the same word counts.
//
//  1. special tokens, in the order given;
//  2. the alphabet: bytes seen (weighted by word counts), plus all 256 with
//     initial_alphabet_bytes, cut to limit_alphabet by frequency, then sorted by the
//     code point of their byte-level character;
//  3. merges: a max-heap of (pair count, smallest pair of ids), stale entries pushed
//     back with their fresh count, until the vocabulary is full or the best count is
//     below min_frequency.
// Counts are 64-bit (HF's are 32-bit and can overflow on large corpora).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/tok/pre_tokenizer.h"
#include "lmpipe/tok/tokenizer.h"

namespace lmp::tok {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using WordCountMap = std::unordered_map<std::string, std::uint64_t, StringHash, std::equal_to<>>;

// Counts pre-tokens over a stream of text chunks, on several threads. Each line
// (with its '\n') is one sequence, as HF tokenizers reads training files.
class WordCounter {
 public:
  // With `bert`, each line is BERT-normalized before it is split (WordPiece).
  WordCounter(const PreTokenizer& pre, int threads, std::optional<text::BertNormalization> bert = std::nullopt);
  // `chunk` holds whole lines (the last may lack its '\n' at end of input).
  void add(std::string_view chunk);
  // Merge the per-thread maps into one and return it (the counter is then empty).
  WordCountMap take();
  std::uint64_t lines() const { return lines_; }

 private:
  void count_slice(std::string_view slice, WordCountMap& m, std::vector<Range>& ranges);
  const PreTokenizer& pre_;
  std::optional<text::BertNormalization> bert_;
  int threads_;
  std::vector<WordCountMap> maps_;
  std::uint64_t lines_ = 0;
};

// Count files: "#lmpipe-counts v1 pre_tokenizer=NAME" then "COUNT<TAB>WORD" lines, the
// word in GPT-2 byte-level text (no spaces, tabs or newlines), sorted by word. Files of
// shards add up: count with `tok-train count` on each shard, train on all of them.
std::string format_counts(const WordCountMap& counts, std::string_view pre_tokenizer);
// Add the counts of a count file into `counts`; `pre_tokenizer` is set from the header
// or checked against it.
Status read_counts(std::string_view text, const std::string& name, WordCountMap& counts,
                   std::string& pre_tokenizer);

struct BpeTrainerConfig {
  std::size_t vocab_size = 30000;
  std::uint64_t min_frequency = 0;
  std::vector<std::string> special_tokens;
  std::optional<std::size_t> limit_alphabet;
  bool initial_alphabet_bytes = false;  // all 256 bytes in the alphabet
  std::optional<std::size_t> max_token_length;
  double dropout = 0;  // written into the model (HF's BPE `dropout`): tok-encode draws with it
};

enum class StopReason { vocab_full, min_frequency, no_pairs };

struct TrainReport {
  StopReason stop = StopReason::no_pairs;
  std::uint64_t stop_count = 0;  // best pair count when stopped by min_frequency
  std::size_t merges = 0;
  std::size_t alphabet = 0;
  std::size_t alphabet_dropped = 0;  // distinct bytes cut by limit_alphabet
  std::size_t words = 0;             // distinct pre-tokens
  std::uint64_t invalid_bytes = 0;   // character-level trainers: bytes not UTF-8, left out (occurrences)
  std::size_t vocab = 0;
};

// Progress: (merges done, merges at most).
using TrainProgress = std::function<void(std::size_t, std::size_t)>;

Result<std::unique_ptr<Tokenizer>> train_bpe(const WordCountMap& counts, const BpeTrainerConfig& cfg,
                                             std::unique_ptr<PreTokenizer> pre, TrainReport& report,
                                             const TrainProgress& progress = {});

// Character-level BPE over words (HF's CharBPETokenizer, the original GPT's form; HF's
// quicktour BPE without affixes): the BpeTrainer above with characters for bytes. The
// alphabet is the words' characters, weighted by their counts, cut to limit_alphabet by
// frequency, sorted by code point; every character but a word's first carries `prefix`
// and the last one `suffix`, each affixed form a token when first met, the words visited
// in byte order. A merge (a, b) makes a then b without b's prefix. The tokenizer decodes
// with HF's BPEDecoder (after a Replace of the prefix) with a suffix, the WordPiece
// decoder with a prefix alone, and joins tokens by spaces without affixes.
//
// Without affixes this is HF's trainer exactly. With them HF numbers the affixed
// characters in the order of a randomly seeded hash map, so ties between equally frequent
// pairs fall differently from run to run; here they fall the same on every run.
struct CharBpeTrainerConfig {
  std::size_t vocab_size = 30000;
  std::uint64_t min_frequency = 0;
  std::vector<std::string> special_tokens;
  std::string unk_token;  // the model's unknown token, among special_tokens; "" for none
  std::optional<std::size_t> limit_alphabet;
  std::optional<std::size_t> max_token_length;  // characters, affixes not counted
  std::string prefix, suffix;                   // continuing_subword_prefix, end_of_word_suffix
  std::optional<text::BertNormalization> normalization;  // what the words were counted with
  double dropout = 0;                                     // written into the model, as BpeTrainerConfig's
};
Result<std::unique_ptr<Tokenizer>> train_char_bpe(const WordCountMap& counts, const CharBpeTrainerConfig& cfg,
                                                  std::unique_ptr<PreTokenizer> pre, TrainReport& report,
                                                  const TrainProgress& progress = {});

}  // namespace lmp::tok
