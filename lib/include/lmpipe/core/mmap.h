// A read-only file mapped into memory (zero-copy), or standard input ("-") or another
// non-mappable input read into memory. Nothing is read up front from a mapped file:
// pages come in as they are touched.
//
// Load::copy reads a regular file up front into anonymous memory aligned to 2 MiB and
// marked for transparent huge pages (big_alloc.h; counted by --max-memory), for data
// streamed over and over, such as model weights at every decode step: where the kernel
// backs page-cache mappings with 4 KiB pages only, the TLB misses of the mapping cost
// read bandwidth that huge pages do not (measured in docs/benchmarks.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lmpipe/core/result.h"

namespace lmp {

class MappedFile {
 public:
  enum class Load : std::uint8_t { map, copy };
  // With Load::copy, byte `align_at` of the file lands on a 64-byte boundary (a cache
  // line): a loader that knows where its data starts asks for that byte, so that rows
  // the file keeps 64-byte aligned from there are aligned in memory too (0: the file's
  // first byte, as a mapping places it).
  static Result<MappedFile> open(const std::string& path, Load how = Load::map, std::size_t align_at = 0);
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::string& name() const { return name_; }  // the path, or "<stdin>"
  bool mapped() const { return mapped_; }
  bool copied() const { return owned_ != nullptr; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;
  void* owned_ = nullptr;  // Load::copy: the big_allocate block holding the bytes
  // The block's size: the lead that aligns byte align_at (data_ - owned_), then size_.
  std::size_t owned_bytes() const { return static_cast<std::size_t>(data_ - static_cast<const std::byte*>(owned_)) + size_; }
  std::string buffer_;  // the bytes of an input that could not be mapped
  std::string name_;
};

}  // namespace lmp
