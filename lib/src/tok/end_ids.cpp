#include "lmpipe/tok/end_ids.h"

#include <algorithm>
#include <array>
#include <filesystem>

#include "lmpipe/core/io.h"
#include "lmpipe/core/json.h"

namespace lmp::tok {

namespace {

constexpr std::array<std::string_view, 10> kEndMarkers = {
    "</s>",      "<eos>",     "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>",
    "<|eom_id|>", "<|im_end|>", "<|end|>",      "<end_of_turn>",   "<|EOT|>"};

// An id named in a config file: within the tokenizer's vocabulary.
Status add_id(const Tokenizer& t, json::Value v, std::vector<TokenId>& ids) {
  auto id = v.integer();
  if (!id || *id < 0 || static_cast<std::size_t>(*id) >= t.vocab_size())
    return make_error(Errc::parse, "{}: eos_token_id must be a token id below {}", v.where(), t.vocab_size());
  ids.push_back(static_cast<TokenId>(*id));
  return {};
}

// generation_config.json: "eos_token_id": 2, or [128001, 128008, 128009].
Status from_generation_config(const Tokenizer& t, const std::string& file, std::vector<TokenId>& ids) {
  LMP_ASSIGN(std::string text, io::read_file(file));
  LMP_ASSIGN(auto doc, json::Document::parse(std::move(text), file));
  json::Value eos = doc->root().get("eos_token_id");
  if (!eos.valid() || eos.is_null()) return {};
  if (eos.is_array()) {
    for (std::size_t i = 0; i < eos.size(); ++i) LMP_TRY(add_id(t, eos[i], ids));
    return {};
  }
  return add_id(t, eos, ids);
}

// tokenizer_config.json: "eos_token": "</s>", or {"content": "</s>", ...}.
Status from_tokenizer_config(const Tokenizer& t, const std::string& file, std::vector<TokenId>& ids) {
  LMP_ASSIGN(std::string text, io::read_file(file));
  LMP_ASSIGN(auto doc, json::Document::parse(std::move(text), file));
  json::Value eos = doc->root().get("eos_token");
  if (!eos.valid() || eos.is_null()) return {};
  if (eos.is_object()) eos = eos.get("content");
  if (!eos.is_string()) return make_error(Errc::parse, "{}: eos_token must be a string or have a \"content\"", eos.where());
  const TokenId id = t.id_of(eos.str());
  if (id < 0) return make_error(Errc::parse, "{}: eos_token '{}' is not a token of the tokenizer", eos.where(), eos.str());
  ids.push_back(id);
  return {};
}

}  // namespace

bool is_end_marker(std::string_view text) {
  return std::find(kEndMarkers.begin(), kEndMarkers.end(), text) != kEndMarkers.end();
}

Result<std::vector<TokenId>> end_of_generation_ids(const Tokenizer& t, const std::string& path) {
  if (!t.end_ids().empty()) return t.end_ids();
  std::vector<TokenId> ids;
  std::error_code ec;
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = std::filesystem::is_directory(path, ec)
                              ? (path.back() == '/' ? path : path + "/")
                              : slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  if (const std::string g = dir + "generation_config.json"; std::filesystem::is_regular_file(g, ec))
    LMP_TRY(from_generation_config(t, g, ids));
  if (const std::string c = dir + "tokenizer_config.json"; std::filesystem::is_regular_file(c, ec))
    LMP_TRY(from_tokenizer_config(t, c, ids));
  if (ids.empty()) {
    for (std::string_view m : kEndMarkers) {
      const TokenId id = t.id_of(m);
      if (id < 0) continue;
      const AddedToken* a = t.added_token(id);
      // A special added token; or, in a vocabulary with no added tokens (GPT-2's
      // vocab.json), the model's own <|endoftext|>.
      if ((a && a->special) || t.added_tokens().empty()) ids.push_back(id);
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace lmp::tok
