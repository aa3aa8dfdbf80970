// Text of a stream of token ids, given as it becomes whole (generate's streamed output).
#pragma once

#include <string>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/tok/tokenizer.h"

namespace lmp::tok {

// Decoding the whole sequence again at every token would cost O(n^2) over a long
// generation; decoding each token alone would lose what a token's text owes to its
// neighbours (a SentencePiece decoder drops the leading space of the first piece only;
// a character spelled by several byte tokens is whole only after the last of them).
// So each step decodes a short window twice, the ids already shown that precede the new
// ones (the context) with and without the new ones, and gives the difference. While that
// difference ends inside a character (incomplete UTF-8, or the U+FFFD a decoder writes
// for bytes it cannot yet place) it is held back, for at most kMaxHeld tokens.
// The pieces join to the whole sequence's decode, with one exception: a decoder that
// replaces every byte of a run of byte tokens that is not valid UTF-8 (SentencePiece's
// byte fallback, as HF's ByteFallback does) will have had a character of the run shown as
// soon as it was whole; the bytes after it that spoil the run show as U+FFFD.
class DecodeStream {
 public:
  static constexpr std::size_t kMaxHeld = 16;

  explicit DecodeStream(const Tokenizer& t, bool skip_special = true) : t_(&t), skip_special_(skip_special) {}

  // Appends to `out` the text that `id` makes whole (often nothing, or more than the
  // token's own text). An id outside the vocabulary is an error.
  Status add(TokenId id, std::string& out);
  // Appends what is still held back, as the decoder gives it.
  Status finish(std::string& out);
  // Ids kept for the next step: the context and those not yet shown.
  std::size_t window() const { return ids_.size(); }

 private:
  Status emit(std::string& out);

  const Tokenizer* t_;
  bool skip_special_;
  std::vector<TokenId> ids_;  // [0, read_): the context, shown; [read_, end): not yet shown
  std::size_t read_ = 0;
  std::string before_, after_;  // the window's text without and with the new ids
};

// Whether `s` ends inside a UTF-8 character (a lead byte still waiting for continuation
// bytes) or on U+FFFD, the replacement a decoder writes for bytes it could not place yet.
bool ends_mid_character(std::string_view s);

}  // namespace lmp::tok
