// HF tokenizers' normalizers as a chain of steps, for the tokenizer.json files whose
// normalizer is more than one Unicode form or a BertNormalizer: NFC, NFD, NFKC, NFKD,
// Lowercase, StripAccents, Strip, Replace (a string or a regex), Prepend,
// BertNormalizer and Precompiled (SentencePiece's character map, by grapheme cluster), in
// any order inside a Sequence. Each step keeps where every byte of its
// output came from, as HF's NormalizedString alignments do, so that offsets still point
// into the input.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/text/unicode.h"

namespace lmp::tok {

class PreTokenizer;
class SpNormalizer;

struct NormStep {
  enum class Kind { nfc, nfd, nfkc, nfkd, lowercase, strip_accents, strip, replace, prepend, bert, precompiled };
  Kind kind = Kind::nfc;
  bool left = false, right = false;  // strip: which ends lose their White_Space
  std::string pattern;               // replace: what is replaced
  bool regex = false;                // replace: `pattern` is a regex (else a literal string)
  std::string content;               // replace: the replacement; prepend: the prefix
  text::BertNormalization bert;      // bert
  std::shared_ptr<const SpNormalizer> charsmap;  // precompiled: SentencePiece's character map
};

// The step of a Unicode form by its tokenizer.json type ("NFC", "NFD", "NFKC", "NFKD").
std::optional<NormStep::Kind> unicode_form_step(std::string_view hf_type);

class Normalizer {
 public:
  // Checks the steps (a replace of an empty string, an invalid regex) and compiles them.
  static Result<std::shared_ptr<const Normalizer>> create(std::vector<NormStep> steps);
  ~Normalizer();

  // `in` through every step into `out`; with `src`, the source in `in` of each byte of
  // `out` (one entry per byte). Text a step inserts points where HF's alignments point:
  // a replacement at the last character it replaced, a prefix at the first character.
  void apply(std::string_view in, std::string& out, std::vector<text::SourceSpan>* src) const;

  const std::vector<NormStep>& steps() const { return steps_; }
  // The chain as tokenizer.json's "normalizer" value.
  std::string to_json() const;

 private:
  Normalizer() = default;
  std::vector<NormStep> steps_;
  std::vector<std::unique_ptr<PreTokenizer>> finders_;  // (per step) a regex replace's matcher
};

}  // namespace lmp::tok
