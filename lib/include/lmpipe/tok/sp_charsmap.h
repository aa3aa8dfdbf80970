// Precompiled character maps for SentencePiece models: the NormalizerSpec blob that
// spm_encode (and tok-encode) apply before encoding — a darts-clone double-array trie
// over the UTF-8 of the characters that change, then the NUL-terminated replacements.
#pragma once

#include <string>

namespace lmp::tok {

// The rules: every code point whose NFKC (or NFKC_Casefold) form differs from itself maps
// to that form, and the canonical decomposition (under 6 bytes) of every precomposed
// character maps to the character's form (a letter and its combining accent become one
// character; HF's Precompiled normalizer looks no further, so neither does this map). Matched
// leftmost-longest, this is NFKC on text except for rarer reorderings of several
// combining marks; SentencePiece's nmt_nfkc also drops control characters and folds
// extra whitespace, which this map leaves alone. The same map serves training and both
// encoders.
std::string build_charsmap(bool case_fold);

}  // namespace lmp::tok
