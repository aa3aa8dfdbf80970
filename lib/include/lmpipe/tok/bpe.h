// Byte-level BPE: the model behind GPT-2, Llama-3, Qwen and tiktoken.
//
// Tokens are raw byte strings (the GPT-2 byte↔unicode text form exists only in
// files). A merge table maps an adjacent pair of ids to (rank, merged id); encoding
// repeatedly merges the lowest-ranked adjacent pair, leftmost first — the order of
// HF tokenizers' heap and of tiktoken's scan. The model is immutable after
// construction and thread-safe; per-call buffers live in a BpeScratch.
//
// Long pieces of CJK text (a run of Han characters is one piece under the GPT-2 and
// Llama-3 splits) are first cut where no token of the vocabulary can span: a merge
// across such a cut would make a token that spans it, so BPE never crosses it and the
// segments encode alone to the same ids. The segments are a character or two long and
// repeat, so most come from a cache (see encode_segmented).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lmpipe/core/double_array.h"
#include "lmpipe/core/flat_map.h"
#include "lmpipe/core/result.h"
#include "lmpipe/core/string_map.h"
#include "lmpipe/tok/model.h"
#include "lmpipe/tok/types.h"

namespace lmp::tok {

struct MergeInfo {
  std::uint32_t rank = 0;
  TokenId id = -1;  // the merged token
};

class BpeModel final : public Model {
 public:
  BpeModel() = default;

  // `tokens[id]` = raw bytes of token id (ids must be dense: 0..n-1; holes are "").
  // `merges` = (left id, right id) in rank order; the merged bytes must be a token.
  // With `rank_by_token` (tiktoken), pairs are derived instead: every split a+b of a
  // token t with a and b tokens is a merge of rank id(t).
  // `threads` > 1 builds the indexes on that many threads (the same model).
  // `continuing_prefix` (HF's continuing_subword_prefix, "##": on every symbol of a word but
  // the first, character-level BPE only): merge (a, b) makes a followed by b without the
  // prefix's bytes, as HF's builder does.
  static Result<BpeModel> build(std::vector<std::string> tokens,
                                std::vector<std::pair<TokenId, TokenId>> merges, bool ignore_merges,
                                int threads = 1, std::string continuing_prefix = {});
  // build() with the bytes → id index already made (by a loader that needed it first):
  // `ids` maps the bytes of every non-empty token to its id, as views into the strings
  // of `tokens` (which move with the vector), and no two tokens have the same bytes.
  // `merged[r]`, when given (as long as `merges`), is the token merge r makes, already
  // checked to be the concatenation of its two tokens.
  static Result<BpeModel> build_indexed(std::vector<std::string> tokens, StringIdMap ids,
                                        std::vector<std::pair<TokenId, TokenId>> merges, bool ignore_merges,
                                        int threads = 1, std::vector<TokenId> merged = {});
  static Result<BpeModel> build_from_ranks(std::vector<std::string> tokens);
  // The token whose bytes are a then b, or -1: vocabularies list merged tokens in merge
  // order, so the token after `prev` (the previous merge's), then `prev` itself (several
  // merges making one token, as in vocabularies converted from tiktoken), are checked
  // first by content (the same answer as a lookup, but a sequential read instead of a
  // random probe), then `ids`. Ids marked in `shadowed` (when not empty) are never the
  // answer. `joined` is scratch.
  static TokenId merged_token(const std::vector<std::string>& tokens, const StringIdMap& ids,
                              const std::vector<bool>& shadowed, TokenId prev, std::string_view a,
                              std::string_view b, std::string& joined);
  // Character-level BPE in HF's form: SentencePiece-style (Mistral, Llama 2 converted), or
  // over words (the original GPT's, HerBERT's, HF's quicktour BPE). The symbols are
  // characters, not bytes; a character not in the vocabulary becomes its <0xXX> byte
  // tokens (byte_fallback) or the unknown token (runs fused into one with fuse_unk).
  void set_char_level(TokenId unk_id, bool byte_fallback, bool fuse_unk);
  bool char_level() const { return char_level_; }
  bool byte_fallback() const { return byte_fallback_; }
  bool fuse_unk() const { return fuse_unk_; }
  // HF's end_of_word_suffix (CLIP's and the original GPT's "</w>"): the last symbol of
  // every piece starts as its token followed by `suffix`. Byte-level: a byte whose
  // suffixed token is missing is dropped, as one without a token. Character-level: as any
  // character not in the vocabulary (byte fallback, unknown or dropped).
  Status set_end_of_word_suffix(std::string suffix);
  const std::string& end_of_word_suffix() const { return suffix_; }
  const std::string& continuing_subword_prefix() const { return prefix_; }
  TokenId unk_id() const { return unk_id_; }
  // HF's `dropout` of a tokenizer.json (0: none): HF skips each merge with this
  // probability on every encoding. encode() applies it only when the scratch samples
  // (Sampling::rng), with the probability the scratch holds.
  void set_dropout(double p) { dropout_ = p; }
  double dropout() const { return dropout_; }

  // Append the ids of one pre-token piece to `out`. With s.sampling.rng set, BPE-dropout
  // as HF's merge_all does it: each merge taken from the heap is skipped with probability
  // s.sampling.dropout, and the skipped ones go back into the heap when a merge is not
  // skipped (a draw that skips the last candidate ends the piece); no ignore_merges
  // lookup then, as in HF.
  void encode(std::string_view piece, std::vector<TokenId>& out, BpeScratch& s) const;
  // Whether encode cuts this piece into segments (7 bytes or more, with a character of
  // three or four bytes), which it caches itself: a cache of whole pieces in front would
  // only add misses.
  bool segments(std::string_view piece) const;

  ModelType type() const override { return ModelType::bpe; }
  void encode(std::string_view piece, std::vector<TokenId>& out, ModelScratch& s) const override {
    encode(piece, out, s.bpe);
  }
  std::size_t vocab_size() const override { return tokens_.size(); }
  std::string_view token_text(TokenId id) const override {
    return id >= 0 && static_cast<std::size_t>(id) < tokens_.size() ? std::string_view(tokens_[static_cast<std::size_t>(id)])
                                                                     : std::string_view();
  }
  const std::string& token(TokenId id) const { return tokens_[static_cast<std::size_t>(id)]; }
  TokenId find(std::string_view bytes) const override { return ids_.find(bytes); }
  const MergeInfo* merge(TokenId a, TokenId b) const { return merges_.find(pair_key(a, b)); }
  // Merges in rank order, as (left, right) ids.
  const std::vector<std::pair<TokenId, TokenId>>& merge_list() const { return merge_list_; }
  bool ignore_merges() const { return ignore_merges_; }
  bool ranks_from_tokens() const { return from_ranks_; }
  TokenId byte_token(unsigned char b) const { return byte_ids_[b]; }

 private:
  // build()'s second half: the merge table, once tokens_ and ids_ are set.
  static Result<BpeModel> finish_build(BpeModel m, const std::vector<bool>& shadowed,
                                       std::vector<std::pair<TokenId, TokenId>> merges, bool ignore_merges,
                                       int threads, const std::vector<TokenId>& merged = {});
  void encode_chars(std::string_view piece, std::vector<TokenId>& out, BpeScratch& s) const;
  // HF's ignore_merges: a piece that is a token (without any prefix or suffix) is that
  // token. Appends it and returns true then.
  bool whole_token(std::string_view piece, std::vector<TokenId>& out) const {
    if (!ignore_merges_ || piece.size() > max_token_bytes_) return false;
    TokenId id = find(piece);
    if (id >= 0) out.push_back(id);
    return id >= 0;
  }
  // The pieces that encode_segmented cuts: at least this long, with a byte >= 0xE0.
  static constexpr std::size_t kSegmentFrom = 7;
  void encode_bytes(std::string_view piece, std::vector<TokenId>& out, BpeScratch& s, bool suffixed = false) const;
  // The piece's byte symbols into s.sym (`suffixed`: the last byte's end-of-word token).
  void symbolize_bytes(std::string_view piece, BpeScratch& s, bool suffixed) const;
  // encode() under BPE-dropout: the whole piece through the heap, no cache.
  void encode_dropout(std::string_view piece, std::vector<TokenId>& out, BpeScratch& s) const;
  void encode_segmented(std::string_view piece, const DoubleArray& trie, std::vector<TokenId>& out, BpeScratch& s) const;
  void encode_segment(std::string_view seg, std::vector<TokenId>& out, BpeScratch& s) const;
  // A trie of every token with a byte >= 0x80 (tokens of ASCII bytes only cannot reach
  // past an ASCII run, so they need no trie), made by the first piece that needs it (not
  // at load: Llama-3's takes ~10 ms, which text without such pieces never pays).
  struct SpanIndex {
    static constexpr int kNone = 0, kBuilding = 1, kReady = 2;
    std::atomic<int> state{kNone};
    DoubleArray trie;
  };
  // The trie; made now by the first caller; nullptr to the others while it is being
  // made: they encode their pieces whole (the same ids) instead of waiting.
  const DoubleArray* span_trie() const;
  void merge_linear(BpeScratch& s) const;
  std::uint64_t cached_merge(TokenId a, TokenId b, BpeScratch& s) const {
    std::uint64_t key = pair_key(a, b);
    auto& slot = s.pair_cache[static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> (64 - BpeScratch::kPairCacheBits))];
    if (slot.key != key) {
      slot.key = key;
      slot.merge = packed_merge(a, b);
    }
    return slot.merge;
  }
  // With `dropout`, BPE-dropout (s.sampling): see encode().
  void merge_heap(BpeScratch& s, bool dropout = false) const;
  // The merge of (a, b) packed as rank << 32 | merged id (ordered by rank), or kNoMerge.
  std::uint64_t packed_merge(TokenId a, TokenId b) const {
    const MergeInfo* m = merges_.find(pair_key(a, b));
    return m ? (std::uint64_t{m->rank} << 32) | static_cast<std::uint32_t>(m->id) : kNoMerge;
  }
  static constexpr std::uint64_t kNoMerge = ~std::uint64_t{0};

  std::vector<std::string> tokens_;                       // (n_vocab) raw bytes
  StringIdMap ids_;                                       // bytes → id (views into tokens_)
  InlineMap64<MergeInfo> merges_;                         // pair_key(a, b) → merge
  std::vector<std::pair<TokenId, TokenId>> merge_list_;   // (n_merges) in rank order
  std::array<TokenId, 256> byte_ids_{};                   // single-byte tokens, -1 if absent
  std::size_t max_token_bytes_ = 0;                       // longest token
  bool ignore_merges_ = false;
  bool from_ranks_ = false;
  bool distinct_ = false;  // no two tokens have the same bytes (build_indexed): none is shadowed
  bool char_level_ = false, byte_fallback_ = false, fuse_unk_ = false;
  TokenId unk_id_ = -1;
  double dropout_ = 0;
  std::array<TokenId, 256> fallback_ids_{};               // <0xXX> tokens
  std::string suffix_;                                    // end_of_word_suffix ("" if none)
  std::string prefix_;                                    // continuing_subword_prefix ("" if none)
  std::array<TokenId, 256> suffix_ids_{};                 // byte + suffix tokens, -1 if absent
  void encode_suffixed(std::string_view piece, std::vector<TokenId>& out, BpeScratch& s) const;
  void symbolize_chars(std::string_view piece, BpeScratch& s) const;
  std::shared_ptr<SpanIndex> span_ = std::make_shared<SpanIndex>();
};

}  // namespace lmp::tok
