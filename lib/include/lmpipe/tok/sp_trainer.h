// SentencePiece-style BPE training (`tok-train -m sp-bpe`): BPE over the characters of
// raw text, as Llama 2's tokenizer was trained.
//
// Text is normalized as the model will normalize it — NFKC (a character map written into
// the model), NFKC with case folding, or identity as Llama 2's —, spaces become ▁ and each
// line gets a dummy ▁ prefix; no pre-tokenization, but pieces
// respect SentencePiece's boundaries: ▁ only at the start of a piece (a word boundary;
// see the whitespace rules below), one Unicode script per piece (Hiragana and Katakana
// count as Han; digits are Common, as punctuation), each ASCII digit alone with
// split_digits, at most 16 characters.
// Characters are kept by frequency up to `character_coverage` of all characters; the
// rest are unknown (their UTF-8 bytes with byte fallback). Merges go by pair count, ties
// to the smaller pair of ids (SentencePiece's own trainer approximates: it only
// considers the most frequent 5% of symbols); piece k gets the score -k, then the
// characters follow with lower scores.
//
// The result is a SentencePiece ModelProto that Debian's spm_encode loads and encodes
// exactly as tok-encode does.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lmpipe/tok/bpe_trainer.h"
#include "lmpipe/tok/sentencepiece.h"

namespace lmp::tok {

struct SpBpeTrainerConfig {
  SpNormalizer normalizer;               // written into the model; text must be normalized with it
  std::size_t vocab_size = 32000;
  std::uint64_t min_frequency = 0;       // no pair occurring fewer times is merged
  double character_coverage = 0.9995;
  bool byte_fallback = true;
  bool split_digits = false;
  std::size_t max_piece_chars = 16;
  // SentencePiece's whitespace rules (its trainer_spec fields of the same names). With
  // split_by_whitespace ▁ is only ever the first character of a piece, and without
  // allow_whitespace_only_pieces (spm_train's default) every ▁ starts a word; with it (as
  // Llama 2 was trained, lmpipe's default) a run of ▁ stays one word and pieces of ▁ alone
  // may be longer than one (▁▁▁▁, code's indentation). Without split_by_whitespace pieces
  // may span words (▁ inside a piece, never at its end).
  bool split_by_whitespace = true;
  bool allow_whitespace_only_pieces = true;
  std::vector<std::string> user_defined;  // pieces matched whole in the text, never trained into
  std::vector<std::string> control;       // pieces with ids but never in text (like <s>)
  double dropout = 0;                     // BPE into a tokenizer.json: its `dropout` (a .model has none)
};

struct SpTrainReport : TrainReport {
  std::size_t chars_total_distinct = 0;
  std::size_t chars_kept = 0;
  double coverage = 0;  // share of character occurrences covered by the kept characters
};

// The normalizer of a model to train: a character map by SentencePiece's name ("nfkc",
// "nfkc_cf", "nmt_nfkc", "nmt_nfkc_cf"; see sp_charsmap.h) or "identity"; ▁ escaping, a
// dummy prefix, and spaces kept as they are unless `remove_extra_whitespaces` (spm_train's
// default: no spaces at either end, a run of them one space).
Result<SpNormalizer> make_sp_normalizer(std::string_view name, bool remove_extra_whitespaces = false);

// Normalize one line (its newline dropped) as the trained model will.
void sp_normalize_line(std::string_view line, const SpNormalizer& norm, std::string& out);

// Count the words of normalized lines, for training: split as SentencePiece splits them
// (at each ▁, or at a ▁ after another character with allow_whitespace_only_pieces, or
// not at all without split_by_whitespace), then where no piece can cross (script and
// digit boundaries, a run of ▁ at the end, user-defined symbols).
void sp_count_words(std::string_view normalized, const SpBpeTrainerConfig& cfg, WordCountMap& counts);

// Whether a piece may be trained under cfg's whitespace rules (SentencePiece's
// IsValidSentencePiece for ▁; the script, digit and length rules are kept by the words'
// boundaries and the trainers' limits).
bool sp_whitespace_valid(std::string_view piece, const SpBpeTrainerConfig& cfg);

// SentencePiece's unigram training (`tok-train -m unigram`): seed pieces are the
// frequent substrings of the words (up to 16 characters, count ≥ max(2, min_frequency),
// scored count × length, the best `seed_size` kept, all kept characters added); then
// rounds of EM (expected counts from forward-backward over each word's lattice, pieces
// under 0.5 dropped, scores digamma(count) − digamma(total)) and pruning (each piece's
// loss of likelihood if its occurrences were re-segmented without it; the best
// max(target, 0.75 × size) kept) until 1.1 × the vocabulary is reached; then the best
// scoring pieces fill it, the characters always among them.
struct UnigramTrainerConfig : SpBpeTrainerConfig {
  std::size_t seed_size = 1000000;
  double shrinking_factor = 0.75;
  int em_sub_iterations = 2;
  int threads = 1;  // EM and pruning threads; the result is the same for any count
  // Keep each round's word lattices from its first EM iteration for the later ones and
  // the pruning (faster, 4 bytes an edge); the result is the same without (for tests).
  bool reuse_lattices = true;
};
// With `hf_json`, also the same model as an HF Unigram tokenizer.json (Precompiled map,
// Prepend/Replace ▁, no pre-tokenizer, so that a line is one lattice as in SentencePiece).
Result<std::string> train_sp_unigram(const WordCountMap& counts, const UnigramTrainerConfig& cfg, SpTrainReport& report,
                                     const TrainProgress& progress = {}, std::string* hf_json = nullptr);

// Train; returns the serialized ModelProto (.model bytes). With `hf_json`, also the same
// tokenizer as an HF tokenizer.json (SentencePiece-style BPE: Precompiled character map,
// Prepend/Replace ▁, byte fallback; merges: every split of a piece into two pieces, in
// the order of the pieces' scores).
Result<std::string> train_sp_bpe(const WordCountMap& counts, const SpBpeTrainerConfig& cfg, SpTrainReport& report,
                                 const TrainProgress& progress = {}, std::string* hf_json = nullptr);

}  // namespace lmp::tok
