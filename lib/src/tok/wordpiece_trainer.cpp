#include "lmpipe/tok/wordpiece_trainer.h"

#include <algorithm>
#include <limits>
#include <queue>

#include "lmpipe/core/flat_map.h"
#include "lmpipe/tok/wordpiece.h"
#include "merge_core.h"

namespace lmp::tok {

namespace {

// Specials, alphabet, words as symbol ids ("##" on continuations), shared by both
// algorithms; the unknown token must be among the specials.
Status prepare(const WordCountMap& counts, const WordPieceTrainerConfig& cfg, MergeProblem& mp,
               std::vector<AddedToken>& added, TrainReport& report) {
  if (std::find(cfg.special_tokens.begin(), cfg.special_tokens.end(), cfg.unk_token) == cfg.special_tokens.end())
    return make_error(Errc::invalid_argument,
                      "WordPiece needs its unknown token among the special tokens: add -S '{}'", cfg.unk_token);
  return prepare_char_problem(counts, CharSymbols{cfg.special_tokens, cfg.limit_alphabet, cfg.prefix, ""}, mp, added,
                              report);
}

// ---- The likelihood criterion -----------------------------------------------------

struct Cand {
  double score;
  std::int64_t count;
  std::uint64_t pair;
};
struct CandLess {
  bool operator()(const Cand& x, const Cand& y) const {
    if (x.score != y.score) return x.score < y.score;
    if (x.count != y.count) return x.count < y.count;
    return x.pair > y.pair;
  }
};

std::vector<std::pair<TokenId, TokenId>> run_likelihood(MergeProblem& mp, const WordPieceTrainerConfig& cfg,
                                                        TrainReport& report, const TrainProgress& progress) {
  auto& words = mp.words;
  auto& wc = mp.wcount;
  std::vector<std::int64_t> sym(mp.id_to_word.size(), 0);  // symbol occurrences
  FlatMap64<std::int64_t> pc;                               // pair occurrences
  FlatMap64<std::vector<std::uint32_t>> where;              // pair → words (may be stale)
  std::vector<std::vector<std::uint64_t>> pairs_of(mp.id_to_word.size());  // symbol → pairs it is in
  for (std::size_t i = 0; i < words.size(); ++i) {
    const auto& w = words[i];
    for (std::size_t k = 0; k < w.size(); ++k) {
      sym[static_cast<std::size_t>(w[k])] += wc[i];
      if (k + 1 == w.size()) continue;
      std::uint64_t p = pair_key(w[k], w[k + 1]);
      auto& c = pc[p];
      if (c == 0) {
        pairs_of[static_cast<std::size_t>(w[k])].push_back(p);
        pairs_of[static_cast<std::size_t>(w[k + 1])].push_back(p);
      }
      c += wc[i];
      auto& v = where[p];
      if (v.empty() || v.back() != i) v.push_back(static_cast<std::uint32_t>(i));
    }
  }
  const auto min_count = static_cast<std::int64_t>(std::max<std::uint64_t>(cfg.min_frequency, 1));
  auto score = [&](std::uint64_t p, std::int64_t c) {
    auto a = static_cast<std::size_t>(p >> 32), b = static_cast<std::size_t>(p & 0xFFFFFFFFu);
    return static_cast<double>(c) / (static_cast<double>(sym[a]) * static_cast<double>(sym[b]));
  };
  std::priority_queue<Cand, std::vector<Cand>, CandLess> heap;
  pc.for_each([&](std::uint64_t p, std::int64_t c) {
    if (c >= min_count) heap.push(Cand{score(p, c), c, p});
  });
  std::size_t max_len = cfg.max_token_length ? *cfg.max_token_length : std::numeric_limits<std::size_t>::max();
  std::vector<std::pair<TokenId, TokenId>> merges;
  std::vector<Change> changes;
  std::vector<std::uint32_t> change_word;
  std::size_t budget = cfg.vocab_size > mp.id_to_word.size() ? cfg.vocab_size - mp.id_to_word.size() : 0;
  bool filtered = false;  // some pair was left out for min_frequency
  auto repush = [&](TokenId x) {
    auto& list = pairs_of[static_cast<std::size_t>(x)];
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    std::size_t keep = 0;
    for (std::uint64_t p : list) {
      const std::int64_t* c = pc.find(p);
      if (!c || *c <= 0) continue;
      list[keep++] = p;
      if (*c >= min_count) heap.push(Cand{score(p, *c), *c, p});
      else filtered = true;
    }
    list.resize(keep);
  };
  report.stop = StopReason::no_pairs;
  for (;;) {
    if (mp.id_to_word.size() >= cfg.vocab_size) {
      report.stop = StopReason::vocab_full;
      break;
    }
    if (heap.empty()) {
      report.stop = filtered || cfg.min_frequency > 1 ? StopReason::min_frequency : StopReason::no_pairs;
      break;
    }
    Cand top = heap.top();
    heap.pop();
    const std::int64_t* cur = pc.find(top.pair);
    if (!cur || *cur < min_count) {
      if (cur && *cur > 0) filtered = true;
      continue;
    }
    double sc = score(top.pair, *cur);
    if (*cur != top.count || sc != top.score) {  // stale: counts moved since it was pushed
      heap.push(Cand{sc, *cur, top.pair});
      continue;
    }
    auto a = static_cast<TokenId>(top.pair >> 32);
    auto b = static_cast<TokenId>(top.pair & 0xFFFFFFFFu);
    std::string joined;
    join_pieces(cfg.prefix, mp.id_to_word[static_cast<std::size_t>(a)], mp.id_to_word[static_cast<std::size_t>(b)], joined);
    TokenId nid;
    auto it = mp.word_to_id.find(joined);
    if (it != mp.word_to_id.end()) {
      nid = it->second;
    } else {
      nid = static_cast<TokenId>(mp.id_to_word.size());
      mp.len.push_back(char_len(joined, cfg.prefix, ""));
      mp.word_to_id.emplace(joined, nid);
      mp.id_to_word.push_back(std::move(joined));
      sym.push_back(0);
      pairs_of.emplace_back();
    }
    merges.emplace_back(a, b);
    const auto& wlist = *where.find(top.pair);
    std::vector<std::uint32_t> wl = wlist;
    changes.clear();
    change_word.clear();
    for (std::uint32_t wi : wl) {
      std::size_t before = changes.size();
      auto& w = words[wi];
      std::size_t n_before = w.size();
      merge_word(w, a, b, nid, max_len, mp.len, changes);
      change_word.resize(changes.size(), wi);
      auto merged = static_cast<std::int64_t>(n_before - w.size());
      if (merged > 0) {
        std::int64_t n = merged * wc[wi];
        sym[static_cast<std::size_t>(a)] -= n;
        sym[static_cast<std::size_t>(b)] -= n;
        sym[static_cast<std::size_t>(nid)] += n;
      }
      (void)before;
    }
    *pc.find(top.pair) = 0;
    for (std::size_t k = 0; k < changes.size(); ++k) {
      const Change& c = changes[k];
      if (c.pair == top.pair) continue;  // (a, b) itself: all merged
      auto& cnt = pc[c.pair];
      std::int64_t old = cnt;
      cnt += c.delta * wc[change_word[k]];
      if (c.delta > 0) {
        auto& v = where[c.pair];
        if (v.empty() || v.back() != change_word[k]) v.push_back(change_word[k]);
        if (old <= 0) {
          pairs_of[static_cast<std::size_t>(c.pair >> 32)].push_back(c.pair);
          pairs_of[static_cast<std::size_t>(c.pair & 0xFFFFFFFFu)].push_back(c.pair);
        }
      }
    }
    // Every pair with a, b or the new token in it changed score.
    repush(a);
    if (b != a) repush(b);
    repush(nid);
    if (progress && (merges.size() & 255) == 0) progress(merges.size(), budget);
  }
  if (progress) progress(merges.size(), merges.size());
  return merges;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> train_wordpiece(const WordCountMap& counts, const WordPieceTrainerConfig& cfg,
                                                   TrainReport& report, const TrainProgress& progress) {
  report = TrainReport{};
  MergeProblem mp;
  std::vector<AddedToken> added;
  LMP_TRY(prepare(counts, cfg, mp, added, report));
  std::vector<std::pair<TokenId, TokenId>> merges;
  if (cfg.algo == WordPieceAlgo::hf) {
    merges = run_bpe_merges(
        mp, MergeLimits{cfg.vocab_size, cfg.min_frequency, cfg.max_token_length}, report, progress,
        [&](const std::string& a, const std::string& b, std::string& out) { join_pieces(cfg.prefix, a, b, out); },
        [&](const std::string& t) { return char_len(t, cfg.prefix, ""); });
  } else {
    merges = run_likelihood(mp, cfg, report, progress);
  }
  report.merges = merges.size();
  report.vocab = mp.id_to_word.size();
  WordPieceOptions o;
  o.unk_token = cfg.unk_token;
  o.prefix = cfg.prefix;
  auto model = WordPieceModel::build(std::move(mp.id_to_word), o);
  if (!model.ok()) return std::move(model).error();
  auto wp = std::make_unique<WordPieceModel>(std::move(model).value());
  TokenizerSpec spec;
  spec.bert = cfg.normalization;
  const char* pre = cfg.split_digits ? "bert+digits" : "bert";
  LMP_ASSIGN(spec.pre, make_pre_tokenizer(pre));
  spec.decoder = Decoder::wordpiece;
  TokenId cls = wp->find("[CLS]"), sep = wp->find("[SEP]");
  if (cls >= 0 && sep >= 0) {
    spec.template_prefix = {cls};
    spec.template_suffix = {sep};
  }
  TokenizerInfo info{"", "tokenizer.json", pre};
  return std::make_unique<Tokenizer>(std::move(wp), std::move(spec), std::move(added), std::move(info));
}

}  // namespace lmp::tok
