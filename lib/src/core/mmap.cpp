#include "lmpipe/core/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "lmpipe/core/io.h"

namespace lmp {

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this == &o) return *this;
  if (mapped_ && data_) ::munmap(const_cast<std::byte*>(data_), size_);
  mapped_ = o.mapped_;
  size_ = o.size_;
  name_ = std::move(o.name_);
  buffer_ = std::move(o.buffer_);
  data_ = mapped_ ? o.data_ : reinterpret_cast<const std::byte*>(buffer_.data());
  o.data_ = nullptr;
  o.size_ = 0;
  o.mapped_ = false;
  return *this;
}

MappedFile::~MappedFile() {
  if (mapped_ && data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

Result<MappedFile> MappedFile::open(const std::string& path) {
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
