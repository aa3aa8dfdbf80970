// The thread pool and run_parallel: every index runs once, and an exception thrown on any
// thread reaches the caller (std::bad_alloc under --max-memory must not std::terminate).
// Memory accounting: reservations, the limit, big_allocate blocks.
#include <catch2/catch.hpp>

#include <atomic>
#include <new>
#include <stdexcept>
#include <vector>

#include "lmpipe/core/big_alloc.h"
#include "lmpipe/core/memory_limit.h"
#include "lmpipe/core/parallel.h"
#include "lmpipe/core/thread_pool.h"

using namespace lmp;

TEST_CASE("thread pool runs every index once, on every pool size", "[core][threads]") {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (std::size_t n : {0u, 1u, 2u, 7u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      for (int round = 0; round < 3; ++round) pool.run(n, [&](std::size_t i) { hits[i].fetch_add(1); });
      for (std::size_t i = 0; i < n; ++i) REQUIRE(hits[i].load() == 3);
    }
  }
}

TEST_CASE("an exception in a pool task reaches the caller, and the pool stays usable", "[core][threads]") {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  auto boom = [&](std::size_t i) {
    ran.fetch_add(1);
    if (i == 5) throw std::bad_alloc();
  };
  REQUIRE_THROWS_AS(pool.run(64, boom), std::bad_alloc);
  CHECK(ran.load() == 64);  // the other tasks still ran: no half-finished job is left behind
  std::atomic<int> after{0};
  pool.run(100, [&](std::size_t) { after.fetch_add(1); });
  CHECK(after.load() == 100);
  // Several throwing tasks: one exception comes out.
  REQUIRE_THROWS_AS(pool.run(64, [](std::size_t i) { if (i % 2) throw std::runtime_error("odd"); }),
                    std::runtime_error);
}

TEST_CASE("run_parallel rethrows a worker thread's exception after joining all", "[core][threads]") {
  std::atomic<int> ran{0};
  REQUIRE_THROWS_WITH(run_parallel(4,
                                   [&](std::size_t i) {
                                     ran.fetch_add(1);
                                     if (i == 3) throw std::runtime_error("thread 3 failed");
                                   }),
                      "thread 3 failed");
  CHECK(ran.load() == 4);
  REQUIRE_NOTHROW(run_parallel(3, [](std::size_t) {}));
}

TEST_CASE("memory accounting: reservations under and over the limit", "[core][memory]") {
  const auto base = memory::in_use();
  REQUIRE(memory::limit() == 0);
  REQUIRE(memory::reserve(1000));
  CHECK(memory::in_use() == base + 1000);
  CHECK(memory::peak() >= base + 1000);
  memory::release(1000);
  CHECK(memory::in_use() == base);

  memory::set_limit(base + 4000);
  CHECK(memory::reserve(4096) == false);  // would pass the limit: refused, nothing reserved
  CHECK(memory::in_use() == base);
  CHECK(memory::last_refusal().asked == 4096);
  CHECK(memory::last_refusal().in_use == base);
  CHECK(memory::reserve(4000));  // exactly at the limit: allowed
  memory::release(4000);

  // big_allocate reserves its (rounded) blocks: refused over the limit, counted under it.
  REQUIRE_THROWS_AS(big_allocate(std::size_t{8} << 20), std::bad_alloc);
  CHECK(memory::in_use() == base);
  memory::set_limit(0);
  void* p = big_allocate(std::size_t{3} << 20);
  CHECK(memory::in_use() == base + (std::size_t{4} << 20));  // rounded up to 2 MiB pages
  big_free(p, std::size_t{3} << 20);
  CHECK(memory::in_use() == base);
}
