#include "lmpipe/tok/tokenizer.h"

#include <algorithm>
#include <functional>

#include "lmpipe/text/unicode.h"

namespace lmp::tok {

namespace {
constexpr std::size_t kCacheSize = 1 << 14;     // entries, direct-mapped
constexpr std::size_t kCacheMaxPiece = 64;      // bytes; longer pieces are not cached

bool is_word_byte_char(std::uint32_t cp) {
  return (text::char_class(cp) & (text::kLetter | text::kDigit | text::kConnector | text::kMark)) != 0;
}
}  // namespace

Session::Session(const Tokenizer&) : cache_(kCacheSize) {}

Tokenizer::Tokenizer(BpeModel model, std::unique_ptr<PreTokenizer> pre, Normalization norm,
                     bool prefix_space, std::vector<AddedToken> added, TokenizerInfo info)
    : model_(std::move(model)),
      pre_(std::move(pre)),
      norm_(norm),
      prefix_space_(prefix_space),
      added_(std::move(added)),
      info_(std::move(info)) {
  std::stable_sort(added_.begin(), added_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  vocab_size_ = model_.vocab_size();
  for (const auto& a : added_) vocab_size_ = std::max(vocab_size_, static_cast<std::size_t>(a.id) + 1);
  std::size_t n = vocab_size_;
  by_id_.assign(n, nullptr);
  for (const auto& a : added_) {
    if (a.id >= 0 && static_cast<std::size_t>(a.id) < n && !by_id_[static_cast<std::size_t>(a.id)])
      by_id_[static_cast<std::size_t>(a.id)] = &a;
    if (!a.content.empty()) added_first_[static_cast<unsigned char>(a.content[0])] = true;
  }
}

std::optional<std::string_view> Tokenizer::piece(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= vocab_size()) return std::nullopt;
  if (const AddedToken* a = added_token(id)) return std::string_view(a->content);
  if (static_cast<std::size_t>(id) < model_.vocab_size() && !model_.token(id).empty())
    return std::string_view(model_.token(id));
  return std::nullopt;
}

const AddedToken* Tokenizer::match_added(std::string_view text, std::size_t pos) const {
  for (const auto& a : added_) {
    if (a.content.empty() || text.size() - pos < a.content.size()) continue;
    if (text.compare(pos, a.content.size(), a.content) != 0) continue;
    if (a.single_word) {
      const auto* p = reinterpret_cast<const unsigned char*>(text.data());
      if (pos > 0) {
        std::size_t k = pos - 1;
        while (k > 0 && (p[k] & 0xC0) == 0x80) --k;
        if (is_word_byte_char(text::decode_utf8(p, text.size(), k).cp)) continue;
      }
      std::size_t e = pos + a.content.size();
      if (e < text.size() && is_word_byte_char(text::decode_utf8(p, text.size(), e).cp)) continue;
    }
    return &a;
  }
  return nullptr;
}

void Tokenizer::encode(std::string_view text, std::vector<TokenId>& out, Session& s,
                       bool parse_special) const {
  if (!parse_special || added_.empty()) {
    encode_segment(text, out, s);
    return;
  }
  std::size_t seg = 0;
  for (std::size_t i = 0; i < text.size();) {
    if (!added_first_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const AddedToken* m = match_added(text, i);
    if (!m) {
      ++i;
      continue;
    }
    std::size_t seg_end = i;
    if (m->lstrip)
      while (seg_end > seg && (text[seg_end - 1] == ' ' || text[seg_end - 1] == '\t')) --seg_end;
    encode_segment(text.substr(seg, seg_end - seg), out, s);
    out.push_back(m->id);
    if (s.pieces) s.pieces->push_back({text.substr(i, m->content.size()), 1});
    i += m->content.size();
    if (m->rstrip)
      while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    seg = i;
  }
  encode_segment(text.substr(seg), out, s);
}

void Tokenizer::encode_segment(std::string_view seg, std::vector<TokenId>& out, Session& s) const {
  if (seg.empty()) return;
  std::string_view t = seg;
  if (norm_ != Normalization::none || (prefix_space_ && seg[0] != ' ')) {
    if (norm_ == Normalization::none) s.norm_.assign(seg);
    else s.norm_ = text::normalize(seg, norm_ == Normalization::nfc ? text::NormalForm::nfc
                                                                    : text::NormalForm::nfkc);
    if (prefix_space_ && (s.norm_.empty() || s.norm_[0] != ' ')) s.norm_.insert(s.norm_.begin(), ' ');
    t = s.norm_;
  }
  s.ranges_.clear();
  if (pre_) pre_->split(t, s.ranges_);
  else s.ranges_.push_back({0, static_cast<std::uint32_t>(t.size())});
  for (const Range& r : s.ranges_) {
    std::string_view piece = t.substr(r.begin, r.end - r.begin);
    std::size_t before = out.size();
    encode_piece(piece, out, s);
    if (s.pieces) s.pieces->push_back({piece, static_cast<std::uint32_t>(out.size() - before)});
  }
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<TokenId>& out, Session& s) const {
  if (piece.size() > kCacheMaxPiece || piece.size() < 2) {
    model_.encode(piece, out, s.scratch_);
    return;
  }
  std::size_t h = std::hash<std::string_view>{}(piece) & (kCacheSize - 1);
  auto& e = s.cache_[h];
  if (e.key == piece) {
    out.insert(out.end(), e.ids.begin(), e.ids.end());
    return;
  }
  std::size_t before = out.size();
  std::uint64_t dropped = s.scratch_.dropped_bytes;
  model_.encode(piece, out, s.scratch_);
  if (s.scratch_.dropped_bytes != dropped) return;  // keep the drop count exact: don't cache
  e.key.assign(piece);
  e.ids.assign(out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
}

Status Tokenizer::decode(const TokenId* ids, std::size_t n, std::string& out, bool skip_special) const {
  for (std::size_t k = 0; k < n; ++k) {
    TokenId id = ids[k];
    if (const AddedToken* a = added_token(id)) {
      if (!(skip_special && a->special)) out += a->content;
      continue;
    }
    if (id < 0 || static_cast<std::size_t>(id) >= model_.vocab_size() || model_.token(id).empty())
      return make_error(Errc::out_of_range, "token id {} is not in the vocabulary (size {})", id,
                        vocab_size());
    out += model_.token(id);
  }
  return {};
}

}  // namespace lmp::tok
