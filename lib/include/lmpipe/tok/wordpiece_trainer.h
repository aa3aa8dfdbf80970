// WordPiece training, two algorithms, named for what they are:
//
//  likelihood  merges the pair with the highest count(ab) / (count(a) · count(b)): the
//              likelihood (mutual information) criterion of the WordPiece papers, as
//              the HF course teaches it. Ties: the higher pair count, then the
//              smaller pair of ids.
//  hf          what HF's WordPieceTrainer really does: byte-pair merging by count (its
//              BpeTrainer) over characters, continuations marked "##".
//
// Both: special tokens first, then the alphabet (characters of the words, weighted by
// their counts, cut to limit_alphabet by frequency, sorted by code point), then each
// character that continues a word as "##c", then merges; a merged token is a + b with
// b's "##" dropped. min_frequency: a pair occurring fewer times is never merged.
// Words are BERT-normalized and pre-tokenized before counting (WordCounter).
//
// HF's own trainer is not deterministic: it numbers the "##c" tokens in the order of
// a randomly seeded hash map, and ties between equally frequent pairs go to the smaller
// ids, so two HF runs on one corpus differ in a few dozen tokens of 30000. Here the
// words are visited in byte order, which makes the result one of HF's possible ones,
// the same on every run.
#pragma once

#include "lmpipe/tok/bpe_trainer.h"

namespace lmp::tok {

enum class WordPieceAlgo { likelihood, hf };

struct WordPieceTrainerConfig {
  std::size_t vocab_size = 30000;
  std::uint64_t min_frequency = 0;
  std::vector<std::string> special_tokens;  // must include the unknown token
  std::string unk_token = "[UNK]";
  std::optional<std::size_t> limit_alphabet;
  std::optional<std::size_t> max_token_length;  // characters, "##" not counted
  std::string prefix = "##";
  WordPieceAlgo algo = WordPieceAlgo::likelihood;
  text::BertNormalization normalization;  // what the words were counted with
  bool split_digits = false;  // the words were counted with every digit a word (pre-tokenizer bert+digits)
};

Result<std::unique_ptr<Tokenizer>> train_wordpiece(const WordCountMap& counts, const WordPieceTrainerConfig& cfg,
                                                   TrainReport& report, const TrainProgress& progress = {});

}  // namespace lmp::tok
