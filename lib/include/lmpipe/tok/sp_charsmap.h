// Precompiled character maps for SentencePiece models: the NormalizerSpec blob that
// spm_encode (and tok-encode) apply before encoding — a darts-clone double-array trie
// over the UTF-8 of the characters that change, then the NUL-terminated replacements.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace lmp::tok {

// SentencePiece's named rules: nfkc; nfkc_cf, NFKC and then simple case folding of each
// code point ('ẞ' → 'ß', 'ß' stays, nothing dropped); nmt_nfkc and nmt_nfkc_cf, spm_train's
// default, the same with rules of their own for single code points: control characters
// dropped, tabs, line breaks and invisible separators (U+200B, U+FEFF, U+FFFD …) made a
// space, the full-width tilde kept.
enum class CharsmapRule { nfkc, nfkc_cf, nmt_nfkc, nmt_nfkc_cf };
std::optional<CharsmapRule> charsmap_rule(std::string_view name);  // by its SentencePiece name

// The map of a rule: every assigned code point whose form differs from itself maps to that
// form, and the canonical decomposition (under 6 bytes) of every precomposed character,
// and its variants with characters that decompose to one of its parts alone, map to the
// character's form (a letter and its combining accent become one character; HF's
// Precompiled normalizer looks no further, so neither does this map). Matched
// leftmost-longest, this is the rule on text except for rarer reorderings of several
// combining marks; the whitespace folding of spm_train's --remove_extra_whitespaces is
// the normalizer's, not the map's. The same map serves training and both encoders.
std::string build_charsmap(CharsmapRule rule);

}  // namespace lmp::tok
