#include <algorithm>

#include "lmpipe/text/unicode.h"
#include "lmpipe/tok/bpe.h"
#include "lmpipe/tok/bpe_trainer.h"
#include "merge_core.h"

namespace lmp::tok {

namespace {

// The characters of a word as strings (an invalid byte is a character of its own).
void chars_of(std::string_view w, std::vector<std::string_view>& out) {
  out.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(w.data());
  for (std::size_t i = 0; i < w.size();) {
    auto c = text::decode_utf8(p, w.size(), i);
    out.push_back(w.substr(i, c.len));
    i += c.len;
  }
}

std::uint32_t first_cp(std::string_view c) {
  return text::decode_utf8(reinterpret_cast<const unsigned char*>(c.data()), c.size(), 0).cp;
}

}  // namespace

std::uint32_t char_len(std::string_view t, std::string_view prefix, std::string_view suffix) {
  if (!prefix.empty() && t.size() > prefix.size() && t.substr(0, prefix.size()) == prefix) t.remove_prefix(prefix.size());
  if (!suffix.empty() && t.size() > suffix.size() && t.substr(t.size() - suffix.size()) == suffix)
    t.remove_suffix(suffix.size());
  return static_cast<std::uint32_t>(text::count_chars(t));
}

void join_pieces(const std::string& prefix, const std::string& a, const std::string& b, std::string& out) {
  out.reserve(a.size() + b.size());
  out.append(a);
  if (!prefix.empty() && b.size() > prefix.size() && b.compare(0, prefix.size(), prefix) == 0)
    out.append(b, prefix.size(), std::string::npos);
  else
    out.append(b);
}

Status prepare_char_problem(const WordCountMap& counts, const CharSymbols& cfg, MergeProblem& mp,
                            std::vector<AddedToken>& added, TrainReport& report) {
  auto add = [&](std::string s) {
    auto id = static_cast<TokenId>(mp.id_to_word.size());
    mp.word_to_id.emplace(s, id);
    mp.len.push_back(char_len(s, cfg.prefix, cfg.suffix));
    mp.id_to_word.push_back(std::move(s));
    return id;
  };
  for (const auto& s : cfg.special_tokens) {
    if (s.empty()) return make_error(Errc::invalid_argument, "a special token cannot be empty");
    if (mp.word_to_id.count(s)) continue;
    TokenId id = add(s);
    added.push_back(AddedToken{s, id, true, false, false, false, false});
  }

  // Alphabet: characters weighted by word counts.
  std::unordered_map<std::string_view, std::uint64_t> freq;
  std::vector<std::string_view> cs;
  for (const auto& [w, c] : counts) {
    chars_of(w, cs);
    for (auto ch : cs) {
      if (first_cp(ch) >= text::kInvalidBase) {  // not a character: left out, and counted
        report.invalid_bytes = saturating_add(report.invalid_bytes, c);
        continue;
      }
      auto& f = freq[ch];
      f = saturating_add(f, c);
    }
  }
  std::vector<std::pair<std::string_view, std::uint64_t>> alpha(freq.begin(), freq.end());
  if (cfg.limit_alphabet && alpha.size() > *cfg.limit_alphabet) {
    std::size_t drop = alpha.size() - *cfg.limit_alphabet;
    std::sort(alpha.begin(), alpha.end(), [](const auto& x, const auto& y) {
      if (x.second != y.second) return x.second < y.second;
      return first_cp(x.first) < first_cp(y.first);
    });
    alpha.erase(alpha.begin(), alpha.begin() + static_cast<std::ptrdiff_t>(drop));
    report.alphabet_dropped = drop;
  }
  std::sort(alpha.begin(), alpha.end(), [](const auto& x, const auto& y) {
    std::uint32_t a = first_cp(x.first), b = first_cp(y.first);
    return a != b ? a < b : x.first < y.first;
  });
  for (const auto& [ch, f] : alpha)
    if (!mp.word_to_id.count(std::string(ch))) add(std::string(ch));
  report.alphabet = alpha.size();

  // Words in byte order, so that the affixed characters get the same ids on every run.
  auto items = words_in_byte_order(counts);
  mp.words.resize(items.size());
  mp.wcount.resize(items.size());
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) {
    mp.wcount[i] = word_count(items[i]->second);
    chars_of(items[i]->first, cs);
    auto& w = mp.words[i];
    for (std::size_t k = 0; k < cs.size(); ++k) {
      s.assign(cs[k]);
      if (!mp.word_to_id.count(s)) continue;
      if (k > 0) s.insert(0, cfg.prefix);
      if (k + 1 == cs.size()) s += cfg.suffix;
      auto it = mp.word_to_id.find(s);
      w.push_back(it != mp.word_to_id.end() ? it->second : add(s));
    }
  }
  report.words = items.size();
  return check_count_total(mp);
}

Result<std::unique_ptr<Tokenizer>> train_char_bpe(const WordCountMap& counts, const CharBpeTrainerConfig& cfg,
                                                  std::unique_ptr<PreTokenizer> pre, TrainReport& report,
                                                  const TrainProgress& progress) {
  report = TrainReport{};
  if (!cfg.unk_token.empty() &&
      std::find(cfg.special_tokens.begin(), cfg.special_tokens.end(), cfg.unk_token) == cfg.special_tokens.end())
    return make_error(Errc::invalid_argument,
                      "the unknown token '{}' must be among the special tokens: add -S '{}' (or --unk-token '' for none)",
                      cfg.unk_token, cfg.unk_token);
  MergeProblem mp;
  std::vector<AddedToken> added;
  LMP_TRY(prepare_char_problem(counts, CharSymbols{cfg.special_tokens, cfg.limit_alphabet, cfg.prefix, cfg.suffix},
                               mp, added, report));
  std::vector<std::pair<TokenId, TokenId>> merges = run_bpe_merges(
      mp, MergeLimits{cfg.vocab_size, cfg.min_frequency, cfg.max_token_length}, report, progress,
      [&](const std::string& a, const std::string& b, std::string& out) { join_pieces(cfg.prefix, a, b, out); },
      [&](const std::string& t) { return char_len(t, cfg.prefix, cfg.suffix); });
  keep_last_rank(merges);
  report.merges = merges.size();
  report.vocab = mp.id_to_word.size();
  TokenId unk = cfg.unk_token.empty() ? -1 : mp.word_to_id.at(cfg.unk_token);

  auto built = BpeModel::build(std::move(mp.id_to_word), std::move(merges), false, 1, cfg.prefix);
  if (!built.ok()) return std::move(built).error();
  auto bpe = std::make_unique<BpeModel>(std::move(built).value());
  bpe->set_char_level(unk, false, false);
  bpe->set_dropout(cfg.dropout);
  LMP_TRY(bpe->set_end_of_word_suffix(cfg.suffix));

  TokenizerSpec spec;
  spec.bert = cfg.normalization;
  std::string pre_name(pre ? pre->name() : "none");
  spec.pre = std::move(pre);
  spec.decoder = Decoder::chain;
  // The decoder HF pairs with each form: BPEDecoder for a suffix (the original GPT's), the
  // WordPiece decoder for a prefix alone; none (tokens joined by spaces) without affixes.
  using K = DecodeStep::Kind;
  if (!cfg.suffix.empty()) {
    if (!cfg.prefix.empty()) spec.decode_steps.push_back(DecodeStep{K::replace, cfg.prefix, "", 0, 0, false});
    spec.decode_steps.push_back(DecodeStep{K::bpe, cfg.suffix, "", 0, 0, false});
  } else if (!cfg.prefix.empty()) {
    spec.decode_steps.push_back(DecodeStep{K::wordpiece, cfg.prefix, "", 0, 0, true});
  }
  TokenizerInfo info{"", "tokenizer.json", pre_name};
  return std::make_unique<Tokenizer>(std::move(bpe), std::move(spec), std::move(added), std::move(info));
}

}  // namespace lmp::tok
