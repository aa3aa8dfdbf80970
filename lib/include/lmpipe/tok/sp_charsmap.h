// Precompiled character maps for SentencePiece models: the NormalizerSpec blob that
// spm_encode (and tok-encode) apply before encoding — a darts-clone double-array trie
// over the UTF-8 of the characters that change, then the NUL-terminated replacements.
#pragma once

#include <string>

namespace lmp::tok {

// The rules of one character each: every code point whose NFKC (or NFKC_Casefold) form
// differs from itself maps to that form. (SentencePiece's own nmt_nfkc also composes
// some multi-character sequences and folds extra whitespace; this map is per character,
// and the same map is applied in training and in both encoders.)
std::string build_charsmap(bool case_fold);

}  // namespace lmp::tok
