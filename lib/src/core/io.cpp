#include "lmpipe/core/io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace lmp::io {

std::string errno_message(int err) { return std::strerror(err); }

namespace {

Result<int> open_read(const std::string& path, std::string& name) {
  if (path == "-") {
    name = "<stdin>";
    return 0;
  }
  name = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::io, "cannot open '{}': {}", path, errno_message(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return make_error(Errc::io, "cannot read '{}': Is a directory", path);
  }
  return fd;
}

// Read up to n bytes, retrying on EINTR; returns bytes read (0 at EOF) or -1.
ssize_t read_some(int fd, char* buf, std::size_t n) {
  for (;;) {
    ssize_t r = ::read(fd, buf, n);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

}  // namespace

Result<std::string> read_file(const std::string& path) {
  std::string name;
  LMP_ASSIGN(int fd, open_read(path, name));
  // Read straight into the string: sized from fstat for a regular file (one byte more,
  // so that end of file needs no growth), doubling for pipes or a file that grows.
  std::string out;
  struct stat st {};
  std::size_t cap = 1 << 16;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
    cap = static_cast<std::size_t>(st.st_size) + 1;
  out.resize(cap);
  std::size_t len = 0;
  for (;;) {
    if (len == out.size()) out.resize(out.size() * 2);
    ssize_t r = read_some(fd, out.data() + len, out.size() - len);
    if (r < 0) {
      int err = errno;
      if (fd != 0) ::close(fd);
      return make_error(Errc::io, "cannot read '{}': {}", name, errno_message(err));
    }
    if (r == 0) break;
    len += static_cast<std::size_t>(r);
  }
  if (fd != 0) ::close(fd);
  out.resize(len);
  return out;
}

namespace {
bool input_waiting(int fd) {
  struct pollfd p {};
  p.fd = fd;
  p.events = POLLIN;
  return ::poll(&p, 1, 0) > 0;
}
}  // namespace

Result<std::unique_ptr<ChunkReader>> ChunkReader::open(const std::string& path) {
  std::unique_ptr<ChunkReader> r(new ChunkReader());
  LMP_ASSIGN(r->fd_, open_read(path, r->name_));
  r->own_ = r->fd_ != 0;
  struct stat st {};
  if (::fstat(r->fd_, &st) == 0 && S_ISREG(st.st_mode)) r->size_hint_ = static_cast<std::uint64_t>(st.st_size);
  else r->interactive_ = true;
  return r;
}

ChunkReader::~ChunkReader() {
  if (own_ && fd_ >= 0) ::close(fd_);
}

Result<bool> ChunkReader::next(std::string& out, std::size_t target) {
  out.clear();
  out.swap(carry_);
  if (target == 0) target = 1;
  std::size_t last_nl = out.rfind(delim_);
  for (;;) {
    if (eof_) return !out.empty();
    if (out.size() >= target && last_nl != std::string::npos) {
      carry_.assign(out, last_nl + 1, std::string::npos);
      out.resize(last_nl + 1);
      return true;
    }
    std::size_t old = out.size();
    // Grow geometrically so that a single very long line costs linear time.
    std::size_t want = std::max({target > old ? target - old : 0, old, std::size_t{1} << 16});
    out.resize(old + want);
    ssize_t r = read_some(fd_, out.data() + old, want);
    if (r < 0) {
      int err = errno;
      out.resize(old);
      return make_error(Errc::io, "cannot read '{}': {}", name_, errno_message(err));
    }
    out.resize(old + static_cast<std::size_t>(r));
    bytes_read_ += static_cast<std::uint64_t>(r);
    if (r == 0) {
      eof_ = true;
      continue;
    }
    std::string_view fresh(out.data() + old, static_cast<std::size_t>(r));
    std::size_t nl = fresh.rfind(delim_);
    if (nl != std::string_view::npos) last_nl = old + nl;
    // A pipe or terminal that has no more to give right now: hand over the complete
    // lines instead of waiting for `target` bytes (a pipeline stays line by line).
    if (interactive_ && static_cast<std::size_t>(r) < want && last_nl != std::string::npos && !input_waiting(fd_)) {
      carry_.assign(out, last_nl + 1, std::string::npos);
      out.resize(last_nl + 1);
      return true;
    }
  }
}

Result<bool> ChunkReader::next_bytes(std::string& out, std::size_t max) {
  out.clear();
  if (!carry_.empty()) {
    out.swap(carry_);
    return true;
  }
  if (eof_) return false;
  out.resize(std::max<std::size_t>(max, 1));
  ssize_t r = read_some(fd_, out.data(), out.size());
  if (r < 0) {
    int err = errno;
    out.clear();
    return make_error(Errc::io, "cannot read '{}': {}", name_, errno_message(err));
  }
  out.resize(static_cast<std::size_t>(r));
  bytes_read_ += static_cast<std::uint64_t>(r);
  if (r == 0) eof_ = true;
  return r > 0;
}

// ---- Atomic output files -------------------------------------------------------

namespace {
constexpr int kMaxPending = 16;
constexpr std::size_t kPathMax = 4096;
char g_pending[kMaxPending][kPathMax];
std::atomic<bool> g_pending_used[kMaxPending];

int register_pending(const std::string& tmp) {
  if (tmp.size() >= kPathMax) return -1;
  for (int i = 0; i < kMaxPending; ++i) {
    bool expected = false;
    if (g_pending_used[i].compare_exchange_strong(expected, true)) {
      std::memcpy(g_pending[i], tmp.c_str(), tmp.size() + 1);
      return i;
    }
  }
  return -1;
}

void unregister_pending(const std::string& tmp) {
  for (int i = 0; i < kMaxPending; ++i)
    if (g_pending_used[i].load() && tmp == g_pending[i]) {
      g_pending[i][0] = '\0';
      g_pending_used[i].store(false);
    }
}

Status write_all(int fd, std::string_view data, const std::string& name) {
  while (!data.empty()) {
    ssize_t w = ::write(fd, data.data(), data.size());
    if (w < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io, "cannot write '{}': {}", name, errno_message(errno));
    }
    data.remove_prefix(static_cast<std::size_t>(w));
  }
  return {};
}
}  // namespace

void remove_pending_temporaries_signal_safe() {
  for (int i = 0; i < kMaxPending; ++i)
    if (g_pending_used[i].load() && g_pending[i][0] != '\0') ::unlink(g_pending[i]);
}

Result<std::unique_ptr<AtomicFile>> AtomicFile::create(const std::string& path) {
  std::unique_ptr<AtomicFile> f(new AtomicFile());
  f->path_ = path;
  // An existing file that is not a regular file (/dev/null, a FIFO, a terminal) is
  // written in place: renaming a temporary over it would replace the device itself.
  // A symbolic link is followed: its target is replaced, the link stays.
  std::string target = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      if (S_ISDIR(st.st_mode)) return make_error(Errc::io, "cannot write '{}': Is a directory", path);
      int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) return make_error(Errc::io, "cannot open '{}': {}", path, errno_message(errno));
      f->fd_ = fd;
      f->direct_ = true;
      return f;
    }
    if (char* real = ::realpath(path.c_str(), nullptr)) {
      target = real;
      std::free(real);
    }
  }
  f->target_ = target;
  std::string tmpl = target + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) return make_error(Errc::io, "cannot create '{}': {}", path, errno_message(errno));
  f->fd_ = fd;
  f->tmp_ = tmpl;
  register_pending(f->tmp_);
  return f;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
  if (!tmp_.empty()) unregister_pending(tmp_);
}

Status AtomicFile::write(std::string_view data) { return write_all(fd_, data, path_); }

Status AtomicFile::commit() {
  if (direct_) {
    committed_ = true;
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return make_error(Errc::io, "cannot write '{}': {}", path_, errno_message(errno));
    return {};
  }
  // mkstemp creates 0600; give the file the mode a plain open() would (0666 & ~umask).
  mode_t um = ::umask(0);
  ::umask(um);
  (void)::fchmod(fd_, 0666 & ~um);
  if (::fsync(fd_) != 0 && errno != EINVAL)
    return make_error(Errc::io, "cannot write '{}': {}", path_, errno_message(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    return make_error(Errc::io, "cannot write '{}': {}", path_, errno_message(errno));
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), target_.c_str()) != 0)
    return make_error(Errc::io, "cannot rename to '{}': {}", path_, errno_message(errno));
  committed_ = true;
  return {};
}

Status write_file_atomic(const std::string& path, std::string_view data) {
  if (path == "-") return write_all(1, data, "<stdout>");
  LMP_ASSIGN(auto f, AtomicFile::create(path));
  LMP_TRY(f->write(data));
  return f->commit();
}

}  // namespace lmp::io
