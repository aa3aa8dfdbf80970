// Unicode services for tokenizers: UTF-8 decoding that never fails (an invalid byte
// decodes as itself, one byte long), character classes for the pre-tokenizer
// regexes, and normalization (through ICU, which only this module and regex.cpp see).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"

namespace lmp::text {

// Code points >= kInvalidBase stand for one invalid UTF-8 byte (kInvalidBase + byte).
inline constexpr std::uint32_t kInvalidBase = 0x110000;

struct CodePoint {
  std::uint32_t cp;
  std::uint32_t len;  // bytes consumed, 1..4
};

// Decode the code point at s[i] (i < n). Overlong forms, surrogates and truncated
// sequences decode as one invalid byte.
inline CodePoint decode_utf8(const unsigned char* s, std::size_t n, std::size_t i) {
  unsigned c = s[i];
  if (c < 0x80) return {c, 1};
  auto cont = [&](std::size_t k) { return i + k < n && (s[i + k] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF && cont(1)) return {((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu), 2};
  if (c >= 0xE0 && c <= 0xEF && cont(1) && cont(2)) {
    std::uint32_t cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
    if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3};
  } else if (c >= 0xF0 && c <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    std::uint32_t cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) |
                       ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
    if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4};
  }
  return {kInvalidBase + c, 1};
}

bool is_valid_utf8(std::string_view s);
void append_utf8(std::string& out, std::uint32_t cp);
std::size_t count_chars(std::string_view s);  // code points; an invalid byte counts as one

// Character class bits, from the Unicode general category and White_Space.
enum : std::uint16_t {
  kLetter = 1 << 0,    // \p{L}
  kNumber = 1 << 1,    // \p{N}
  kSpace = 1 << 2,     // \s: White_Space
  kMark = 1 << 3,      // \p{M}
  kUpper = 1 << 4,     // Lu or Lt
  kLower = 1 << 5,     // Ll
  kOtherLetter = 1 << 6,  // Lm or Lo
  kDigit = 1 << 7,     // Nd
  kConnector = 1 << 8, // Pc
  kCR_LF = 1 << 9,     // '\r' or '\n'
  kHan = 1 << 10,      // Script=Han (CJK ideographs)
  kPunct = 1 << 11,    // \p{P}
  kOther = 1 << 12,    // \p{C}: Cc, Cf, Cs, Co, Cn
  kNonspacing = 1 << 13,  // Mn
  kLowerChanges = 1 << 14,  // Changes_When_Lowercased
};

// Class bits of a code point (0 for invalid bytes). O(1) for the BMP.
std::uint16_t char_class(std::uint32_t cp);

enum class NormalForm { nfc, nfkc, nfd, nfkd, nfkc_cf };  // nfkc_cf: NFKC_Casefold

// Normalize the valid UTF-8 runs of `s`; invalid bytes are kept as they are.
std::string normalize(std::string_view s, NormalForm form);

// The full lowercase mapping of one code point, context-free (as Rust's
// char::to_lowercase: 'İ' → "i̇", final sigma not applied), appended to `out`.
void append_lower(std::string& out, std::uint32_t cp);

// Whether Unicode assigns the code point (ICU's version of it).
bool is_assigned(std::uint32_t cp);

// Simple case folding of one code point (CaseFolding.txt's C and S mappings, one code
// point to one: 'ẞ' → 'ß', 'ᾈ' → 'ᾀ'; 'ß' and 'İ' stay), as SentencePiece's *_cf rules fold.
std::uint32_t simple_case_fold(std::uint32_t cp);

// The Unicode script of a code point (ICU's UScriptCode), with Hiragana, Katakana and
// the prolonged sound mark folded into Han, as SentencePiece counts scripts.
int script_of(std::uint32_t cp);

// CJK ideographs as BERT counts them (HF's is_chinese_char ranges).
bool is_cjk_ideograph(std::uint32_t cp);

// HF tokenizers' BertNormalizer, step by step: clean_text removes NUL, U+FFFD and
// other control/format/unassigned characters (\p{C} except \t \n \r) and turns
// White_Space into ' '; chinese_chars puts spaces around CJK ideographs; strip_accents
// decomposes (NFD, not recomposed) and drops nonspacing marks (Mn); lowercase applies
// the full per-character lowercase mapping. An invalid UTF-8 byte counts as U+FFFD.
struct BertNormalization {
  bool clean_text = true;
  bool chinese_chars = true;
  bool strip_accents = true;  // HF: unset means "same as lowercase"
  bool lowercase = true;
};
void bert_normalize(std::string_view s, const BertNormalization& o, std::string& out);

// Where each byte of a normalized text came from: the bytes [begin, end) of the input.
struct SourceSpan {
  std::uint32_t begin, end;
};

// The source of the bytes [b, e) of a text whose bytes came from `src`; an empty range
// sits where the byte at b came from (or after the last one).
SourceSpan source_of(const std::vector<SourceSpan>& src, std::uint32_t b, std::uint32_t e);

// normalize() and bert_normalize(), with the source of each output byte (`src`, one
// entry per byte of `out`; the output is the same). The input is cut where the form
// has a normalization boundary (a character that nothing before it combines with) and
// each piece normalized alone, then character by character when that gives the same
// text: an output byte points at the character it came from (ﬁ for both letters of "fi",
// nothing at a mark that was removed), or at its own input byte where the character came
// through unchanged. Characters composed into one ("e" + U+0301 → "é") point at the
// first, as HF tokenizers' alignments do.
void normalize_aligned(std::string_view s, NormalForm form, std::string& out, std::vector<SourceSpan>& src);
void bert_normalize_aligned(std::string_view s, const BertNormalization& o, std::string& out,
                            std::vector<SourceSpan>& src);

}  // namespace lmp::text
