#include "lmpipe/tok/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "lmpipe/text/unicode.h"
#include "lmpipe/tok/byte_level.h"
#include "lmpipe/tok/sentencepiece.h"
#include "lmpipe/tok/wordpiece.h"
#include "best_combinations.h"

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
      pre_shortcut_(spec.pre_shortcut),
      norm_(spec.norm),
      bert_(spec.bert),
      chain_(std::move(spec.normalizer)),
      prefix_space_(spec.prefix_space),
      metaspace_(spec.metaspace),
      metaspace_if_missing_(spec.metaspace_if_missing),
      metaspace_first_(spec.metaspace_first),
      metaspace_never_(spec.metaspace_never),
      metaspace_strip_(spec.metaspace_strip),
      charsmap_(std::move(spec.charsmap)),
      squeeze_spaces_(spec.squeeze_spaces),
      decoder_(spec.decoder),
      decode_steps_(std::move(spec.decode_steps)),
      template_prefix_(std::move(spec.template_prefix)),
      template_suffix_(std::move(spec.template_suffix)),
      trim_offsets_(spec.trim_offsets),
      trim_prefix_space_(spec.trim_prefix_space),
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
  // HF matches a normalized: true token in normalized text, by its content normalized the
  // same way. That differs from matching the input only when a normalizer runs: for a
  // SentencePiece-style file, one before the Metaspace pre-tokenizer, or the Prepend "▁"
  // and Replace " " → "▁" normalizers themselves (a token's content then starts with ▁).
  const bool split_normalized = metaspace_ ? !metaspace_if_missing_ || chain_ || charsmap_ || squeeze_spaces_
                                           : bert_ || chain_ || norm_ != Normalization::none;
  std::string norm;
  for (const auto& a : added_) {
    if (a.id >= 0 && static_cast<std::size_t>(a.id) < n && !by_id_[static_cast<std::size_t>(a.id)])
      by_id_[static_cast<std::size_t>(a.id)] = &a;
    if (split_normalized && a.normalized) {
      run_normalizer(a.content, norm, nullptr);
      norm_added_.list.push_back({norm, &a});
    } else {
      raw_added_.list.push_back({a.content, &a});
    }
  }
  for (AddedSet* set : {&raw_added_, &norm_added_}) {
    std::stable_sort(set->list.begin(), set->list.end(),
                     [](const AddedMatch& a, const AddedMatch& b) { return a.content.size() > b.content.size(); });
    for (const AddedMatch& m : set->list)
      if (!m.content.empty()) set->first[static_cast<unsigned char>(m.content[0])] = true;
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

const Tokenizer::AddedMatch* Tokenizer::match_added(const AddedSet& set, std::string_view text, std::size_t pos) {
  for (const AddedMatch& m : set.list) {
    const std::string& c = m.content;
    if (c.empty() || text.size() - pos < c.size()) continue;
    if (text.compare(pos, c.size(), c) != 0) continue;
    if (m.token->single_word) {
      const auto* p = reinterpret_cast<const unsigned char*>(text.data());
      if (pos > 0) {
        std::size_t k = pos - 1;
        while (k > 0 && (p[k] & 0xC0) == 0x80) --k;
        if (is_word_byte_char(text::decode_utf8(p, text.size(), k).cp)) continue;
      }
      std::size_t e = pos + c.size();
      if (e < text.size() && is_word_byte_char(text::decode_utf8(p, text.size(), e).cp)) continue;
    }
    return &m;
  }
  return nullptr;
}

template <class OnSegment, class OnAdded>
void Tokenizer::split_added(const AddedSet& set, std::string_view text, OnSegment&& segment, OnAdded&& added) const {
  if (set.list.empty()) {
    segment(std::size_t{0}, text.size());
    return;
  }
  std::size_t seg = 0;
  for (std::size_t i = 0; i < text.size();) {
    if (!set.first[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const AddedMatch* m = match_added(set, text, i);
    if (!m) {
      ++i;
      continue;
    }
    // lstrip and rstrip take the white space beside the token into it (its offsets too, as HF's).
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    auto space_at = [&](std::size_t k) {
      auto c = text::decode_utf8(p, text.size(), k);
      return c.cp < text::kInvalidBase && (text::char_class(c.cp) & text::kSpace) != 0 ? c.len : 0;
    };
    std::size_t begin = i;
    if (m->token->lstrip)
      while (begin > seg) {
        std::size_t k = begin - 1;
        while (k > seg && (p[k] & 0xC0) == 0x80) --k;
        if (!space_at(k)) break;
        begin = k;
      }
    i += m->content.size();
    if (m->token->rstrip)
      for (std::size_t n; i < text.size() && (n = space_at(i)) != 0;) i += n;
    segment(seg, begin);
    added(*m->token, begin, i - begin);
    seg = i;
  }
  segment(seg, text.size());
}

template <class OnSegment, class OnAdded>
void Tokenizer::for_each_segment(std::string_view text, Session& s, bool parse_special, OnSegment&& segment,
                                 OnAdded&& added, std::vector<text::SourceSpan>* whole_src) const {
  static const AddedSet kNone;
  split_added(
      parse_special ? raw_added_ : kNone, text,
      [&](std::size_t b, std::size_t e) {
        std::string_view seg = text.substr(b, e - b);
        if (!parse_special || norm_added_.list.empty()) {
          segment(Part{seg, b, b, b == 0, false});
          return;
        }
        // Normalized whole, then split at the normalized added tokens, as HF does.
        run_normalizer(seg, s.whole_, whole_src);
        const std::string_view t = s.whole_;
        split_added(
            norm_added_, t,
            [&](std::size_t nb, std::size_t ne) { segment(Part{t.substr(nb, ne - nb), b, nb, b == 0 && nb == 0, true}); },
            [&](const AddedToken& m, std::size_t at, std::size_t len) { added(m, Part{t.substr(at, len), b, at, false, true}); });
      },
      [&](const AddedToken& m, std::size_t at, std::size_t len) { added(m, Part{text.substr(at, len), at, at, at == 0, false}); });
}

void Tokenizer::encode(std::string_view text, std::vector<TokenId>& out, Session& s,
                       bool parse_special) const {
  if (s.pieces) s.words_.clear();
  for_each_segment(
      text, s, parse_special, [&](const Part& p) { encode_segment(p.text, out, s, p.at_start, p.normalized); },
      [&](const AddedToken& m, const Part& p) {
        out.push_back(m.id);
        if (s.pieces) s.pieces->push_back({s.words_.emplace_back(p.text), 1});
      });
}

bool Tokenizer::metaspace_prepends(std::string_view in, bool at_start) const {
  // (Nothing is prepended to text the normalizers emptied, as HF's prepend does.)
  if (in.empty() || metaspace_never_ || (metaspace_first_ && !at_start)) return false;
  // (HF's Metaspace prepends only when the text does not start with ▁ after replacing.)
  bool starts = !in.empty() && (in[0] == ' ' || in.substr(0, kMetaspace.size()) == kMetaspace);
  return !(metaspace_if_missing_ && starts);
}

void Tokenizer::split_words(std::string_view t, Session& s) const {
  s.ranges_.clear();
  if (pre_ && !(pre_shortcut_ && s.scratch_.bpe.sampling.rng)) pre_->split(t, s.ranges_);
  else s.ranges_.push_back({0, static_cast<std::uint32_t>(t.size())});
}

void Tokenizer::encode_segment(std::string_view seg, std::vector<TokenId>& out, Session& s, bool at_start,
                               bool normalized) const {
  if (seg.empty()) return;
  std::string_view t = normalize_segment(seg, at_start, s, nullptr, normalized);
  split_words(t, s);
  for (const Range& r : s.ranges_) {
    std::string_view piece = t.substr(r.begin, r.end - r.begin);
    std::size_t before = out.size();
    encode_piece(piece, out, s);
    if (!s.pieces) continue;
    if (pre_ || model_->type() != ModelType::sentencepiece) {
      // (Normalized text lives in the Session until the next segment: the record keeps a copy.)
      if (normalized || t.data() != seg.data()) piece = s.words_.emplace_back(piece);
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
  if (piece.size() > Session::kCacheMaxPiece || piece.size() < 2 || (bpe_ && bpe_->segments(piece)) ||
      s.scratch_.bpe.sampling.rng) {
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
  std::uint64_t dropped = s.scratch_.bpe.dropped_bytes, unknown = s.unknown_words();
  if (bpe_) bpe_->encode(piece, out, s.scratch_.bpe);
  else model_->encode(piece, out, s.scratch_);
  // Keep the drop and unknown counts exact: don't cache what changed them.
  std::size_t n = out.size() - before;
  if (s.scratch_.bpe.dropped_bytes != dropped || s.unknown_words() != unknown || n > Session::kCacheMaxIds) return;
  std::memcpy(e.key, key, sizeof key);
  e.len = static_cast<std::uint8_t>(piece.size());
  e.n = static_cast<std::uint8_t>(n);
  std::copy(out.begin() + static_cast<std::ptrdiff_t>(before), out.end(), e.ids);
}

// ---- The n best segmentations ------------------------------------------------------------

using Segmentation = SentencePieceModel::Segmentation;

Status Tokenizer::nbest(std::string_view text, std::size_t n, std::vector<Segmentation>& out, Session& s,
                        bool parse_special) const {
  out.clear();
  const auto* sp = model_->type() == ModelType::sentencepiece ? static_cast<const SentencePieceModel*>(model_.get())
                                                              : nullptr;
  if (!sp || sp->kind() != SentencePieceModel::Kind::unigram)
    return make_error(Errc::unsupported, "the n best segmentations need a unigram model");
  if (n == 0) return make_error(Errc::invalid_argument, "the n best segmentations: n must be at least 1");
  // The parts of the text in order, each with its alternatives, best first: a word's n
  // best, or an added token (one).
  std::vector<std::vector<Segmentation>> parts;
  auto words = [&](const Part& p) {
    if (p.text.empty()) return;
    std::string_view t = normalize_segment(p.text, p.at_start, s, nullptr, p.normalized);
    split_words(t, s);
    for (const Range& r : s.ranges_) {
      sp->nbest(t.substr(r.begin, r.end - r.begin), n, parts.emplace_back(), s.scratch_);
      if (parts.back().empty()) parts.pop_back();
    }
  };
  for_each_segment(text, s, parse_special, words,
                   [&](const AddedToken& m, const Part&) { parts.emplace_back().push_back({0.0, {m.id}}); });
  // Combine part by part, then each combination's ids in order.
  BestCombinations best;
  best.reset(n);
  std::vector<double> part_scores;
  for (const auto& part : parts) {
    part_scores.clear();
    for (const auto& x : part) part_scores.push_back(x.score);
    best.add(part_scores.data(), part_scores.size());
  }
  std::vector<std::uint32_t> alt;
  for (std::size_t r = 0; r < best.scores().size(); ++r) {
    best.choices(r, alt);
    Segmentation& seg = out.emplace_back();
    seg.score = best.scores()[r];
    for (std::size_t p = 0; p < parts.size(); ++p) {
      const auto& ids = parts[p][alt[p]].ids;
      seg.ids.insert(seg.ids.end(), ids.begin(), ids.end());
    }
  }
  return {};
}

// ---- Offsets ---------------------------------------------------------------------------

namespace {

using text::SourceSpan;

void identity_sources(std::size_t n, std::vector<SourceSpan>& src) {
  src.resize(n);
  for (std::size_t k = 0; k < n; ++k) src[k] = {static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k + 1)};
}

// The source of the bytes [b, e) of a text whose bytes came from `src`; an empty span
// sits where the byte at b came from (or after the last one).
Range through(const std::vector<SourceSpan>& src, Range r) {
  SourceSpan s = text::source_of(src, r.begin, r.end);
  return {s.begin, s.end};
}

// Bytes of the character at the start of `s` (1 for an invalid byte, 0 for empty).
std::size_t char_bytes(std::string_view s) {
  if (s.empty()) return 0;
  return text::decode_utf8(reinterpret_cast<const unsigned char*>(s.data()), s.size(), 0).len;
}

// The source of the first character of `in` (whose bytes came from `m`): where text put in
// before it (a ▁, a prefix space) comes from.
SourceSpan first_char_source(const std::vector<SourceSpan>& m, std::string_view in) {
  std::size_t n = std::max<std::size_t>(1, char_bytes(in));
  return {m.front().begin, m[std::min(n, m.size()) - 1].end};
}

// SentencePiece's whitespace: `in` with every space a ▁, after one ▁ in front with
// `prepend`; with `src`, the source of each byte (from `in_src`, the sources of `in`).
void metaspace_text(std::string_view in, const std::vector<SourceSpan>& in_src, bool prepend, std::string& out,
                    std::vector<SourceSpan>* src) {
  out.assign(prepend ? kMetaspace : "");
  if (src) src->assign(out.size(), in.empty() ? SourceSpan{0, 0} : first_char_source(in_src, in));
  for (std::size_t k = 0; k < in.size(); ++k) {
    if (in[k] == ' ') out += kMetaspace;
    else out += in[k];
    if (src) src->resize(out.size(), in_src[k]);
  }
}

// The value of a byte-fallback token's text "<0xXX>", or -1.
int byte_token_value(std::string_view t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

void Tokenizer::token_spans(std::string_view piece, const TokenId* ids, std::size_t n, std::vector<Range>& spans) const {
  // What a token stands for in the normalized text: its text, one byte, or (unknown)
  // whatever lies before the next token.
  struct Surface {
    std::string_view text;
    int byte = -1;
    bool unknown = false;
  };
  std::size_t pos = 0;  // where the next token's surface is looked for
  auto surface = [&](std::size_t k) -> Surface {
    TokenId id = ids[k];
    if (id < 0 || static_cast<std::size_t>(id) >= model_->vocab_size()) return {{}, -1, true};
    std::string_view t = model_->token_text(id);
    switch (model_->type()) {
      case ModelType::bpe:
        if (!bpe_->char_level()) {  // (a word's last token carries the end-of-word suffix, not in the text)
          const std::string& suffix = bpe_->end_of_word_suffix();
          if (!suffix.empty() && t.size() >= suffix.size() && t.substr(t.size() - suffix.size()) == suffix)
            t.remove_suffix(suffix.size());
          return {t};
        }
        if (id == bpe_->unk_id()) return {{}, -1, true};
        if (bpe_->byte_fallback()) {
          int b = byte_token_value(t);
          if (b >= 0) return {{}, b};
        }
        {  // (a word's tokens but the first carry the continuing prefix, its last the suffix)
          const std::string& pre = bpe_->continuing_subword_prefix();
          const std::string& suf = bpe_->end_of_word_suffix();
          if (k > 0 && !pre.empty() && t.substr(0, pre.size()) == pre) t.remove_prefix(pre.size());
          if (k + 1 == n && !suf.empty() && t.size() >= suf.size() && t.substr(t.size() - suf.size()) == suf)
            t.remove_suffix(suf.size());
        }
        return {t};
      case ModelType::wordpiece: {
        const auto& wp = static_cast<const WordPieceModel&>(*model_);
        if (id == wp.unk_id()) return {{}, -1, true};
        const std::string& pre = wp.options().prefix;
        if (k > 0 && !pre.empty() && t.substr(0, pre.size()) == pre) t.remove_prefix(pre.size());
        return {t};
      }
      case ModelType::sentencepiece: {
        const auto& sp = static_cast<const SentencePieceModel&>(*model_);
        SpPieceType type = sp.piece_type(id);
        if (type == SpPieceType::unknown) return {{}, -1, true};
        if (type == SpPieceType::byte) return {{}, byte_token_value(t)};
        // HF's Unigram types no piece: with byte fallback, "<0xXX>" stands for its byte
        // unless the text spells it out.
        if (sp.hf() && sp.byte_fallback() && byte_token_value(t) >= 0 && piece.substr(pos, t.size()) != t)
          return {{}, byte_token_value(t)};
        return {t};
      }
    }
    return {t};
  };
  // Where surface `su` next occurs at or after `from`, and its length.
  auto find = [&](const Surface& su, std::size_t from) -> std::pair<std::size_t, std::size_t> {
    if (su.byte >= 0) {
      std::size_t q = piece.find(static_cast<char>(su.byte), from);
      return {q, 1};
    }
    if (su.unknown || su.text.empty()) return {std::string_view::npos, 0};
    return {piece.find(su.text, from), su.text.size()};
  };
  // HF's Unigram gives every byte token of a fused run of unknown characters the whole
  // run's span: `run` is where the current run of byte tokens starts in `spans`.
  const auto* sp = model_->type() == ModelType::sentencepiece ? static_cast<const SentencePieceModel*>(model_.get())
                                                               : nullptr;
  const bool byte_runs = sp && sp->hf() && sp->byte_fallback();
  constexpr std::size_t kNoRun = static_cast<std::size_t>(-1);
  std::size_t run = kNoRun;
  for (std::size_t k = 0; k < n; ++k) {
    Surface su = surface(k);
    if (byte_runs && su.byte >= 0) {
      auto [q, len] = find(su, pos);
      if (q != std::string_view::npos) {
        if (run == kNoRun || q != pos) run = spans.size();
        const std::uint32_t begin = run < spans.size() ? spans[run].begin : static_cast<std::uint32_t>(q);
        pos = q + len;
        spans.push_back({begin, static_cast<std::uint32_t>(pos)});
        for (std::size_t j = run; j < spans.size(); ++j) spans[j].end = static_cast<std::uint32_t>(pos);
        continue;
      }
    }
    run = kNoRun;
    if (!su.unknown) {
      auto [q, len] = find(su, pos);
      if (q == std::string_view::npos) {  // not in the text (cannot happen for a model's own output)
        spans.push_back({static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(pos)});
        continue;
      }
      spans.push_back({static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q + len)});
      pos = q + len;
      continue;
    }
    // Unknown: up to where the next token is found (at least one character), or the end.
    std::size_t first = std::min(piece.size(), pos + std::max<std::size_t>(1, char_bytes(piece.substr(pos))));
    std::size_t end = piece.size();
    if (k + 1 < n) {
      Surface next = surface(k + 1);
      if (next.unknown) end = first;
      else if (auto q = find(next, first).first; q != std::string_view::npos) end = q;
    }
    spans.push_back({static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(end)});
    pos = end;
  }
}

std::string_view Tokenizer::sp_normalizers(std::string_view in, std::string& buf, std::vector<SourceSpan>* src) const {
  if (chain_) {
    chain_->apply(in, buf, src);
    return buf;
  }
  if (charsmap_) {
    charsmap_->apply_charsmap(in, buf, src);
  } else if (squeeze_spaces_) {
    buf.assign(in);
    if (src) identity_sources(in.size(), *src);
  } else {
    if (src) identity_sources(in.size(), *src);
    return in;
  }
  if (squeeze_spaces_) {
    // Drop the spaces at the start, keep one of each run (its source the run's last
    // space's, as HF aligns a Replace's result with the end of its match), drop the end's.
    std::size_t w = 0;
    for (std::size_t r = 0; r < buf.size(); ++r) {
      if (buf[r] == ' ' && w == 0) continue;
      if (buf[r] == ' ' && buf[w - 1] == ' ') {
        if (src) (*src)[w - 1] = (*src)[r];
        continue;
      }
      buf[w] = buf[r];
      if (src) (*src)[w] = (*src)[r];
      ++w;
    }
    while (w > 0 && buf[w - 1] == ' ') --w;
    buf.resize(w);
    if (src) src->resize(w);
  }
  return buf;
}

void Tokenizer::run_normalizer(std::string_view in, std::string& out, std::vector<SourceSpan>* src) const {
  if (metaspace_) {
    std::string mapped;
    std::vector<SourceSpan> mapped_src;
    std::string_view x = sp_normalizers(in, mapped, src ? &mapped_src : nullptr);
    if (metaspace_if_missing_) {  // (the ▁ is the Metaspace pre-tokenizer's, not a normalizer's)
      out.assign(x);
      if (src) *src = std::move(mapped_src);
      return;
    }
    metaspace_text(x, mapped_src, !x.empty(), out, src);
    return;
  }
  if (bert_) {
    if (src) text::bert_normalize_aligned(in, *bert_, out, *src);
    else text::bert_normalize(in, *bert_, out);
  } else if (chain_) {
    chain_->apply(in, out, src);
  } else if (norm_ == Normalization::none) {
    out.assign(in);
    if (src) identity_sources(in.size(), *src);
  } else {
    auto form = norm_ == Normalization::nfc ? text::NormalForm::nfc : text::NormalForm::nfkc;
    if (src) text::normalize_aligned(in, form, out, *src);
    else out = text::normalize(in, form);
  }
}

std::string_view Tokenizer::normalize_segment(std::string_view seg, bool at_start, Session& s,
                                             std::vector<SourceSpan>* src, bool normalized) const {
  if (bert_ && !normalized) {
    run_normalizer(seg, s.norm_, src);
    return s.norm_;
  }
  if (metaspace_) {
    std::string_view in = seg;
    auto& in_src = s.piece_src_;
    if (normalized && !metaspace_if_missing_) {  // (the normalizers put the ▁ in already)
      if (src) identity_sources(seg.size(), *src);
      return seg;
    }
    // HF's normalizers (not again on normalized text), then the Metaspace pre-tokenizer's ▁
    if (!normalized) in = sp_normalizers(seg, s.mapped_, src ? &in_src : nullptr);
    else if (src) identity_sources(seg.size(), in_src);
    metaspace_text(in, in_src, metaspace_prepends(in, at_start), s.norm_, src);
    return s.norm_;
  }
  const bool normalizes = !normalized && (chain_ || norm_ != Normalization::none);
  if (normalizes || (prefix_space_ && seg[0] != ' ')) {
    if (normalizes) {
      run_normalizer(seg, s.norm_, src);
    } else {
      s.norm_.assign(seg);
      if (src) identity_sources(seg.size(), *src);
    }
    if (prefix_space_ && (s.norm_.empty() || s.norm_[0] != ' ')) {
      s.norm_.insert(s.norm_.begin(), ' ');
      if (src)
        src->insert(src->begin(), src->empty() ? SourceSpan{0, 0} : first_char_source(*src, s.norm_.substr(1)));
    }
    return s.norm_;
  }
  if (src) identity_sources(seg.size(), *src);
  return seg;
}

void Tokenizer::segment_with_offsets(std::string_view seg, std::uint32_t base, bool at_start, std::vector<TokenId>& out,
                                     std::vector<Range>& spans, Session& s,
                                     const std::vector<SourceSpan>* outer) const {
  if (seg.empty()) return;
  // The normalized segment and the source in `seg` of each of its bytes.
  auto& src = s.src_;
  std::string_view t = normalize_segment(seg, at_start, s, &src, outer != nullptr);
  split_words(t, s);
  const auto* sp = model_->type() == ModelType::sentencepiece ? static_cast<const SentencePieceModel*>(model_.get())
                                                               : nullptr;
  for (const Range& r : s.ranges_) {
    std::string_view piece = t.substr(r.begin, r.end - r.begin);
    std::size_t before = out.size();
    s.token_spans_.clear();
    if (sp && !sp->hf()) {  // the model normalizes again: through both sources
      sp->normalizer().normalize(piece, s.piece_norm_, &s.piece_src_);
      sp->encode_normalized(s.piece_norm_, out, s.scratch_);
      token_spans(s.piece_norm_, out.data() + before, out.size() - before, s.token_spans_);
      // SentencePiece's own offsets: a token runs from where its first normalized byte's
      // character starts to where the next token's does (the end of the last character
      // for the last), so that the spans tile the text as spm's do: a dummy prefix ▁ on its
      // own covers nothing, the byte pieces of a character all start at it and the last
      // covers it, and removed whitespace belongs to the token before.
      const auto& n = s.piece_src_;
      auto n2o = [&](std::uint32_t i) -> std::uint32_t {
        if (i < n.size()) return n[i].begin;
        return n.empty() ? static_cast<std::uint32_t>(piece.size()) : n.back().end;
      };
      for (Range& x : s.token_spans_) x = {n2o(x.begin), x.end > x.begin ? n2o(x.end) : n2o(x.begin)};
    } else {
      if (bpe_) bpe_->encode(piece, out, s.scratch_.bpe);
      else model_->encode(piece, out, s.scratch_);
      token_spans(piece, out.data() + before, out.size() - before, s.token_spans_);
    }
    for (Range x : s.token_spans_) {
      Range o = through(src, {x.begin + r.begin, x.end + r.begin});
      if (outer) o = through(*outer, o);
      spans.push_back({o.begin + base, o.end + base});
    }
  }
}

void Tokenizer::encode_with_offsets(std::string_view text, std::vector<TokenId>& out, std::vector<Range>& spans,
                                    Session& s, bool parse_special) const {
  const std::size_t first = spans.size();
  // A part of normalized text keeps its bytes' sources in the raw segment (s.whole_src_,
  // relative to the segment's start).
  auto sources = [&](const Part& p) {
    s.part_src_.assign(s.whole_src_.begin() + static_cast<std::ptrdiff_t>(p.at),
                       s.whole_src_.begin() + static_cast<std::ptrdiff_t>(p.at + p.text.size()));
    return &s.part_src_;
  };
  for_each_segment(
      text, s, parse_special,
      [&](const Part& p) {
        segment_with_offsets(p.text, static_cast<std::uint32_t>(p.raw_begin), p.at_start, out, spans, s,
                             p.normalized ? sources(p) : nullptr);
      },
      [&](const AddedToken& m, const Part& p) {
        out.push_back(m.id);
        Range o{static_cast<std::uint32_t>(p.at), static_cast<std::uint32_t>(p.at + p.text.size())};
        if (p.normalized) o = through(s.whole_src_, o);
        const auto base = static_cast<std::uint32_t>(p.normalized ? p.raw_begin : 0);
        spans.push_back({o.begin + base, o.end + base});
      },
      &s.whole_src_);
  if (!trim_offsets_) return;
  // HF's trim_offsets: as many characters of the text as the token's string starts or
  // ends with spaces (Ġ, or any white space) leave its span, each end counted alone.
  auto is_space = [](std::uint32_t cp) {
    return cp == 0x120 || (cp < text::kInvalidBase && (text::char_class(cp) & text::kSpace) != 0);
  };
  const auto* tp = reinterpret_cast<const unsigned char*>(text.data());
  std::vector<std::uint32_t> cps;
  for (std::size_t k = first; k < spans.size(); ++k) {
    std::string t = token_string(out[k]);
    const auto* p = reinterpret_cast<const unsigned char*>(t.data());
    cps.clear();
    for (std::size_t i = 0; i < t.size();) {
      auto c = text::decode_utf8(p, t.size(), i);
      cps.push_back(c.cp);
      i += c.len;
    }
    std::size_t lead = 0, trail = 0;
    while (lead < cps.size() && is_space(cps[lead])) ++lead;
    while (trail < cps.size() && is_space(cps[cps.size() - 1 - trail])) ++trail;
    Range& r = spans[k];
    bool is_first = k == first || r.begin == 0;
    if (is_first && trim_prefix_space_ && lead == 1) lead = 0;  // the space add_prefix_space put there
    for (; lead > 0 && r.begin < r.end; --lead) r.begin += text::decode_utf8(tp, text.size(), r.begin).len;
    r.begin = std::min(r.begin, r.end);
    for (; trail > 0 && r.end > r.begin; --trail) {  // back one character
      --r.end;
      while (r.end > r.begin && (tp[r.end] & 0xC0) == 0x80) --r.end;
    }
  }
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
namespace {
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// HF's ByteFallback decoder on a run of byte tokens' values: the run as one text when it
// is UTF-8, else U+FFFD for each byte (`each(text)` is called per resulting token).
template <class Each>
void byte_run(std::string& bytes, Each&& each) {
  if (bytes.empty()) return;
  if (text::is_valid_utf8(bytes)) each(std::string_view(bytes));
  else
    for (std::size_t k = 0; k < bytes.size(); ++k) each(kReplacementChar);
  bytes.clear();
}

// Every `from` in `s` (not empty) replaced by `to`, left to right.
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

// HF's Strip decoder on one token: up to `start` leading and `stop` trailing characters
// equal to `c` removed.
std::string strip_chars(std::string_view t, std::string_view c, std::size_t start, std::size_t stop) {
  std::size_t b = 0, e = t.size();
  for (std::size_t k = 0; k < start && b < e && t.substr(b, c.size()) == c; ++k) b += c.size();
  for (std::size_t k = 0; k < stop && e - b >= c.size() && t.substr(e - c.size(), c.size()) == c; ++k) e -= c.size();
  return std::string(t.substr(b, e - b));
}
}  // namespace

Status Tokenizer::decode_metaspace(const TokenId* ids, std::size_t n, std::string& out, bool skip_special) const {
  std::size_t start = out.size();
  std::string bytes;
  auto flush = [&] { byte_run(bytes, [&](std::string_view t) { out += t; }); };
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
  if (metaspace_strip_ && out.size() > start && out[start] == ' ') out.erase(start, 1);
  return {};
}

// HF's decoder chain (decoders/*.rs) over the tokens' texts, step by step; with no step,
// what HF gives without a decoder: the tokens joined by spaces.
Status Tokenizer::decode_chain(const TokenId* ids, std::size_t n, std::string& out, bool skip_special) const {
  std::vector<std::string> toks, next;
  for (std::size_t k = 0; k < n; ++k) {
    LMP_ASSIGN(std::optional<std::string_view> got, decode_text(ids[k], skip_special));
    if (got) toks.emplace_back(*got);
  }
  if (decode_steps_.empty()) {
    for (std::size_t k = 0; k < toks.size(); ++k) {
      if (k) out += ' ';
      out += toks[k];
    }
    return {};
  }
  using K = DecodeStep::Kind;
  for (const DecodeStep& st : decode_steps_) {
    const std::size_t last = toks.empty() ? 0 : toks.size() - 1;
    switch (st.kind) {
      case K::byte_fallback: {
        next.clear();
        std::string bytes;
        auto emit = [&](std::string_view t) { next.emplace_back(t); };
        for (std::string& t : toks) {
          int b = byte_token_value(t);
          if (b >= 0) {
            bytes += static_cast<char>(b);
            continue;
          }
          byte_run(bytes, emit);
          next.push_back(std::move(t));
        }
        byte_run(bytes, emit);
        toks.swap(next);
        break;
      }
      case K::fuse: {
        std::string all;
        for (const std::string& t : toks) all += t;
        toks.assign(1, std::move(all));
        break;
      }
      case K::replace:
        for (std::string& t : toks) replace_all(t, st.from, st.to);
        break;
      case K::strip:
        for (std::string& t : toks) t = strip_chars(t, st.from, st.start, st.stop);
        break;
      case K::bpe:
        for (std::size_t i = 0; i < toks.size(); ++i) replace_all(toks[i], st.from, i == last ? "" : " ");
        break;
      case K::wordpiece:
        for (std::size_t i = 0; i < toks.size(); ++i) {
          std::string& t = toks[i];
          if (i > 0) {
            if (t.compare(0, st.from.size(), st.from) == 0) t.erase(0, st.from.size());
            else t.insert(0, 1, ' ');
          }
          if (st.flag) wordpiece_cleanup(t);
        }
        break;
      case K::metaspace:
        for (std::size_t i = 0; i < toks.size(); ++i) replace_all(toks[i], st.from, i == 0 && st.flag ? "" : " ");
        break;
    }
  }
  for (const std::string& t : toks) out += t;
  return {};
}

Status Tokenizer::decode(const TokenId* ids, std::size_t n, std::string& out, bool skip_special) const {
  if (decoder_ == Decoder::chain) return decode_chain(ids, n, out, skip_special);
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
