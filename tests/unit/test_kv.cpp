// The KV cache: row formats and their kernels, the paged cache against the contiguous one
// over random operation sequences, copy-on-write, the allocator, eviction and errors.
#include <algorithm>
#include <cmath>
#include <random>

#include <catch2/catch.hpp>

#include "lmpipe/kv/kv_cache.h"
#include "lmpipe/tensor_io/dtype.h"

using namespace lmp;
using namespace lmp::kv;

namespace {

std::vector<float> random_vec(std::mt19937& rng, std::size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::unique_ptr<KvCache> must(Result<std::unique_ptr<KvCache>> r) {
  if (!r.ok()) FAIL(r.error().message);
  return std::move(*r);
}

// Every live row of (layer, seq), K then V, dequantized, in attention's order, each block
// tagged with its q_pos.
std::vector<float> gather(const KvCache& c, int layer, SeqId s) {
  std::vector<KvBlock> bl;
  c.blocks(layer, s, bl);
  const RowFormat& f = c.format();
  std::vector<float> out, row(static_cast<std::size_t>(f.kv_dim));
  for (const auto& b : bl) {
    out.push_back(static_cast<float>(b.q_pos));
    for (int r = b.begin; r < b.end; ++r) {
      load_row(f, row.data(), b.k + static_cast<std::size_t>(r) * f.bytes);
      out.insert(out.end(), row.begin(), row.end());
      load_row(f, row.data(), b.v + static_cast<std::size_t>(r) * f.bytes);
      out.insert(out.end(), row.begin(), row.end());
    }
  }
  // Block boundaries differ between layouts: drop the tags of blocks that continue a run.
  return out;
}

// The live rows without block tags (the layouts split runs differently).
std::vector<float> rows_of(const KvCache& c, int layer, SeqId s) {
  std::vector<KvBlock> bl;
  c.blocks(layer, s, bl);
  const RowFormat& f = c.format();
  std::vector<float> out, row(static_cast<std::size_t>(f.kv_dim));
  for (const auto& b : bl)
    for (int r = b.begin; r < b.end; ++r) {
      load_row(f, row.data(), b.k + static_cast<std::size_t>(r) * f.bytes);
      out.insert(out.end(), row.begin(), row.end());
      load_row(f, row.data(), b.v + static_cast<std::size_t>(r) * f.bytes);
      out.insert(out.end(), row.begin(), row.end());
      out.push_back(static_cast<float>(b.q_pos));
    }
  return out;
}

// Append one token (all layers) with values that name it: k[i] = token + i/1000, v = -k.
Status put(KvCache& c, SeqId s, int token) {
  const int d = c.config().kv_dim;
  std::vector<float> k(static_cast<std::size_t>(d)), v(k.size());
  for (int l = 0; l < c.config().n_layer; ++l) {
    for (int i = 0; i < d; ++i) {
      k[static_cast<std::size_t>(i)] = static_cast<float>(token) + static_cast<float>(i + l) / 1000.0f;
      v[static_cast<std::size_t>(i)] = -k[static_cast<std::size_t>(i)];
    }
    LMP_TRY(c.append(l, s, k, v));
  }
  return {};
}

// The token numbers of the live rows of (layer 0, seq), read back from their keys.
std::vector<int> tokens_of(const KvCache& c, SeqId s) {
  std::vector<int> t;
  const auto rows = rows_of(c, 0, s);
  const auto stride = 2 * static_cast<std::size_t>(c.config().kv_dim) + 1;
  for (std::size_t i = 0; i < rows.size(); i += stride) t.push_back(static_cast<int>(std::lround(std::floor(rows[i]))));
  return t;
}

// The sizes of the runs of rows that attention reads for a sequence's layer.
std::vector<int> run_sizes(const KvCache& c, int layer, SeqId s) {
  std::vector<KvBlock> bl;
  c.blocks(layer, s, bl);
  std::vector<int> n;
  for (const auto& b : bl) n.push_back(b.size());
  return n;
}

// a, a + 1, ..., b - 1.
std::vector<int> tokens(int a, int b) {
  std::vector<int> t;
  for (int i = a; i < b; ++i) t.push_back(i);
  return t;
}

}  // namespace

TEST_CASE("row formats: quantization error within d/2, kernels equal the dequantized rows", "[kv]") {
  std::mt19937 rng(7);
  for (KvType t : {KvType::f32, KvType::f16, KvType::int8, KvType::int4}) {
    for (int hd : {8, 16, 48, 64, 128}) {
      const int n_kv = 2, kv_dim = n_kv * hd;
      const RowFormat f = RowFormat::make(t, kv_dim, hd);
      INFO(kv_type_name(t) << " head_dim " << hd << " group " << f.group);
      const int n = 37;
      std::vector<std::byte> rows(static_cast<std::size_t>(n) * f.bytes);
      std::vector<float> deq(static_cast<std::size_t>(n * kv_dim));
      double worst = 0;
      for (int j = 0; j < n; ++j) {
        auto x = random_vec(rng, static_cast<std::size_t>(kv_dim), j % 5 == 0 ? 30.0f : 1.0f);
        if (j == 3) std::fill(x.begin(), x.end(), 0.0f);  // an all-zero row: scale 0
        std::byte* r = rows.data() + static_cast<std::size_t>(j) * f.bytes;
        store_row(f, r, x.data());
        load_row(f, deq.data() + static_cast<std::size_t>(j * kv_dim), r);
        for (int g = 0; g < kv_dim; g += (t == KvType::int8 || t == KvType::int4) ? f.group : kv_dim) {
          const int len = (t == KvType::int8 || t == KvType::int4) ? f.group : kv_dim;
          float amax = 0;
          for (int i = g; i < g + len; ++i) amax = std::max(amax, std::fabs(x[static_cast<std::size_t>(i)]));
          const double m = amax;
          const double bound = t == KvType::f32 ? 0.0
                               : t == KvType::f16 ? m / 1024.0
                               : t == KvType::int8 ? m / 127.0 / 2 * 1.002
                                                   : m / 7.0 / 2 * 1.002;
          for (int i = g; i < g + len; ++i) {
            const double e = std::fabs(static_cast<double>(deq[static_cast<std::size_t>(j * kv_dim + i)] - x[static_cast<std::size_t>(i)]));
            CHECK(e <= bound + 1e-7);
            worst = std::max(worst, e);
          }
        }
      }
      if (t == KvType::f32) CHECK(worst == 0);
      // The kernels against the dequantized rows, head by head.
      for (int h = 0; h < n_kv; ++h) {
        const auto q = random_vec(rng, static_cast<std::size_t>(hd));
        std::vector<float> att(static_cast<std::size_t>(n)), want(att.size());
        row_scores(f, att.data(), q.data(), rows.data(), n, h * hd, hd, 0.5f);
        for (int j = 0; j < n; ++j) {
          // Within 1e-4 of the sum of |products| (the quantized rows meet q in int16: 2^-16).
          double s = 0, mag = 0;
          for (int i = 0; i < hd; ++i) {
            const double pr = static_cast<double>(q[static_cast<std::size_t>(i)] * deq[static_cast<std::size_t>(j * kv_dim + h * hd + i)]);
            s += pr;
            mag += std::fabs(pr);
          }
          want[static_cast<std::size_t>(j)] = static_cast<float>(s * 0.5);
          CHECK(std::fabs(static_cast<double>(att[static_cast<std::size_t>(j)]) - s * 0.5) <= 1e-4 * mag * 0.5 + 1e-6);
        }
        std::vector<float> out(static_cast<std::size_t>(hd), 1.0f), ref(out.size(), 1.0f);
        row_accumulate(f, out.data(), att.data(), rows.data(), n, h * hd, hd);
        for (int i = 0; i < hd; ++i) {
          double s = 1.0;
          for (int j = 0; j < n; ++j)
            s += static_cast<double>(att[static_cast<std::size_t>(j)] * deq[static_cast<std::size_t>(j * kv_dim + h * hd + i)]);
          CHECK(out[static_cast<std::size_t>(i)] == Approx(s).margin(1e-3).epsilon(1e-4));
        }
      }
    }
  }
  CHECK(RowFormat::make(KvType::int8, 4096, 128).bytes_per_number() == Approx(34.0 / 32));
  CHECK(RowFormat::make(KvType::int4, 4096, 128).bytes_per_number() == Approx(18.0 / 32));
}

// Many heads in one pass (row by row, each row's slices together) give each head the bits
// it gets alone: 20 heads (more than one pass's 16) on 4 kv heads, GQA's shared slices,
// rows split into blocks anywhere. load_slice equals load_row's numbers.
TEST_CASE("the kernels for many heads at once equal one head at a time, bit for bit", "[kv]") {
  std::mt19937 rng(11);
  for (KvType t : {KvType::f32, KvType::f16, KvType::int8, KvType::int4}) {
    for (int hd : {8, 32, 64}) {
      const int n_kv = 4, kv_dim = n_kv * hd, H = 20, n = 45;
      const RowFormat f = RowFormat::make(t, kv_dim, hd);
      INFO(kv_type_name(t) << " head_dim " << hd);
      std::vector<std::byte> rows(static_cast<std::size_t>(n) * f.bytes);
      for (int j = 0; j < n; ++j) {
        const auto x = random_vec(rng, static_cast<std::size_t>(kv_dim));
        store_row(f, rows.data() + static_cast<std::size_t>(j) * f.bytes, x.data());
        std::vector<float> row(static_cast<std::size_t>(kv_dim)), slice(static_cast<std::size_t>(hd));
        load_row(f, row.data(), rows.data() + static_cast<std::size_t>(j) * f.bytes);
        for (int k = 0; k < n_kv; ++k) {
          load_slice(f, slice.data(), rows.data() + static_cast<std::size_t>(j) * f.bytes, k * hd, hd);
          CHECK(std::equal(slice.begin(), slice.end(), row.begin() + k * hd));
        }
      }
      std::vector<std::vector<float>> q, att_one, att_many, out_one, out_many;
      std::vector<int> off;
      for (int h = 0; h < H; ++h) {
        q.push_back(random_vec(rng, static_cast<std::size_t>(hd)));
        off.push_back((h * n_kv / H) * hd);  // five heads per kv head
        att_one.emplace_back(static_cast<std::size_t>(n));
        att_many.emplace_back(static_cast<std::size_t>(n));
        out_one.emplace_back(static_cast<std::size_t>(hd), 0.5f);
        out_many.emplace_back(static_cast<std::size_t>(hd), 0.5f);
      }
      for (int h = 0; h < H; ++h) {
        row_scores(f, att_one[h].data(), q[h].data(), rows.data(), n, off[h], hd, 0.25f);
        row_accumulate(f, out_one[h].data(), att_one[h].data(), rows.data(), n, off[h], hd);
      }
      std::vector<float*> a, o;
      std::vector<const float*> qp, ap;
      for (int h = 0; h < H; ++h) {
        a.push_back(att_many[h].data());
        o.push_back(out_many[h].data());
        qp.push_back(q[h].data());
        ap.push_back(att_many[h].data());
      }
      for (int b0 = 0; b0 < n;) {  // blocks of 1, 6, 11, ... rows
        const int m = std::min(n - b0, 1 + 5 * (b0 % 3));
        std::vector<float*> a_at, o_at = o;
        std::vector<const float*> ap_at;
        for (int h = 0; h < H; ++h) {
          a_at.push_back(a[h] + b0);
          ap_at.push_back(ap[h] + b0);
        }
        const std::byte* r = rows.data() + static_cast<std::size_t>(b0) * f.bytes;
        row_scores(f, a_at.data(), qp.data(), off.data(), H, r, m, hd, 0.25f);
        row_accumulate(f, o_at.data(), ap_at.data(), off.data(), H, r, m, hd);
        b0 += m;
      }
      CHECK(att_many == att_one);
      CHECK(out_many == out_one);
    }
  }
}

TEST_CASE("bytes per token: the formula of the reference numbers", "[kv]") {
  KvConfig c;
  c.n_layer = 32;
  c.kv_dim = 32 * 128;  // Llama-2-7B
  c.head_dim = 128;
  c.type = KvType::f16;
  CHECK(bytes_per_token(c) == 524288);  // 0.5 MiB
  c.type = KvType::int8;
  CHECK(bytes_per_token(c) == 272 * 1024);
  c.type = KvType::int4;
  CHECK(bytes_per_token(c) == 144 * 1024);
  c.n_layer = 80;
  c.kv_dim = 8 * 128;  // Llama-2-70B, GQA
  c.type = KvType::f16;
  CHECK(bytes_per_token(c) == 320 * 1024);
}

namespace {
// Random appends, forks, truncations and releases, the same on two caches of one config
// (`a` and `b`): of every `ops` draws, `appends` append (through `append`, which must
// give both caches the same token), two fork, one truncates and the rest release; both
// must accept or refuse alike. `check` runs after every step.
template <class Append, class Check>
void random_ops(KvCache& a, KvCache& b, unsigned seed, int steps, int ops, int appends, Append&& append, Check&& check) {
  const KvConfig& cfg = a.config();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick_seq(0, cfg.max_seqs - 1), pick_op(0, ops - 1);
  for (int step = 0; step < steps; ++step) {
    const SeqId s = pick_seq(rng);
    const int op = pick_op(rng);
    if (op < appends) {
      const bool room = a.length(s) < cfg.n_ctx;
      REQUIRE(append(a, s).ok() == room);
      REQUIRE(append(b, s).ok() == room);
    } else if (op < appends + 2) {
      const SeqId d = pick_seq(rng);
      const bool can = d == s || a.length(d) == 0;
      REQUIRE(a.fork(s, d).ok() == can);
      REQUIRE(b.fork(s, d).ok() == can);
    } else if (op == appends + 2) {
      const int keep = std::uniform_int_distribution<int>(0, std::max(a.length(s), 1))(rng);
      REQUIRE(a.truncate(s, keep).ok());
      REQUIRE(b.truncate(s, keep).ok());
    } else {
      a.release(s);
      b.release(s);
    }
    check();
  }
}
}  // namespace

TEST_CASE("paged equals contiguous over random append, fork, truncate and release", "[kv][paged]") {
  for (KvType t : {KvType::f32, KvType::int8, KvType::int4}) {
    for (int bs : {1, 3, 16}) {
      INFO(kv_type_name(t) << " block " << bs);
      KvConfig cfg;
      cfg.n_layer = 3;
      cfg.n_ctx = 40;
      cfg.kv_dim = 64;
      cfg.head_dim = 32;
      cfg.type = t;
      cfg.max_seqs = 5;
      cfg.block_size = bs;
      auto contiguous = must(make_kv_cache(cfg));
      cfg.layout = Layout::paged;
      auto paged = must(make_kv_cache(cfg));
      int token = 0;
      auto append = [&](KvCache& c, SeqId s) { return put(c, s, &c == contiguous.get() ? ++token : token); };
      random_ops(*contiguous, *paged, static_cast<unsigned>(bs * 31 + static_cast<int>(t)), 1500, 10, 6, append, [&] {
        for (SeqId q = 0; q < cfg.max_seqs; ++q) {
          REQUIRE(contiguous->length(q) == paged->length(q));
          for (int l = 0; l < cfg.n_layer; ++l) REQUIRE(rows_of(*contiguous, l, q) == rows_of(*paged, l, q));
        }
        // Blocks in use never exceed what the sequences hold.
        std::int64_t bound = 0;
        for (SeqId q = 0; q < cfg.max_seqs; ++q) bound += (paged->length(q) + bs - 1) / bs;
        const KvStats ps = paged->stats();
        REQUIRE(ps.blocks_in_use <= bound);
        REQUIRE(ps.used <= ps.allocated);
        REQUIRE(ps.allocated - ps.used < static_cast<std::uint64_t>(std::max<std::int64_t>(ps.blocks_in_use, 1)) *
                                              static_cast<std::uint64_t>(bs) * bytes_per_token(cfg));
      });
      for (SeqId q = 0; q < cfg.max_seqs; ++q) paged->release(q);
      const KvStats st = paged->stats();
      CHECK(st.blocks_in_use == 0);
      CHECK(st.tokens == 0);
      CHECK(st.reserved == static_cast<std::uint64_t>(st.blocks_free) * bytes_per_token(cfg) * static_cast<std::uint64_t>(bs));
    }
  }
}

TEST_CASE("copy-on-write: a forked sequence's writes never change its source", "[kv][paged]") {
  KvConfig cfg;
  cfg.n_layer = 2;
  cfg.n_ctx = 64;
  cfg.kv_dim = 8;
  cfg.max_seqs = 3;
  cfg.layout = Layout::paged;
  cfg.block_size = 4;
  auto c = must(make_kv_cache(cfg));
  for (int i = 0; i < 10; ++i) REQUIRE(put(*c, 0, i).ok());  // blocks 0, 1 full; block 2 holds 2
  const auto before0 = gather(*c, 0, 0), before1 = gather(*c, 1, 0);
  REQUIRE(c->fork(0, 1).ok());
  REQUIRE(c->fork(0, 2).ok());
  CHECK(c->stats().blocks_in_use == 3);  // all shared
  CHECK(c->stats().blocks_shared == 3);
  for (int i = 100; i < 109; ++i) REQUIRE(put(*c, 1, i).ok());  // writes into the shared third block first
  CHECK(c->stats().cow_copies == 1);
  REQUIRE(c->truncate(2, 5).ok());  // cuts into block 1, shared: nothing copied until written
  REQUIRE(put(*c, 2, 200).ok());
  CHECK(c->stats().cow_copies == 2);
  CHECK(gather(*c, 0, 0) == before0);
  CHECK(gather(*c, 1, 0) == before1);
  CHECK(tokens_of(*c, 1) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 101, 102, 103, 104, 105, 106, 107, 108});
  CHECK(tokens_of(*c, 2) == std::vector<int>{0, 1, 2, 3, 4, 200});
  // Sequence 0 still owns its third block alone; the release frees only what nobody holds.
  c->release(0);
  CHECK(tokens_of(*c, 2) == std::vector<int>{0, 1, 2, 3, 4, 200});
  c->release(1);
  c->release(2);
  CHECK(c->stats().blocks_in_use == 0);
  // Sharing: three sequences of a 10-token prompt take 3 blocks, not 9.
  for (int i = 0; i < 10; ++i) REQUIRE(put(*c, 0, i).ok());
  REQUIRE(c->fork(0, 1).ok());
  REQUIRE(c->fork(0, 2).ok());
  CHECK(c->stats().allocated == 3 * 4 * bytes_per_token(cfg));
  CHECK(c->stats().used == 10 * bytes_per_token(cfg));  // shared rows count once
  CHECK(c->stats().tokens == 30);
}

TEST_CASE("paged: a sequence's consecutive blocks are read as one run, interleaved ones as several", "[kv][paged]") {
  const KvConfig cfg{.n_layer = 2, .n_ctx = 256, .kv_dim = 8, .layout = Layout::paged, .max_seqs = 2, .block_size = 4};
  auto c = must(make_kv_cache(cfg));
  // Alone, 50 tokens take blocks 0..12 of the pool's first chunk (16 blocks): one run.
  for (int i = 0; i < 50; ++i) REQUIRE(put(*c, 0, i).ok());
  for (int l = 0; l < cfg.n_layer; ++l) CHECK(run_sizes(*c, l, 0) == std::vector<int>{50});
  // 100 tokens cross into the second chunk: two runs, split where the chunk ends.
  for (int i = 50; i < 100; ++i) REQUIRE(put(*c, 0, i).ok());
  CHECK(run_sizes(*c, 1, 0) == std::vector<int>{64, 36});
  CHECK(tokens_of(*c, 0) == tokens(0, 100));
  // Truncated into a block and grown again: the rows are those written, still one run a chunk.
  REQUIRE(c->truncate(0, 30).ok());
  for (int i = 30; i < 40; ++i) REQUIRE(put(*c, 0, 1000 + i).ok());
  auto want = tokens(0, 30), more = tokens(1030, 1040);
  want.insert(want.end(), more.begin(), more.end());
  CHECK(tokens_of(*c, 0) == want);
  CHECK(run_sizes(*c, 0, 0) == std::vector<int>{40});
  // Two sequences growing token by token in turn share out the free blocks: their runs
  // split, their rows do not.
  c->release(0);
  for (int i = 0; i < 40; ++i) {
    REQUIRE(put(*c, 0, i).ok());
    REQUIRE(put(*c, 1, 500 + i).ok());
  }
  CHECK(tokens_of(*c, 0) == tokens(0, 40));
  CHECK(tokens_of(*c, 1) == tokens(500, 540));
  const auto r0 = run_sizes(*c, 0, 0), r1 = run_sizes(*c, 0, 1);
  CHECK(r0.size() + r1.size() > 2);
  int sum = 0;
  for (int n : r0) sum += n;
  for (int n : r1) sum += n;
  CHECK(sum == 80);
  CHECK(c->stats().blocks_in_use == 20);
}

TEST_CASE("paged: sequences growing together read their blocks in runs, set-aside blocks still serve the budget", "[kv][paged]") {
  const KvConfig cfg{.n_layer = 2, .n_ctx = 256, .kv_dim = 8, .layout = Layout::paged, .max_seqs = 4, .block_size = 4};
  auto c = must(make_kv_cache(cfg));
  // Four sequences taking a token each in turn: the fresh block each takes starts a run
  // (256 tokens, cut at the end of its chunk) that its next blocks come from.
  for (int i = 0; i < 100; ++i)
    for (SeqId s = 0; s < 4; ++s) REQUIRE(put(*c, s, 1000 * s + i).ok());
  for (SeqId s = 0; s < 4; ++s) {
    INFO("sequence " << s);
    CHECK(tokens_of(*c, s) == tokens(1000 * s, 1000 * s + 100));
    for (int l = 0; l < cfg.n_layer; ++l) CHECK(run_sizes(*c, l, s).size() <= 2);
  }
  CHECK(c->stats().blocks_in_use == 100);
  // Released, a sequence's blocks are handed out again in runs.
  c->release(2);
  for (int i = 0; i < 100; ++i) REQUIRE(put(*c, 2, i).ok());
  CHECK(run_sizes(*c, 0, 2).size() <= 2);
  CHECK(tokens_of(*c, 2) == tokens(0, 100));

  // A budget of 10 blocks: the first sequence's block sets the other 9 aside for it, and
  // the second sequence still gets all 9; then the pool is out of blocks.
  KvConfig small{.n_layer = 1, .n_ctx = 64, .kv_dim = 8, .layout = Layout::paged, .max_seqs = 2, .block_size = 4};
  small.max_bytes = 10 * 4 * bytes_per_token(small);
  auto p = must(make_kv_cache(small));
  REQUIRE(put(*p, 0, 0).ok());
  for (int i = 0; i < 36; ++i) REQUIRE(put(*p, 1, 100 + i).ok());
  CHECK(p->stats().blocks_in_use == 10);
  CHECK(p->stats().blocks_free == 0);
  const Status full = put(*p, 1, 136);
  REQUIRE_FALSE(full.ok());
  CHECK_THAT(full.error().message, Catch::Matchers::Contains("out of KV-cache memory"));
  for (int i = 1; i < 4; ++i) CHECK(put(*p, 0, i).ok());  // the rest of its block
  CHECK_FALSE(put(*p, 0, 4).ok());
  CHECK(tokens_of(*p, 0) == tokens(0, 4));
  CHECK(tokens_of(*p, 1) == tokens(100, 136));
}

TEST_CASE("eviction: window and sinks keep the right tokens in both layouts and free blocks", "[kv]") {
  for (Eviction e : {Eviction::window, Eviction::sinks}) {
    for (Layout lay : {Layout::contiguous, Layout::paged}) {
      INFO(eviction_name(e) << " " << layout_name(lay));
      KvConfig cfg;
      cfg.n_layer = 2;
      cfg.n_ctx = 12;
      cfg.kv_dim = 8;
      cfg.layout = lay;
      cfg.block_size = 4;
      cfg.eviction = e;
      cfg.n_sink = 3;
      auto c = must(make_kv_cache(cfg));
      for (int i = 0; i < 50; ++i) {
        REQUIRE(put(*c, 0, i).ok());
        const int len = i + 1;
        std::vector<int> want;
        if (len <= cfg.n_ctx) {
          for (int t = 0; t < len; ++t) want.push_back(t);
        } else {
          const int s = e == Eviction::sinks ? cfg.n_sink : 0;
          for (int t = 0; t < s; ++t) want.push_back(t);
          for (int t = len - (cfg.n_ctx - s); t < len; ++t) want.push_back(t);
        }
        REQUIRE(tokens_of(*c, 0) == want);
        REQUIRE(c->live(0) == std::min(len, cfg.n_ctx));
        REQUIRE(c->length(0) == len);
        if (lay == Layout::paged) REQUIRE(c->stats().blocks_in_use <= (cfg.n_ctx + 3) / 4 + 2);
      }
      // The sinks, once the window has moved, meet the query at the cache's last position.
      std::vector<KvBlock> bl;
      c->blocks(0, 0, bl);
      if (e == Eviction::sinks) {
        CHECK(bl.front().q_pos == cfg.n_ctx - 1);
      } else {
        for (const auto& b : bl) CHECK(b.q_pos == -1);
      }
      CHECK_FALSE(c->truncate(0, 5).ok());
    }
  }
}

TEST_CASE("errors: context full, out of blocks, bad sequences, bad configs", "[kv]") {
  KvConfig cfg;
  cfg.n_layer = 1;
  cfg.n_ctx = 8;
  cfg.kv_dim = 8;
  cfg.max_seqs = 2;
  for (Layout lay : {Layout::contiguous, Layout::paged}) {
    cfg.layout = lay;
    auto c = must(make_kv_cache(cfg));
    for (int i = 0; i < 8; ++i) REQUIRE(put(*c, 0, i).ok());
    auto full = put(*c, 0, 8);
    REQUIRE_FALSE(full.ok());
    CHECK_THAT(full.error().message, Catch::Contains("context is full: 8 tokens"));
    CHECK_THAT(put(*c, 2, 0).error().message, Catch::Contains("sequence 2 is outside"));
    CHECK_THAT(c->fork(0, 0).ok() ? std::string("ok") : std::string("fail"), Catch::Equals("ok"));
    REQUIRE(put(*c, 1, 0).ok());
    CHECK_THAT(c->fork(0, 1).error().message, Catch::Contains("not empty"));
  }
  cfg.layout = Layout::paged;
  cfg.block_size = 4;
  cfg.max_bytes = 3 * 4 * bytes_per_token(cfg);  // three blocks
  auto c = must(make_kv_cache(cfg));
  for (int i = 0; i < 8; ++i) REQUIRE(put(*c, 0, i).ok());
  for (int i = 0; i < 4; ++i) REQUIRE(put(*c, 1, i).ok());
  auto oom = put(*c, 1, 4);
  REQUIRE_FALSE(oom.ok());
  CHECK_THAT(oom.error().message, Catch::Contains("out of KV-cache memory: all 3 blocks"));
  c->release(0);
  CHECK(put(*c, 1, 4).ok());  // a released block is taken again
  cfg.max_bytes = 1;
  CHECK_THAT(make_kv_cache(cfg).error().message, Catch::Contains("below one block"));
  cfg.max_bytes = 0;
  cfg.block_size = 0;
  CHECK_FALSE(make_kv_cache(cfg).ok());
  cfg.block_size = 16;
  cfg.eviction = Eviction::sinks;
  cfg.n_sink = 8;
  CHECK_THAT(make_kv_cache(cfg).error().message, Catch::Contains("leave no window"));
  cfg.n_layer = 0;
  CHECK_FALSE(make_kv_cache(cfg).ok());
  CHECK_FALSE(parse_kv_type("int3").ok());
  auto q8 = parse_kv_type("q8_0");
  CHECK((q8.ok() && *q8 == KvType::int8));
}

TEST_CASE("int4-kivi: keys per channel after a full-precision window, values per token, truncate, fork, errors", "[kv]") {
  KvConfig cfg;
  cfg.n_layer = 2;
  cfg.n_ctx = 100;
  cfg.kv_dim = 64;
  cfg.head_dim = 32;
  cfg.type = KvType::int4_kivi;
  cfg.max_seqs = 2;
  auto c = must(make_kv_cache(cfg));
  std::mt19937 rng(3);
  std::vector<std::vector<float>> ks, vs;
  // Channels of very different sizes: what per-channel scales are for.
  for (int t = 0; t < 70; ++t) {
    auto k = random_vec(rng, 64), v = random_vec(rng, 64);
    for (int i = 0; i < 64; ++i) k[static_cast<std::size_t>(i)] *= i % 8 == 0 ? 20.0f : 1.0f;
    ks.push_back(k);
    vs.push_back(v);
    for (int l = 0; l < 2; ++l) REQUIRE(c->append(l, 0, k, v).ok());
  }
  // Two sealed groups of 32 (per-channel keys, int4 values) and a window of 6 in f32.
  std::vector<KvBlock> bl;
  c->blocks(1, 0, bl);
  REQUIRE(bl.size() == 3);
  CHECK(bl[0].kscale != nullptr);
  CHECK(bl[2].kscale == nullptr);
  CHECK(bl[2].size() == 6);
  auto key = [&](const KvBlock& b, int r, std::vector<float>& out) {
    out.resize(64);
    load_row(*b.kfmt, out.data(), b.k + static_cast<std::size_t>(r) * b.kfmt->bytes);
    if (b.kscale)
      for (int i = 0; i < 64; ++i) out[static_cast<std::size_t>(i)] *= f16_to_f32(b.kscale[i]);
  };
  std::vector<float> got;
  for (int g = 0; g < 2; ++g) {
    for (int r = 0; r < 32; ++r) {
      key(bl[static_cast<std::size_t>(g)], r, got);
      const auto& want = ks[static_cast<std::size_t>(g * 32 + r)];
      for (int ch = 0; ch < 64; ++ch) {  // within half a step of the channel's scale
        float amax = 0;
        for (int t = g * 32; t < g * 32 + 32; ++t) amax = std::max(amax, std::fabs(ks[static_cast<std::size_t>(t)][static_cast<std::size_t>(ch)]));
        CHECK(std::fabs(got[static_cast<std::size_t>(ch)] - want[static_cast<std::size_t>(ch)]) <= amax / 7 / 2 * 1.01f + 1e-6f);
      }
    }
  }
  key(bl[2], 5, got);
  CHECK(got == ks[69]);  // the window is exact
  std::vector<float> v(64);
  load_row(*bl[2].vfmt, v.data(), bl[2].v + 5 * bl[2].vfmt->bytes);
  CHECK(v == vs[69]);
  // Fork copies; truncating into a sealed group brings its kept tokens back to the window.
  REQUIRE(c->fork(0, 1).ok());
  REQUIRE(c->truncate(1, 40).ok());
  c->blocks(0, 1, bl);
  REQUIRE(bl.size() == 2);
  CHECK(bl[1].size() == 8);
  CHECK(bl[1].kscale == nullptr);
  for (int l = 0; l < 2; ++l) REQUIRE(c->append(l, 1, ks[0], vs[0]).ok());
  CHECK(c->length(1) == 41);
  CHECK(c->length(0) == 70);
  // No eviction, in either layout.
  for (Layout lay : {Layout::contiguous, Layout::paged}) {
    cfg.layout = lay;
    cfg.eviction = Eviction::window;
    CHECK_THAT(make_kv_cache(cfg).error().message, Catch::Contains("does not evict"));
  }
}

namespace {
// Every live row of (layer, seq) as attention reads it: each block in its own formats,
// keys times their per-channel scales.
std::vector<float> kivi_rows_of(const KvCache& c, int layer, SeqId s) {
  std::vector<KvBlock> bl;
  c.blocks(layer, s, bl);
  const int d = c.config().kv_dim;
  std::vector<float> out, row(static_cast<std::size_t>(d));
  for (const auto& b : bl) {
    const RowFormat& kf = b.kfmt ? *b.kfmt : c.format();
    const RowFormat& vf = b.vfmt ? *b.vfmt : c.format();
    for (int r = b.begin; r < b.end; ++r) {
      load_row(kf, row.data(), b.k + static_cast<std::size_t>(r) * kf.bytes);
      if (b.kscale)
        for (int i = 0; i < d; ++i) row[static_cast<std::size_t>(i)] *= f16_to_f32(b.kscale[i]);
      out.insert(out.end(), row.begin(), row.end());
      load_row(vf, row.data(), b.v + static_cast<std::size_t>(r) * vf.bytes);
      out.insert(out.end(), row.begin(), row.end());
    }
  }
  return out;
}

// Append one token (all layers) of random keys with outlier channels, and values.
Status put_random(KvCache& c, SeqId s, std::mt19937& rng) {
  const auto d = static_cast<std::size_t>(c.config().kv_dim);
  for (int l = 0; l < c.config().n_layer; ++l) {
    auto k = random_vec(rng, d), v = random_vec(rng, d);
    for (std::size_t i = 0; i < d; i += 8) k[i] *= 20.0f;
    LMP_TRY(c.append(l, s, k, v));
  }
  return {};
}
}  // namespace

// The paged int4-kivi cache, its group the block: with blocks of 32 it holds exactly what
// the contiguous one does (groups of 32) over random appends, forks, truncations (into
// sealed groups too) and releases; forks share the sealed blocks, and nothing leaks.
TEST_CASE("int4-kivi paged equals int4-kivi contiguous over random operations, blocks shared, freed", "[kv][paged]") {
  KvConfig cfg;
  cfg.n_layer = 2;
  cfg.n_ctx = 100;
  cfg.kv_dim = 64;
  cfg.head_dim = 32;
  cfg.type = KvType::int4_kivi;
  cfg.max_seqs = 4;
  cfg.block_size = 32;
  auto contiguous = must(make_kv_cache(cfg));
  cfg.layout = Layout::paged;
  auto paged = must(make_kv_cache(cfg));
  std::mt19937 ra(7), rb(7);  // (the same random tokens for both)
  auto append = [&](KvCache& c, SeqId s) { return put_random(c, s, &c == contiguous.get() ? ra : rb); };
  random_ops(*contiguous, *paged, 41, 3000, 20, 16, append, [&] {
    for (SeqId q = 0; q < cfg.max_seqs; ++q) {
      REQUIRE(contiguous->length(q) == paged->length(q));
      for (int l = 0; l < cfg.n_layer; ++l) REQUIRE(kivi_rows_of(*contiguous, l, q) == kivi_rows_of(*paged, l, q));
    }
    // A block for each sealed group a sequence holds, shared ones once.
    std::int64_t bound = 0;
    for (SeqId q = 0; q < cfg.max_seqs; ++q) bound += paged->length(q) / cfg.block_size;
    const KvStats ps = paged->stats();
    REQUIRE(ps.blocks_in_use <= bound);
    REQUIRE(ps.used <= ps.allocated);
  });
  for (SeqId q = 0; q < cfg.max_seqs; ++q) paged->release(q);
  CHECK(paged->stats().blocks_in_use == 0);
  CHECK(paged->stats().allocated == 0);

  // Sharing: three continuations of a 70-token prompt hold its two sealed blocks once.
  std::mt19937 rp(5);
  for (int t = 0; t < 70; ++t) REQUIRE(put_random(*paged, 0, rp).ok());
  REQUIRE(paged->fork(0, 1).ok());
  REQUIRE(paged->fork(0, 2).ok());
  KvStats st = paged->stats();
  CHECK(st.blocks_in_use == 2);
  CHECK(st.blocks_shared == 2);
  CHECK(paged->bytes_held(1) == paged->bytes_held(0));
  for (int t = 0; t < 30; ++t) REQUIRE(put_random(*paged, 1, rp).ok());  // seals a block of its own
  CHECK(paged->stats().blocks_in_use == 3);
  CHECK(kivi_rows_of(*paged, 1, 2) == kivi_rows_of(*paged, 1, 0));  // the others unchanged
  REQUIRE(paged->truncate(2, 40).ok());  // into a shared sealed block: it stays for the others
  CHECK(paged->stats().blocks_in_use == 3);
  CHECK(paged->length(2) == 40);
  for (SeqId q = 0; q < 3; ++q) paged->release(q);
  CHECK(paged->stats().blocks_in_use == 0);
}

TEST_CASE("int4-kivi paged: the block is the group, budget and context errors", "[kv][paged]") {
  KvConfig cfg;
  cfg.n_layer = 2;
  cfg.n_ctx = 64;
  cfg.kv_dim = 64;
  cfg.head_dim = 32;
  cfg.type = KvType::int4_kivi;
  cfg.layout = Layout::paged;
  cfg.block_size = 16;
  auto c = must(make_kv_cache(cfg));
  std::mt19937 rng(9);
  std::vector<std::vector<float>> ks;
  for (int t = 0; t < 40; ++t) {
    auto k = random_vec(rng, 64), v = random_vec(rng, 64);
    for (int i = 0; i < 64; i += 8) k[static_cast<std::size_t>(i)] *= 20.0f;
    ks.push_back(k);
    for (int l = 0; l < 2; ++l) REQUIRE(c->append(l, 0, k, v).ok());
  }
  std::vector<KvBlock> bl;
  c->blocks(0, 0, bl);
  REQUIRE(bl.size() == 3);  // two sealed blocks of 16, a window of 8
  CHECK(bl[0].size() == 16);
  CHECK(bl[0].kscale != nullptr);
  CHECK(bl[2].size() == 8);
  CHECK(bl[2].kscale == nullptr);
  const auto rows = kivi_rows_of(*c, 0, 0);
  for (int t = 0; t < 32; ++t)
    for (int ch = 0; ch < 64; ++ch) {  // within half a step of the channel's scale over its block
      float amax = 0;
      for (int u = t / 16 * 16; u < t / 16 * 16 + 16; ++u) amax = std::max(amax, std::fabs(ks[static_cast<std::size_t>(u)][static_cast<std::size_t>(ch)]));
      const float got = rows[static_cast<std::size_t>(t) * 128 + static_cast<std::size_t>(ch)];
      CHECK(std::fabs(got - ks[static_cast<std::size_t>(t)][static_cast<std::size_t>(ch)]) <= amax / 7 / 2 * 1.01f + 1e-6f);
    }
  for (int t = 32; t < 40; ++t)  // the window is exact
    for (int ch = 0; ch < 64; ++ch)
      CHECK(rows[static_cast<std::size_t>(t) * 128 + static_cast<std::size_t>(ch)] == ks[static_cast<std::size_t>(t)][static_cast<std::size_t>(ch)]);
  // The context limit; a budget of one block (and the window): the second block fails.
  for (int t = 40; t < 64; ++t) REQUIRE(put_random(*c, 0, rng).ok());
  CHECK_THAT(put_random(*c, 0, rng).error().message, Catch::Contains("context is full"));
  cfg.max_bytes = 1;
  CHECK_THAT(make_kv_cache(cfg).error().message, Catch::Contains("below one block"));
  auto one = must(make_kv_cache(cfg = [&] {
    KvConfig b = cfg;
    b.max_bytes = 0;
    auto probe = must(make_kv_cache(b));
    for (int t = 0; t < 17; ++t) REQUIRE(put_random(*probe, 0, rng).ok());
    b.max_bytes = probe->stats().allocated;  // one block and one window
    return b;
  }()));
  for (int t = 0; t < 31; ++t) REQUIRE(put_random(*one, 0, rng).ok());
  CHECK_THAT(put_random(*one, 0, rng).error().message, Catch::Contains("out of KV-cache memory"));
}
