// Encoding statistics: compression (bytes and characters per token), fertility
// (tokens per word) and the most fragmented words — rare words that shatter into many
// tokens, the failure that makes a vocabulary poor for a language or domain.
//
// A word is a pre-token with its leading whitespace removed that holds a letter or a
// number (whitespace splitting would make a whole Chinese sentence one "word").
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "lmpipe/tok/tokenizer.h"

namespace lmp::tok {

class EncodeStats {
 public:
  // One encoded line: its text, its token count and its pre-tokens.
  void add_line(std::string_view text, std::size_t n_tokens, const std::vector<PieceCount>& pieces);
  void merge(const EncodeStats& o);
  // A human-readable report; `top` most fragmented words.
  std::string report(const Tokenizer& t, std::size_t top = 10) const;
  std::string report_json(const Tokenizer& t, std::size_t top = 10) const;

  std::uint64_t lines = 0, bytes = 0, chars = 0, tokens = 0, words = 0, word_tokens = 0;
  std::uint64_t dropped_bytes = 0;
  std::uint64_t unknown_words = 0;  // unknown tokens: whole words (WordPiece), a character or a fused run (others)

 private:
  struct WordInfo {
    std::uint64_t count = 0;
    std::uint32_t n_tokens = 0;
  };
  struct Frag {
    std::string word;
    WordInfo info;
  };
  std::vector<Frag> most_fragmented(std::size_t top) const;
  std::unordered_map<std::string, WordInfo> frag_;  // words of 3+ tokens
};

}  // namespace lmp::tok
