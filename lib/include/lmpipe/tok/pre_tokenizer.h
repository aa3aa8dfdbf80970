// Pre-tokenizers: split text into pieces that BPE never merges across.
//
// The regex splits of GPT-2, cl100k/Llama-3 and o200k are hand-written scanners that
// reproduce the regex semantics (alternation order, backtracking of `\s+(?!\S)`,
// `\s*[\r\n]+`) exactly; any other pattern runs through ICU's regex engine, with
// `\s` meaning White_Space as in Oniguruma and Rust's regex crates. Tests compare
// every scanner with the ICU engine on the same pattern.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"

namespace lmp::tok {

// What a split keeps of the pattern's matches (HF's SplitDelimiterBehavior): isolated
// (a piece of its own), removed, merged with the piece before or after, or contiguous
// (runs of matches, and of non-matches, each one piece).
enum class SplitBehavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

struct Range {
  std::uint32_t begin, end;  // byte offsets into the text, end exclusive
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Append the pieces of `text` to `out`, in order. Pieces may leave gaps only
  // where the split behaviour removes text.
  virtual void split(std::string_view text, std::vector<Range>& out) const = 0;
  // The canonical name (gpt2, cl100k, llama3, o200k, whitespace, bert, none) or "regex".
  virtual std::string_view name() const = 0;
  // The regex it implements ("" for none).
  virtual std::string_view pattern() const = 0;
  // What becomes of the regex's matches (a Split's behavior; the named ones isolate them).
  virtual SplitBehavior behavior() const { return SplitBehavior::isolated; }
  // Whether what the regex does not match is the delimiter (HF's Split `invert`).
  virtual bool invert() const { return false; }
  // The splits it applies in turn: itself, or a sequence's steps.
  virtual std::vector<const PreTokenizer*> steps() const { return {this}; }
};

// The regex patterns, as HF tokenizers and tiktoken spell them.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kWhitespacePattern = R"(\w+|[^\w\s]+)";

// By name: gpt2, cl100k, llama3 (the same split as cl100k), o200k, whitespace (HF's
// Whitespace: \w+ and [^\w\s]+ runs), whitespace-split (HF's WhitespaceSplit), bert
// (HF's BertPreTokenizer: whitespace removed, each punctuation character isolated), none.
// NAME+digits first splits off every \p{N} character on its own (HF's Digits with
// individual_digits, before the split, as StarCoder has it), then splits as NAME.
Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(std::string_view name);


// From a regex: a known pattern gets its fast scanner, any other runs through ICU.
Result<std::unique_ptr<PreTokenizer>> make_regex_pre_tokenizer(
    std::string_view pattern, SplitBehavior behavior = SplitBehavior::isolated, bool invert = false);

// HF's character-class pre-tokenizers. Each character the class holds is a match of its
// own (HF's `split` by a char predicate), handled as `behavior` says:
//   punctuation: ASCII punctuation (symbols such as $ + < = > ^ ` | ~ included) or \p{P}
//                (HF's Punctuation; default behavior isolated);
//   numeric:     \p{N} (HF's Digits: isolated with individual_digits, else contiguous);
//   whitespace:  White_Space (HF's WhitespaceSplit: removed);
//   delimiter:   the code point `delimiter` (HF's CharDelimiterSplit: removed).
// pattern() gives the same split as a regex, for the ICU engine to check and for saving.
enum class CharSplit { punctuation, numeric, whitespace, delimiter };
std::unique_ptr<PreTokenizer> make_char_split_pre_tokenizer(CharSplit kind, SplitBehavior behavior,
                                                            char32_t delimiter = 0);

// `inner` applied to the byte-level text of each piece (every byte shown as the character
// GPT-2's mapping gives it), its pieces mapped back to byte offsets: what a split placed
// after HF's ByteLevel pre-tokenizer sees. A space is `Ġ` there, and a byte 0xA1 inside a
// character is `¡`, a punctuation mark. A sequence gives a sequence of views; `inner` must
// not be a view itself.
std::unique_ptr<PreTokenizer> make_byte_level_view(std::unique_ptr<PreTokenizer> inner);

// Splits applied in turn, each to every piece of the one before (HF's Sequence of Split
// pre-tokenizers; llama.cpp's lists of regexes): deepseek-coder, falcon. One step is
// returned as it is.
std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps);
// Always the ICU engine (the reference the fast scanners are tested against).
Result<std::unique_ptr<PreTokenizer>> make_icu_regex_pre_tokenizer(
    std::string_view pattern, SplitBehavior behavior = SplitBehavior::isolated, bool invert = false);

}  // namespace lmp::tok
