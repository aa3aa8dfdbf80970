#include "lmpipe/tok/stats.h"

#include <algorithm>

#include "lmpipe/core/json.h"
#include "lmpipe/text/unicode.h"
#include "lmpipe/tok/byte_level.h"

namespace lmp::tok {

namespace {
constexpr std::size_t kMaxTracked = 1u << 20;  // distinct fragmented words kept
}

void EncodeStats::add_line(std::string_view text, std::size_t n_tokens, const std::vector<PieceCount>& pieces) {
  ++lines;
  bytes += text.size();
  chars += text::count_chars(text);
  tokens += n_tokens;
  for (const auto& p : pieces) {
    std::string_view w = p.text;
    const auto* s = reinterpret_cast<const unsigned char*>(w.data());
    std::size_t i = 0;
    bool has_word_char = false;
    while (i < w.size()) {
      auto c = text::decode_utf8(s, w.size(), i);
      if (!(text::char_class(c.cp) & text::kSpace)) break;
      i += c.len;
    }
    w.remove_prefix(i);
    for (std::size_t k = 0; k < w.size();) {
      auto c = text::decode_utf8(reinterpret_cast<const unsigned char*>(w.data()), w.size(), k);
      if (text::char_class(c.cp) & (text::kLetter | text::kNumber)) {
        has_word_char = true;
        break;
      }
      k += c.len;
    }
    if (!has_word_char) continue;
    ++words;
    word_tokens += p.n_tokens;
    if (p.n_tokens >= 3) {  // keyed by the whole pre-token, so its split can be shown
      auto it = frag_.find(std::string(p.text));
      if (it != frag_.end()) ++it->second.count;
      else if (frag_.size() < kMaxTracked) frag_.emplace(std::string(p.text), WordInfo{1, p.n_tokens});
    }
  }
}

void EncodeStats::merge(const EncodeStats& o) {
  lines += o.lines;
  bytes += o.bytes;
  chars += o.chars;
  tokens += o.tokens;
  words += o.words;
  word_tokens += o.word_tokens;
  dropped_bytes += o.dropped_bytes;
  unknown_words += o.unknown_words;
  for (const auto& [w, i] : o.frag_) {
    auto it = frag_.find(w);
    if (it != frag_.end()) it->second.count += i.count;
    else if (frag_.size() < kMaxTracked) frag_.emplace(w, i);
  }
}

std::vector<EncodeStats::Frag> EncodeStats::most_fragmented(std::size_t top) const {
  std::vector<Frag> v;
  v.reserve(frag_.size());
  for (const auto& [w, i] : frag_) v.push_back({w, i});
  auto better = [](const Frag& a, const Frag& b) {
    if (a.info.n_tokens != b.info.n_tokens) return a.info.n_tokens > b.info.n_tokens;
    if (a.info.count != b.info.count) return a.info.count > b.info.count;
    return a.word < b.word;
  };
  if (v.size() > top) {
    std::partial_sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(top), v.end(), better);
    v.resize(top);
  } else {
    std::sort(v.begin(), v.end(), better);
  }
  return v;
}

namespace {
double ratio(std::uint64_t a, std::uint64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }

std::string printable(std::string_view w) {
  std::string o;
  for (char c : w) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) o += fmt::format("\\x{:02x}", u);
    else o += c;
  }
  return o;
}

std::string_view trim(std::string_view w) {
  while (!w.empty() && (w.front() == ' ' || w.front() == '\t')) w.remove_prefix(1);
  return w;
}

std::string split_pieces(const Tokenizer& t, std::string_view w) {
  Session s(t);
  std::vector<TokenId> ids;
  // SentencePiece puts its own ▁ in front: the word's leading space would double it.
  if (t.model().type() == ModelType::sentencepiece)
    while (!w.empty() && w.front() == ' ') w.remove_prefix(1);
  t.encode(w, ids, s, false);
  std::string o;
  for (TokenId id : ids) {
    if (!o.empty()) o += " | ";
    o += t.token_string(id);  // as --pieces shows them (Ġ = space in byte-level BPE)
  }
  return o;
}
}  // namespace

std::string EncodeStats::report(const Tokenizer& t, std::size_t top) const {
  std::string o;
  o += fmt::format("lines               {}\n", lines);
  o += fmt::format("bytes               {}\n", bytes);
  o += fmt::format("characters          {}\n", chars);
  o += fmt::format("tokens              {}\n", tokens);
  o += fmt::format("bytes per token     {:.3f}\n", ratio(bytes, tokens));
  o += fmt::format("chars per token     {:.3f}\n", ratio(chars, tokens));
  o += fmt::format("words               {}\n", words);
  o += fmt::format("tokens per word     {:.3f}  (fertility)\n", ratio(word_tokens, words));
  if (dropped_bytes) o += fmt::format("dropped bytes       {}  (no token in the vocabulary)\n", dropped_bytes);
  if (unknown_words)
    o += fmt::format("unknown tokens      {}  ({:.4f} per word)\n", unknown_words, ratio(unknown_words, words));
  auto frag = most_fragmented(top);
  if (!frag.empty()) {
    o += fmt::format("most fragmented words (tokens, occurrences, word: pieces):\n");
    for (const auto& f : frag)
      o += fmt::format("  {:3} {:8}  {}: {}\n", f.info.n_tokens, f.info.count, printable(trim(f.word)),
                       split_pieces(t, f.word));
  }
  return o;
}

std::string EncodeStats::report_json(const Tokenizer& t, std::size_t top) const {
  std::string o = fmt::format(
      "{{\"lines\":{},\"bytes\":{},\"characters\":{},\"tokens\":{},\"bytes_per_token\":{:.6f},"
      "\"chars_per_token\":{:.6f},\"words\":{},\"tokens_per_word\":{:.6f},\"dropped_bytes\":{},"
      "\"unknown_words\":{},\"most_fragmented\":[",
      lines, bytes, chars, tokens, ratio(bytes, tokens), ratio(chars, tokens), words, ratio(word_tokens, words),
      dropped_bytes, unknown_words);
  auto frag = most_fragmented(top);
  for (std::size_t i = 0; i < frag.size(); ++i) {
    if (i) o += ",";
    o += "{\"word\":";
    json::append_string(o, trim(frag[i].word));
    o += fmt::format(",\"tokens\":{},\"count\":{},\"pieces\":", frag[i].info.n_tokens, frag[i].info.count);
    json::append_string(o, split_pieces(t, frag[i].word));
    o += "}";
  }
  o += "]}\n";
  return o;
}

}  // namespace lmp::tok
