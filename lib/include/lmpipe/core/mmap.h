// A read-only file mapped into memory (zero-copy), or standard input ("-") or another
// non-mappable input read into memory. Nothing is read up front from a mapped file:
// pages come in as they are touched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lmpipe/core/result.h"

namespace lmp {

class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path);
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

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;
  std::string buffer_;  // the bytes of an input that could not be mapped
  std::string name_;
};

}  // namespace lmp
