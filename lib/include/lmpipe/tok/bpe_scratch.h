// Per-thread working memory of byte-level BPE encoding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmpipe/core/rng.h"
#include "lmpipe/tok/types.h"

namespace lmp::tok {

// Subword regularization (tok-encode --sample), set on a Session: with `rng` set, a BPE
// model skips each merge with probability `dropout` (BPE-dropout, in the semantics of the
// file's own library: HF's for tokenizer.json, SentencePiece's for .model files) and a
// unigram model draws a segmentation with probability ∝ exp(alpha · score), from all of
// them when `nbest` < 0, from the `nbest` best when it is over 1 (the best one at 0 or 1:
// spm's nbest_size). Piece caches are bypassed then.
struct Sampling {
  Rng* rng = nullptr;
  double dropout = 0;
  double alpha = 0;
  int nbest = -1;
};

// Per-thread working memory for BpeModel::encode.
struct BpeScratch {
  std::vector<TokenId> sym;          // (n_symbols) current symbols of the piece
  std::vector<std::uint64_t> rank;   // (n_symbols - 1) merge of each adjacent pair: rank << 32 | id
  std::vector<std::int32_t> prev, next;
  std::vector<std::uint64_t> heap;   // (rank << 32 | position) min-heap for long pieces
  std::vector<std::uint8_t> dead;
  std::uint64_t dropped_bytes = 0;   // bytes with no token in the vocabulary
  std::uint64_t unknown = 0;         // unknown tokens put out (character-level BPE)
  std::string key;                   // a character with its word prefix or suffix (character-level BPE)
  Sampling sampling;                 // (off unless set)
  std::vector<std::uint64_t> skipped;  // BPE-dropout: heap entries skipped since the last merge
  // Direct-mapped cache of recent pair lookups (pair_key → packed merge): the merge
  // table of a large vocabulary (8 MB for Llama-3) misses the CPU caches on nearly
  // every probe, while text reuses a few thousand pairs (CJK characters' bytes above all).
  struct PairSlot {
    std::uint64_t key = ~std::uint64_t{0};
    std::uint64_t merge = 0;
  };
  static constexpr std::size_t kPairCacheBits = 15;
  std::vector<PairSlot> pair_cache = std::vector<PairSlot>(std::size_t{1} << kPairCacheBits);
  // Direct-mapped cache of short segments (BpeModel::encode_segmented): bytes → ids.
  // A long piece of CJK text cuts into segments of a character or two, which repeat.
  static constexpr std::size_t kSegCacheBits = 14, kSegMaxBytes = 8, kSegMaxIds = 3;
  struct SegSlot {
    std::uint64_t key = 0;         // the segment's bytes, zero-padded
    std::uint8_t len = 0, n = 0;   // bytes (0: empty slot), ids
    TokenId ids[kSegMaxIds];
  };
  std::vector<SegSlot> seg_cache;  // (1 << kSegCacheBits), allocated on first use
};

}  // namespace lmp::tok
