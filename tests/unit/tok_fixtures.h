// Tokenizers the unit tests train on the spot.
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <string_view>

#include "lmpipe/tok/bpe_trainer.h"
#include "lmpipe/tok/tokenizer.h"

namespace lmp::tok::test {

// A byte-level BPE (with the added token <|endoftext|> when `special`), trained on
// `corpus` with the named pre-tokenizer; `all_bytes`: every byte in the alphabet.
inline std::unique_ptr<Tokenizer> trained_bpe(const char* pre_name, bool all_bytes, std::string_view corpus,
                                              std::size_t vocab_size, bool special = true) {
  auto pre = make_pre_tokenizer(pre_name);
  REQUIRE(pre.ok());
  WordCounter wc(*pre.value(), 1);
  wc.add(corpus);
  BpeTrainerConfig cfg;
  cfg.vocab_size = vocab_size;
  cfg.initial_alphabet_bytes = all_bytes;
  if (special) cfg.special_tokens = {"<|endoftext|>"};
  TrainReport rep;
  auto t = train_bpe(wc.take(), cfg, std::move(pre).value(), rep);
  REQUIRE(t.ok());
  return std::move(t).value();
}

}  // namespace lmp::tok::test
