// Count files of `tok-train count`, then a small training run on what they hold: the
// byte-level BPE trainer, or for BERT-split counts the WordPiece trainer (both merge
// rules, chosen by the input's length so that the corpus keeps both), or for char-bpe's
// counts (NORMALIZATION:SPLIT, and every third whitespace one) the character-level BPE
// trainer with affixes chosen by the length, whose tokenizer.json must read back to the
// same ids.
#include "fuzz_common.h"
#include "lmpipe/tok/bpe_trainer.h"
#include "lmpipe/tok/pre_tokenizer.h"
#include "lmpipe/tok/wordpiece_trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto input = lmp::fuzz::as_text(data, size);
  lmp::tok::WordCountMap counts;
  std::string pre;
  if (!lmp::tok::read_counts(input, "fuzz.counts", counts, pre)) return 0;
  lmp::tok::TrainReport report;
  if (pre.rfind("bert", 0) == 0) {
    lmp::tok::WordPieceTrainerConfig cfg;
    cfg.vocab_size = 300;
    cfg.min_frequency = 2;
    cfg.special_tokens = {"[UNK]"};
    cfg.normalization.lowercase = cfg.normalization.strip_accents = pre.rfind("bert-cased", 0) != 0;
    cfg.split_digits = pre.find("+digits") != std::string::npos;
    cfg.algo = size % 2 ? lmp::tok::WordPieceAlgo::hf : lmp::tok::WordPieceAlgo::likelihood;
    auto t = lmp::tok::train_wordpiece(counts, cfg, report);
    if (t) lmp::fuzz::exercise(**t, input);
    return 0;
  }
  std::size_t colon = pre.find(':');
  if (colon != std::string::npos || (pre.rfind("whitespace", 0) == 0 && size % 3 == 0)) {
    lmp::tok::CharBpeTrainerConfig cfg;
    cfg.vocab_size = 300;
    cfg.min_frequency = size % 5 == 0 ? 0 : 2;
    cfg.special_tokens = {"<unk>"};
    cfg.unk_token = size % 7 == 0 ? "" : "<unk>";
    cfg.suffix = size % 2 ? "</w>" : "";
    cfg.prefix = size % 4 < 2 ? "##" : "";
    if (size % 11 == 0) cfg.max_token_length = 3;
    if (size % 13 == 0) cfg.limit_alphabet = 8;
    if (colon != std::string::npos && pre.rfind("bert", 0) == 0) {
      bool uncased = pre.rfind("bert-cased", 0) != 0;
      cfg.normalization = lmp::text::BertNormalization{true, true, uncased, uncased};
    }
    auto p = lmp::tok::make_pre_tokenizer(colon == std::string::npos ? pre : pre.substr(colon + 1));
    if (!p) return 0;
    auto t = lmp::tok::train_char_bpe(counts, cfg, std::move(*p), report);
    if (!t) return 0;
    lmp::fuzz::exercise(**t, input);
    auto back = lmp::tok::load_tokenizer_json(lmp::tok::to_tokenizer_json(**t), "trained.json");
    if (!back) std::abort();  // what the trainer writes must read back
    std::string_view text = input.substr(0, 256);
    std::vector<lmp::TokenId> a, b;
    lmp::tok::Session sa(**t), sb(**back);
    (*t)->encode(text, a, sa);
    (*back)->encode(text, b, sb);
    if (a != b) std::abort();
    return 0;
  }
  lmp::tok::BpeTrainerConfig cfg;
  cfg.vocab_size = 300;
  cfg.min_frequency = 2;
  cfg.special_tokens = {"<|endoftext|>"};
  auto p = lmp::tok::make_pre_tokenizer(pre.empty() ? "gpt2" : pre);
  if (!p) return 0;
  auto t = lmp::tok::train_bpe(counts, cfg, std::move(*p), report);
  if (t) lmp::fuzz::exercise(**t, input);
  return 0;
}
