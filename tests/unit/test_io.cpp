#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>

#include "lmpipe/core/io.h"
#include "lmpipe/core/mmap.h"

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

TEST_CASE("a file read into memory holds the same bytes as its mapping", "[core][io][mmap]") {
  std::string p = temp_path("copy.bin");
  std::string bytes;
  // Over 64 MiB (read on several threads) and not a multiple of a page, so that the
  // block's tail is past the file.
  bytes.resize((std::size_t{70} << 20) + 123);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 24);
  REQUIRE(io::write_file_atomic(p, bytes).ok());
  auto mapped = MappedFile::open(p);
  auto copied = MappedFile::open(p, MappedFile::Load::copy);
  REQUIRE(mapped.ok());
  REQUIRE(copied.ok());
  CHECK(mapped.value().mapped());
  CHECK_FALSE(mapped.value().copied());
  CHECK(copied.value().copied());
  CHECK_FALSE(copied.value().mapped());
  CHECK(copied.value().view() == bytes);
  CHECK(copied.value().name() == p);
  CHECK(reinterpret_cast<std::uintptr_t>(copied.value().data()) % (std::uintptr_t{2} << 20) == 0);
  // Byte 100 of the file on a cache line: the same bytes, 28 bytes into the block.
  auto shifted = MappedFile::open(p, MappedFile::Load::copy, 100);
  REQUIRE(shifted.ok());
  CHECK(shifted.value().view() == bytes);
  CHECK(reinterpret_cast<std::uintptr_t>(shifted.value().data() + 100) % 64 == 0);
  // Moved, the block goes with it and is freed once.
  MappedFile moved = std::move(copied.value());
  CHECK(moved.view() == bytes);
  moved = MappedFile::open(p).value();
  CHECK(moved.mapped());
  CHECK(moved.view() == bytes);
  // An empty file and a missing one behave as when mapped.
  std::string e = temp_path("empty.bin");
  REQUIRE(io::write_file_atomic(e, "").ok());
  auto empty = MappedFile::open(e, MappedFile::Load::copy);
  REQUIRE(empty.ok());
  CHECK(empty.value().size() == 0);
  auto missing = MappedFile::open("/nonexistent/model.gguf", MappedFile::Load::copy);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message == "cannot open '/nonexistent/model.gguf': No such file or directory");
  std::remove(p.c_str());
  std::remove(e.c_str());
}
