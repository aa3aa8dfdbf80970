#include "lmpipe/tok/wordpiece.h"

#include <algorithm>

#include "lmpipe/text/unicode.h"

namespace lmp::tok {

Result<WordPieceModel> WordPieceModel::build(std::vector<std::string> vocab, WordPieceOptions opts) {
  WordPieceModel m;
  m.tokens_ = std::move(vocab);
  m.opts_ = std::move(opts);
  m.ids_.reserve(m.tokens_.size());
  for (std::size_t i = 0; i < m.tokens_.size(); ++i) {
    const std::string& t = m.tokens_[i];
    if (t.empty()) continue;
    m.ids_.insert(t, static_cast<TokenId>(i));
    std::size_t n = t.size();
    if (!m.opts_.prefix.empty() && t.compare(0, m.opts_.prefix.size(), m.opts_.prefix) == 0 && n > m.opts_.prefix.size())
      n -= m.opts_.prefix.size();
    m.max_piece_bytes_ = std::max(m.max_piece_bytes_, n);
  }
  m.unk_id_ = m.ids_.find(m.opts_.unk_token);
  if (m.unk_id_ < 0)
    return make_error(Errc::parse, "the unknown token '{}' is not in the vocabulary ({} tokens)", m.opts_.unk_token,
                      m.tokens_.size());
  return m;
}

namespace {
// Start of the UTF-8 character that ends just before byte `end` (end > 0).
std::size_t prev_char(std::string_view s, std::size_t end) {
  std::size_t k = end - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return k;
}
// `pos` moved back to a character boundary (not past `floor`).
std::size_t char_floor(std::string_view s, std::size_t pos, std::size_t floor) {
  while (pos > floor && pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}
}  // namespace

void WordPieceModel::encode(std::string_view word, std::vector<TokenId>& out, ModelScratch& s) const {
  if (word.empty()) return;
  if (text::count_chars(word) > opts_.max_chars) {
    out.push_back(unk_id_);
    ++s.unknown;
    return;
  }
  const std::size_t before = out.size();
  std::size_t start = 0;
  while (start < word.size()) {
    // No piece is longer than max_piece_bytes_: start the search there.
    std::size_t end = word.size();
    if (end - start > max_piece_bytes_) end = char_floor(word, start + max_piece_bytes_, start);
    TokenId found = -1;
    while (end > start) {
      std::string_view sub = word.substr(start, end - start);
      if (start == 0) {
        found = ids_.find(sub);
      } else {
        s.buf.assign(opts_.prefix);
        s.buf.append(sub);
        found = ids_.find(s.buf);
      }
      if (found >= 0) break;
      end = prev_char(word, end);
      if (end <= start) break;
    }
    if (found < 0) {  // a position nothing matches: the whole word is unknown
      out.resize(before);
      out.push_back(unk_id_);
      ++s.unknown;
      return;
    }
    out.push_back(found);
    start = end;
  }
}

}  // namespace lmp::tok
