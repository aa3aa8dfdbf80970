// WordPiece (BERT): greedy longest-match-first over a word, continuation pieces
// marked with a prefix ("##"), as HF tokenizers' WordPiece model encodes.
//
// A word of more than max_chars characters, or one with any position that no
// vocabulary piece matches, becomes the single unknown token.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/core/string_map.h"
#include "lmpipe/tok/model.h"

namespace lmp::tok {

struct WordPieceOptions {
  std::string unk_token = "[UNK]";
  std::string prefix = "##";            // continuing_subword_prefix
  std::size_t max_chars = 100;          // max_input_chars_per_word
};

class WordPieceModel final : public Model {
 public:
  WordPieceModel() = default;
  // `vocab[id]` = piece text; the unknown token must be in it. Duplicate pieces keep
  // their first id; empty entries are holes.
  static Result<WordPieceModel> build(std::vector<std::string> vocab, WordPieceOptions opts);

  ModelType type() const override { return ModelType::wordpiece; }
  void encode(std::string_view word, std::vector<TokenId>& out, ModelScratch& s) const override;
  std::size_t vocab_size() const override { return tokens_.size(); }
  std::string_view token_text(TokenId id) const override {
    return id >= 0 && static_cast<std::size_t>(id) < tokens_.size() ? std::string_view(tokens_[static_cast<std::size_t>(id)])
                                                                     : std::string_view();
  }
  TokenId find(std::string_view text) const override { return ids_.find(text); }

  const WordPieceOptions& options() const { return opts_; }
  TokenId unk_id() const { return unk_id_; }

 private:
  std::vector<std::string> tokens_;  // (n_vocab) piece text, "##" included
  StringIdMap ids_;                  // text → id (views into tokens_)
  WordPieceOptions opts_;
  TokenId unk_id_ = -1;
  std::size_t max_piece_bytes_ = 0;  // longest piece without the prefix
};

}  // namespace lmp::tok
