// Model: the last stage of a tokenizer, turning one pre-token into ids.
//
// Implementations: BpeModel (byte-level BPE), WordPieceModel (BERT). A model is
// immutable after construction and shared by threads; per-thread buffers live in a
// ModelScratch that each Session owns.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lmpipe/tok/bpe_scratch.h"
#include "lmpipe/tok/types.h"

namespace lmp::tok {

// A best path ending at one byte position (SentencePiece unigram Viterbi).
struct SpBest {
  TokenId id = -1;
  float score = 0;
  std::int32_t starts_at = -1;
};

// A symbol of SentencePiece BPE: a span of the normalized text, linked to its neighbours.
struct SpSym {
  std::uint32_t begin, len;  // len 0: merged into its left neighbour
  std::int32_t prev, next;
  TokenId id;                // the piece it is, or -1
  bool freeze;               // a user-defined symbol: never merged
};

// A cached word of SentencePiece BPE: its pieces as (byte length, id).
struct SpCacheEntry {
  std::string key;
  std::vector<std::pair<std::uint32_t, TokenId>> pieces;
};
inline constexpr std::size_t kSpCacheSize = 1 << 14;

struct ModelScratch {
  BpeScratch bpe;
  std::vector<SpCacheEntry> sp_cache;  // direct-mapped, allocated on first use
  std::vector<SpSym> sp_sym;
  std::vector<SpBest> sp_best;                              // (bytes + 1) unigram lattice
  std::vector<std::pair<std::string_view, TokenId>> sp_pieces;  // pieces of one segment
  std::string sp_text;                                      // normalized segment
  std::string buf;  // WordPiece: the candidate piece with its prefix
  std::uint64_t unknown = 0;  // pre-tokens encoded as the unknown token
};

enum class ModelType { bpe, wordpiece, sentencepiece };

class Model {
 public:
  virtual ~Model() = default;
  virtual ModelType type() const = 0;
  // Append the ids of one pre-token.
  virtual void encode(std::string_view piece, std::vector<TokenId>& out, ModelScratch& s) const = 0;
  virtual std::size_t vocab_size() const = 0;
  // A token's text as the model stores it: raw bytes for byte-level BPE, the piece
  // with its "##" for WordPiece; empty for an id the model does not have.
  virtual std::string_view token_text(TokenId id) const = 0;
  // The id of a token text, or -1.
  virtual TokenId find(std::string_view text) const = 0;
};

}  // namespace lmp::tok
