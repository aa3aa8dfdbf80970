#include "lmpipe/tok/sp_trainer.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "lmpipe/text/unicode.h"
#include "merge_core.h"

namespace lmp::tok {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // ▁

// ---- protobuf writing ------------------------------------------------------------------
void put_varint(std::string& o, std::uint64_t v) {
  while (v >= 0x80) {
    o += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  o += static_cast<char>(v);
}
void put_tag(std::string& o, int field, int wire) { put_varint(o, static_cast<std::uint64_t>(field) << 3 | static_cast<unsigned>(wire)); }
void put_bytes(std::string& o, int field, std::string_view v) {
  put_tag(o, field, 2);
  put_varint(o, v.size());
  o += v;
}
void put_varint_field(std::string& o, int field, std::uint64_t v) {
  put_tag(o, field, 0);
  put_varint(o, v);
}
void put_float(std::string& o, int field, float f) {
  put_tag(o, field, 5);
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  for (int k = 0; k < 4; ++k) o += static_cast<char>((bits >> (8 * k)) & 0xFF);
}

struct Piece {
  std::string text;
  float score;
  int type;  // SentencePiece's: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte
};

std::string model_proto(const std::vector<Piece>& pieces, const SpBpeTrainerConfig& cfg) {
  std::string o;
  for (const auto& p : pieces) {
    std::string m;
    put_bytes(m, 1, p.text);
    put_float(m, 2, p.score);
    if (p.type != 1) put_varint_field(m, 3, static_cast<std::uint64_t>(p.type));
    put_bytes(o, 1, m);
  }
  std::string t;  // TrainerSpec: what spm_encode needs, and what it was trained with
  put_varint_field(t, 3, 2);  // model_type BPE
  put_varint_field(t, 4, pieces.size());
  put_float(t, 10, static_cast<float>(cfg.character_coverage));
  put_varint_field(t, 20, cfg.max_piece_chars);
  put_varint_field(t, 25, cfg.split_digits ? 1 : 0);
  put_varint_field(t, 35, cfg.byte_fallback ? 1 : 0);
  put_varint_field(t, 40, 0);  // unk_id
  put_varint_field(t, 41, 1);  // bos_id
  put_varint_field(t, 42, 2);  // eos_id
  put_varint_field(t, 43, static_cast<std::uint64_t>(-1) & 0xFFFFFFFFFFFFFFFFull);  // pad_id -1
  put_bytes(o, 2, t);
  std::string n;  // NormalizerSpec: identity (no charsmap) or NFKC is done by us before
  put_bytes(n, 1, "identity");
  put_varint_field(n, 3, 1);  // add_dummy_prefix
  put_varint_field(n, 4, 0);  // remove_extra_whitespaces: keep spaces as they are
  put_varint_field(n, 5, 1);  // escape_whitespaces
  put_bytes(o, 3, n);
  return o;
}

// Character class for piece boundaries: digits, or a script.
int boundary_class(std::uint32_t cp) {
  if (text::char_class(cp) & text::kNumber) return -2;
  return text::script_of(cp);
}
bool is_common(int cls) { return cls == 0 /* USCRIPT_COMMON */ || cls == 1 /* USCRIPT_INHERITED */; }

}  // namespace

void sp_normalize_line(std::string_view line, std::string& out) {
  out.clear();
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.empty()) return;
  out += kSpace;
  const auto* p = reinterpret_cast<const unsigned char*>(line.data());
  for (std::size_t i = 0; i < line.size();) {
    auto c = text::decode_utf8(p, line.size(), i);
    if (c.cp == ' ') out += kSpace;
    else if (c.cp >= text::kInvalidBase) out += "\xEF\xBF\xBD";
    else out.append(line.substr(i, c.len));
    i += c.len;
  }
}

void sp_count_words(std::string_view s, bool split_digits, WordCountMap& counts) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t start = 0, i = 0;
  bool in_prefix = true;  // still in the ▁ run that starts the word
  int cls = 0;
  bool have_cls = false;
  std::uint32_t prev_cp = 0;
  auto emit = [&](std::size_t end) {
    if (end > start) {
      auto it = counts.find(s.substr(start, end - start));
      if (it != counts.end()) ++it->second;
      else counts.emplace(std::string(s.substr(start, end - start)), 1);
    }
    start = end;
  };
  while (i < s.size()) {
    if (s.compare(i, kSpace.size(), kSpace) == 0) {
      if (!in_prefix) {
        emit(i);
        in_prefix = true;
        have_cls = false;
      }
      i += kSpace.size();
      continue;
    }
    auto c = text::decode_utf8(p, s.size(), i);
    int k = boundary_class(c.cp);
    bool digit = k == -2;
    if (have_cls) {
      bool split = false;
      if (digit != (cls == -2)) split = true;                                   // digits apart
      else if (digit && split_digits) split = true;                             // each digit alone
      else if (!digit && k != cls && !is_common(k) && !is_common(cls)) split = true;  // one script
      else if (!digit && (is_common(k) != is_common(cls))) split = true;
      if (split) emit(i);
    }
    (void)prev_cp;
    prev_cp = c.cp;
    cls = k;
    have_cls = true;
    in_prefix = false;
    i += c.len;
  }
  emit(s.size());
}

Result<std::string> train_sp_bpe(const WordCountMap& counts, const SpBpeTrainerConfig& cfg, SpTrainReport& report,
                                 const TrainProgress& progress) {
  report = SpTrainReport{};
  std::vector<Piece> head = {{"<unk>", 0, 2}, {"<s>", 0, 3}, {"</s>", 0, 3}};
  if (cfg.byte_fallback) {
    char name[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      head.push_back({name, 0, 6});
    }
  }
  for (const auto& u : cfg.user_defined) head.push_back({u, 0, 4});

  // Characters by frequency; keep the most frequent up to the coverage.
  std::unordered_map<std::string, std::uint64_t> freq;
  std::uint64_t total = 0;
  for (const auto& [w, c] : counts) {
    const auto* p = reinterpret_cast<const unsigned char*>(w.data());
    for (std::size_t i = 0; i < w.size();) {
      std::size_t n = text::decode_utf8(p, w.size(), i).len;
      freq[w.substr(i, n)] += c;
      total += c;
      i += n;
    }
  }
  std::vector<std::pair<std::string, std::uint64_t>> chars(freq.begin(), freq.end());
  std::sort(chars.begin(), chars.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::uint64_t covered = 0;
  std::size_t kept = 0;
  for (; kept < chars.size(); ++kept) {
    if (kept > 0 && static_cast<double>(covered) >= cfg.character_coverage * static_cast<double>(total)) break;
    covered += chars[kept].second;
  }
  // ▁ is always a character of the model.
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
  if (head.size() + kept > cfg.vocab_size)
    return make_error(Errc::invalid_argument,
                      "vocabulary size {} is too small: {} meta and byte pieces and {} required characters need {} "
                      "(lower --character-coverage or raise --vocab-size)",
                      cfg.vocab_size, head.size(), kept, head.size() + kept);

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
          mp.wcount.push_back(static_cast<std::int64_t>(std::min<std::uint64_t>(kv->second, std::numeric_limits<std::int64_t>::max() / 4)));
        }
        w.clear();
      } else {
        w.push_back(it->second);
      }
      i += n;
    }
    if (w.size() > 1) {
      mp.words.push_back(std::move(w));
      mp.wcount.push_back(static_cast<std::int64_t>(std::min<std::uint64_t>(kv->second, std::numeric_limits<std::int64_t>::max() / 4)));
    }
  }
  report.words = items.size();
  report.alphabet = kept;
  std::size_t target = cfg.vocab_size - head.size();  // characters + merges
  auto merges = run_bpe_merges(
      mp, MergeLimits{target, std::max<std::uint64_t>(cfg.min_frequency, 1), cfg.max_piece_chars + 1}, report, progress,
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
  return model_proto(unique, cfg);
}

}  // namespace lmp::tok
