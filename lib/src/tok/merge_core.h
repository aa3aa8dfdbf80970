// The merge loop shared by the BPE trainers (byte-level BPE, character-level BPE,
// WordPiece as HF trains it): HF BpeTrainer's max-heap of (pair count, smallest pair of
// ids) with stale entries pushed back; and the character-level start they share.
// Internal to the library.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lmpipe/tok/bpe_trainer.h"

namespace lmp::tok {

struct MergeProblem {
  std::vector<std::vector<TokenId>> words;  // (n_words) symbol ids
  std::vector<std::int64_t> wcount;         // (n_words) occurrences
  std::vector<std::string> id_to_word;      // (n_vocab) token strings; grows with the merges
  std::unordered_map<std::string, TokenId> word_to_id;
  std::vector<std::uint32_t> len;           // (n_vocab) token length for max_token_length
};

struct MergeLimits {
  std::size_t vocab_size;
  std::uint64_t min_frequency;
  std::optional<std::size_t> max_token_length;
  // When set, a pair whose merged token it refuses is never merged (SentencePiece's piece
  // rules); the next best pair is taken instead.
  std::function<bool(const std::string&)> allowed = {};
};

// A pair count change made by a merge inside one word.
struct Change {
  std::uint64_t pair;
  std::int32_t delta;
};

// Replace each (a, b) in `w` by `repl`, recording pair count changes as HF's
// Word::merge does (a pair is not formed when the joined length would reach max_len).
void merge_word(std::vector<TokenId>& w, TokenId a, TokenId b, TokenId repl, std::size_t max_len,
                const std::vector<std::uint32_t>& len, std::vector<Change>& ch);

// The merged token's string from its two parts.
using JoinFn = std::function<void(const std::string&, const std::string&, std::string&)>;
// A new token's length, in the unit of max_token_length.
using LenFn = std::function<std::uint32_t(const std::string&)>;

// The entries of a count map sorted by word bytes: the deterministic order the trainers
// visit words in (and count files list them in).
std::vector<const WordCountMap::value_type*> words_in_byte_order(const WordCountMap& counts);

// a + b, held at the largest value instead of wrapping (frequencies that only rank).
inline std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return a + b < a ? ~std::uint64_t{0} : a + b;
}

// A word count as the merge loops hold it (clamped; check_count_total rejects a
// total that large).
std::int64_t word_count(std::uint64_t c);

// The merge loops sum word counts into int64 pair and symbol counts, which a merge
// moves up and down: refuse counts whose symbol occurrences, the sum over words of
// count x symbols, reach 2^61.
Status check_count_total(const MergeProblem& p);

// Merge until the vocabulary is full, no pair is left, or the best pair occurs fewer
// than min_frequency times; returns the merges in order (report: stop reason, count).
std::vector<std::pair<TokenId, TokenId>> run_bpe_merges(MergeProblem& p, const MergeLimits& lim, TrainReport& report,
                                                        const TrainProgress& progress, const JoinFn& join,
                                                        const LenFn& len_of);

// HF keeps merges in a map keyed by pair: a pair merged twice (its left token made
// again by another merge) keeps its last rank. Drops the earlier ones.
void keep_last_rank(std::vector<std::pair<TokenId, TokenId>>& merges);

// ---- Character-level symbols (character-level BPE, WordPiece) --------------------------
// HF's BpeTrainer over characters: every character of a word but the first carries
// `prefix` (continuing_subword_prefix) and the last one `suffix` (end_of_word_suffix).
struct CharSymbols {
  std::vector<std::string> special_tokens;
  std::optional<std::size_t> limit_alphabet;
  std::string prefix, suffix;
};

// A token's length for max_token_length: its characters, the affixes not counted (HF
// counts one per character symbol).
std::uint32_t char_len(std::string_view t, std::string_view prefix, std::string_view suffix);

// Merge (a, b) makes a then b without b's leading prefix, as HF's trainer joins them.
void join_pieces(const std::string& prefix, const std::string& a, const std::string& b, std::string& out);

// Specials first (as added tokens), then the alphabet (characters weighted by word
// counts, cut to limit_alphabet by frequency, sorted by code point), then the words as
// symbol ids in byte order of the words, each affixed character a token when first met.
// A character outside the alphabet is left out, as in HF (its neighbours keep their
// affixes by position in the word); so is a byte that is not UTF-8, counted in
// report.invalid_bytes (HF refuses such text; a vocabulary must be UTF-8 to be JSON).
Status prepare_char_problem(const WordCountMap& counts, const CharSymbols& cfg, MergeProblem& mp,
                            std::vector<AddedToken>& added, TrainReport& report);

}  // namespace lmp::tok
