// The KV cache: the keys and values of every token seen, per layer, so that a decode step
// computes them only for the new token. Attention reads the cache as a list of blocks (one
// or two for the contiguous cache; one per page for the paged cache), each a run of token
// rows in the cache's storage type, and never copies the cache out.
//
// Two storages behind one per-sequence interface (llama.cpp's llama_memory_i in spirit):
//   contiguous  per sequence and layer, (n_ctx, kv_dim) rows reserved up front: llama2.c's
//               layout; forking copies.
//   paged       PagedAttention: fixed-size blocks of block_size tokens (all layers' K and
//               V of those tokens), a block table per sequence, a free list, blocks taken
//               on demand and reference-counted so that forked sequences share their
//               common blocks; writing into a shared block copies it first (copy-on-write).
// Storage types f32, f16, int8 and int4 (kv_rows.h), and int4-kivi: int4 values, keys
// per channel over groups of tokens (32 in the contiguous layout, the block in the paged
// one), the group being filled kept in f32 (no eviction). Eviction for long generations: none
// (an error at the context limit), a sliding window, or attention sinks + window
// (StreamingLLM).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/kv/kv_rows.h"

namespace lmp::kv {

using SeqId = std::int32_t;

// What happens when a sequence holds n_ctx tokens and one more comes.
//   none    an error: the context is full
//   window  the oldest token leaves (sliding-window attention; keys keep their positions)
//   sinks   the first n_sink tokens stay, the oldest of the others leaves (StreamingLLM:
//           the sinks are attended as if they sat just before the window)
enum class Eviction : std::uint8_t { none, window, sinks };
const char* eviction_name(Eviction e);
Result<Eviction> parse_eviction(std::string_view s);

enum class Layout : std::uint8_t { contiguous, paged };
const char* layout_name(Layout l);
Result<Layout> parse_layout(std::string_view s);

struct KvConfig {
  int n_layer = 0;
  int n_ctx = 0;        // tokens held per sequence (with eviction: sinks + window)
  int kv_dim = 0;       // n_kv_head × head_dim
  int head_dim = 0;     // sets the quantization group (kv_rows.h); 0 = kv_dim
  KvType type = KvType::f32;
  Layout layout = Layout::contiguous;
  int max_seqs = 1;     // sequence ids 0 .. max_seqs-1
  int block_size = 16;  // tokens per block (paged)
  std::uint64_t max_bytes = 0;  // paged: budget for blocks (0 = max_seqs × n_ctx tokens)
  Eviction eviction = Eviction::none;
  int n_sink = 4;       // with Eviction::sinks
};

// A run of token rows of one layer and sequence: rows begin .. end-1 of k and v are live
// (each RowFormat::bytes long, kv_rows.h). q_pos >= 0 (attention sinks after eviction):
// these keys are attended by the query rotated to position q_pos instead of its own.
//
// The int4-kivi cache's blocks differ from its rows' format: kfmt / vfmt (when not null)
// give the rows' formats, and kscale (when not null) the per-channel scales of the keys
// (kv_dim f16): the keys are then unscaled int4 rows, met by the query times the scales.
struct KvBlock {
  const std::byte* k = nullptr;
  const std::byte* v = nullptr;
  int begin = 0, end = 0;
  int q_pos = -1;
  const RowFormat* kfmt = nullptr;
  const RowFormat* vfmt = nullptr;
  const std::uint16_t* kscale = nullptr;
  int size() const { return end - begin; }
};

// Memory accounting, in bytes. used: live token rows (a row in a shared block counts
// once); allocated: blocks (or reserved rows) that hold or may hold this cache's tokens,
// so allocated - used is the waste; reserved: all storage taken from the system (free
// blocks included).
struct KvStats {
  std::uint64_t used = 0, allocated = 0, reserved = 0;
  std::int64_t blocks_in_use = 0, blocks_free = 0, blocks_shared = 0;  // paged only
  std::int64_t tokens = 0;      // live tokens over all sequences
  std::int64_t cow_copies = 0;  // paged: blocks copied before a write (copy-on-write)
};

class KvCache {
 public:
  virtual ~KvCache() = default;
  const KvConfig& config() const { return cfg_; }
  const RowFormat& format() const { return fmt_; }
  // Store the key and value (kv_dim floats each) of the next token of `seq` in `layer`.
  // Layers are filled in order: token i of layer l after token i of layer l-1. Errors: the
  // context limit (without eviction), the memory budget (paged), a bad sequence id.
  virtual Status append(int layer, SeqId seq, std::span<const float> k, std::span<const float> v) = 0;
  // The live blocks of `layer` for `seq`, in token order.
  virtual void blocks(int layer, SeqId seq, std::vector<KvBlock>& out) const = 0;
  // Tokens appended to `seq` (in its last layer: those fully processed), evicted ones included.
  int length(SeqId seq) const;
  // Tokens of `seq` that attention sees (length() less the evicted ones).
  int live(SeqId seq) const;
  // How many more tokens `seq` takes without evicting or failing.
  int room(SeqId seq) const;
  // Keep the first n_keep tokens of `seq` (an error below its evicted tokens).
  virtual Status truncate(SeqId seq, int n_keep) = 0;
  // Make `dst` (empty) a copy of `src`: the paged cache shares the blocks, the contiguous
  // one copies the rows.
  virtual Status fork(SeqId src, SeqId dst) = 0;
  // Drop every token of `seq` (the paged cache: its blocks back to the free list).
  virtual void release(SeqId seq);
  virtual KvStats stats() const = 0;
  // Bytes of the storage `seq` refers to, shared blocks included: what it would take alone.
  virtual std::uint64_t bytes_held(SeqId seq) const = 0;

 protected:
  explicit KvCache(const KvConfig& cfg);
  Status check_seq(SeqId seq) const;
  // What every storage checks before an append: the sequence, the layer order, the
  // context limit (without eviction). The token's index in the layer.
  Result<int> begin_append(int layer, SeqId seq) const;
  // Before a fork: both sequences valid, dst empty, src between two tokens.
  Status check_fork(SeqId src, SeqId dst) const;
  // Before a truncation: an error below evicted tokens; false when nothing is cut.
  Result<bool> check_truncate(SeqId seq, int n_keep) const;
  // The live token range(s) of a sequence of `len` tokens: sinks [0, s1) and window [w0, len).
  struct LiveRanges {
    int s1 = 0, w0 = 0;
    bool evicted = false;
  };
  LiveRanges live_ranges(int len) const;

  KvConfig cfg_;
  RowFormat fmt_;
  std::vector<std::vector<int>> len_;  // (max_seqs, n_layer) tokens appended per sequence and layer
};

// The storage the config asks for; errors for a config that cannot work (zero sizes, a
// block size of 0, sinks >= n_ctx, a budget below one block).
Result<std::unique_ptr<KvCache>> make_kv_cache(const KvConfig& cfg);

// Bytes of K and V one token takes in all layers (the formula: 2 · layers · kv_dim ·
// bytes per element, scales included).
std::uint64_t bytes_per_token(const KvConfig& cfg);

}  // namespace lmp::kv
