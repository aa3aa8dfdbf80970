#include "lmpipe/tok/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "lmpipe/text/unicode.h"
#include "lmpipe/tok/byte_level.h"
#include "lmpipe/tok/sentencepiece.h"
#include "lmpipe/tok/wordpiece.h"

namespace lmp::tok {

namespace {

bool is_word_byte_char(std::uint32_t cp) {
  return (text::char_class(cp) & (text::kLetter | text::kDigit | text::kConnector | text::kMark)) != 0;
}
}  // namespace

Session::Session(const Tokenizer&) : cache_(std::size_t{1} << kCacheBits, CacheSlot{}) {}

namespace {
TokenizerSpec bpe_spec(std::unique_ptr<PreTokenizer> pre, Normalization norm, bool prefix_space) {
  TokenizerSpec s;
  s.pre = std::move(pre);
  s.norm = norm;
  s.prefix_space = prefix_space;
  return s;
}
}  // namespace

Tokenizer::Tokenizer(BpeModel model, std::unique_ptr<PreTokenizer> pre, Normalization norm,
                     bool prefix_space, std::vector<AddedToken> added, TokenizerInfo info)
    : Tokenizer(std::make_unique<BpeModel>(std::move(model)), bpe_spec(std::move(pre), norm, prefix_space),
                std::move(added), std::move(info)) {}

Tokenizer::Tokenizer(std::unique_ptr<Model> model, TokenizerSpec spec, std::vector<AddedToken> added,
                     TokenizerInfo info)
    : model_(std::move(model)),
      pre_(std::move(spec.pre)),
      norm_(spec.norm),
      bert_(spec.bert),
      prefix_space_(spec.prefix_space),
      metaspace_(spec.metaspace),
      metaspace_if_missing_(spec.metaspace_if_missing),
      charsmap_(std::move(spec.charsmap)),
      decoder_(spec.decoder),
      template_prefix_(std::move(spec.template_prefix)),
      template_suffix_(std::move(spec.template_suffix)),
      added_(std::move(added)),
      info_(std::move(info)) {
  if (model_->type() == ModelType::bpe) bpe_ = static_cast<const BpeModel*>(model_.get());
  std::stable_sort(added_.begin(), added_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  vocab_size_ = model_->vocab_size();
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
  std::string_view t = model_->token_text(id);
  if (!t.empty()) return t;
  return std::nullopt;
}

TokenId Tokenizer::id_of(std::string_view text) const {
  for (const auto& a : added_)
    if (a.content == text) return a.id;
  return model_->find(text);
}

void Tokenizer::set_end_ids(std::vector<TokenId> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  end_ids_ = std::move(ids);
}

std::string Tokenizer::token_string(TokenId id) const {
  if (const AddedToken* a = added_token(id)) return a->content;
  auto p = piece(id);
  if (!p) return "?";
  return bpe_ && !bpe_->char_level() ? bytes_to_byte_level(*p) : std::string(*p);
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
  if (s.pieces) s.words_.clear();
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
  if (bert_) {
    text::bert_normalize(seg, *bert_, s.norm_);
    t = s.norm_;
  } else if (metaspace_) {
    std::string_view src = seg;
    if (charsmap_) {
      charsmap_->apply_charsmap(seg, s.mapped_);
      src = s.mapped_;
    }
    // (HF's Metaspace prepends only when the text does not start with ▁ after replacing.)
    bool starts = !src.empty() && (src[0] == ' ' || src.substr(0, kMetaspace.size()) == kMetaspace);
    s.norm_.assign(metaspace_if_missing_ && starts ? "" : kMetaspace);
    for (char c : src) {
      if (c == ' ') s.norm_ += kMetaspace;
      else s.norm_ += c;
    }
    t = s.norm_;
  } else if (norm_ != Normalization::none || (prefix_space_ && seg[0] != ' ')) {
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
    if (!s.pieces) continue;
    if (pre_ || model_->type() != ModelType::sentencepiece) {
      s.pieces->push_back({piece, static_cast<std::uint32_t>(out.size() - before)});
      continue;
    }
    // SentencePiece has no words of its own: for statistics, a word starts at each
    // token that starts with ▁ (its text, ▁ shown as a space, is kept in the Session).
    std::uint32_t n = 0;
    std::string* w = nullptr;
    auto flush = [&] {
      if (w && n) s.pieces->push_back({*w, n});
      n = 0;
    };
    for (std::size_t k = before; k < out.size(); ++k) {
      std::string_view tt = model_->token_text(out[k]);
      if (!w || tt.substr(0, kMetaspace.size()) == kMetaspace) {
        flush();
        w = &s.words_.emplace_back();
      }
      if (tt.size() == 6 && tt.compare(0, 3, "<0x") == 0 && tt[5] == '>') {  // a byte-fallback token
        *w += static_cast<char>(std::stoi(std::string(tt.substr(3, 2)), nullptr, 16));
        ++n;
        continue;
      }
      for (std::size_t i = 0; i < tt.size();) {
        if (tt.compare(i, kMetaspace.size(), kMetaspace) == 0) {
          *w += ' ';
          i += kMetaspace.size();
        } else {
          *w += tt[i++];
        }
      }
      ++n;
    }
    flush();
  }
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<TokenId>& out, Session& s) const {
  using Slot = Session::CacheSlot;
  if (piece.size() > Session::kCacheMaxPiece || piece.size() < 2 || (bpe_ && bpe_->segments(piece))) {
    if (bpe_) bpe_->encode(piece, out, s.scratch_.bpe);
    else model_->encode(piece, out, s.scratch_);
    return;
  }
  std::uint64_t key[3] = {0, 0, 0};
  std::memcpy(key, piece.data(), piece.size());
  std::uint64_t h = (key[0] * 0x9E3779B97F4A7C15ULL) ^ (key[1] * 0xC2B2AE3D27D4EB4FULL) ^
                    (key[2] * 0x165667B19E3779F9ULL) ^ piece.size();
  h ^= h >> 31;
  Slot& e = s.cache_[static_cast<std::size_t>((h * 0xBF58476D1CE4E5B9ULL) >> (64 - Session::kCacheBits))];
  if (e.len == piece.size() && e.key[0] == key[0] && e.key[1] == key[1] && e.key[2] == key[2]) {
    for (std::uint8_t k = 0; k < e.n; ++k) out.push_back(e.ids[k]);
    return;
  }
  std::size_t before = out.size();
  std::uint64_t dropped = s.scratch_.bpe.dropped_bytes, unknown = s.scratch_.unknown;
  if (bpe_) bpe_->encode(piece, out, s.scratch_.bpe);
  else model_->encode(piece, out, s.scratch_);
  // Keep the drop and unknown counts exact: don't cache what changed them.
  std::size_t n = out.size() - before;
  if (s.scratch_.bpe.dropped_bytes != dropped || s.scratch_.unknown != unknown || n > Session::kCacheMaxIds) return;
  std::memcpy(e.key, key, sizeof key);
  e.len = static_cast<std::uint8_t>(piece.size());
  e.n = static_cast<std::uint8_t>(n);
  std::copy(out.begin() + static_cast<std::ptrdiff_t>(before), out.end(), e.ids);
}

namespace {
// HF's WordPiece decoder cleanup, applied to each token as it is appended.
void wordpiece_cleanup(std::string& s) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},           {" ,", ","},     {" ' ", "'"},    {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : kRules) {
    for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
      s.replace(p, from.size(), to);
  }
}
}  // namespace

// The text a decoder starts from for one id: an added token's content (nothing for a
// special one with skip_special), else the model's token; an unknown id is an error.
Result<std::optional<std::string_view>> Tokenizer::decode_text(TokenId id, bool skip_special) const {
  if (const AddedToken* a = added_token(id)) {
    if (skip_special && a->special) return std::optional<std::string_view>();
    return std::optional<std::string_view>(a->content);
  }
  std::string_view text = model_->token_text(id);
  if (text.empty()) return make_error(Errc::out_of_range, "token id {} is not in the vocabulary (size {})", id, vocab_size());
  return std::optional<std::string_view>(text);
}

// HF's decoder chain of SentencePiece-style tokenizers: Replace ▁ → ' ', ByteFallback
// (a run of <0xXX> tokens becomes its bytes when they are UTF-8, else one U+FFFD per
// byte), Fuse, Strip one leading space.
Status Tokenizer::decode_metaspace(const TokenId* ids, std::size_t n, std::string& out, bool skip_special) const {
  std::size_t start = out.size();
  std::string bytes;
  auto flush = [&] {
    if (bytes.empty()) return;
    if (text::is_valid_utf8(bytes)) out += bytes;
    else
      for (std::size_t k = 0; k < bytes.size(); ++k) out += "\xEF\xBF\xBD";
    bytes.clear();
  };
  for (std::size_t k = 0; k < n; ++k) {
    LMP_ASSIGN(std::optional<std::string_view> got, decode_text(ids[k], skip_special));
    if (!got) continue;
    std::string_view text = *got;
    auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
    if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>' && hex(text[3]) && hex(text[4])) {
      bytes += static_cast<char>(std::stoi(std::string(text.substr(3, 2)), nullptr, 16));
      continue;
    }
    flush();
    for (std::size_t i = 0; i < text.size();) {
      if (text.compare(i, kMetaspace.size(), kMetaspace) == 0) {
        out += ' ';
        i += kMetaspace.size();
      } else {
        out += text[i++];
      }
    }
  }
  flush();
  if (out.size() > start && out[start] == ' ') out.erase(start, 1);
  return {};
}

Status Tokenizer::decode(const TokenId* ids, std::size_t n, std::string& out, bool skip_special) const {
  if (decoder_ == Decoder::sentencepiece && model_->type() == ModelType::sentencepiece)
    return static_cast<const SentencePieceModel&>(*model_).decode(ids, n, out);
  if (decoder_ == Decoder::metaspace) return decode_metaspace(ids, n, out, skip_special);
  std::string_view prefix;
  if (decoder_ == Decoder::wordpiece && model_->type() == ModelType::wordpiece)
    prefix = static_cast<const WordPieceModel&>(*model_).options().prefix;
  std::string tok;
  std::size_t emitted = 0;
  for (std::size_t k = 0; k < n; ++k) {
    LMP_ASSIGN(std::optional<std::string_view> got, decode_text(ids[k], skip_special));
    if (!got) continue;
    std::string_view text = *got;
    if (decoder_ == Decoder::byte_level) {
      out += text;
      continue;
    }
    // WordPiece: a continuation piece is glued to the previous one, a word gets a space.
    tok.clear();
    if (emitted > 0) {
      if (!prefix.empty() && text.substr(0, prefix.size()) == prefix) text.remove_prefix(prefix.size());
      else tok += ' ';
    }
    tok += text;
    wordpiece_cleanup(tok);
    out += tok;
    ++emitted;
  }
  return {};
}

}  // namespace lmp::tok
