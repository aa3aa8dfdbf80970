// Shared by the fuzz harnesses: bytes as a file path (the readers under test take paths
// and map them, as the tools do), and a workout for whatever tokenizer loaded.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/rng.h"
#include "lmpipe/tok/bpe.h"
#include "lmpipe/tok/tokenizer.h"

namespace lmp::fuzz {

// An anonymous in-memory file holding `bytes`, named by its /proc/self/fd path.
class MemFile {
 public:
  explicit MemFile(std::string_view bytes) {
    fd_ = memfd_create("fuzz", 0);
    if (fd_ < 0) std::abort();
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Encode a fixed sample and the input's own first bytes (with offsets too: the same ids,
// spans in order inside the text), the latter sampled too, decode the ids back, and decode ids the tokenizer
// never made (including ones past its vocabulary): none may crash.
// Offsets as encode_with_offsets must give them: one span per id, inside the text, in order.
inline void check_spans(const std::vector<tok::Range>& spans, std::size_t n_ids, std::string_view text) {
  if (spans.size() != n_ids) std::abort();
  std::uint32_t prev = 0;
  for (const tok::Range& r : spans) {
    if (r.begin > r.end || r.end > text.size() || r.begin < prev) std::abort();
    prev = r.begin;
  }
}

inline void exercise(const tok::Tokenizer& t, std::string_view input) {
  tok::Session s(t);
  std::vector<TokenId> ids;
  t.encode("Hello, world! 你好 ▁x  \t\n\xff\xfe <s> [CLS] 12345", ids, s);
  t.encode(input.substr(0, 256), ids, s);
  // Offsets: the same ids, each span inside the text and in order.
  for (std::string_view text : {std::string_view("Hello, w\xC3\xB6rld! \xEF\xAC\x81 e\xCC\x81 \xE4\xBD\xA0 <s>"),
                                input.substr(0, 256)}) {
    std::vector<TokenId> plain, with;
    std::vector<tok::Range> spans;
    t.encode(text, plain, s);
    t.encode_with_offsets(text, with, spans, s);
    if (with != plain) std::abort();
    check_spans(spans, with.size(), text);
  }
  // Sampling (BPE-dropout, unigram draws among all segmentations or the n best): ids in the vocabulary, spans in order; a
  // byte-level BPE decodes a draw to the text of the best segmentation, unless a byte
  // had no token of its own (the best segmentation may hold it in a whole-piece token).
  if (t.model().type() != tok::ModelType::wordpiece) {
    Rng rng(input.size());
    tok::Session d(t);
    d.sample(&rng, 0.3, 0.2, input.size() % 3 == 0 ? 8 : -1);  // unigram: every third input among the 8 best
    const std::string_view text = input.substr(0, 256);
    std::vector<TokenId> drawn, best;
    std::vector<tok::Range> spans;
    t.encode(text, drawn, d);
    t.encode(text, best, s);
    for (TokenId id : drawn)
      if (id < 0 || static_cast<std::size_t>(id) >= t.vocab_size()) std::abort();
    if (t.bpe() && !t.bpe()->char_level() && t.decoder() == tok::Decoder::byte_level && d.dropped_bytes() == 0) {
      std::string a, b;
      if (t.decode(drawn.data(), drawn.size(), a).ok() != t.decode(best.data(), best.size(), b).ok() || a != b)
        std::abort();
    }
    drawn.clear();
    t.encode_with_offsets(text, drawn, spans, d);
    check_spans(spans, drawn.size(), text);
  }
  // The n best (unigram): at least one, at most n, best first, ids in the vocabulary;
  // other models refuse. (The first need not be encode()'s segmentation: with equal
  // scores, Viterbi keeps SentencePiece's float tie order.)
  {
    std::vector<tok::SentencePieceModel::Segmentation> nb;
    const std::string_view text = input.substr(0, 128);
    const bool unigram = t.model().type() == tok::ModelType::sentencepiece &&
                         static_cast<const tok::SentencePieceModel&>(t.model()).kind() ==
                             tok::SentencePieceModel::Kind::unigram;
    const std::size_t n = 1 + input.size() % 5;
    if (t.nbest(text, n, nb, s).ok() != unigram) std::abort();
    if (unigram) {
      if (nb.empty() || nb.size() > n) std::abort();
      for (std::size_t r = 0; r < nb.size(); ++r) {
        if (r && nb[r].score > nb[r - 1].score) std::abort();
        for (TokenId id : nb[r].ids)
          if (id < 0 || static_cast<std::size_t>(id) >= t.vocab_size()) std::abort();
      }
    }
  }
  std::string out;
  (void)t.decode(ids.data(), ids.size(), out);
  const TokenId probes[] = {0, 1, 2, 255, 256, static_cast<TokenId>(t.vocab_size()) - 1,
                                 static_cast<TokenId>(t.vocab_size()), -1};
  for (TokenId id : probes) {
    out.clear();
    (void)t.decode(&id, 1, out, true);
    (void)t.token_string(id);
    (void)t.piece(id);
  }
}

}  // namespace lmp::fuzz
