#include "lmpipe/tok/decode_stream.h"

namespace lmp::tok {

bool ends_mid_character(std::string_view s) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  if (s.size() >= kReplacement.size() && s.substr(s.size() - kReplacement.size()) == kReplacement) return true;
  // Back over at most three continuation bytes to the lead byte; a lead byte that asks for
  // more bytes than follow it is an incomplete character. Stray continuation bytes with no
  // lead byte will never become whole, so they do not count.
  std::size_t k = s.size();
  std::size_t cont = 0;
  while (k > 0 && cont < 3 && (static_cast<unsigned char>(s[k - 1]) & 0xC0) == 0x80) {
    --k;
    ++cont;
  }
  if (k == 0) return false;
  const auto lead = static_cast<unsigned char>(s[k - 1]);
  if (lead < 0xC0) return false;  // ASCII, or a continuation byte: nothing waits
  const std::size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : 1;
  return cont < need;
}

Status DecodeStream::add(TokenId id, std::string& out) {
  ids_.push_back(id);
  before_.clear();
  LMP_TRY(t_->decode(ids_.data(), read_, before_, skip_special_));
  after_.clear();
  LMP_TRY(t_->decode(ids_.data(), ids_.size(), after_, skip_special_));
  if (ids_.size() - read_ < kMaxHeld && ends_mid_character(after_)) return {};
  return emit(out);
}

Status DecodeStream::finish(std::string& out) {
  if (read_ == ids_.size()) return {};
  before_.clear();
  LMP_TRY(t_->decode(ids_.data(), read_, before_, skip_special_));
  after_.clear();
  LMP_TRY(t_->decode(ids_.data(), ids_.size(), after_, skip_special_));
  return emit(out);
}

Status DecodeStream::emit(std::string& out) {
  // The window's text with the new ids should extend the text without them. It does not
  // when the decoder reads the context anew in the light of the new ids (a byte token that
  // makes a run of bytes invalid UTF-8, which a byte-fallback decoder then replaces
  // whole): what was shown cannot be taken back, so the context shrinks from the front
  // until the new ids' text extends it again (with no context at all, it always does).
  std::size_t from = 0;
  while (after_.compare(0, before_.size(), before_) != 0 && from < read_) {
    ++from;
    before_.clear();
    LMP_TRY(t_->decode(ids_.data() + from, read_ - from, before_, skip_special_));
    after_.clear();
    LMP_TRY(t_->decode(ids_.data() + from, ids_.size() - from, after_, skip_special_));
  }
  if (after_.size() <= before_.size()) {
    // Nothing to show (skipped special tokens): they join the context, which keeps the
    // text before them as it was.
    read_ = ids_.size();
    return {};
  }
  out.append(after_, before_.size());
  // The ids just shown are the next step's context; older ones are no longer needed.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(read_));
  read_ = ids_.size();
  return {};
}

}  // namespace lmp::tok
