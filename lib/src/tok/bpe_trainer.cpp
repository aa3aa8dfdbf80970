#include "lmpipe/tok/bpe_trainer.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "lmpipe/core/flat_map.h"
#include "lmpipe/core/parallel.h"
#include "lmpipe/tok/byte_level.h"
#include "merge_core.h"

namespace lmp::tok {

// ---- Word counting ----------------------------------------------------------------

WordCounter::WordCounter(const PreTokenizer& pre, int threads, std::optional<text::BertNormalization> bert)
    : pre_(pre), bert_(bert), threads_(std::max(1, threads)), maps_(static_cast<std::size_t>(std::max(1, threads))) {}

void WordCounter::count_slice(std::string_view slice, WordCountMap& m, std::vector<Range>& ranges) {
  std::size_t pos = 0;
  std::string norm;
  while (pos < slice.size()) {
    std::size_t nl = slice.find('\n', pos);
    std::size_t end = nl == std::string_view::npos ? slice.size() : nl + 1;
    std::string_view line = slice.substr(pos, end - pos);
    pos = end;
    if (bert_) {
      text::bert_normalize(line, *bert_, norm);
      line = norm;
    }
    ranges.clear();
    pre_.split(line, ranges);
    for (const Range& r : ranges) {
      std::string_view w = line.substr(r.begin, r.end - r.begin);
      auto it = m.find(w);
      if (it != m.end()) ++it->second;
      else m.emplace(std::string(w), 1);
    }
  }
}

void WordCounter::add(std::string_view chunk) {
  for (char c : chunk) lines_ += c == '\n';
  if (threads_ == 1 || chunk.size() < (1u << 16)) {
    std::vector<Range> ranges;
    count_slice(chunk, maps_[0], ranges);
    return;
  }
  std::vector<std::string_view> slices = split_at_lines(chunk, threads_);
  run_parallel(slices.size(), [&](std::size_t t) {
    std::vector<Range> ranges;
    count_slice(slices[t], maps_[t], ranges);
  });
}

WordCountMap WordCounter::take() {
  WordCountMap out = std::move(maps_[0]);
  for (std::size_t t = 1; t < maps_.size(); ++t) {
    for (auto& [w, c] : maps_[t]) out[w] += c;
    maps_[t] = WordCountMap();
  }
  maps_[0] = WordCountMap();
  return out;
}

std::string format_counts(const WordCountMap& counts, std::string_view pre_tokenizer) {
  std::string out = fmt::format("#lmpipe-counts v1 pre_tokenizer={}\n", pre_tokenizer);
  for (auto* kv : words_in_byte_order(counts)) {
    out += std::to_string(kv->second);
    out += '\t';
    out += bytes_to_byte_level(kv->first);
    out += '\n';
  }
  return out;
}

Status read_counts(std::string_view text, const std::string& name, WordCountMap& counts,
                   std::string& pre_tokenizer) {
  constexpr std::string_view kMagic = "#lmpipe-counts v1 pre_tokenizer=";
  std::size_t nl = text.find('\n');
  std::string_view head = text.substr(0, nl);
  if (head.substr(0, kMagic.size()) != kMagic)
    return make_error(Errc::parse, "{}:1: not a count file (expected '{}...')", name, kMagic);
  std::string pre(head.substr(kMagic.size()));
  if (pre_tokenizer.empty()) pre_tokenizer = pre;
  else if (pre != pre_tokenizer)
    return make_error(Errc::invalid_argument, "{}:1: counted with pre-tokenizer '{}', not '{}'", name, pre,
                      pre_tokenizer);
  std::size_t pos = nl == std::string_view::npos ? text.size() : nl + 1;
  std::size_t line_no = 1;
  while (pos < text.size()) {
    std::size_t e = text.find('\n', pos);
    if (e == std::string_view::npos) e = text.size();
    std::string_view line = text.substr(pos, e - pos);
    pos = e + 1;
    ++line_no;
    if (line.empty()) continue;
    auto tab = line.find('\t');
    if (tab == std::string_view::npos || tab == 0)
      return make_error(Errc::parse, "{}:{}: expected COUNT<TAB>WORD", name, line_no);
    std::uint64_t c = 0;
    for (char ch : line.substr(0, tab)) {
      if (ch < '0' || ch > '9') return make_error(Errc::parse, "{}:{}: invalid count", name, line_no);
      auto d = static_cast<std::uint64_t>(ch - '0');
      if (c > (std::numeric_limits<std::uint64_t>::max() - d) / 10)
        return make_error(Errc::parse, "{}:{}: count overflows 64 bits", name, line_no);
      c = c * 10 + d;
    }
    auto word = byte_level_to_bytes(line.substr(tab + 1));
    if (!word || word->empty())
      return make_error(Errc::parse, "{}:{}: word is not byte-level text", name, line_no);
    auto& total = counts[*word];
    if (total > std::numeric_limits<std::uint64_t>::max() - c)
      return make_error(Errc::parse, "{}:{}: count of this word, summed over its lines, overflows 64 bits", name, line_no);
    total += c;
  }
  return {};
}

// ---- Training ---------------------------------------------------------------------

namespace {

struct HeapEntry {
  std::uint64_t count;
  std::uint64_t pair;  // pair_key(a, b): comparing keys compares (a, b)
  std::vector<std::uint32_t> pos;  // words that had the pair when pushed (sorted)
};

// Max-heap order: higher count first, then the smaller pair.
bool heap_less(const HeapEntry& x, const HeapEntry& y) {
  if (x.count != y.count) return x.count < y.count;
  return x.pair > y.pair;
}

}  // namespace

std::vector<const WordCountMap::value_type*> words_in_byte_order(const WordCountMap& counts) {
  std::vector<const WordCountMap::value_type*> items;
  items.reserve(counts.size());
  for (const auto& kv : counts) items.push_back(&kv);
  std::sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
  return items;
}

std::int64_t word_count(std::uint64_t c) {
  return static_cast<std::int64_t>(std::min<std::uint64_t>(c, std::uint64_t{1} << 62));
}

Status check_count_total(const MergeProblem& mp) {
  constexpr std::uint64_t kLimit = std::uint64_t{1} << 61;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < mp.words.size(); ++i) {
    auto c = static_cast<std::uint64_t>(mp.wcount[i]);
    std::uint64_t n = mp.words[i].size();
    if (n != 0 && c > (kLimit - total) / n)
      return make_error(Errc::out_of_range,
                        "word counts too large: count x symbols, summed over the {} words, passes 2^61, where the "
                        "64-bit pair counts of the merge loop could overflow", mp.words.size());
    total += c * n;
  }
  return {};
}

// Replace each (a, b) in `w` by `repl`, recording pair count changes as HF's Word::merge.
void merge_word(std::vector<TokenId>& w, TokenId a, TokenId b, TokenId repl, std::size_t max_len,
                const std::vector<std::uint32_t>& len, std::vector<Change>& ch) {
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w[i] != a || i + 1 >= w.size() || w[i + 1] != b) continue;
    std::size_t new_len = len[static_cast<std::size_t>(repl)];
    if (i > 0) {
      ch.push_back({pair_key(w[i - 1], a), -1});
      if (len[static_cast<std::size_t>(w[i - 1])] + new_len < max_len) ch.push_back({pair_key(w[i - 1], repl), 1});
    }
    w[i] = repl;
    w.erase(w.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    if (i + 1 < w.size()) {
      ch.push_back({pair_key(b, w[i + 1]), -1});
      if (len[static_cast<std::size_t>(w[i + 1])] + new_len < max_len) ch.push_back({pair_key(repl, w[i + 1]), 1});
    }
  }
}


std::vector<std::pair<TokenId, TokenId>> run_bpe_merges(MergeProblem& mp, const MergeLimits& lim, TrainReport& report,
                                                        const TrainProgress& progress, const JoinFn& join,
                                                        const LenFn& len_of) {
  auto& words = mp.words;
  auto& wcount = mp.wcount;
  auto& id_to_word = mp.id_to_word;
  auto& word_to_id = mp.word_to_id;
  auto& len = mp.len;
  std::size_t max_len = lim.max_token_length ? *lim.max_token_length : std::numeric_limits<std::size_t>::max();

  // 4. Pair counts and where each pair occurs.
  FlatMap64<std::int64_t> pair_counts;
  FlatMap64<std::vector<std::uint32_t>> where;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const auto& w = words[i];
    for (std::size_t k = 0; k + 1 < w.size(); ++k) {
      std::uint64_t p = pair_key(w[k], w[k + 1]);
      pair_counts[p] += wcount[i];
      auto& v = where[p];
      if (v.empty() || v.back() != i) v.push_back(static_cast<std::uint32_t>(i));
    }
  }
  std::vector<HeapEntry> heap;
  heap.reserve(where.size());
  where.for_each([&](std::uint64_t p, std::vector<std::uint32_t>& pos) {
    std::int64_t c = *pair_counts.find(p);
    if (c > 0) heap.push_back(HeapEntry{static_cast<std::uint64_t>(c), p, std::move(pos)});
  });
  where.clear();
  std::make_heap(heap.begin(), heap.end(), heap_less);

  // 5. Merges.
  std::vector<std::pair<TokenId, TokenId>> merges;
  std::vector<Change> changes;
  std::vector<std::uint32_t> change_word;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> fresh;  // (pair, word) gained
  std::size_t budget = lim.vocab_size > id_to_word.size() ? lim.vocab_size - id_to_word.size() : 0;
  report.stop = StopReason::no_pairs;
  for (;;) {
    if (id_to_word.size() >= lim.vocab_size) {
      report.stop = StopReason::vocab_full;
      break;
    }
    if (heap.empty()) {
      report.stop = StopReason::no_pairs;
      break;
    }
    std::pop_heap(heap.begin(), heap.end(), heap_less);
    HeapEntry top = std::move(heap.back());
    heap.pop_back();
    std::int64_t current = *pair_counts.find(top.pair);
    if (top.count != static_cast<std::uint64_t>(current)) {
      top.count = static_cast<std::uint64_t>(current);
      heap.push_back(std::move(top));
      std::push_heap(heap.begin(), heap.end(), heap_less);
      continue;
    }
    if (top.count < 1 || top.count < lim.min_frequency) {
      report.stop = top.count < 1 ? StopReason::no_pairs : StopReason::min_frequency;
      report.stop_count = top.count;
      break;
    }
    auto a = static_cast<TokenId>(top.pair >> 32);
    auto b = static_cast<TokenId>(top.pair & 0xFFFFFFFFu);
    std::string joined;
    join(id_to_word[static_cast<std::size_t>(a)], id_to_word[static_cast<std::size_t>(b)], joined);
    if (lim.allowed && !lim.allowed(joined)) continue;  // dropped; pushed again only if it gains occurrences
    TokenId nid;
    auto it = word_to_id.find(joined);
    if (it != word_to_id.end()) {
      nid = it->second;
    } else {
      nid = static_cast<TokenId>(id_to_word.size());
      len.push_back(len_of(joined));
      word_to_id.emplace(joined, nid);
      id_to_word.push_back(std::move(joined));
    }
    merges.emplace_back(a, b);

    changes.clear();
    change_word.clear();
    for (std::uint32_t wi : top.pos) {
      merge_word(words[wi], a, b, nid, max_len, len, changes);
      change_word.resize(changes.size(), wi);
    }
    fresh.clear();
    for (std::size_t k = 0; k < changes.size(); ++k) {
      const Change& c = changes[k];
      pair_counts[c.pair] += c.delta * wcount[change_word[k]];
      if (c.delta > 0) fresh.emplace_back(c.pair, change_word[k]);
    }
    // Push every pair that gained occurrences, with the words it gained them in.
    std::sort(fresh.begin(), fresh.end());
    for (std::size_t k = 0; k < fresh.size();) {
      std::uint64_t p = fresh[k].first;
      HeapEntry e{0, p, {}};
      for (; k < fresh.size() && fresh[k].first == p; ++k)
        if (e.pos.empty() || e.pos.back() != fresh[k].second) e.pos.push_back(fresh[k].second);
      std::int64_t c = *pair_counts.find(p);
      if (c > 0) {
        e.count = static_cast<std::uint64_t>(c);
        heap.push_back(std::move(e));
        std::push_heap(heap.begin(), heap.end(), heap_less);
      }
    }
    if (progress && (merges.size() & 255) == 0) progress(merges.size(), budget);
  }
  if (progress) progress(merges.size(), merges.size());

  return merges;
}

void keep_last_rank(std::vector<std::pair<TokenId, TokenId>>& merges) {
  FlatMap64<std::uint32_t> last;
  for (std::size_t r = 0; r < merges.size(); ++r)
    last.set(pair_key(merges[r].first, merges[r].second), static_cast<std::uint32_t>(r));
  std::vector<std::pair<TokenId, TokenId>> kept;
  kept.reserve(merges.size());
  for (std::size_t r = 0; r < merges.size(); ++r)
    if (*last.find(pair_key(merges[r].first, merges[r].second)) == r) kept.push_back(merges[r]);
  merges.swap(kept);
}

Result<std::unique_ptr<Tokenizer>> train_bpe(const WordCountMap& counts, const BpeTrainerConfig& cfg,
                                             std::unique_ptr<PreTokenizer> pre, TrainReport& report,
                                             const TrainProgress& progress) {
  report = TrainReport{};
  std::vector<std::string> id_to_word;  // raw bytes
  std::unordered_map<std::string, TokenId> word_to_id;
  std::vector<AddedToken> added;

  // 1. Special tokens. HF keys its vocabulary by token text, where a trained token's
  // text is its byte-level form: a special whose text is byte-level text (such as
  // "<|endoftext|>") is the same entry as the token of those bytes, and a merge that
  // builds those bytes gets the special's id. Other specials (a space in the text, say)
  // can never collide and have no bytes in the model.
  std::unordered_set<std::string> special_text;
  for (const auto& s : cfg.special_tokens) {
    if (s.empty()) return make_error(Errc::invalid_argument, "a special token cannot be empty");
    if (!special_text.insert(s).second) continue;
    auto id = static_cast<TokenId>(id_to_word.size());
    std::string bytes;
    if (byte_level_to_bytes(s, bytes) && !word_to_id.count(bytes)) word_to_id.emplace(bytes, id);
    else bytes.clear();
    id_to_word.push_back(std::move(bytes));
    added.push_back(AddedToken{s, id, true, false, false, false, false});
  }

  // 2. The alphabet.
  std::array<std::uint64_t, 256> freq{};
  std::array<bool, 256> seen{};
  for (const auto& [w, c] : counts)
    for (char ch : w) {
      auto b = static_cast<unsigned char>(ch);
      seen[b] = true;
      freq[b] = saturating_add(freq[b], c);
    }
  if (cfg.initial_alphabet_bytes)
    for (int b = 0; b < 256; ++b) {
      seen[static_cast<std::size_t>(b)] = true;
      freq[static_cast<std::size_t>(b)] = std::numeric_limits<std::uint64_t>::max();
    }
  std::vector<int> alpha;
  for (int b = 0; b < 256; ++b)
    if (seen[static_cast<std::size_t>(b)]) alpha.push_back(b);
  if (cfg.limit_alphabet && alpha.size() > *cfg.limit_alphabet) {
    std::size_t to_remove = alpha.size() - *cfg.limit_alphabet;
    // Least frequent first; ties (arbitrary in HF) by byte-level code point.
    std::sort(alpha.begin(), alpha.end(), [&](int x, int y) {
      auto fx = freq[static_cast<std::size_t>(x)], fy = freq[static_cast<std::size_t>(y)];
      if (fx != fy) return fx < fy;
      return byte_to_unicode(static_cast<unsigned char>(x)) < byte_to_unicode(static_cast<unsigned char>(y));
    });
    alpha.erase(alpha.begin(), alpha.begin() + static_cast<std::ptrdiff_t>(to_remove));
    report.alphabet_dropped = to_remove;
  }
  std::sort(alpha.begin(), alpha.end(), [](int x, int y) {
    return byte_to_unicode(static_cast<unsigned char>(x)) < byte_to_unicode(static_cast<unsigned char>(y));
  });
  std::array<TokenId, 256> byte_id{};
  byte_id.fill(-1);
  for (int b : alpha) {
    std::string s(1, static_cast<char>(b));
    auto it = word_to_id.find(s);
    if (it != word_to_id.end()) {
      byte_id[static_cast<std::size_t>(b)] = it->second;
      continue;
    }
    auto id = static_cast<TokenId>(id_to_word.size());
    id_to_word.push_back(s);
    word_to_id.emplace(s, id);
    byte_id[static_cast<std::size_t>(b)] = id;
  }
  report.alphabet = alpha.size();

  // 3. Words as symbol ids, in byte order of the words (deterministic).
  auto items = words_in_byte_order(counts);
  std::vector<std::vector<TokenId>> words(items.size());
  std::vector<std::int64_t> wcount(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    wcount[i] = word_count(items[i]->second);
    auto& w = words[i];
    w.reserve(items[i]->first.size());
    for (char ch : items[i]->first) {
      TokenId id = byte_id[static_cast<unsigned char>(ch)];
      if (id >= 0) w.push_back(id);
    }
  }
  report.words = words.size();
  items.clear();

  // Token lengths in characters (bytes), for max_token_length.
  MergeProblem mp{std::move(words), std::move(wcount), std::move(id_to_word), std::move(word_to_id), {}};
  mp.len.reserve(cfg.vocab_size + 256);
  for (const auto& w : mp.id_to_word) mp.len.push_back(static_cast<std::uint32_t>(w.size()));
  LMP_TRY(check_count_total(mp));
  std::vector<std::pair<TokenId, TokenId>> merges = run_bpe_merges(
      mp, MergeLimits{cfg.vocab_size, cfg.min_frequency, cfg.max_token_length}, report, progress,
      [](const std::string& a, const std::string& b, std::string& out) {
        out.reserve(a.size() + b.size());
        out.append(a);
        out.append(b);
      },
      [](const std::string& t) { return static_cast<std::uint32_t>(t.size()); });
  id_to_word = std::move(mp.id_to_word);

  keep_last_rank(merges);
  report.merges = merges.size();
  report.vocab = id_to_word.size();

  auto model = BpeModel::build(std::move(id_to_word), std::move(merges), false);
  if (!model.ok()) return std::move(model).error();
  model.value().set_dropout(cfg.dropout);
  std::string pre_name(pre ? pre->name() : "none");
  TokenizerInfo info{"", "tokenizer.json", pre_name};
  return std::make_unique<Tokenizer>(std::move(model).value(), std::move(pre), Normalization::none, false,
                                     std::move(added), std::move(info));
}

}  // namespace lmp::tok
