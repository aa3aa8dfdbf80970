// The hash tables behind tokenizers, and their parallel bulk builds: insert_all and
// set_all on any number of threads answer every lookup as the sequential inserts do.
// run_ordered emits in order, in bounded buffers, and stops on the first error.
#include <catch2/catch.hpp>

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lmpipe/core/big_alloc.h"
#include "lmpipe/core/flat_map.h"
#include "lmpipe/core/parallel.h"
#include "lmpipe/core/string_map.h"

using namespace lmp;

TEST_CASE("ZeroedArray starts all zero, small and large, and moves", "[core][tables]") {
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{3} << 20}) {
    ZeroedArray<std::uint64_t> a(n);
    REQUIRE(a.size() == n);
    bool zero = true;
    for (std::size_t i = 0; i < n; i += 4099) zero = zero && a[i] == 0;
    CHECK(zero);
    a[n - 1] = 7;
    ZeroedArray<std::uint64_t> b = std::move(a);
    CHECK(a.empty());
    CHECK(b[n - 1] == 7);
  }
}

TEST_CASE("ZeroedArray::prefault writes nothing but zeros, and only inside its range", "[core][tables]") {
  // Elements of 24 bytes, so that ranges start and end inside pages and elements.
  struct E {
    std::uint64_t a, b, c;
  };
  const std::size_t n = (std::size_t{5} << 20) / sizeof(E) + 17;
  ZeroedArray<E> z(n);
  const std::size_t parts = 3;
  // A marker at each share's ends, written before; each thread prefaults its share
  // between them, so a write outside the range would clear a marker's first byte.
  for (std::size_t p = 0; p < parts; ++p) {
    z[n * p / parts] = E{1, 2, 3};
    z[n * (p + 1) / parts - 1] = E{4, 5, 6};
  }
  parallel_ranges(n, static_cast<int>(parts), [&](std::size_t lo, std::size_t hi, std::size_t) { z.prefault(lo + 1, hi - 1); });
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < n; ++i) nonzero += z[i].a != 0 || z[i].b != 0 || z[i].c != 0;
  CHECK(nonzero == 2 * parts);
  for (std::size_t p = 0; p < parts; ++p) {
    CHECK(z[n * p / parts].c == 3);
    CHECK(z[n * (p + 1) / parts - 1].a == 4);
  }
  ZeroedArray<E> small(10);
  small.prefault(0, 10);  // a small array is already written: nothing to do
  CHECK(small[9].b == 0);
}

TEST_CASE("StringIdMap::insert_all on 1-5 threads equals inserts in order", "[core][tables][property]") {
  std::mt19937 rng(3);
  for (int round = 0; round < 20; ++round) {
    // Keys from a small alphabet, so that many repeat (the first id must win).
    // Two rounds big enough for a table of huge pages, which the threads prefault.
    std::size_t n = round < 2 ? 60000 + rng() % 40000 : 1 + rng() % 5000;
    std::vector<std::string> store(n);
    for (auto& k : store) {
      k.resize(rng() % 12);  // empty keys too
      for (auto& c : k) c = "abc\xE4\x80"[rng() % 5];
    }
    std::vector<std::string_view> keys(store.begin(), store.end());
    std::vector<std::int32_t> ids(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::int32_t>(rng() % 100000);
    StringIdMap want;
    std::vector<std::uint8_t> want_in(n);
    for (std::size_t i = 0; i < n; ++i) want_in[i] = want.insert(keys[i], ids[i]) ? 1 : 0;
    for (int threads = 1; threads <= 5; ++threads) {
      StringIdMap got;
      std::vector<std::uint8_t> got_in;
      got.insert_all(keys, ids.data(), got_in, threads);
      INFO("round " << round << ", " << threads << " threads, " << n << " keys");
      REQUIRE(got_in == want_in);
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < n; ++i) REQUIRE(got.find(keys[i]) == want.find(keys[i]));
      CHECK(got.find("zzz-absent") == -1);
    }
  }
}

TEST_CASE("InlineMap64::set_all on 1-5 threads equals sets in order", "[core][tables][property]") {
  std::mt19937_64 rng(9);
  for (int round = 0; round < 20; ++round) {
    std::size_t n = round < 2 ? 150000 + rng() % 50000 : 1 + rng() % 20000;
    std::vector<std::uint64_t> keys(n);
    std::vector<std::uint32_t> vals(n);
    for (std::size_t i = 0; i < n; ++i) {
      keys[i] = rng() % (n / 2 + 1);  // repeats: the last value must win
      if (rng() % 8 == 0) keys[i] = 0;  // the key 0 is a key like any other
      vals[i] = static_cast<std::uint32_t>(rng());
    }
    InlineMap64<std::uint32_t> want;
    for (std::size_t i = 0; i < n; ++i) want.set(keys[i], vals[i]);
    for (int threads = 1; threads <= 5; ++threads) {
      InlineMap64<std::uint32_t> got;
      got.set_all(keys.data(), vals.data(), n, threads);
      INFO("round " << round << ", " << threads << " threads");
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < n; ++i) REQUIRE(*got.find(keys[i]) == *want.find(keys[i]));
      CHECK(got.find(n + 12345) == nullptr);
    }
  }
}

TEST_CASE("run_ordered emits every item once, in order, whatever the workers' pace", "[core][threads]") {
  for (int threads : {1, 2, 3, 7}) {
    std::mt19937 rng(static_cast<unsigned>(threads));
    std::vector<int> delay(300);
    for (auto& d : delay) d = static_cast<int>(rng() % 200);
    std::size_t taken = 0;
    std::vector<std::size_t> emitted;
    run_ordered(threads, 4,
        [&](std::size_t, std::size_t k) {
          REQUIRE(k == taken);  // taken in order
          return ++taken <= delay.size();
        },
        [&](std::size_t, std::size_t k, std::string& out) {
          std::this_thread::sleep_for(std::chrono::microseconds(delay[k]));
          out = std::to_string(k);
        },
        [&](std::size_t k, std::string& out) {
          REQUIRE(out == std::to_string(k));
          emitted.push_back(k);
          return true;
        });
    REQUIRE(emitted.size() == delay.size());
    for (std::size_t k = 0; k < emitted.size(); ++k) REQUIRE(emitted[k] == k);
  }
}

TEST_CASE("run_ordered stops when emit refuses, and rethrows a worker's exception", "[core][threads]") {
  for (int threads : {1, 2, 4}) {
    std::size_t emitted = 0;
    run_ordered(threads, 8, [&](std::size_t, std::size_t k) { return k < 1000; },
                [&](std::size_t, std::size_t, std::string& out) { out = "x"; },
                [&](std::size_t k, std::string&) {
                  ++emitted;
                  return k < 10;  // refuse item 10: nothing after it
                });
    CHECK(emitted == 11);
    std::atomic<int> after{0};
    REQUIRE_THROWS_AS(run_ordered(threads, 8, [&](std::size_t, std::size_t k) { return k < 1000; },
                                  [&](std::size_t, std::size_t k, std::string&) {
                                    if (k == 5) throw std::runtime_error("item 5");
                                    if (k > 50) ++after;
                                  },
                                  [&](std::size_t, std::string&) { return true; }),
                      std::runtime_error);
    CHECK(after.load() < 50);  // the others stopped soon after
  }
}

TEST_CASE("load_upto8 reads what a zero-padded memcpy of up to 8 bytes gives", "[core][tables]") {
  const char bytes[] = "\x01\x82\x03\xF4\x05\x86\x07\xF8\x09";
  for (std::size_t off = 0; off < 2; ++off)
    for (std::size_t n = 0; n <= 8; ++n) {
      std::uint64_t want = 0;
      std::memcpy(&want, bytes + off, n);
      CHECK(load_upto8(bytes + off, n) == want);
    }
  // It reads 8 bytes where they stay inside one page: a key that ends at the end of a
  // page followed by an unmapped one is read without touching the next page.
  const std::size_t page = 4096;
  void* m = ::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  auto* base = static_cast<unsigned char*>(m);
  REQUIRE(::mprotect(base + page, page, PROT_NONE) == 0);
  for (std::size_t i = 0; i < page; ++i) base[i] = static_cast<unsigned char>(i * 37 + 11);
  for (std::size_t n = 0; n <= 8; ++n)
    for (std::size_t back = n; back <= 16; ++back) {  // keys [page - back, page - back + n)
      const unsigned char* k = base + page - back;
      std::uint64_t want = 0;
      std::memcpy(&want, k, n);
      CHECK(load_upto8(k, n) == want);
      CHECK(hash_bytes(k, n) == hash_bytes(std::string(reinterpret_cast<const char*>(k), n).data(), n));
    }
  ::munmap(m, 2 * page);
}
