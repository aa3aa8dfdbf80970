#include "lmpipe/tok/sp_trainer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "lmpipe/text/unicode.h"
#include "lmpipe/core/base64.h"
#include "lmpipe/core/double_array.h"
#include "lmpipe/core/json.h"
#include "lmpipe/tok/sp_charsmap.h"
#include "lmpipe/core/parallel.h"
#include "lmpipe/core/string_map.h"
#include "merge_core.h"
#include "proto_write.h"

namespace lmp::tok {

namespace {

constexpr std::string_view kSpace = kMetaspace;

using proto::put_bytes;
using proto::put_float;
using proto::put_varint_field;

struct Piece {
  std::string text;
  float score;
  int type;  // SentencePiece's: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte
};

std::string model_proto(const std::vector<Piece>& pieces, const SpBpeTrainerConfig& cfg, int model_type = 2) {
  std::string o;
  for (const auto& p : pieces) {
    std::string m;
    put_bytes(m, 1, p.text);
    put_float(m, 2, p.score);
    if (p.type != 1) put_varint_field(m, 3, static_cast<std::uint64_t>(p.type));
    put_bytes(o, 1, m);
  }
  std::string t;  // TrainerSpec: what spm_encode needs, and what it was trained with
  put_varint_field(t, 3, static_cast<std::uint64_t>(model_type));  // 1 unigram, 2 BPE
  put_varint_field(t, 4, pieces.size());
  put_float(t, 10, static_cast<float>(cfg.character_coverage));
  put_varint_field(t, 20, cfg.max_piece_chars);
  put_varint_field(t, 22, cfg.split_by_whitespace ? 1 : 0);
  if (cfg.allow_whitespace_only_pieces) put_varint_field(t, 26, 1);
  put_varint_field(t, 25, cfg.split_digits ? 1 : 0);
  put_varint_field(t, 35, cfg.byte_fallback ? 1 : 0);
  put_varint_field(t, 40, 0);  // unk_id
  put_varint_field(t, 41, 1);  // bos_id
  put_varint_field(t, 42, 2);  // eos_id
  put_varint_field(t, 43, static_cast<std::uint64_t>(-1) & 0xFFFFFFFFFFFFFFFFull);  // pad_id -1
  put_bytes(o, 2, t);
  std::string n;  // NormalizerSpec: the normalizer the text was trained with
  put_bytes(n, 1, cfg.normalizer.name);
  if (!cfg.normalizer.charsmap.empty()) put_bytes(n, 2, cfg.normalizer.charsmap);
  put_varint_field(n, 3, 1);  // add_dummy_prefix
  put_varint_field(n, 4, cfg.normalizer.remove_extra_whitespaces ? 1 : 0);
  put_varint_field(n, 5, 1);  // escape_whitespaces
  put_bytes(o, 3, n);
  return o;
}

// The pieces before the trained ones: <unk> <s> </s>, control symbols, user-defined
// symbols, then the 256 byte pieces with byte fallback.
std::vector<Piece> head_pieces(const SpBpeTrainerConfig& cfg) {
  std::vector<Piece> head = {{"<unk>", 0, 2}, {"<s>", 0, 3}, {"</s>", 0, 3}};
  for (const auto& c : cfg.control) head.push_back({c, 0, 3});
  for (const auto& u : cfg.user_defined) head.push_back({u, 0, 4});
  if (cfg.byte_fallback) {
    char name[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      head.push_back({name, 0, 6});
    }
  }
  return head;
}

// The characters a model keeps: the most frequent (weighted by word counts) up to
// cfg.character_coverage of all occurrences, and ▁ always; by frequency. Fills the
// coverage part of the report; an error when they and `head` pieces overflow the vocabulary.
// The most that character and symbol occurrences may total (check_count_total).
constexpr std::uint64_t kCountLimit = std::uint64_t{1} << 61;

Result<std::vector<std::pair<std::string, std::uint64_t>>> kept_characters(const WordCountMap& counts,
                                                                          const SpBpeTrainerConfig& cfg,
                                                                          std::size_t head, SpTrainReport& report) {
  // Counts by code point (an invalid byte after them: text::kInvalidBase + byte), each
  // character's UTF-8 being the one form of its code point.
  std::vector<std::uint64_t> freq(text::kInvalidBase + 256, 0);
  std::uint64_t total = 0;
  for (const auto& [w, c] : counts) {
    const auto* p = reinterpret_cast<const unsigned char*>(w.data());
    for (std::size_t i = 0; i < w.size();) {
      text::CodePoint ch = text::decode_utf8(p, w.size(), i);
      if (c > kCountLimit - total)
        return make_error(Errc::out_of_range,
                          "word counts too large: count x characters, summed over the words, passes 2^61, where "
                          "the 64-bit counts of the merge loop could overflow");
      freq[ch.cp] += c;
      total += c;
      i += ch.len;
    }
  }
  std::vector<std::pair<std::string, std::uint64_t>> chars;
  for (std::uint32_t cp = 0; cp < freq.size(); ++cp)
    if (freq[cp]) {
      chars.emplace_back(std::string(), freq[cp]);
      text::append_utf8(chars.back().first, cp);
    }
  std::sort(chars.begin(), chars.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::uint64_t covered = 0;
  std::size_t kept = 0;
  for (; kept < chars.size(); ++kept) {
    if (kept > 0 && static_cast<double>(covered) >= cfg.character_coverage * static_cast<double>(total)) break;
    covered += chars[kept].second;
  }
  for (std::size_t k = kept; k < chars.size(); ++k)
    if (chars[k].first == kSpace) {
      std::swap(chars[k], chars[kept]);
      covered += chars[kept].second;
      ++kept;
    }
  report.chars_total_distinct = chars.size();
  report.chars_kept = kept;
  report.coverage = total ? static_cast<double>(covered) / static_cast<double>(total) : 1.0;
  chars.resize(kept);
  if (head + kept > cfg.vocab_size)
    return make_error(Errc::invalid_argument,
                      "vocabulary size {} is too small: {} meta and byte pieces and {} required characters need {} "
                      "(lower --character-coverage or raise --vocab-size)",
                      cfg.vocab_size, head, kept, head + kept);
  return chars;
}

// Whether no piece may hold both characters of these scripts (split_by_unicode_script:
// one script per piece; Common, which holds the digits and punctuation, and Inherited
// count as one).
bool is_common(int cls) { return cls == 0 /* USCRIPT_COMMON */ || cls == 1 /* USCRIPT_INHERITED */; }
bool scripts_differ(int a, int b) { return a != b && !(is_common(a) && is_common(b)); }
// split_digits counts ASCII digits only, as SentencePiece does.
bool is_ascii_digit(std::uint32_t cp) { return cp >= '0' && cp <= '9'; }

}  // namespace

Result<SpNormalizer> make_sp_normalizer(std::string_view name, bool remove_extra_whitespaces) {
  SpNormalizer n;
  n.add_dummy_prefix = true;
  n.remove_extra_whitespaces = remove_extra_whitespaces;
  n.escape_whitespaces = true;
  if (name == "identity") {
    n.name = "identity";
  } else if (auto rule = charsmap_rule(name)) {
    n.name = std::string(name);
    LMP_TRY(n.load_charsmap(build_charsmap(*rule), "charsmap"));
  } else {
    return make_error(Errc::invalid_argument,
                      "unknown normalization '{}' (nfkc, nfkc_cf, nmt_nfkc, nmt_nfkc_cf, identity)", name);
  }
  return n;
}

void sp_normalize_line(std::string_view line, const SpNormalizer& norm, std::string& out) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  norm.normalize(line, out);
}

void sp_count_words(std::string_view s, const SpBpeTrainerConfig& cfg, WordCountMap& counts) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t start = 0, i = 0;
  std::size_t ws_from = 0;  // where the run of ▁ that ends at i starts (i when none)
  int cls = 0;
  bool have_cls = false;    // a character other than ▁ since the word's start
  bool prev_digit = false;
  auto emit = [&](std::size_t end) {  // a word ends at `end` (nothing when it is not past the start)
    if (end <= start) return;
    auto it = counts.find(s.substr(start, end - start));
    if (it != counts.end()) ++it->second;
    else counts.emplace(std::string(s.substr(start, end - start)), 1);
    start = end;
  };
  while (i < s.size()) {
    // A user-defined symbol is a piece of its own: never part of a trained word.
    std::size_t ud = 0;
    for (const auto& u : cfg.user_defined)
      if (u.size() > ud && s.compare(i, u.size(), u) == 0) ud = u.size();
    if (ud) {
      if (have_cls) emit(ws_from);  // a run of ▁ before it ends no piece that starts earlier
      emit(i);
      i += ud;
      start = ws_from = i;
      have_cls = false;
      continue;
    }
    if (s.compare(i, kSpace.size(), kSpace) == 0) {
      const bool in_run = ws_from < i;
      if (cfg.split_by_whitespace && (!cfg.allow_whitespace_only_pieces || !in_run)) {
        emit(i);  // SentencePiece's SplitIntoWords: a ▁ starts a word
        have_cls = false;
      }
      if (!in_run) ws_from = i;
      i += kSpace.size();
      continue;
    }
    auto c = text::decode_utf8(p, s.size(), i);
    const int k = text::script_of(c.cp);
    const bool digit = is_ascii_digit(c.cp);
    // One script per piece; with split_digits each digit alone. No piece ends in ▁ after
    // another character, so the ▁ before a boundary go with what follows.
    if (cfg.split_digits && digit) {  // a piece of its own, without the ▁ before it
      emit(ws_from);
      emit(i);
    } else if (have_cls && (scripts_differ(k, cls) || (cfg.split_digits && prev_digit))) {
      emit(ws_from);
    }
    cls = k;
    prev_digit = digit;
    have_cls = true;
    i += c.len;
    ws_from = i;
  }
  // A run of ▁ at the end cannot end a piece that starts before it.
  if (have_cls && ws_from < s.size()) emit(ws_from);
  emit(s.size());
}

bool sp_whitespace_valid(std::string_view piece, const SpBpeTrainerConfig& cfg) {
  const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
  bool all_ws = true, inner = false, last_ws = false;  // inner: a ▁ after the first character
  for (std::size_t k = 0; k < piece.size();) {
    last_ws = piece.compare(k, kSpace.size(), kSpace) == 0;
    if (last_ws && k > 0) inner = true;
    all_ws = all_ws && last_ws;
    k += last_ws ? kSpace.size() : text::decode_utf8(p, piece.size(), k).len;
  }
  if (all_ws && cfg.allow_whitespace_only_pieces) return true;
  if (cfg.split_by_whitespace) return !inner;
  return !(inner && last_ws);  // inside a piece, never at its end
}

namespace {
// Everything of a SentencePiece-style HF tokenizer.json but its model: the unknown,
// control and user-defined pieces as added tokens; SentencePiece's normalization in HF's
// terms (the character map, ▁ always in front, spaces as ▁, no pre-tokenizer, so a line is
// one unit as in spm_encode); <s> as the template; ▁ back to spaces, byte fallback.
std::string hf_sp_json_head(const std::vector<Piece>& pieces, const SpBpeTrainerConfig& cfg) {
  auto str = [](std::string& o, std::string_view s) { json::append_string(o, s); };
  std::string o = R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[)";
  bool first_added = true;
  for (std::size_t id = 0; id < pieces.size(); ++id) {
    int ty = pieces[id].type;
    if (ty != 2 && ty != 3 && ty != 4) continue;  // unknown, control, user-defined: added tokens
    if (!first_added) o += ",";
    first_added = false;
    o += fmt::format(R"({{"id":{},"content":)", id);
    str(o, pieces[id].text);
    o += fmt::format(R"(,"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":{}}})",
                     ty != 4);
  }
  o += R"(],"normalizer":{"type":"Sequence","normalizers":[)";
  if (!cfg.normalizer.charsmap.empty()) {
    o += R"({"type":"Precompiled","precompiled_charsmap":)";
    str(o, base64_encode(cfg.normalizer.charsmap));
    o += "},";
  }
  // remove_extra_whitespaces: no spaces at either end, a run of them one space (as the
  // ASCII spaces that SentencePiece's normalizer folds, nothing else; \A and \z, since ^
  // and $ are line anchors in HF's Oniguruma).
  if (cfg.normalizer.remove_extra_whitespaces) {
    o += R"({"type":"Replace","pattern":{"Regex":)";
    str(o, kHfTrimSpaces);
    o += R"(},"content":""},{"type":"Replace","pattern":{"Regex":)";
    str(o, kHfSqueezeSpaces);
    o += R"(},"content":" "},)";
  }
  o += R"({"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},)";
  o += R"("pre_tokenizer":null,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},)"
       R"({"Sequence":{"id":"A","type_id":0}}],"pair":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},)"
       R"({"SpecialToken":{"id":"<s>","type_id":1}},{"Sequence":{"id":"B","type_id":1}}],"special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}},)";
  o += R"("decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},)"
       R"({"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]},)";
  return o;
}

// The trained pieces as an HF tokenizer.json (SentencePiece-style BPE).
std::string hf_sp_bpe_json(const std::vector<Piece>& pieces, const SpBpeTrainerConfig& cfg) {
  auto str = [](std::string& o, std::string_view s) { json::append_string(o, s); };
  std::string o = hf_sp_json_head(pieces, cfg);
  o += R"("model":{"type":"BPE","dropout":)";
  o += cfg.dropout > 0 ? fmt::format("{}", cfg.dropout) : std::string("null");
  o += R"(,"unk_token":"<unk>","continuing_subword_prefix":null,"end_of_word_suffix":null,)";
  o += fmt::format(R"("fuse_unk":true,"byte_fallback":{},"ignore_merges":false,"vocab":{{)", cfg.byte_fallback);
  std::unordered_map<std::string_view, std::size_t> id_of;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (i) o += ",";
    str(o, pieces[i].text);
    o += ":" + std::to_string(i);
    id_of.emplace(pieces[i].text, i);
  }
  o += R"(},"merges":[)";
  // Pieces by score, highest first (the merged pieces, in the order they were made):
  // every split of each into two pieces is a merge.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i].type == 1) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return pieces[a].score > pieces[b].score; });
  bool first = true;
  for (std::size_t i : order) {
    std::string_view p = pieces[i].text;
    const auto* u = reinterpret_cast<const unsigned char*>(p.data());
    for (std::size_t k = text::decode_utf8(u, p.size(), 0).len; k < p.size(); k += text::decode_utf8(u, p.size(), k).len) {
      if (!id_of.count(p.substr(0, k)) || !id_of.count(p.substr(k))) continue;
      if (!first) o += ",";
      first = false;
      o += "[";
      str(o, p.substr(0, k));
      o += ",";
      str(o, p.substr(k));
      o += "]";
    }
  }
  o += "]}}";
  return o;
}
}  // namespace

Result<std::string> train_sp_bpe(const WordCountMap& counts, const SpBpeTrainerConfig& cfg, SpTrainReport& report,
                                 const TrainProgress& progress, std::string* hf_json) {
  report = SpTrainReport{};
  std::vector<Piece> head = head_pieces(cfg);

  LMP_ASSIGN(auto chars, kept_characters(counts, cfg, head.size(), report));
  const std::size_t kept = chars.size();

  // Symbols: the kept characters (ids 0..kept-1 here); merges add to them.
  MergeProblem mp;
  for (const auto& [ch, f] : chars) {
    auto id = static_cast<TokenId>(mp.id_to_word.size());
    mp.word_to_id.emplace(ch, id);
    mp.id_to_word.push_back(ch);
    mp.len.push_back(1);
  }
  std::vector<const std::pair<const std::string, std::uint64_t>*> items;
  for (const auto& kv : counts) items.push_back(&kv);
  std::sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
  std::string ch;
  for (auto* kv : items) {
    std::vector<TokenId> w;
    const std::string& s = kv->first;
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    for (std::size_t i = 0; i < s.size();) {
      std::size_t n = text::decode_utf8(p, s.size(), i).len;
      ch.assign(s, i, n);
      auto it = mp.word_to_id.find(ch);
      // An unknown character breaks the word: no piece spans it.
      if (it == mp.word_to_id.end()) {
        if (w.size() > 1) {
          mp.words.push_back(std::move(w));
          mp.wcount.push_back(word_count(kv->second));
        }
        w.clear();
      } else {
        w.push_back(it->second);
      }
      i += n;
    }
    if (w.size() > 1) {
      mp.words.push_back(std::move(w));
      mp.wcount.push_back(word_count(kv->second));
    }
  }
  LMP_TRY(check_count_total(mp));
  report.words = items.size();
  report.alphabet = kept;
  std::size_t target = cfg.vocab_size - head.size();  // characters + merges
  auto merges = run_bpe_merges(
      mp,
      MergeLimits{target, std::max<std::uint64_t>(cfg.min_frequency, 1), cfg.max_piece_chars + 1,
                  [&cfg](const std::string& piece) { return sp_whitespace_valid(piece, cfg); }},
      report, progress,
      [](const std::string& a, const std::string& b, std::string& out) {
        out.reserve(a.size() + b.size());
        out.append(a);
        out.append(b);
      },
      [](const std::string& t) { return static_cast<std::uint32_t>(text::count_chars(t)); });
  report.merges = merges.size();

  // Pieces: meta, bytes, user-defined; the merged pieces in order (score -k); the characters.
  std::vector<Piece> pieces = head;
  std::size_t n_merged = mp.id_to_word.size() - kept;
  for (std::size_t k = 0; k < n_merged; ++k)
    pieces.push_back({mp.id_to_word[kept + k], -static_cast<float>(k), 1});
  for (std::size_t k = 0; k < kept; ++k)
    pieces.push_back({mp.id_to_word[k], -static_cast<float>(n_merged + k), 1});
  // A user-defined or byte piece that training also built stays the earlier one.
  std::unordered_map<std::string, std::size_t> seen;
  std::vector<Piece> unique;
  for (auto& p : pieces)
    if (seen.emplace(p.text, unique.size()).second) unique.push_back(std::move(p));
  report.vocab = unique.size();
  if (hf_json) *hf_json = hf_sp_bpe_json(unique, cfg);
  return model_proto(unique, cfg);
}

}  // namespace lmp::tok

// ---- Unigram ---------------------------------------------------------------------------

namespace lmp::tok {

namespace {

double digamma(double x) {
  double r = 0;
  while (x < 7) {
    r -= 1 / x;
    x += 1;
  }
  x -= 0.5;
  double xx = 1 / x, xx2 = xx * xx, xx4 = xx2 * xx2;
  r += std::log(x) + (1.0 / 24) * xx2 - (7.0 / 960) * xx4 + (31.0 / 8064) * xx4 * xx2 - (127.0 / 30720) * xx4 * xx4;
  return r;
}

double log_add(double a, double b) {
  if (a < b) std::swap(a, b);
  if (b == -std::numeric_limits<double>::infinity()) return a;
  return a + std::log1p(std::exp(b - a));
}

struct UWord {
  std::string_view text;  // a span of the words' buffer
  double count;
};

// The current vocabulary of the EM: pieces with log-probabilities, and a trie over them.
// The trie is built for the pieces of a pruning round; the EM drops pieces in between
// without rebuilding it: `remap` takes a trie value to the piece's index now (-1: dropped).
struct UModel {
  std::vector<std::string_view> pieces;  // views into the words and characters (stable)
  std::vector<double> score;
  std::vector<bool> required;  // characters: never dropped
  DoubleArray trie;
  std::vector<std::int32_t> remap;
  void rebuild() {
    std::vector<std::pair<std::string_view, std::int32_t>> keys;
    keys.reserve(pieces.size());
    for (std::size_t i = 0; i < pieces.size(); ++i) keys.emplace_back(pieces[i], static_cast<std::int32_t>(i));
    trie.build(std::move(keys));
    remap.resize(pieces.size());
    for (std::size_t i = 0; i < pieces.size(); ++i) remap[i] = static_cast<std::int32_t>(i);
  }
  // Every piece that starts at byte `start` of `w`: (end byte, trie value).
  template <class F>
  void matches(std::string_view w, std::size_t start, F&& f) const {
    std::int32_t node = 0;
    for (std::size_t k = start; k < w.size(); ++k) {
      node = trie.step(node, static_cast<unsigned char>(w[k]));
      if (node < 0) return;
      std::int32_t id = trie.value(node);
      if (id >= 0) f(k + 1, id);
    }
  }
};

// An edge of a word's lattice: piece `id` covers bytes [s, e).
struct Edge {
  std::uint32_t s, e;
  std::int32_t id;
};

// An edge found with trie value `trie_id`, added to `edges` under the piece's index now
// (nothing when the piece was dropped since the trie was built).
inline void add_edge(const UModel& m, std::vector<Edge>& edges, std::uint32_t s, std::uint32_t e,
                     std::int32_t trie_id) {
  std::int32_t id = m.remap[static_cast<std::size_t>(trie_id)];
  if (id >= 0) edges.push_back(Edge{s, e, id});
}

// The lattice of word `w` under the current pieces, walked through the trie: the edges in
// order of start, then of end; with `raw`, also all of them with their trie values.
void walk_lattice(const UModel& m, std::string_view w, std::vector<Edge>& edges, std::vector<Edge>* raw) {
  edges.clear();
  if (raw) raw->clear();
  for (std::size_t s = 0; s < w.size(); ++s)
    m.matches(w, s, [&](std::size_t e, std::int32_t trie_id) {
      add_edge(m, edges, static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(e), trie_id);
      if (raw) raw->push_back(Edge{static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(e), trie_id});
    });
}

// The lattices of the words of a chunk, as the trie of a round gives them (trie values,
// dropped pieces included), kept from the round's first EM iteration for its later ones
// and its pruning: walking the trie is most of their time (about a cache miss a byte),
// and the lattice of the pieces left is the same edges less the dropped ones, in the same
// order. 4 bytes an edge: trie value (22 bits), length - 1 (6 bits: up to 64 bytes, 16
// characters of 4 bytes) and the gap from the previous edge's start (4 bits: every kept
// character has a piece, so starts are at most 4 bytes apart). A word whose edges do not
// fit makes the chunk walk the trie every time instead.
struct ChunkLattices {
  std::vector<std::uint32_t> edges;
  std::vector<std::uint32_t> count;  // edges of each word
  bool ok = false;                   // complete (false: not filled, or an edge did not fit)

  void clear() {
    edges.clear();
    count.clear();
    ok = true;
  }
  void add(const std::vector<Edge>& word) {  // the next word's lattice, with trie values
    if (!ok) return;
    std::uint32_t prev = 0;
    for (const Edge& x : word) {
      const std::uint32_t len = x.e - x.s, gap = x.s - prev;
      if (static_cast<std::uint32_t>(x.id) >= (1u << 22) || len - 1 >= 64 || gap >= 16) {
        ok = false;
        edges = {};
        count = {};
        return;
      }
      edges.push_back(static_cast<std::uint32_t>(x.id) << 10 | (len - 1) << 4 | gap);
      prev = x.s;
    }
    count.push_back(static_cast<std::uint32_t>(word.size()));
  }
  // The lattices again, word after word, under the current pieces.
  struct Reader {
    const ChunkLattices& from;
    std::size_t word = 0, cursor = 0;
    void next(const UModel& m, std::vector<Edge>& out) {
      out.clear();
      std::uint32_t s = 0;
      for (std::size_t k = 0, n = from.count[word++]; k < n; ++k) {
        const std::uint32_t x = from.edges[cursor++];
        s += x & 15;
        add_edge(m, out, s, s + ((x >> 4) & 63) + 1, static_cast<std::int32_t>(x >> 10));
      }
    }
  };
};

// Forward-backward over the lattice of a word of n bytes: adds count × P(piece used) to
// `expected`; returns the word's log-likelihood.
double expect(const UModel& m, std::size_t n, const std::vector<Edge>& edges, double count,
              std::vector<double>& expected, std::vector<double>& alpha, std::vector<double>& beta) {
  const double ninf = -std::numeric_limits<double>::infinity();
  alpha.assign(n + 1, ninf);
  beta.assign(n + 1, ninf);
  alpha[0] = 0;
  for (const Edge& x : edges)
    if (alpha[x.s] != ninf) alpha[x.e] = log_add(alpha[x.e], alpha[x.s] + m.score[static_cast<std::size_t>(x.id)]);
  if (alpha[n] == ninf) return 0;  // not coverable (characters dropped by coverage)
  beta[n] = 0;
  for (std::size_t k = edges.size(); k-- > 0;) {
    const Edge& x = edges[k];
    if (beta[x.e] != ninf) beta[x.s] = log_add(beta[x.s], beta[x.e] + m.score[static_cast<std::size_t>(x.id)]);
  }
  const double z = alpha[n];
  for (const Edge& x : edges) {
    if (alpha[x.s] == ninf || beta[x.e] == ninf) continue;
    double p = std::exp(alpha[x.s] + m.score[static_cast<std::size_t>(x.id)] + beta[x.e] - z);
    expected[static_cast<std::size_t>(x.id)] += count * p;
  }
  return z * count;
}

// Viterbi over the lattice of a word of n bytes: the pieces of its best segmentation
// (empty if none), skipping piece `banned` (for the alternatives of pruning).
void viterbi(const UModel& m, std::size_t n, const std::vector<Edge>& edges, std::int32_t banned,
             std::vector<std::int32_t>& out, std::vector<double>& best, std::vector<std::int32_t>& from,
             std::vector<std::int32_t>& piece) {
  const double ninf = -std::numeric_limits<double>::infinity();
  best.assign(n + 1, ninf);
  from.assign(n + 1, -1);
  piece.assign(n + 1, -1);
  best[0] = 0;
  for (const Edge& x : edges) {  // in order of start: best[x.s] is final
    if (x.id == banned || best[x.s] == ninf) continue;
    double c = best[x.s] + m.score[static_cast<std::size_t>(x.id)];
    if (c > best[x.e]) {
      best[x.e] = c;
      from[x.e] = static_cast<std::int32_t>(x.s);
      piece[x.e] = x.id;
    }
  }
  out.clear();
  if (best[n] == ninf) return;
  for (std::size_t e = n; e > 0; e = static_cast<std::size_t>(from[e])) out.push_back(piece[e]);
  std::reverse(out.begin(), out.end());
}

// Substring counts of the seed search. A key is a span of the words' buffer packed in 64
// bits (offset 40, length 16, a hash tag 8), so a slot is 16 bytes; the hash is 32 bits
// and recomputed from the buffer on growth. Open addressing, no allocation per key.
class SpanCounts {
 public:
  static constexpr std::size_t kMaxLen = 0xFFFF;
  static std::uint32_t hash(const char* p, std::size_t n) { return static_cast<std::uint32_t>(hash_bytes(p, n) >> 32); }
  explicit SpanCounts(const char* base) : base_(base) {}
  void clear() {
    slots_.assign(1024, Slot{});
    slots_.shrink_to_fit();
    size_ = 0;
  }
  // The count of span [off, off + len) with hash h, or 0 when absent.
  double find(std::uint64_t off, std::size_t len, std::uint32_t h) const {
    return slots_.empty() ? 0.0 : slots_[probe(off, len, h)].count;
  }
  void add(std::uint64_t off, std::size_t len, std::uint32_t h, double c) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    Slot& s = slots_[probe(off, len, h)];
    if (!s.key) {
      s.key = pack(off, len, h);
      ++size_;
    }
    s.count += c;
  }
  // f(offset, length, count) for every key.
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.key) f(s.key >> 24, (s.key >> 8) & kMaxLen, s.count);
  }

 private:
  struct Slot {
    std::uint64_t key = 0;  // 0: empty (a key's length is never 0)
    double count = 0;
  };
  static std::uint64_t pack(std::uint64_t off, std::size_t len, std::uint32_t h) {
    return off << 24 | static_cast<std::uint64_t>(len) << 8 | (h >> 24);
  }
  std::size_t probe(std::uint64_t off, std::size_t len, std::uint32_t h) const {
    const std::uint64_t low = pack(0, len, h);
    std::size_t mask = slots_.size() - 1, i = h & mask;
    for (;; i = (i + 1) & mask) {
      std::uint64_t k = slots_[i].key;
      if (!k) return i;
      if ((k & 0xFFFFFF) == low && std::memcmp(base_ + (k >> 24), base_ + off, len) == 0) return i;
    }
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::max<std::size_t>(1024, old.size() * 2), Slot{});
    for (const Slot& s : old)
      if (s.key) {
        std::uint64_t off = s.key >> 24;
        std::size_t len = (s.key >> 8) & kMaxLen;
        slots_[probe(off, len, hash(base_ + off, len))] = s;
      }
  }
  const char* base_;
  std::vector<Slot> slots_;
  std::size_t size_ = 0;
};

// Words are cut into kChunks fixed slices, each summed on its own and the sums added in
// order, so the result is the same on any number of threads.
constexpr std::size_t kChunks = 4;

// Call f(chunk, lo, hi) for the kChunks slices of [0, n), on up to `threads` threads.
template <class F>
void run_chunks(std::size_t n, int threads, F&& f) {
  std::atomic<std::size_t> next{0};
  auto t = static_cast<std::size_t>(std::clamp(threads, 1, static_cast<int>(kChunks)));
  run_parallel(t, [&](std::size_t) {
    for (std::size_t c; (c = next.fetch_add(1)) < kChunks;) f(c, n * c / kChunks, n * (c + 1) / kChunks);
  });
}

}  // namespace

namespace {
std::string hf_unigram_json(const std::vector<Piece>& pieces, const SpBpeTrainerConfig& cfg) {
  auto str = [](std::string& o, std::string_view s) { json::append_string(o, s); };
  std::string o = hf_sp_json_head(pieces, cfg);
  o += fmt::format(R"("model":{{"type":"Unigram","unk_id":0,"byte_fallback":{},"vocab":[)", cfg.byte_fallback);
  // HF scores an unknown character 10 below the lowest score of all pieces; SentencePiece
  // below the lowest normal piece. Giving the special and byte pieces that lowest score
  // (they are never chosen by score: specials match as added tokens, bytes by fallback)
  // makes the two agree.
  float lowest = 0;
  for (const auto& p : pieces)
    if (p.type == 1) lowest = std::min(lowest, p.score);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (i) o += ",";
    o += "[";
    str(o, pieces[i].text);
    o += fmt::format(",{}]", static_cast<double>(pieces[i].type == 1 ? pieces[i].score : lowest));
  }
  o += "]}}";
  return o;
}
}  // namespace

Result<std::string> train_sp_unigram(const WordCountMap& counts, const UnigramTrainerConfig& cfg, SpTrainReport& report,
                                     const TrainProgress& progress, std::string* hf_json) {
  report = SpTrainReport{};
  std::vector<Piece> head = head_pieces(cfg);
  LMP_ASSIGN(auto chars, kept_characters(counts, cfg, head.size(), report));
  const std::size_t kept = chars.size();
  std::vector<bool> keep_chars(text::kInvalidBase + 256, false);  // by code point, as kept_characters counts
  for (const auto& c : chars)
    keep_chars[text::decode_utf8(reinterpret_cast<const unsigned char*>(c.first.data()), c.first.size(), 0).cp] = true;

  // Words: split where a character is not kept (no piece may contain it); sorted, back
  // to back in one buffer.
  std::string buf;
  std::vector<UWord> words;
  {
    // The pieces of the words between dropped characters, as views of the counts' keys,
    // sorted and the equal ones added up (counts are whole numbers: exact in any order).
    std::vector<std::pair<std::string_view, double>> parts;
    parts.reserve(counts.size());
    for (const auto& [w, c] : counts) {
      const auto* p = reinterpret_cast<const unsigned char*>(w.data());
      const std::string_view ws(w);
      std::size_t start = 0;
      for (std::size_t i = 0; i < w.size();) {
        text::CodePoint ch = text::decode_utf8(p, w.size(), i);
        if (!keep_chars[ch.cp]) {
          if (i > start) parts.emplace_back(ws.substr(start, i - start), static_cast<double>(c));
          start = i + ch.len;
        }
        i += ch.len;
      }
      if (w.size() > start) parts.emplace_back(ws.substr(start), static_cast<double>(c));
    }
    std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::size_t n = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (n > 0 && parts[n - 1].first == parts[i].first) parts[n - 1].second += parts[i].second;
      else parts[n++] = parts[i];
    }
    parts.resize(n);
    std::size_t total = 0;
    for (const auto& w : parts) total += w.first.size();
    buf.reserve(total);
    for (const auto& w : parts) buf += w.first;
    words.reserve(parts.size());
    std::size_t off = 0;
    for (const auto& [w, c] : parts) {
      words.push_back(UWord{std::string_view(buf).substr(off, w.size()), c});
      off += w.size();
    }
  }
  report.words = words.size();
  report.alphabet = kept;

  // Seeds: frequent substrings, grown one character at a time from frequent ones. Each
  // character position of the words stays alive while the substring starting there, one
  // character shorter, is frequent; a level hashes the substrings at live positions
  // (threads over words), counts them (each thread one hash class, so no substring is
  // counted twice and no maps need adding up), then marks the positions whose substring
  // fell short.
  const std::uint64_t min_seed = std::max<std::uint64_t>(2, cfg.min_frequency);
  struct Seed {
    std::uint64_t off, len;
    double score;  // count × length in characters
  };
  std::vector<Seed> seed_list;
  auto seed_text = [&](const Seed& x) { return std::string_view(buf).substr(x.off, x.len); };
  auto seed_better = [&](const Seed& a, const Seed& b) {
    return a.score != b.score ? a.score > b.score : seed_text(a) < seed_text(b);
  };
  {
    // Character boundaries of every word: the word's characters are
    // pos[first[wi]] .. pos[first[wi + 1] - 1] (offsets into buf), plus its end.
    std::vector<std::uint64_t> first(words.size() + 1);
    std::vector<std::uint64_t> pos;
    pos.reserve(buf.size() / 2 + words.size());
    for (std::size_t wi = 0; wi < words.size(); ++wi) {
      first[wi] = pos.size();
      const auto* p = reinterpret_cast<const unsigned char*>(words[wi].text.data());
      const auto base = static_cast<std::uint64_t>(words[wi].text.data() - buf.data());
      for (std::size_t i = 0; i < words[wi].text.size();) {
        pos.push_back(base + i);
        i += text::decode_utf8(p, words[wi].text.size(), i).len;
      }
      pos.push_back(base + words[wi].text.size());
    }
    first[words.size()] = pos.size();
    // Every character may start a seed (a word's end may not); seeds break no ▁ rule
    // (sp_whitespace_valid), but a frequent substring that does still grows.
    std::vector<std::uint8_t> alive(pos.size(), 1);
    for (std::size_t wi = 0; wi < words.size(); ++wi) alive[first[wi + 1] - 1] = 0;
    std::vector<std::uint32_t> hash(pos.size());
    const int nt = std::clamp(cfg.threads, 1, 8);
    const auto nts = static_cast<std::size_t>(nt);
    std::vector<SpanCounts> next(nts, SpanCounts(buf.data()));
    seed_list.reserve(cfg.seed_size + cfg.seed_size / 2);
    auto over_words = [&](auto&& f) {  // f(first word, end word) on nt slices
      run_parallel(nts, [&](std::size_t t) { f(words.size() * t / nts, words.size() * (t + 1) / nts); });
    };
    for (std::size_t len = 2; len <= cfg.max_piece_chars; ++len) {
      over_words([&](std::size_t lo, std::size_t hi) {
        for (std::size_t wi = lo; wi < hi; ++wi)
          for (std::uint64_t k = first[wi], end = first[wi + 1]; k < end; ++k) {
            if (!alive[k]) continue;
            if (k + len >= end || pos[k + len] - pos[k] > SpanCounts::kMaxLen) {
              alive[k] = 0;
              continue;
            }
            hash[k] = SpanCounts::hash(buf.data() + pos[k], pos[k + len] - pos[k]);
          }
      });
      run_parallel(nts, [&](std::size_t t) {
        SpanCounts& mine = next[t];
        mine.clear();
        for (std::size_t wi = 0; wi < words.size(); ++wi)
          for (std::uint64_t k = first[wi], end = first[wi + 1]; k < end; ++k)
            if (alive[k] && hash[k] % nts == t) mine.add(pos[k], pos[k + len] - pos[k], hash[k], words[wi].count);
      });
      bool any = false;
      for (auto& counted : next)
        counted.for_each([&](std::uint64_t off, std::uint64_t n, double c) {
          if (c < static_cast<double>(min_seed)) return;
          any = true;
          if (!sp_whitespace_valid(std::string_view(buf).substr(off, n), cfg)) return;
          // Keep the list bounded: the best seed_size of everything are among the best
          // seed_size of what has been counted so far.
          if (seed_list.size() == seed_list.capacity()) {
            std::nth_element(seed_list.begin(), seed_list.begin() + static_cast<std::ptrdiff_t>(cfg.seed_size),
                             seed_list.end(), seed_better);
            seed_list.resize(cfg.seed_size);
          }
          seed_list.push_back(Seed{off, n, c * static_cast<double>(len)});
        });
      if (!any) break;
      over_words([&](std::size_t lo, std::size_t hi) {
        for (std::size_t wi = lo; wi < hi; ++wi)
          for (std::uint64_t k = first[wi], end = first[wi + 1]; k < end; ++k)
            if (alive[k]) {
              std::uint64_t n = pos[k + len] - pos[k];
              alive[k] = next[hash[k] % nts].find(pos[k], n, hash[k]) >= static_cast<double>(min_seed);
            }
      });
    }
  }
  std::sort(seed_list.begin(), seed_list.end(), seed_better);
  if (seed_list.size() > cfg.seed_size) seed_list.resize(cfg.seed_size);
  UModel m;
  for (const auto& c : chars) {
    m.pieces.push_back(c.first);
    m.score.push_back(static_cast<double>(c.second));
    m.required.push_back(true);
  }
  for (const Seed& x : seed_list) {
    m.pieces.push_back(seed_text(x));
    m.score.push_back(x.score);
    m.required.push_back(false);
  }
  seed_list.clear();
  {
    double sum = 0;
    for (double s : m.score) sum += s;
    for (double& s : m.score) s = std::log(s) - std::log(sum);
  }
  m.rebuild();

  const std::size_t target = cfg.vocab_size - head.size();
  const auto desired = static_cast<std::size_t>(static_cast<double>(target) * 1.1);
  const int threads = cfg.threads;
  std::vector<double> expected;
  std::array<ChunkLattices, kChunks> lattices;  // of the trie of this round (chunk c: run_chunks' slice c)
  std::size_t rounds = 0;
  for (;;) {
    // EM.
    for (int it = 0; it < cfg.em_sub_iterations; ++it) {
      // Fixed chunks of words, summed in order: the same result on any thread count.
      std::vector<std::vector<double>> part(kChunks);
      run_chunks(words.size(), threads, [&](std::size_t c, std::size_t lo, std::size_t hi) {
        std::vector<double> e(m.pieces.size(), 0.0), al, be;
        std::vector<Edge> edges, raw;
        ChunkLattices& cache = lattices[c];
        const bool replay = cache.ok;
        if (!replay && cfg.reuse_lattices) cache.clear();
        ChunkLattices::Reader reader{cache};
        for (std::size_t k = lo; k < hi; ++k) {
          if (replay) {
            reader.next(m, edges);
          } else {
            walk_lattice(m, words[k].text, edges, cache.ok ? &raw : nullptr);
            cache.add(raw);
          }
          expect(m, words[k].text.size(), edges, words[k].count, e, al, be);
        }
        part[c] = std::move(e);
      });
      expected.assign(m.pieces.size(), 0.0);
      for (const auto& p : part)
        for (std::size_t i = 0; i < p.size(); ++i) expected[i] += p[i];
      double sum = 0;
      UModel n;
      std::vector<std::int32_t> now(m.pieces.size(), -1);  // old index → new, -1: dropped
      for (std::size_t i = 0; i < m.pieces.size(); ++i) {
        if (expected[i] < 0.5 && !m.required[i]) continue;
        now[i] = static_cast<std::int32_t>(n.pieces.size());
        n.pieces.push_back(std::move(m.pieces[i]));
        n.score.push_back(std::max(expected[i], 0.5));
        n.required.push_back(m.required[i]);
        sum += n.score.back();
      }
      double lsum = digamma(sum);
      for (double& s : n.score) s = digamma(s) - lsum;
      n.trie = std::move(m.trie);  // the dropped pieces leave it through remap
      n.remap = std::move(m.remap);
      for (std::int32_t& r : n.remap)
        if (r >= 0) r = now[static_cast<std::size_t>(r)];
      m = std::move(n);
    }
    ++rounds;
    if (progress) progress(rounds, 0);
    if (m.pieces.size() <= desired) break;
    // Prune: Viterbi counts, then each piece's loss if its uses were re-segmented.
    std::vector<double> vfreq(m.pieces.size(), 0.0);
    double vsum = 0;
    {
      std::vector<std::vector<double>> part(kChunks);
      std::vector<double> psum(kChunks, 0.0);
      run_chunks(words.size(), threads, [&](std::size_t c, std::size_t lo, std::size_t hi) {
        std::vector<double> f(m.pieces.size(), 0.0), b;
        std::vector<std::int32_t> sg, fr, pa;
        std::vector<Edge> edges;
        ChunkLattices::Reader reader{lattices[c]};
        for (std::size_t k = lo; k < hi; ++k) {
          if (lattices[c].ok) reader.next(m, edges);
          else walk_lattice(m, words[k].text, edges, nullptr);
          viterbi(m, words[k].text.size(), edges, -1, sg, b, fr, pa);
          for (auto id : sg) f[static_cast<std::size_t>(id)] += words[k].count;
          psum[c] += words[k].count * static_cast<double>(sg.size());
        }
        part[c] = std::move(f);
      });
      for (std::size_t c = 0; c < kChunks; ++c) {
        vsum += psum[c];
        for (std::size_t i = 0; i < part[c].size(); ++i) vfreq[i] += part[c][i];
      }
    }
    // Each piece's loss (NaN: kept always, a character or a piece with no other
    // segmentation), on threads: each piece's is its own.
    std::vector<double> piece_loss(m.pieces.size());
    run_chunks(m.pieces.size(), threads, [&](std::size_t, std::size_t lo, std::size_t hi) {
      std::vector<double> b;
      std::vector<std::int32_t> sg, fr, pa;
      std::vector<Edge> edges;
      for (std::size_t i = lo; i < hi; ++i) {
        double& out = piece_loss[i];
        if (m.required[i]) {
          out = std::numeric_limits<double>::quiet_NaN();
          continue;
        }
        if (vfreq[i] == 0) {
          out = -std::numeric_limits<double>::infinity();  // unused: first to go
          continue;
        }
        walk_lattice(m, m.pieces[i], edges, nullptr);
        viterbi(m, m.pieces[i].size(), edges, static_cast<std::int32_t>(i), sg, b, fr, pa);
        if (sg.empty()) {
          out = std::numeric_limits<double>::quiet_NaN();
          continue;
        }
        const double f = vfreq[i] / vsum;
        const double logprob_sp = std::log(vfreq[i]) - std::log(vsum);
        const double new_sum = vsum + vfreq[i] * static_cast<double>(sg.size() - 1);
        double logprob_alt = 0;
        for (auto a : sg) logprob_alt += std::log(vfreq[static_cast<std::size_t>(a)] + vfreq[i]) - std::log(new_sum);
        out = f * (logprob_sp - logprob_alt);
      }
    });
    std::vector<std::pair<double, std::size_t>> loss;
    std::vector<std::size_t> keep_always;
    for (std::size_t i = 0; i < m.pieces.size(); ++i) {
      if (std::isnan(piece_loss[i])) keep_always.push_back(i);
      else loss.emplace_back(piece_loss[i], i);
    }
    std::sort(loss.begin(), loss.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::size_t want = std::max(desired, static_cast<std::size_t>(cfg.shrinking_factor * static_cast<double>(m.pieces.size())));
    std::vector<bool> keep(m.pieces.size(), false);
    for (auto i : keep_always) keep[i] = true;
    std::size_t have = keep_always.size();
    for (const auto& [l, i] : loss) {
      if (have >= want) break;
      keep[i] = true;
      ++have;
    }
    UModel n;
    for (std::size_t i = 0; i < m.pieces.size(); ++i)
      if (keep[i]) {
        n.pieces.push_back(std::move(m.pieces[i]));
        n.score.push_back(m.score[i]);
        n.required.push_back(m.required[i]);
      }
    if (n.pieces.size() == m.pieces.size()) {  // nothing more can go
      m = std::move(n);
      m.rebuild();
      break;
    }
    m = std::move(n);
    m.rebuild();
    for (ChunkLattices& l : lattices) l.ok = false;  // a new trie: its lattices are walked anew
  }
  // Final: the characters, then the best-scoring pieces up to the vocabulary size.
  std::vector<std::size_t> order(m.pieces.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return m.score[a] > m.score[b]; });
  std::vector<bool> take(m.pieces.size(), false);
  std::size_t taken = 0;
  double min_score = 0;
  for (std::size_t i = 0; i < m.pieces.size(); ++i)
    if (m.required[i]) {
      take[i] = true;
      ++taken;
    }
  for (std::size_t i : order) {
    if (taken >= target) break;
    if (!take[i]) {
      take[i] = true;
      ++taken;
    }
  }
  std::vector<Piece> pieces = head;
  for (std::size_t i : order)
    if (take[i]) {
      pieces.push_back({std::string(m.pieces[i]), static_cast<float>(m.score[i]), 1});
      min_score = std::min(min_score, m.score[i]);
    }
  (void)min_score;
  report.vocab = pieces.size();
  report.merges = rounds;
  report.stop = pieces.size() >= cfg.vocab_size ? StopReason::vocab_full : StopReason::no_pairs;
  if (hf_json) *hf_json = hf_unigram_json(pieces, cfg);
  return model_proto(pieces, cfg, 1);
}

}  // namespace lmp::tok
