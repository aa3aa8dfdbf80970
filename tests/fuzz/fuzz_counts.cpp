// Count files of `tok-train count`, then a small training run on what they hold: the
// byte-level BPE trainer, or for BERT-split counts the WordPiece trainer (both merge
// rules, chosen by the input's length so that the corpus keeps both).
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
