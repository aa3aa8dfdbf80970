#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "lmpipe/core/io.h"

using namespace lmp;

namespace {
std::string temp_path(const char* name) {
  return std::string("/tmp/lmp_test_") + std::to_string(::getpid()) + "_" + name;
}
bool exists(const std::string& p) { return ::access(p.c_str(), F_OK) == 0; }
}  // namespace

TEST_CASE("atomic files appear only on commit", "[core][io]") {
  std::string p = temp_path("atomic.txt");
  {
    auto f = io::AtomicFile::create(p);
    REQUIRE(f.ok());
    REQUIRE(f.value()->write("partial").ok());
    CHECK_FALSE(exists(p));
  }  // destroyed without commit: nothing left behind
  CHECK_FALSE(exists(p));
  REQUIRE(io::write_file_atomic(p, "done\n").ok());
  auto r = io::read_file(p);
  REQUIRE(r.ok());
  CHECK(r.value() == "done\n");
  std::remove(p.c_str());
}

TEST_CASE("missing files give a located error", "[core][io]") {
  auto r = io::read_file("/nonexistent/x.txt");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "cannot open '/nonexistent/x.txt': No such file or directory");
  auto d = io::read_file("/tmp");
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().message.find("Is a directory") != std::string::npos);
}

TEST_CASE("chunk reader cuts at line ends and keeps every byte", "[core][io]") {
  std::string p = temp_path("chunks.txt");
  std::string data;
  for (int i = 0; i < 2000; ++i) data += std::string(static_cast<std::size_t>(i % 37), 'x') + "\n";
  data += std::string(300000, 'y');  // a long last line without newline
  REQUIRE(io::write_file_atomic(p, data).ok());
  auto r = io::ChunkReader::open(p);
  REQUIRE(r.ok());
  std::string all, chunk;
  for (;;) {
    auto more = r.value()->next(chunk, 1000);
    REQUIRE(more.ok());
    if (!more.value()) break;
    if (all.size() + chunk.size() < data.size()) CHECK(chunk.back() == '\n');
    all += chunk;
  }
  CHECK(all == data);
  std::remove(p.c_str());
}
