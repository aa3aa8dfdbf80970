// SentencePiece models (.model files, protobuf ModelProto): unigram and BPE over raw
// text, as spm_encode encodes.
//
// Normalization is the model's own: the precompiled character map (a darts-clone
// double-array trie over the replacement rules, matched leftmost-longest), then extra
// whitespace removed (when asked), spaces escaped as ▁ (U+2581) and a dummy ▁ prefix.
// Unigram: the Viterbi path of highest total score over all pieces (SentencePiece's
// float sums and tie order); an uncovered character is <unk> with the lowest score
// minus 10. BPE: repeatedly merge the adjacent pair whose concatenation is the piece
// of highest score, leftmost first. Unknown pieces become <0xXX> byte pieces when the
// model has byte fallback.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/core/double_array.h"
#include "lmpipe/core/flat_map.h"
#include "lmpipe/core/rng.h"
#include "lmpipe/core/string_map.h"
#include "lmpipe/text/unicode.h"
#include "lmpipe/tok/model.h"

namespace lmp::tok {

enum class SpPieceType : std::uint8_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

struct SpPathSet;      // (sentencepiece.cpp: the n-best search's buffers)
struct SpNBestSearch;

// SentencePiece's remove_extra_whitespaces as an HF tokenizer.json says it (tok-train
// writes it, tok-encode reads it back on its fast path): two Replace steps with these
// regexes after the Precompiled map, the ends' spaces → "", then runs of spaces → " ".
inline constexpr std::string_view kHfTrimSpaces = R"(\A +| +\z)";
inline constexpr std::string_view kHfSqueezeSpaces = " {2,}";

class SpNormalizer {
 public:
  std::string name;                   // nmt_nfkc, identity, ...
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  bool treat_whitespace_as_suffix = false;
  std::string charsmap;  // the precompiled charsmap blob as loaded (empty: none)
  // Load the precompiled charsmap blob (u32 trie size, trie units, string pool).
  Status load_charsmap(std::string_view blob, const std::string& where);
  // With `src`, also where each byte of `out` came from in `in`: the character (all its
  // bytes alike) or the characters a rule replaced, the k-th output character from the
  // k-th input character; the dummy prefix from the first character kept.
  void normalize(std::string_view in, std::string& out, std::vector<text::SourceSpan>* src = nullptr) const;
  // The character map alone, as HF's Precompiled normalizer applies it (not spm's
  // leftmost-longest): by extended grapheme cluster, a cluster under 6 bytes that a rule
  // starts becomes the shortest such rule's replacement (the rest of the cluster is
  // dropped: "ﬁ" + U+0301 → "fi"), any other cluster is mapped character by character.
  void apply_charsmap(std::string_view in, std::string& out, std::vector<text::SourceSpan>* src = nullptr) const;

 private:
  // Longest rule matching a prefix of `s`: (replacement, bytes consumed); consumed 0 if none.
  // With `shortest`, the shortest such rule instead.
  std::pair<std::string_view, std::size_t> match(std::string_view s, bool shortest = false) const;
  std::vector<std::uint32_t> trie_;   // darts-clone units
  std::string pool_;                  // NUL-terminated replacements
};

class SentencePieceModel final : public Model {
 public:
  enum class Kind { unigram, bpe };
  // Parse a serialized ModelProto; `name` locates errors.
  static Result<SentencePieceModel> parse(std::string_view proto, const std::string& name);
  // HF's Unigram model (tokenizer.json): every vocabulary entry is a piece in the
  // lattice, scores are f64 sums as HF computes them, the unknown score is the lowest
  // of all minus 10, a run of unknown characters is one piece (its bytes with byte
  // fallback). Normalization is the Tokenizer's (HF's normalizer and Metaspace).
  static Result<SentencePieceModel> from_hf_unigram(std::vector<std::pair<std::string, double>> vocab, TokenId unk_id,
                                                   bool byte_fallback, const std::string& name);
  bool hf() const { return hf_; }

  ModelType type() const override { return ModelType::sentencepiece; }
  // Encode one segment of raw text (normalization included).
  void encode(std::string_view text, std::vector<TokenId>& out, ModelScratch& s) const override;
  // Encode text normalized already (by normalizer(), or for HF models by the Tokenizer).
  // With s.bpe.sampling set: unigram draws one segmentation with probability
  // ∝ exp(alpha · score) (subword regularization, by forward filtering and backward
  // sampling; from the s.bpe.sampling.nbest best when that is over 1, the best at 0 or 1);
  // BPE drops each merge with probability dropout, as spm's SampleEncode.
  void encode_normalized(std::string_view text, std::vector<TokenId>& out, ModelScratch& s) const;
  std::size_t vocab_size() const override { return pieces_.size(); }
  std::string_view token_text(TokenId id) const override {
    return id >= 0 && static_cast<std::size_t>(id) < pieces_.size() ? std::string_view(pieces_[static_cast<std::size_t>(id)])
                                                                     : std::string_view();
  }
  TokenId find(std::string_view piece) const override { return ids_.find(piece); }

  // One segmentation of a text and its score (the sum of its pieces' scores).
  struct Segmentation {
    double score = 0;
    std::vector<TokenId> ids;
  };
  // Unigram only: the n best segmentations of one segment, best first (fewer when it has
  // fewer), as encode() takes it (raw text for a .model, normalized for an HF model).
  // Equal scores keep a fixed order.
  void nbest(std::string_view text, std::size_t n, std::vector<Segmentation>& out, ModelScratch& s) const;

  // spm's decoding: pieces joined, ▁ → space, <0xXX> → bytes, control tokens dropped,
  // <unk> → its surface (" ⁇ "), the dummy prefix's space removed.
  Status decode(const TokenId* ids, std::size_t n, std::string& out) const;

  Kind kind() const { return kind_; }
  SpPieceType piece_type(TokenId id) const { return types_[static_cast<std::size_t>(id)]; }
  float score(TokenId id) const { return scores_[static_cast<std::size_t>(id)]; }
  bool byte_fallback() const { return byte_fallback_; }
  TokenId unk_id() const { return unk_id_; }
  TokenId bos_id() const { return bos_id_; }
  TokenId eos_id() const { return eos_id_; }
  const SpNormalizer& normalizer() const { return norm_; }

 private:
  // Pieces to ids: byte fallback for unknown pieces, runs of <unk> as one.
  void emit(const std::vector<std::pair<std::string_view, TokenId>>& pieces, std::vector<TokenId>& out,
            ModelScratch& s) const;
  // The lattice of a normalized text: every (start, end, id, score) edge, unknown
  // characters included.
  struct LatticeEdge {
    std::uint32_t start, end;
    TokenId id;
    double score;
  };
  void lattice(std::string_view text, std::vector<LatticeEdge>& edges) const;
  friend struct SpNBestSearch;
  template <class OnPiece, class OnUnknown>
  void walk_lattice(std::string_view text, OnPiece&& piece, OnUnknown&& unknown) const;
  void unigram(std::string_view text, std::vector<std::pair<std::string_view, TokenId>>& out,
               std::vector<SpBest>& best) const;
  void bpe(std::string_view text, std::vector<std::pair<std::string_view, TokenId>>& out, ModelScratch& s) const;
  // Unigram: one segmentation of normalized text drawn with probability ∝ exp(alpha · score):
  // from all of them (nbest < 0, forward filtering and backward sampling) or from the
  // `nbest` best (nbest > 1), as spm's SampleEncode with that nbest_size.
  void sample(std::string_view text, double alpha, int nbest, Rng& rng,
              std::vector<std::pair<std::string_view, TokenId>>& pieces) const;
  // Unigram: the n best segmentations of normalized text, best first (fewer when it has
  // fewer), with their scores (the sums of their pieces' scores).
  struct Path {
    double score = 0;
    std::vector<std::pair<std::string_view, TokenId>> pieces;
  };
  std::vector<Path> nbest_paths(std::string_view text, std::size_t n) const;
  // The search behind it, in a thread's buffers: each word's n best (one lattice, or one
  // per word when no piece crosses a word's start), combined; then segmentation r's pieces.
  void nbest_search(std::string_view text, std::size_t n, SpNBestSearch& s) const;
  void nbest_lattice(std::string_view text, std::size_t n, SpNBestSearch& s, SpPathSet& out) const;
  static void append_path(const SpNBestSearch& s, std::size_t r, std::vector<std::pair<std::string_view, TokenId>>& pieces);
  std::size_t match_user_defined(std::string_view s) const;  // bytes of the longest one at s, or 0
  void find_word_split();  // sets ws_split_

  Kind kind_ = Kind::unigram;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<SpPieceType> types_;
  StringIdMap ids_;          // piece → id
  DoubleArray trie_;         // unigram: normal, user-defined and unused pieces → id
  struct PairMerge {
    float score = 0;
    TokenId id = -1;
  };
  InlineMap64<PairMerge> pair_merge_;  // BPE: (left id, right id) → the piece they make
  std::vector<std::uint32_t> rank_;    // BPE: by score, highest first; ties share a rank
  bool has_unused_ = false;
  bool ws_split_ = false;  // words (a ▁ run and what follows) encode independently (find_word_split)
  std::size_t max_piece_bytes_ = 0;
  std::vector<std::string_view> user_defined_;  // longest first
  TokenId unk_id_ = -1, bos_id_ = -1, eos_id_ = -1;
  bool byte_fallback_ = false;
  bool hf_ = false;             // HF Unigram semantics (from_hf_unigram)
  std::vector<double> scores64_;  // HF: the f64 scores
  double min_score64_ = 0;
  void unigram_hf(std::string_view text, std::vector<std::pair<std::string_view, TokenId>>& out) const;
  std::array<TokenId, 256> byte_ids_{};
  float min_score_ = 0, max_score_ = 0;
  std::string unk_surface_ = " \xE2\x81\x87 ";
  SpNormalizer norm_;
};

}  // namespace lmp::tok
