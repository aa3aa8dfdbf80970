// Tokenizer: added-token split → normalizer → pre-tokenizer → model (byte-level BPE or
// WordPiece), and back through the model's decoder.
//
// Immutable after loading and shared by threads; each thread encodes through its own
// Session (scratch buffers and a cache of recently seen pieces).
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/text/unicode.h"
#include "lmpipe/tok/bpe.h"
#include "lmpipe/tok/model.h"
#include "lmpipe/tok/normalizer.h"
#include "lmpipe/tok/pre_tokenizer.h"
#include "lmpipe/tok/sentencepiece.h"
#include "lmpipe/tok/types.h"

namespace lmp::tok {

struct AddedToken {
  std::string content;  // matched verbatim in the input
  TokenId id = -1;
  bool special = false;
  bool single_word = false;  // only when not inside a word
  bool lstrip = false;       // absorbs whitespace on its left
  bool rstrip = false;       // absorbs whitespace on its right
  bool normalized = false;
};

enum class Normalization { none, nfc, nfkc };

// How ids become text again.
enum class Decoder {
  byte_level,  // concatenate the tokens' bytes (exact inverse)
  wordpiece,   // HF's WordPiece decoder: words joined by spaces, "##" glued, cleanup
  sentencepiece,  // spm: ▁ → space, <0xXX> → bytes, control tokens dropped, dummy prefix removed
  metaspace,      // HF's SentencePiece-style chain: ▁ → space, ByteFallback, Fuse, Strip one leading space
  chain,          // HF's decoder steps as the file lists them (TokenizerSpec::decode_steps); with
                  // none, the tokens joined by spaces (HF without a decoder)
};

// One step of HF's decoder chain: it maps the list of token texts to a new list, which
// the last step's output joins into the text.
struct DecodeStep {
  enum class Kind {
    byte_fallback,  // a run of <0xXX> tokens → its bytes when UTF-8, else U+FFFD per byte
    fuse,           // every token into one
    replace,        // `from` → `to` in every token
    strip,          // up to `start` / `stop` characters `from` off each token's ends
    bpe,            // BPEDecoder: suffix `from` → " " (but "" in the last token)
    wordpiece,      // prefix `from` stripped, else a space before (but the first); `flag`: cleanup
    metaspace,      // replacement `from` → " "; `flag`: dropped in the first token instead
  };
  Kind kind = Kind::fuse;
  std::string from, to;
  std::size_t start = 0, stop = 0;
  bool flag = false;
};

// Everything of a tokenizer but its model and added tokens.
struct TokenizerSpec {
  std::unique_ptr<PreTokenizer> pre;
  // `pre` is lmpipe's shortcut, not the file's: a split that gives the same tokens
  // (words no merge crosses). Sampling skips it: BPE-dropout draws over the word HF sees.
  bool pre_shortcut = false;
  Normalization norm = Normalization::none;
  std::optional<text::BertNormalization> bert;  // HF's BertNormalizer (instead of `norm`)
  // Any other chain of HF normalizers (instead of `norm` and `bert`).
  std::shared_ptr<const Normalizer> normalizer;
  bool prefix_space = false;
  // HF's SentencePiece-style normalizer (Prepend "▁", Replace " " → "▁"): every
  // non-empty segment gets a leading ▁ and its spaces become ▁.
  bool metaspace = false;
  // With metaspace: HF's Metaspace pre-tokenizer prepends ▁ only when the segment does
  // not start with one already (the Prepend normalizer always does); with prepend_scheme
  // "first" only to the segment at the start of the text (not after an added token), with
  // "never" not at all.
  bool metaspace_if_missing = false;
  bool metaspace_first = false;
  bool metaspace_never = false;
  // With the metaspace decoder: strip the one leading space of the text (HF's Strip
  // decoder, or a Metaspace decoder that prepends).
  bool metaspace_strip = true;
  // HF's Precompiled normalizer (a SentencePiece character map), applied first.
  std::shared_ptr<const SpNormalizer> charsmap;
  // Then SentencePiece's remove_extra_whitespaces as tok-train writes it, HF's Replace
  // steps `\A +| +\z` → "" and ` {2,}` → " ": no spaces at either end, a run of them one.
  bool squeeze_spaces = false;
  Decoder decoder = Decoder::byte_level;
  std::vector<DecodeStep> decode_steps;  // (Decoder::chain)
  // Added around every sequence by --add-special (HF's TemplateProcessing "single").
  std::vector<TokenId> template_prefix, template_suffix;
  // HF's ByteLevel / RobertaProcessing post-processor with trim_offsets: a token's
  // offsets leave out the spaces it starts or ends with (but the first token's single
  // leading space when add_prefix_space put it there).
  bool trim_offsets = false;
  bool trim_prefix_space = true;
};

// How the tokenizer was specified, for reports and for writing it back.
struct TokenizerInfo {
  std::string source;       // file it came from
  std::string format;       // tokenizer.json, gpt2 (vocab.json + merges.txt), tiktoken
  std::string pre_tokenizer;  // name or "regex"
};

// Per-piece record for statistics: a pre-token and the number of tokens it became.
struct PieceCount {
  std::string_view text;  // valid until the next encode() with the same Session
  std::uint32_t n_tokens;
};

class Tokenizer;

class Session {
 public:
  explicit Session(const Tokenizer& t);
  std::uint64_t dropped_bytes() const { return scratch_.bpe.dropped_bytes; }
  // Words encoded as the unknown token (WordPiece); unknown tokens put out (SentencePiece,
  // character-level BPE: a fused run counts once).
  std::uint64_t unknown_words() const { return scratch_.unknown + scratch_.bpe.unknown; }
  // When set, encode() appends one record per pre-token of the line.
  std::vector<PieceCount>* pieces = nullptr;
  // Subword regularization from now on (tok-encode --sample): BPE models skip each merge
  // with probability `dropout`, unigram models draw with probability ∝ exp(alpha · score)
  // among all segmentations (nbest < 0) or the nbest best (spm's nbest_size), from `rng`
  // (which must outlive the Session's use of it); nullptr turns it off.
  void sample(Rng* rng, double dropout, double alpha, int nbest = -1) {
    scratch_.bpe.sampling = {rng, dropout, alpha, nbest};
  }

 private:
  friend class Tokenizer;
  std::deque<std::string> words_;  // SentencePiece: word texts behind `pieces` records
  std::string mapped_;             // the segment after a Precompiled character map
  // A direct-mapped cache of recent pieces (HF caches words too): a piece of up to 24
  // bytes and up to 9 ids fits one 64-byte slot, so that a hit reads one cache line.
  static constexpr std::size_t kCacheBits = 13, kCacheMaxPiece = 24, kCacheMaxIds = 9;
  struct CacheSlot {
    std::uint64_t key[3];       // the piece's bytes, zero-padded
    std::uint8_t len, n;        // bytes (0: empty), ids
    TokenId ids[kCacheMaxIds];
  };
  ModelScratch scratch_;
  std::vector<Range> ranges_;
  std::string norm_;
  std::vector<CacheSlot> cache_;  // (1 << kCacheBits)
  // encode_with_offsets: the sources of the normalized segment's bytes, and of a
  // SentencePiece model's own normalization of a piece.
  std::vector<text::SourceSpan> src_, piece_src_;
  std::string piece_norm_;
  std::vector<Range> token_spans_;
  // A segment normalized whole before normalized added tokens are split off, and the
  // sources of its bytes (of one part of it).
  std::string whole_;
  std::vector<text::SourceSpan> whole_src_, part_src_;
};

class Tokenizer {
 public:
  Tokenizer() = default;
  Tokenizer(BpeModel model, std::unique_ptr<PreTokenizer> pre, Normalization norm,
            bool prefix_space, std::vector<AddedToken> added, TokenizerInfo info);
  Tokenizer(std::unique_ptr<Model> model, TokenizerSpec spec, std::vector<AddedToken> added, TokenizerInfo info);

  // Encode `text` (any bytes; invalid UTF-8 is encoded byte by byte) and append the
  // ids to `out`. With `parse_special` false, added-token text is ordinary text.
  void encode(std::string_view text, std::vector<TokenId>& out, Session& s,
              bool parse_special = true) const;
  // encode(), and for each id appended the bytes [begin, end) of `text` it stands for
  // (HF's offsets, in bytes): the same ids. A token made from normalized text points at
  // the input it came from (NFKC's "fi" at "ﬁ", a lowercased or accent-stripped letter at
  // the original); inserted text (a dummy prefix ▁, a prefix space) at the character it
  // was put before. A byte-level token that holds part of a character points at those
  // bytes alone; an unknown token at the span up to the next token.
  void encode_with_offsets(std::string_view text, std::vector<TokenId>& out, std::vector<Range>& spans, Session& s,
                           bool parse_special = true) const;
  // A unigram model's n best segmentations of `text`, best first (fewer when it has
  // fewer): each word's n best (the lattice of SentencePieceModel::nbest) combined by the
  // sum of their scores, added tokens fixed. With no pre-tokenizer (a .model) this is
  // spm's NBestEncode; with one (HF's Metaspace split) the n best choices of one
  // segmentation per word. Equal scores keep a fixed order. An error for other models.
  Status nbest(std::string_view text, std::size_t n, std::vector<SentencePieceModel::Segmentation>& out, Session& s,
               bool parse_special = true) const;
  // Inverse of encode: the text of the ids (exact for byte-level BPE; WordPiece loses
  // what its normalizer removed). An id outside the vocabulary is an error.
  Status decode(const TokenId* ids, std::size_t n, std::string& out, bool skip_special = false) const;
  // The ids --add-special puts before and after a sequence ([CLS] … [SEP] for BERT).
  const std::vector<TokenId>& template_prefix() const { return template_prefix_; }
  const std::vector<TokenId>& template_suffix() const { return template_suffix_; }

  std::size_t vocab_size() const { return vocab_size_; }  // largest id + 1, model and added tokens
  // The token's bytes (or added-token text); nullopt for an id that does not exist.
  std::optional<std::string_view> piece(TokenId id) const;
  // The token as the tokenizer's files spell it: byte-level text (Ġ for a space) for
  // byte-level BPE, the piece with "##" for WordPiece; "?" for an id that does not exist.
  std::string token_string(TokenId id) const;
  // The id of a token given by its text: an added token's content, or the model's own
  // spelling of it (token_text: "</s>", "Ġthe", "##ing"); -1 when there is none.
  TokenId id_of(std::string_view text) const;
  // The ids that end a generation (end of sequence, end of turn), where the tokenizer's
  // file names them (a GGUF's tokenizer.ggml.eos/eot/eom_token_id, a .model's </s>);
  // end_of_generation_ids (end_ids.h) also looks beside a tokenizer.json. Sorted, unique.
  const std::vector<TokenId>& end_ids() const { return end_ids_; }
  void set_end_ids(std::vector<TokenId> ids);
  // The added token with this id, or null.
  const AddedToken* added_token(TokenId id) const {
    auto i = static_cast<std::size_t>(id);
    return id >= 0 && i < by_id_.size() ? by_id_[i] : nullptr;
  }
  const Model& model() const { return *model_; }
  const BpeModel* bpe() const { return bpe_; }  // the model, when it is BPE
  const std::optional<text::BertNormalization>& bert_normalization() const { return bert_; }
  const Normalizer* normalizer() const { return chain_.get(); }
  Decoder decoder() const { return decoder_; }
  const std::vector<DecodeStep>& decode_steps() const { return decode_steps_; }
  const PreTokenizer* pre_tokenizer() const { return pre_.get(); }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  const TokenizerInfo& info() const { return info_; }
  Normalization normalization() const { return norm_; }
  bool prefix_space() const { return prefix_space_; }
  bool metaspace() const { return metaspace_; }
  const SpNormalizer* charsmap() const { return charsmap_.get(); }

 private:
  // `at_start`: the segment begins the text (for Metaspace's prepend_scheme "first");
  // `normalized`: the normalizer has already run on it (see normalize_segment).
  // The normalized segment `t` into the words the model encodes one by one (s.ranges_):
  // the pre-tokenizer's, or `t` whole (also when sampling skips a shortcut split).
  void split_words(std::string_view t, Session& s) const;
  void encode_segment(std::string_view seg, std::vector<TokenId>& out, Session& s, bool at_start,
                      bool normalized = false) const;
  // The segment as the model sees it (the normalizer, the metaspace ▁, a prefix space):
  // `seg` itself when nothing changes it, else in the Session. With `src`, also where
  // each of its bytes came from in `seg` (offsets). With `normalized`, only what follows
  // the normalizer (the prefix space).
  std::string_view normalize_segment(std::string_view seg, bool at_start, Session& s,
                                     std::vector<text::SourceSpan>* src, bool normalized = false) const;
  // The normalizer alone (a chain, a BertNormalizer or one Unicode form; a copy when
  // there is none; for a SentencePiece-style file its own normalizers, then the ▁ when the
  // Prepend and Replace normalizers put it in) into `out`, with the sources of its bytes
  // when `src` is given.
  void run_normalizer(std::string_view in, std::string& out, std::vector<text::SourceSpan>* src) const;
  // A SentencePiece-style file's own normalizers before any ▁ (a chain or a Precompiled
  // character map) into `buf`; `in` itself when it has none. Sources into `src` if given.
  std::string_view sp_normalizers(std::string_view in, std::string& buf, std::vector<text::SourceSpan>* src) const;
  // Whether the metaspace normalization puts ▁ before a segment whose text (after any
  // character map) is `in`.
  bool metaspace_prepends(std::string_view in, bool at_start) const;
  // An added token as matched: its content (normalized, for a token matched in
  // normalized text) and the token.
  struct AddedMatch {
    std::string content;
    const AddedToken* token = nullptr;
  };
  struct AddedSet {
    std::vector<AddedMatch> list;  // longest content first
    std::array<bool, 256> first{};  // first bytes of the contents
  };
  // The added-token split of encode(): `segment(begin, end)` for the text between the
  // tokens of `set` (whitespace they strip left out), `added(token, at, length)` for each
  // match.
  template <class OnSegment, class OnAdded>
  void split_added(const AddedSet& set, std::string_view text, OnSegment&& segment, OnAdded&& added) const;
  // One part of a text as for_each_segment walks it: a stretch between added tokens, or an
  // added token's match. `normalized`: the part is in s.whole_ (the raw segment that starts
  // at `raw_begin` of the text, normalized whole), at `at` there; else it is the raw text's
  // bytes from `raw_begin` (and `at` = `raw_begin`).
  struct Part {
    std::string_view text;
    std::size_t raw_begin = 0, at = 0;
    bool at_start = false, normalized = false;
  };
  // The walk of a text that encode(), nbest() and encode_with_offsets() share:
  // split_added on the raw text and, where added tokens match normalized text, the segment
  // normalized whole (into s.whole_, with its bytes' sources in `whole_src` when given) and
  // split again. `segment(part)` for each stretch between tokens, `added(token, part)` for
  // each token.
  template <class OnSegment, class OnAdded>
  void for_each_segment(std::string_view text, Session& s, bool parse_special, OnSegment&& segment,
                        OnAdded&& added, std::vector<text::SourceSpan>* whole_src = nullptr) const;
  // Offsets of one segment; `outer`: the sources of an already normalized segment's bytes
  // (relative to `base`), when it is a part of normalized text.
  void segment_with_offsets(std::string_view seg, std::uint32_t base, bool at_start, std::vector<TokenId>& out,
                            std::vector<Range>& spans, Session& s,
                            const std::vector<text::SourceSpan>* outer = nullptr) const;
  // Spans in `piece` (normalized text) of the tokens ids[0, n) that encode it.
  void token_spans(std::string_view piece, const TokenId* ids, std::size_t n, std::vector<Range>& spans) const;
  Status decode_metaspace(const TokenId* ids, std::size_t n, std::string& out, bool skip_special) const;
  Status decode_chain(const TokenId* ids, std::size_t n, std::string& out, bool skip_special) const;
  Result<std::optional<std::string_view>> decode_text(TokenId id, bool skip_special) const;
  void encode_piece(std::string_view piece, std::vector<TokenId>& out, Session& s) const;
  static const AddedMatch* match_added(const AddedSet& set, std::string_view text, std::size_t pos);

  std::unique_ptr<Model> model_;
  const BpeModel* bpe_ = nullptr;
  std::unique_ptr<PreTokenizer> pre_;
  bool pre_shortcut_ = false;
  Normalization norm_ = Normalization::none;
  std::optional<text::BertNormalization> bert_;
  std::shared_ptr<const Normalizer> chain_;
  bool prefix_space_ = false;
  bool metaspace_ = false;
  bool metaspace_if_missing_ = false;
  bool metaspace_first_ = false;
  bool metaspace_never_ = false;
  bool metaspace_strip_ = true;
  std::shared_ptr<const SpNormalizer> charsmap_;
  bool squeeze_spaces_ = false;
  Decoder decoder_ = Decoder::byte_level;
  std::vector<DecodeStep> decode_steps_;
  std::vector<TokenId> template_prefix_, template_suffix_;
  bool trim_offsets_ = false, trim_prefix_space_ = true;
  std::vector<AddedToken> added_;        // sorted by content length, longest first
  std::vector<const AddedToken*> by_id_;  // (vocab_size) id → added token, or null
  std::size_t vocab_size_ = 0;
  std::vector<TokenId> end_ids_;
  // Added tokens matched in the input, and those HF matches in normalized text (normalized:
  // true, when there is a normalizer and no metaspace ▁) by their normalized content.
  AddedSet raw_added_, norm_added_;
  TokenizerInfo info_;
};

// ---- Files ------------------------------------------------------------------------

struct LoadOptions {
  // tiktoken files: the pre-tokenizer and special tokens, when the file name does not
  // tell (cl100k_base, o200k_base, r50k_base, p50k_base, gpt2).
  std::string pre_tokenizer;
  std::vector<std::pair<std::string, TokenId>> special_tokens;
  // BERT vocab.txt: lowercase (and strip accents) or not; unset: lowercase unless the
  // vocabulary has capital letters outside its [SPECIAL] tokens.
  std::optional<bool> lowercase;
  // Threads to build a large vocabulary's indexes with (the same tokenizer at any count).
  int threads = 1;
};

// Load a tokenizer file, detecting the format: HF tokenizer.json, GPT-2 vocab.json
// (with merges.txt beside it, or "vocab.json:merges.txt"), a tiktoken rank file, a BERT
// vocab.txt (one WordPiece token per line), or a SentencePiece .model. A directory (an HF
// model's) stands for the tokenizer file in it (tokenizer_file_in).
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path,
                                                  const LoadOptions& opts = {});

// The tokenizer file of a model directory, the first of tokenizer.json, tokenizer.model,
// vocab.json (with merges.txt), vocab.txt, tokenizer.bin and a single *.tiktoken; an error
// naming what was looked for when there is none.
Result<std::string> tokenizer_file_in(const std::string& dir);

Result<std::unique_ptr<Tokenizer>> load_tokenizer_json(std::string text,
                                                       const std::string& name, int threads = 1);
Result<std::unique_ptr<Tokenizer>> load_gpt2_files(const std::string& vocab_json,
                                                   const std::string& merges_txt);
Result<std::unique_ptr<Tokenizer>> load_tiktoken(const std::string& path, const LoadOptions& opts);
Result<std::unique_ptr<Tokenizer>> load_vocab_txt(const std::string& path, const LoadOptions& opts);
// A SentencePiece .model (unigram or BPE); --add-special adds its <s>.
Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& path);

// HF tokenizer.json text (compact, in HF's key order): byte-level BPE, character-level
// BPE over words (tok-train -m char-bpe) or WordPiece.
std::string to_tokenizer_json(const Tokenizer& t);
// BERT vocab.txt: the model's tokens, one per line, in id order.
std::string to_vocab_txt(const Tokenizer& t);
// GPT-2 style vocab.json and merges.txt.
std::string to_vocab_json(const Tokenizer& t);
std::string to_merges_txt(const Tokenizer& t);

}  // namespace lmp::tok
