#include "lmpipe/core/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "lmpipe/core/big_alloc.h"
#include "lmpipe/core/cpu.h"
#include "lmpipe/core/io.h"

namespace lmp {

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this == &o) return *this;
  if (mapped_ && data_) ::munmap(const_cast<std::byte*>(data_), size_);
  if (owned_) big_free(owned_, owned_bytes());
  mapped_ = o.mapped_;
  owned_ = std::exchange(o.owned_, nullptr);
  size_ = o.size_;
  name_ = std::move(o.name_);
  buffer_ = std::move(o.buffer_);
  data_ = mapped_ || owned_ ? o.data_ : reinterpret_cast<const std::byte*>(buffer_.data());
  o.data_ = nullptr;
  o.size_ = 0;
  o.mapped_ = false;
  return *this;
}

MappedFile::~MappedFile() {
  if (mapped_ && data_) ::munmap(const_cast<std::byte*>(data_), size_);
  if (owned_) big_free(owned_, owned_bytes());
}

namespace {

// Read bytes [begin, end) of `fd` into dst + begin (a regular file that may not change size).
Status read_range(int fd, std::byte* dst, std::size_t begin, std::size_t end, const std::string& path) {
  constexpr std::size_t kChunk = std::size_t{16} << 20;
  std::size_t done = begin;
  while (done < end) {
    const ssize_t n = ::pread(fd, dst + done, std::min(kChunk, end - done), static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io, "cannot read '{}': {}", path, io::errno_message(errno));
    }
    if (n == 0) return make_error(Errc::io, "cannot read '{}': it shrank to {} bytes while being read", path, done);
    done += static_cast<std::size_t>(n);
  }
  return {};
}

// All `size` bytes, in ranges of whole huge pages on up to 4 threads: the time goes to
// faulting in (zeroing) the destination pages and copying from the page cache, which
// the kernel does in the calling thread.
Status read_whole(int fd, std::byte* dst, std::size_t size, const std::string& path) {
  const std::size_t pages = (size + kHugePage - 1) / kHugePage;
  const std::size_t n = std::min<std::size_t>({4, static_cast<std::size_t>(cpu::processors()), pages});
  if (n <= 1 || size < (std::size_t{64} << 20)) return read_range(fd, dst, 0, size, path);
  std::vector<Status> status(n);
  std::vector<std::thread> threads;
  threads.reserve(n - 1);
  auto range = [&](std::size_t i) {
    const std::size_t b = std::min(size, pages * i / n * kHugePage), e = std::min(size, pages * (i + 1) / n * kHugePage);
    status[i] = read_range(fd, dst, b, e, path);
  };
  for (std::size_t i = 1; i < n; ++i) {
    try {
      threads.emplace_back(range, i);
    } catch (const std::system_error&) {  // no thread to be had: this one reads the range
      range(i);
    }
  }
  range(0);
  for (auto& t : threads) t.join();
  for (auto& st : status)
    if (!st.ok()) return std::move(st);
  return {};
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::string& path, Load how, std::size_t align_at) {
  MappedFile m;
  if (path != "-") {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return make_error(Errc::io, "cannot open '{}': {}", path, io::errno_message(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return make_error(Errc::io, "cannot open '{}': {}", path, io::errno_message(err));
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return make_error(Errc::io, "cannot open '{}': Is a directory", path);
    }
    if (S_ISREG(st.st_mode) && st.st_size > 0 && how == Load::copy) {
      const auto size = static_cast<std::size_t>(st.st_size);
      const std::size_t lead = (64 - align_at % 64) % 64;  // the block is 2 MiB-aligned
      void* p = nullptr;
      try {
        p = big_allocate(size + lead);
      } catch (const std::bad_alloc&) {
        ::close(fd);
        throw;  // the boundary's "memory limit reached" (or out of memory)
      }
      Status st_read = read_whole(fd, static_cast<std::byte*>(p) + lead, size, path);
      ::close(fd);
      if (!st_read.ok()) {
        big_free(p, size + lead);
        return std::move(st_read).error();
      }
      m.owned_ = p;
      m.data_ = static_cast<const std::byte*>(p) + lead;
      m.size_ = size;
      m.name_ = path;
      return m;
    }
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
      void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      ::close(fd);
      if (p == MAP_FAILED) return make_error(Errc::io, "cannot map '{}': {}", path, io::errno_message(errno));
      m.data_ = static_cast<const std::byte*>(p);
      m.size_ = static_cast<std::size_t>(st.st_size);
      m.mapped_ = true;
      m.name_ = path;
      return m;
    }
    ::close(fd);
  }
  // Standard input, a pipe, or an empty file: read it.
  LMP_ASSIGN(m.buffer_, io::read_file(path));
  m.name_ = path == "-" ? "<stdin>" : path;
  m.size_ = m.buffer_.size();
  m.data_ = reinterpret_cast<const std::byte*>(m.buffer_.data());
  return m;
}

}  // namespace lmp
