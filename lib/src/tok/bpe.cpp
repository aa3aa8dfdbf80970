#include "lmpipe/tok/bpe.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "lmpipe/core/parallel.h"
#include "lmpipe/text/unicode.h"
#include <functional>

namespace lmp::tok {

namespace {
// Index tokens by their bytes. Returns the ids whose bytes an earlier id already has
// (on duplicates the first id wins, as in HF's reverse lookup).
std::vector<bool> index_tokens(const std::vector<std::string>& tokens, StringIdMap& ids,
                               std::array<TokenId, 256>& byte_ids, std::size_t& max_bytes, int threads) {
  std::vector<std::string_view> keys;
  std::vector<TokenId> key_ids;
  keys.reserve(tokens.size());
  key_ids.reserve(tokens.size());
  max_bytes = 0;
  byte_ids.fill(-1);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if (t.empty()) continue;
    keys.emplace_back(t);
    key_ids.push_back(static_cast<TokenId>(i));
    max_bytes = std::max(max_bytes, t.size());
    if (t.size() == 1 && byte_ids[static_cast<unsigned char>(t[0])] < 0)
      byte_ids[static_cast<unsigned char>(t[0])] = static_cast<TokenId>(i);
  }
  std::vector<std::uint8_t> inserted;
  ids.insert_all(keys, key_ids.data(), inserted, threads);
  std::vector<bool> shadowed;
  for (std::size_t k = 0; k < keys.size(); ++k)
    if (!inserted[k]) {
      if (shadowed.empty()) shadowed.resize(tokens.size(), false);
      shadowed[static_cast<std::size_t>(key_ids[k])] = true;
    }
  return shadowed;
}

bool is_concat(std::string_view t, std::string_view a, std::string_view b) {
  return t.size() == a.size() + b.size() && !t.empty() && std::memcmp(t.data(), a.data(), a.size()) == 0 &&
         std::memcmp(t.data() + a.size(), b.data(), b.size()) == 0;
}
}  // namespace

Result<BpeModel> BpeModel::build(std::vector<std::string> tokens,
                                 std::vector<std::pair<TokenId, TokenId>> merges, bool ignore_merges, int threads,
                                 std::string continuing_prefix) {
  BpeModel m;
  m.tokens_ = std::move(tokens);
  m.prefix_ = std::move(continuing_prefix);
  std::vector<bool> shadowed = index_tokens(m.tokens_, m.ids_, m.byte_ids_, m.max_token_bytes_, threads);
  return finish_build(std::move(m), shadowed, std::move(merges), ignore_merges, threads);
}

Result<BpeModel> BpeModel::build_indexed(std::vector<std::string> tokens, StringIdMap ids,
                                         std::vector<std::pair<TokenId, TokenId>> merges, bool ignore_merges,
                                         int threads, std::vector<TokenId> merged) {
  if (!merged.empty() && merged.size() != merges.size())
    return make_error(Errc::invalid_argument, "{} merged tokens for {} merges", merged.size(), merges.size());
  BpeModel m;
  m.tokens_ = std::move(tokens);
  m.ids_ = std::move(ids);
  m.distinct_ = true;
  m.byte_ids_.fill(-1);
  m.max_token_bytes_ = 0;
  for (std::size_t i = 0; i < m.tokens_.size(); ++i) {
    const std::string& t = m.tokens_[i];
    m.max_token_bytes_ = std::max(m.max_token_bytes_, t.size());
    if (t.size() == 1) m.byte_ids_[static_cast<unsigned char>(t[0])] = static_cast<TokenId>(i);
  }
  return finish_build(std::move(m), {}, std::move(merges), ignore_merges, threads, merged);
}

Result<BpeModel> BpeModel::finish_build(BpeModel m, const std::vector<bool>& shadowed,
                                        std::vector<std::pair<TokenId, TokenId>> merges, bool ignore_merges,
                                        int threads, const std::vector<TokenId>& merged) {
  m.ignore_merges_ = ignore_merges;
  const auto n = static_cast<TokenId>(m.tokens_.size());
  const std::size_t n_merges = merges.size();
  std::vector<std::uint64_t> keys(n_merges);
  std::vector<MergeInfo> infos(n_merges);
  auto parts = static_cast<std::size_t>(threads < 1 ? 1 : threads);
  std::vector<std::size_t> first_bad(parts, n_merges);
  std::vector<Error> errors(parts);
  parallel_ranges(n_merges, threads, [&](std::size_t begin, std::size_t end, std::size_t part) {
    std::string joined;
    TokenId prev = -1;  // the token the previous merge made
    for (std::size_t r = begin; r < end; ++r) {
      auto [a, b] = merges[r];
      if (a < 0 || b < 0 || a >= n || b >= n) {
        first_bad[part] = r;
        errors[part] = make_error(Errc::parse, "merge {}: token id out of range", r + 1);
        return;
      }
      if (!merged.empty()) {  // (found and checked by the loader)
        if (merged[r] < 0 || merged[r] >= n) {
          first_bad[part] = r;
          errors[part] = make_error(Errc::parse, "merge {}: merged token id out of range", r + 1);
          return;
        }
        keys[r] = pair_key(a, b);
        infos[r] = MergeInfo{static_cast<std::uint32_t>(r), merged[r]};
        continue;
      }
      // (with a continuing prefix, b's first bytes are dropped whatever they are, as HF does)
      std::string_view right = m.tokens_[static_cast<std::size_t>(b)];
      if (right.size() < m.prefix_.size()) {
        first_bad[part] = r;
        errors[part] = make_error(Errc::parse, "merge {}: right token is shorter than the continuing_subword_prefix", r + 1);
        return;
      }
      right.remove_prefix(m.prefix_.size());
      TokenId id = merged_token(m.tokens_, m.ids_, shadowed, prev, m.tokens_[static_cast<std::size_t>(a)], right, joined);
      if (id < 0) {
        first_bad[part] = r;
        errors[part] = make_error(Errc::parse, "merge {}: merged token is not in the vocabulary", r + 1);
        return;
      }
      keys[r] = pair_key(a, b);
      infos[r] = MergeInfo{static_cast<std::uint32_t>(r), id};
      prev = id;
    }
  });
  for (std::size_t p = 0; p < parts; ++p)
    if (first_bad[p] < n_merges) return errors[p];  // (the parts are in merge order)
  m.merges_.set_all(keys.data(), infos.data(), n_merges, threads);
  m.merge_list_ = std::move(merges);
  return m;
}

TokenId BpeModel::merged_token(const std::vector<std::string>& tokens, const StringIdMap& ids,
                               const std::vector<bool>& shadowed, TokenId prev, std::string_view a,
                               std::string_view b, std::string& joined) {
  auto matches = [&](TokenId g) {
    return g >= 0 && static_cast<std::size_t>(g) < tokens.size() &&
           (shadowed.empty() || !shadowed[static_cast<std::size_t>(g)]) &&
           is_concat(tokens[static_cast<std::size_t>(g)], a, b);
  };
  if (matches(prev + 1)) return prev + 1;
  if (matches(prev)) return prev;
  joined.assign(a);
  joined += b;
  return ids.find(joined);
}

Result<BpeModel> BpeModel::build_from_ranks(std::vector<std::string> tokens) {
  BpeModel m;
  m.tokens_ = std::move(tokens);
  index_tokens(m.tokens_, m.ids_, m.byte_ids_, m.max_token_bytes_, 1);
  m.ignore_merges_ = true;  // tiktoken emits a piece that is itself a token directly
  m.from_ranks_ = true;
  m.merges_.reserve(m.tokens_.size() * 4);
  // The rank of a merge is the rank (= id) of the concatenation. Derive the merge list
  // in rank order too, taking for each token the split HF's converters record: the
  // one whose parts encode to single tokens with the lowest maximum rank.
  for (std::size_t i = 0; i < m.tokens_.size(); ++i) {
    std::string_view t = m.tokens_[i];
    if (t.size() < 2) continue;
    auto id = static_cast<TokenId>(i);
    std::pair<TokenId, TokenId> best{-1, -1};
    TokenId best_rank = -1;
    for (std::size_t k = 1; k < t.size(); ++k) {
      TokenId a = m.find(t.substr(0, k));
      if (a < 0 || a >= id) continue;
      TokenId b = m.find(t.substr(k));
      if (b < 0 || b >= id) continue;
      m.merges_.set(pair_key(a, b), MergeInfo{static_cast<std::uint32_t>(id), id});
      TokenId r = std::max(a, b);
      if (best_rank < 0 || r < best_rank) {
        best_rank = r;
        best = {a, b};
      }
    }
    if (best.first >= 0) m.merge_list_.push_back(best);
  }
  return m;
}

void BpeModel::set_char_level(TokenId unk_id, bool byte_fallback, bool fuse_unk) {
  char_level_ = true;
  unk_id_ = unk_id;
  byte_fallback_ = byte_fallback;
  fuse_unk_ = fuse_unk;
  fallback_ids_.fill(-1);
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    fallback_ids_[static_cast<std::size_t>(b)] = find(name);
  }
}

Status BpeModel::set_end_of_word_suffix(std::string suffix) {
  suffix_ = std::move(suffix);
  suffix_ids_.fill(-1);
  if (suffix_.empty() || char_level_) return {};
  std::string t;
  for (int b = 0; b < 256; ++b) {
    t.assign(1, static_cast<char>(b));
    t += suffix_;
    suffix_ids_[static_cast<std::size_t>(b)] = find(t);
  }
  return {};
}

// HF's merge_word with an end-of-word suffix: the last byte's symbol carries it. HF's
// ignore_merges looks the piece up without the suffix, and so does this.
void BpeModel::encode_suffixed(std::string_view piece, std::vector<TokenId>& out, BpeScratch& s) const {
  if (whole_token(piece, out)) return;
  encode_bytes(piece, out, s, /*suffixed=*/true);
}

// HF's BPE word symbols (models/bpe/model.rs merge_word), character by character: every
// character but the first carries the continuing prefix, the last one the end-of-word
// suffix, and what is looked up (and, with byte fallback, spelled in bytes, as HF does)
// is the character with them.
void BpeModel::symbolize_chars(std::string_view piece, BpeScratch& s) const {
  s.sym.clear();
  bool pending_unk = false;  // HF adds an unknown symbol only when the run ends
  auto push_unk = [&] {
    s.sym.push_back(unk_id_);
    ++s.unknown;  // (counted for --stats)
  };
  const bool affixed = !prefix_.empty() || !suffix_.empty();
  const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
  for (std::size_t i = 0; i < piece.size();) {
    std::size_t n = text::decode_utf8(p, piece.size(), i).len;
    std::string_view ch = piece.substr(i, n);
    if (affixed) {
      s.key.assign(i > 0 ? std::string_view(prefix_) : std::string_view());
      s.key += ch;
      if (i + n == piece.size()) s.key += suffix_;
      ch = s.key;
    }
    i += n;
    TokenId id = find(ch);
    if (id >= 0) {
      if (pending_unk) push_unk();
      pending_unk = false;
      s.sym.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {  // (HF leaves a pending unknown symbol pending across these)
        for (char c : ch) s.sym.push_back(fallback_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_ < 0) {
      s.dropped_bytes += n;
      continue;
    }
    if (pending_unk && !fuse_unk_) push_unk();
    pending_unk = true;
  }
  if (pending_unk) push_unk();
}

void BpeModel::encode(std::string_view piece, std::vector<TokenId>& out, BpeScratch& s) const {
  if (piece.empty()) return;
  if (s.sampling.rng) {
    encode_dropout(piece, out, s);
    return;
  }
  if (char_level_) {
    encode_chars(piece, out, s);
    return;
  }
  if (!suffix_.empty()) {
    encode_suffixed(piece, out, s);
    return;
  }
  if (piece.size() == 1) {
    TokenId id = byte_ids_[static_cast<unsigned char>(piece[0])];
    if (id >= 0) out.push_back(id);
    else ++s.dropped_bytes;
    return;
  }
  if (segments(piece)) {
    if (const DoubleArray* trie = span_trie()) {
      encode_segmented(piece, *trie, out, s);
      return;
    }
    // (another thread is making the trie: this piece whole, below, gives the same ids)
  }
  if (whole_token(piece, out)) return;
  encode_bytes(piece, out, s);
}

// Character-level BPE; HF's ignore_merges looks the piece up whole first (without the
// prefix or suffix).
void BpeModel::encode_chars(std::string_view piece, std::vector<TokenId>& out, BpeScratch& s) const {
  if (whole_token(piece, out)) return;
  symbolize_chars(piece, s);
  if (s.sym.size() >= 2) {
    if (s.sym.size() <= 64) merge_linear(s);
    else merge_heap(s);
  }
  out.insert(out.end(), s.sym.begin(), s.sym.end());
}

// Pieces with a character of three or four UTF-8 bytes: Han, kana, Hangul (and emoji).
// Scripts of two-byte characters (Cyrillic, Greek, Arabic) split into words as Latin
// does, whose repeats the piece cache answers: cutting them measured 1.2x slower (Russian).
bool BpeModel::segments(std::string_view piece) const {
  if (char_level_ || !suffix_.empty() || piece.size() < kSegmentFrom) return false;
  for (char c : piece)
    if (static_cast<unsigned char>(c) >= 0xE0) return true;
  return false;
}

void BpeModel::symbolize_bytes(std::string_view piece, BpeScratch& s, bool suffixed) const {
  s.sym.clear();
  auto add = [&](TokenId id) {
    if (id >= 0) s.sym.push_back(id);
    else ++s.dropped_bytes;
  };
  const std::size_t plain = suffixed && !piece.empty() ? piece.size() - 1 : piece.size();
  for (std::size_t i = 0; i < plain; ++i) add(byte_ids_[static_cast<unsigned char>(piece[i])]);
  if (plain < piece.size()) add(suffix_ids_[static_cast<unsigned char>(piece.back())]);
}

// BPE-dropout, as HF's BPE::tokenize with a dropout: no ignore_merges lookup (HF makes it
// only on its cached path, which dropout bypasses), and the whole piece in one heap: the
// segments of encode_segmented would merge the same way, but they would draw in another
// order, and a merge in one segment puts back the skipped ones of all.
void BpeModel::encode_dropout(std::string_view piece, std::vector<TokenId>& out, BpeScratch& s) const {
  if (char_level_) symbolize_chars(piece, s);
  else symbolize_bytes(piece, s, !suffix_.empty());
  if (s.sym.size() >= 2) merge_heap(s, /*dropout=*/true);
  out.insert(out.end(), s.sym.begin(), s.sym.end());
}

// BPE from the bytes up: the definition, for a piece or a segment of one; `suffixed`: the
// last byte starts as its end-of-word token.
void BpeModel::encode_bytes(std::string_view piece, std::vector<TokenId>& out, BpeScratch& s, bool suffixed) const {
  symbolize_bytes(piece, s, suffixed);
  if (s.sym.size() >= 2) {
    // Short pieces: the scan (24 vs 64 measured equal on Chinese text, where hash
    // lookups of pairs dominate); long pieces: the heap.
    if (s.sym.size() <= 64) merge_linear(s);
    else merge_heap(s);
  }
  out.insert(out.end(), s.sym.begin(), s.sym.end());
}

const DoubleArray* BpeModel::span_trie() const {
  SpanIndex& x = *span_;
  int state = x.state.load(std::memory_order_acquire);
  if (state == SpanIndex::kReady) return &x.trie;
  if (state == SpanIndex::kBuilding || !x.state.compare_exchange_strong(state, SpanIndex::kBuilding, std::memory_order_acq_rel))
    return nullptr;
  try {
    std::vector<std::pair<std::string_view, std::int32_t>> keys;
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      std::string_view t = tokens_[i];
      std::uint64_t high = 0;  // (8 bytes at a time)
      for (std::size_t k = 0; k < t.size(); k += 8) high |= load_upto8(t.data() + k, std::min<std::size_t>(8, t.size() - k));
      if ((high & 0x8080808080808080ULL) != 0 && (distinct_ || ids_.find(t) == static_cast<TokenId>(i)))
        keys.emplace_back(t, static_cast<std::int32_t>(i));
    }
    x.trie.build(std::move(keys));
  } catch (...) {
    x.state.store(SpanIndex::kNone, std::memory_order_release);  // (out of memory: a later piece tries again)
    throw;
  }
  x.state.store(SpanIndex::kReady, std::memory_order_release);
  return &x.trie;
}

// Cut the piece where no token can span, and encode each segment alone. Position i is
// such a cut when every token that matches the text at some j < i ends at or before i:
// `reach` is the furthest end of the tokens that start before i. The trie gives the
// tokens with a byte >= 0x80; a token of ASCII bytes only that starts at an ASCII byte
// ends within that byte's ASCII run. (Counting tokens that BPE can never make only
// cuts less, never wrongly.)
void BpeModel::encode_segmented(std::string_view piece, const DoubleArray& trie, std::vector<TokenId>& out,
                                BpeScratch& s) const {
  const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
  const std::size_t n = piece.size();
  std::size_t reach = 0, start = 0, ascii_end = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (reach <= i && i > start) {
      encode_segment(piece.substr(start, i - start), out, s);
      start = i;
    }
    if (p[i] < 0x80) {
      if (ascii_end <= i)
        for (ascii_end = i; ascii_end < n && p[ascii_end] < 0x80;) ++ascii_end;
      reach = std::max(reach, ascii_end);
    }
    std::int32_t node = 0;
    for (std::size_t j = i; j < n; ++j) {
      node = trie.step(node, p[j]);
      if (node < 0) break;
      if (j + 1 > reach && trie.value(node) >= 0) reach = j + 1;
    }
    // The walk from the start meets the whole piece when it is a token (the piece has
    // a byte >= 0x80, so the trie holds it): with ignore_merges, that token is the answer.
    if (i == 0 && reach == n && ignore_merges_ && node >= 0) {
      out.push_back(trie.value(node));
      return;
    }
  }
  encode_segment(piece.substr(start), out, s);
}

// One segment, through the segment cache when it is short.
void BpeModel::encode_segment(std::string_view seg, std::vector<TokenId>& out, BpeScratch& s) const {
  if (seg.size() > BpeScratch::kSegMaxBytes) {
    encode_bytes(seg, out, s);
    return;
  }
  std::uint64_t key = 0;
  for (std::size_t k = 0; k < seg.size(); ++k) key |= std::uint64_t{static_cast<unsigned char>(seg[k])} << (8 * k);
  if (s.seg_cache.empty()) s.seg_cache.resize(std::size_t{1} << BpeScratch::kSegCacheBits);
  std::uint64_t h = (key ^ (key >> 29) ^ seg.size()) * 0x9E3779B97F4A7C15ULL;
  auto& e = s.seg_cache[static_cast<std::size_t>(h >> (64 - BpeScratch::kSegCacheBits))];
  if (e.len == seg.size() && e.key == key) {
    for (std::uint8_t k = 0; k < e.n; ++k) out.push_back(e.ids[k]);
    return;
  }
  std::size_t before = out.size();
  std::uint64_t dropped = s.dropped_bytes, unknown = s.unknown;
  encode_bytes(seg, out, s);
  std::size_t n = out.size() - before;
  if (s.dropped_bytes != dropped || s.unknown != unknown || n > BpeScratch::kSegMaxIds) return;  // (counts stay exact)
  e.key = key;
  e.len = static_cast<std::uint8_t>(seg.size());
  e.n = static_cast<std::uint8_t>(n);
  std::copy(out.begin() + static_cast<std::ptrdiff_t>(before), out.end(), e.ids);
}

// O(n·m) scan for short pieces: with few symbols a linear search for the lowest rank
// beats a heap on cache locality (tiktoken makes the same choice).
void BpeModel::merge_linear(BpeScratch& s) const {
  auto& sym = s.sym;
  auto& rank = s.rank;
  rank.resize(sym.size() - 1);
  for (std::size_t i = 0; i + 1 < sym.size(); ++i) rank[i] = cached_merge(sym[i], sym[i + 1], s);
  while (!rank.empty()) {
    // Lowest rank, leftmost on ties (equal ranks mean equal packed values).
    std::size_t best = 0;
    std::uint64_t br = rank[0];
    for (std::size_t i = 1; i < rank.size(); ++i)
      if (rank[i] < br) {
        br = rank[i];
        best = i;
      }
    if (br == kNoMerge) break;
    sym[best] = static_cast<TokenId>(br & 0xFFFFFFFFu);
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    rank.erase(rank.begin() + static_cast<std::ptrdiff_t>(best));
    if (best < rank.size()) rank[best] = cached_merge(sym[best], sym[best + 1], s);
    if (best > 0) rank[best - 1] = cached_merge(sym[best - 1], sym[best], s);
  }
}

// Heap with lazy invalidation for long pieces (HF's merge_all order: rank, then position).
void BpeModel::merge_heap(BpeScratch& s, bool dropout) const {
  auto& sym = s.sym;
  const auto n = static_cast<std::int32_t>(sym.size());
  s.prev.resize(sym.size());
  s.next.resize(sym.size());
  for (std::int32_t i = 0; i < n; ++i) {
    s.prev[static_cast<std::size_t>(i)] = i - 1;
    s.next[static_cast<std::size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  // Min-heap of (rank << 32 | position): lowest rank first, then leftmost.
  auto& q = s.heap;
  q.clear();
  auto push = [&](std::int32_t pos) {
    std::int32_t nx = s.next[static_cast<std::size_t>(pos)];
    if (nx < 0) return;
    std::uint64_t mg = cached_merge(sym[static_cast<std::size_t>(pos)], sym[static_cast<std::size_t>(nx)], s);
    if (mg == kNoMerge) return;
    q.push_back((mg & ~std::uint64_t{0xFFFFFFFFu}) | static_cast<std::uint32_t>(pos));
    std::push_heap(q.begin(), q.end(), std::greater<>());
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) push(i);
  auto& dead = s.dead;
  dead.assign(sym.size(), 0);
  s.skipped.clear();
  while (!q.empty()) {
    std::pop_heap(q.begin(), q.end(), std::greater<>());
    std::uint64_t key = q.back();
    q.pop_back();
    if (dropout) {  // (HF draws for every entry taken, stale ones too)
      if (s.sampling.rng->uniform() < s.sampling.dropout) {
        s.skipped.push_back(key);
        continue;
      }
      for (std::uint64_t k : s.skipped) {
        q.push_back(k);
        std::push_heap(q.begin(), q.end(), std::greater<>());
      }
      s.skipped.clear();
    }
    auto pos = static_cast<std::int32_t>(key & 0xFFFFFFFFu);
    auto p = static_cast<std::size_t>(pos);
    if (dead[p]) continue;
    std::int32_t nx = s.next[p];
    if (nx < 0) continue;
    std::uint64_t mg = cached_merge(sym[p], sym[static_cast<std::size_t>(nx)], s);
    if (mg == kNoMerge || (mg >> 32) != (key >> 32)) continue;  // stale
    sym[p] = static_cast<TokenId>(mg & 0xFFFFFFFFu);
    dead[static_cast<std::size_t>(nx)] = 1;
    std::int32_t nn = s.next[static_cast<std::size_t>(nx)];
    s.next[p] = nn;
    if (nn >= 0) s.prev[static_cast<std::size_t>(nn)] = pos;
    if (s.prev[p] >= 0) push(s.prev[p]);
    push(pos);
  }
  std::size_t w = 0;
  for (std::size_t i = 0; i < sym.size(); ++i)
    if (!dead[i]) sym[w++] = sym[i];
  sym.resize(w);
}

}  // namespace lmp::tok
