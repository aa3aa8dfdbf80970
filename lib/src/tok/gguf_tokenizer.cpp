#include "lmpipe/tok/gguf_tokenizer.h"

#include <cstring>

#include "lmpipe/core/io.h"
#include "lmpipe/core/json.h"
#include "lmpipe/tok/end_ids.h"
#include "lmpipe/tok/pre_tokenizer.h"
#include "lmpipe/tok/sentencepiece.h"
#include "proto_write.h"

namespace lmp::tok {

using tensor_io::MetaType;
using tensor_io::MetaValue;

namespace {

using proto::put_bytes;
using proto::put_float;
using proto::put_varint_field;

const MetaValue* array_of(const tensor_io::TensorFile& f, const char* key, MetaType elem) {
  const MetaValue* v = f.meta(key);
  return v && v->type == MetaType::array && v->elem == elem ? v : nullptr;
}

std::optional<TokenId> id_key(const tensor_io::TensorFile& f, const char* key) {
  const MetaValue* v = f.meta(key);
  auto x = v ? v->as_int() : std::nullopt;
  if (!x) return std::nullopt;
  return static_cast<TokenId>(*x);
}

// A SentencePiece BPE tokenizer from pieces, scores and piece types (SentencePiece's
// numbering, as GGUF's), through a ModelProto built in memory.
Result<std::unique_ptr<Tokenizer>> spm_from(const std::vector<std::string>& pieces, const std::vector<float>& scores,
                                            std::vector<std::int64_t> types, bool add_space_prefix, TokenId bos,
                                            const std::string& name) {
  const std::size_t n = pieces.size();
  bool byte_fallback = false, have_unknown = false;
  std::string proto;
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t type = types[i];
    if (type < 1 || type > 6) type = 1;
    if (type == 6) byte_fallback = true;
    if (type == 2) {  // llama.cpp takes the first unknown piece; later ones are pieces never produced
      if (have_unknown) type = 3;
      have_unknown = true;
    }
    std::string piece;
    put_bytes(piece, 1, pieces[i]);
    put_float(piece, 2, scores[i]);
    put_varint_field(piece, 3, static_cast<std::uint64_t>(type));
    put_bytes(proto, 1, piece);
  }
  std::string trainer;
  put_varint_field(trainer, 3, 2);  // BPE
  put_varint_field(trainer, 35, byte_fallback);
  put_bytes(proto, 2, trainer);
  std::string norm;
  put_bytes(norm, 1, "identity");
  put_varint_field(norm, 3, add_space_prefix);  // add_dummy_prefix
  put_varint_field(norm, 4, 0);                 // remove_extra_whitespaces
  put_varint_field(norm, 5, 1);                 // escape_whitespaces
  put_bytes(proto, 3, norm);
  LMP_ASSIGN(auto m, SentencePieceModel::parse(proto, name));
  auto sp = std::make_unique<SentencePieceModel>(std::move(m));
  TokenizerSpec spec;
  spec.decoder = Decoder::sentencepiece;
  if (bos < 0) bos = sp->bos_id();
  if (bos >= 0) spec.template_prefix = {bos};
  TokenizerInfo info{name, "sentencepiece", "none"};
  return std::make_unique<Tokenizer>(std::move(sp), std::move(spec), std::vector<AddedToken>{}, std::move(info));
}

// Piece types from the pieces' spelling (as llama.cpp guesses them without token_type):
// the unknown piece (`unk`, or <unk>), <s> and </s> as control pieces, <0xXX> as bytes.
std::int64_t guess_type(const std::string& t, std::size_t i, TokenId unk) {
  if (static_cast<TokenId>(i) == unk || (unk < 0 && t == "<unk>")) return 2;
  if (t == "<s>" || t == "</s>" || t == "\n<s>\n" || t == "\n</s>\n") return 3;
  if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') return 6;
  return 1;
}

Result<std::unique_ptr<Tokenizer>> spm(const tensor_io::TensorFile& f, const MetaValue& tokens) {
  const MetaValue* scores = array_of(f, "tokenizer.ggml.scores", MetaType::f32);
  const MetaValue* types = array_of(f, "tokenizer.ggml.token_type", MetaType::i32);
  const std::size_t n = tokens.items.size();
  if ((scores && scores->items.size() != n) || (types && types->items.size() != n))
    return make_error(Errc::parse, "{}: tokenizer.ggml.scores/token_type do not have the {} entries of the tokens", f.name(), n);
  const TokenId unk = id_key(f, "tokenizer.ggml.unknown_token_id").value_or(-1);
  std::vector<std::string> pieces(n);
  std::vector<float> sc(n, 0.0f);
  std::vector<std::int64_t> ty(n);
  for (std::size_t i = 0; i < n; ++i) {
    pieces[i] = tokens.items[i].s;
    if (scores) sc[i] = static_cast<float>(scores->items[i].f);
    ty[i] = types ? types->items[i].i : guess_type(pieces[i], i, unk);
  }
  const MetaValue* prefix = f.meta("tokenizer.ggml.add_space_prefix");
  return spm_from(pieces, sc, std::move(ty), prefix ? prefix->u != 0 : true,
                  id_key(f, "tokenizer.ggml.bos_token_id").value_or(-1), f.name() + " (tokenizer.ggml.*)");
}

// The splits of a tokenizer.ggml.pre name, as llama.cpp's llama-vocab.cpp gives them: one
// regex, or several applied in turn (each to the pieces of the one before), each a Split
// of the tokenizer.json built below; and whether a piece that is a token is taken whole
// (HF's ignore_merges). Where llama.cpp rewrites an HF pattern for its own engine (the
// case-insensitive contractions, tekken's and o200k's letter classes), the HF original is
// used: ICU runs it as HF does.
struct GgufPre {
  std::vector<std::string_view> names;
  std::vector<std::string> patterns;
  bool ignore_merges = false;
};

const std::vector<GgufPre>& gguf_pres() {
  static const std::string gpt2(kGpt2Pattern), cl100k(kCl100kPattern), o200k(kO200kPattern);
  static const std::string gpt2_words = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
  static const std::string qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::string bloom = R"( ?[^(\s|.,!?…。，、।۔،)]+)";
  static const std::vector<GgufPre> table = {
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", gpt2_words, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
        "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "exaone4", "trillion", "granite-docling"},
       {gpt2}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"}, {cl100k}, true},
      {{"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}, {cl100k}},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "stablelm2", "megrez", "hunyuan", "grok-2"}, {qwen2}},
      {{"seed-coder"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {R"(\p{N})", gpt2_words}},
      {{"deepseek-coder"},
       {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+", R"(\p{N})"}},
      {{"deepseek-v3", "hunyuan-dense"},
       {R"(\p{N}{1,3})", "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", gpt2_words, "[0-9][0-9][0-9]"}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {bloom}},
      {{"viking"}, {bloom, R"(\p{N})"}},
      {{"tekken"},
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true},
      {{"gpt-4o", "llama4", "minimax-m2"}, {o200k}},
      {{"bailingmoe", "bailingmoe2", "llada-moe"},
       {R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"}},
  };
  return table;
}

Result<const GgufPre*> gguf_pre(std::string_view name, const std::string& file) {
  for (const GgufPre& p : gguf_pres())
    for (std::string_view n : p.names)
      if (n == name) return &p;
  return make_error(Errc::unsupported,
                    "{}{}tokenizer.ggml.pre '{}' is not supported (gpt-2, llama-bpe, qwen2, deepseek-coder, deepseek-v3, "
                    "falcon, starcoder, tekken, gpt-4o and the names llama.cpp gives the same splits are; see "
                    "docs/tok-encode.md); give -t with the model's tokenizer.json",
                    file, file.empty() ? "" : ": ", name);
}

Result<std::unique_ptr<Tokenizer>> bpe(const tensor_io::TensorFile& f, const MetaValue& tokens) {
  const MetaValue* merges = array_of(f, "tokenizer.ggml.merges", MetaType::string);
  if (!merges) return make_error(Errc::parse, "{}: a gpt2 tokenizer needs tokenizer.ggml.merges", f.name());
  const MetaValue* types = array_of(f, "tokenizer.ggml.token_type", MetaType::i32);
  const MetaValue* pre = f.meta("tokenizer.ggml.pre");
  std::string pre_name = pre && pre->type == MetaType::string ? pre->s : "default";
  LMP_ASSIGN(const GgufPre* spec, gguf_pre(pre_name, f.name()));
  const std::vector<std::string>& patterns = spec->patterns;
  // The equivalent tokenizer.json, handed to its loader.
  std::string j = R"({"version":"1.0","added_tokens":[)";
  bool first = true;
  for (std::size_t i = 0; types && i < tokens.items.size(); ++i)
    if (types->items[i].i == 3 || types->items[i].i == 4) {  // control and user-defined: matched whole
      j += first ? "" : ",";
      first = false;
      j += fmt::format(R"({{"id":{},"content":)", i);
      json::append_string(j, tokens.items[i].s);
      j += fmt::format(R"(,"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":{}}})",
                       types->items[i].i == 3);
    }
  j += R"(],"normalizer":null,"pre_tokenizer":{"type":"Sequence","pretokenizers":[)";
  for (const std::string& pattern : patterns) {
    j += R"({"type":"Split","pattern":{"Regex":)";
    json::append_string(j, pattern);
    j += R"(},"behavior":"Isolated","invert":false},)";
  }
  j += R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]},)";
  j += R"("post_processor":null,"decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},)";
  j += R"("model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":)";
  j += spec->ignore_merges ? "true" : "false";
  j += R"(,"vocab":{)";
  for (std::size_t i = 0; i < tokens.items.size(); ++i) {
    if (i) j += ",";
    json::append_string(j, tokens.items[i].s);
    j += fmt::format(":{}", i);
  }
  j += R"(},"merges":[)";
  for (std::size_t i = 0; i < merges->items.size(); ++i) {
    if (i) j += ",";
    json::append_string(j, merges->items[i].s);
  }
  j += "]}}";
  return load_tokenizer_json(std::move(j), f.name() + " (tokenizer.ggml.*)");
}

// tokenizer.ggml.model "bert" (BERT, BGE and other sentence-embedding models): WordPiece
// with "##" continuations, BERT's normalizer (lowercase, accents stripped, CJK characters
// apart; llama.cpp always lowercases) and pre-tokenizer, [CLS] … [SEP] as the template.
Result<std::unique_ptr<Tokenizer>> wordpiece(const tensor_io::TensorFile& f, const MetaValue& tokens) {
  const std::size_t n = tokens.items.size();
  const MetaValue* types = array_of(f, "tokenizer.ggml.token_type", MetaType::i32);
  if (types && types->items.size() != n)
    return make_error(Errc::parse, "{}: tokenizer.ggml.token_type does not have the {} entries of the tokens", f.name(), n);
  const TokenId unk = id_key(f, "tokenizer.ggml.unknown_token_id").value_or(-1);
  if (unk < 0 || static_cast<std::size_t>(unk) >= n)
    return make_error(Errc::parse, "{}: a bert tokenizer needs tokenizer.ggml.unknown_token_id within its {} tokens", f.name(), n);
  std::string j = R"({"version":"1.0","added_tokens":[)";
  bool first = true;
  for (std::size_t i = 0; types && i < n; ++i)
    if (types->items[i].i == 3) {  // control: [CLS], [SEP], [PAD], [MASK], [UNK]
      j += first ? "" : ",";
      first = false;
      j += fmt::format(R"({{"id":{},"content":)", i);
      json::append_string(j, tokens.items[i].s);
      j += R"(,"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true})";
    }
  j += R"(],"normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},)";
  j += R"("pre_tokenizer":{"type":"BertPreTokenizer"},"post_processor":)";
  const auto cls = id_key(f, "tokenizer.ggml.cls_token_id"), sep = id_key(f, "tokenizer.ggml.seperator_token_id");
  if (cls && sep && *cls >= 0 && *sep >= 0 && static_cast<std::size_t>(*cls) < n && static_cast<std::size_t>(*sep) < n) {
    j += R"({"type":"BertProcessing","sep":[)";
    json::append_string(j, tokens.items[static_cast<std::size_t>(*sep)].s);
    j += fmt::format(R"(,{}],"cls":[)", *sep);
    json::append_string(j, tokens.items[static_cast<std::size_t>(*cls)].s);
    j += fmt::format(R"(,{}]}},)", *cls);
  } else {
    j += "null,";
  }
  j += R"("decoder":{"type":"WordPiece","prefix":"##","cleanup":true},"model":{"type":"WordPiece","unk_token":)";
  json::append_string(j, tokens.items[static_cast<std::size_t>(unk)].s);
  j += R"(,"continuing_subword_prefix":"##","max_input_chars_per_word":100,"vocab":{)";
  // llama.cpp's converter spells a word's first piece with a leading ▁ and drops the ##
  // of a continuation; [BRACKETED] tokens stay as they are. Back to BERT's spelling:
  for (std::size_t i = 0; i < n; ++i) {
    if (i) j += ",";
    const std::string& t = tokens.items[i].s;
    const bool bracketed = t.size() >= 2 && t.front() == '[' && t.back() == ']';
    if (bracketed) json::append_string(j, t);
    else if (t.compare(0, kMetaspace.size(), kMetaspace) == 0) json::append_string(j, t.substr(kMetaspace.size()));
    else json::append_string(j, "##" + t);
    j += fmt::format(":{}", i);
  }
  j += "}}}";
  return load_tokenizer_json(std::move(j), f.name() + " (tokenizer.ggml.*)");
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_llama2c_tokenizer(const std::string& path) {
  LMP_ASSIGN(std::string buf, io::read_file(path));
  if (buf.size() < 4) return make_error(Errc::parse, "{}: not a llama2.c tokenizer.bin (shorter than its header)", path);
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::size_t pos = 4;
  while (pos < buf.size()) {
    if (buf.size() - pos < 8)
      return make_error(Errc::parse, "{}: byte {}: token {}: truncated", path, pos, pieces.size());
    float score;
    std::int32_t len;
    std::memcpy(&score, buf.data() + pos, 4);
    std::memcpy(&len, buf.data() + pos + 4, 4);
    if (len < 0 || static_cast<std::size_t>(len) > buf.size() - pos - 8)
      return make_error(Errc::parse, "{}: byte {}: token {}: length {} with {} bytes left", path, pos + 4, pieces.size(), len,
                        buf.size() - pos - 8);
    std::string piece = buf.substr(pos + 8, static_cast<std::size_t>(len));
    // tokenizer.bin spells SentencePiece's ▁ as a space.
    std::string escaped;
    for (char c : piece) escaped += c == ' ' ? std::string(kMetaspace) : std::string(1, c);
    pieces.push_back(std::move(escaped));
    scores.push_back(score);
    pos += 8 + static_cast<std::size_t>(len);
  }
  std::vector<std::int64_t> types(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) types[i] = guess_type(pieces[i], i, 0);
  LMP_ASSIGN(auto t, spm_from(pieces, scores, std::move(types), true, 1, path));
  // llama2.c's models were trained on stories each begun by <s> (id 1), and its run.c ends
  // a generation there; </s> (id 2) ends one too.
  std::vector<TokenId> end;
  for (TokenId id : {1, 2})
    if (static_cast<std::size_t>(id) < pieces.size() && guess_type(pieces[static_cast<std::size_t>(id)], 0, -1) == 3)
      end.push_back(id);
  t->set_end_ids(std::move(end));
  return t;
}

std::vector<std::string_view> gguf_pre_names() {
  std::vector<std::string_view> v;
  for (const GgufPre& p : gguf_pres()) v.insert(v.end(), p.names.begin(), p.names.end());
  return v;
}

Result<std::unique_ptr<PreTokenizer>> gguf_pre_tokenizer(std::string_view name) {
  LMP_ASSIGN(const GgufPre* spec, gguf_pre(name, ""));
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  for (const std::string& p : spec->patterns) {
    LMP_ASSIGN(auto step, make_regex_pre_tokenizer(p));
    steps.push_back(std::move(step));
  }
  return make_sequence_pre_tokenizer(std::move(steps));
}

Result<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const tensor_io::TensorFile& f) {
  const MetaValue* model = f.meta("tokenizer.ggml.model");
  const MetaValue* tokens = array_of(f, "tokenizer.ggml.tokens", MetaType::string);
  if (!model || model->type != MetaType::string || !tokens)
    return make_error(Errc::parse, "{}: no tokenizer (tokenizer.ggml.model and tokenizer.ggml.tokens); give -t", f.name());
  std::unique_ptr<Tokenizer> t;
  if (model->s == "llama") {
    LMP_ASSIGN(t, spm(f, *tokens));
  } else if (model->s == "gpt2") {
    LMP_ASSIGN(t, bpe(f, *tokens));
  } else if (model->s == "bert") {
    LMP_ASSIGN(t, wordpiece(f, *tokens));
  } else {
    return make_error(Errc::unsupported, "{}: tokenizer.ggml.model '{}' is not supported (llama, gpt2, bert are); give -t",
                      f.name(), model->s);
  }
  // Where a generation ends: the ids the keys name, and the control tokens (type 3) that
  // are end-of-text or end-of-turn markers (<|eot_id|>, <|im_end|>, ...), as llama.cpp
  // gathers them.
  std::vector<TokenId> end;
  const std::size_t n = tokens->items.size();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto id = id_key(f, key); id && *id >= 0 && static_cast<std::size_t>(*id) < n) end.push_back(*id);
  const MetaValue* types = array_of(f, "tokenizer.ggml.token_type", MetaType::i32);
  for (std::size_t i = 0; types && types->items.size() == n && i < n; ++i)
    if (types->items[i].i == 3 && is_end_marker(tokens->items[i].s)) end.push_back(static_cast<TokenId>(i));
  t->set_end_ids(std::move(end));
  return t;
}

}  // namespace lmp::tok
