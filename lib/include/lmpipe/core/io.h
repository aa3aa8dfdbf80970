// File and stream I/O for the library: whole-file reads, line-chunked streaming
// reads, and atomic output files (temp file in the same folder + rename).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "lmpipe/core/result.h"

namespace lmp::io {

// Read a whole file ("-" = standard input) into memory.
Result<std::string> read_file(const std::string& path);

// A sequential reader over a file or stdin ("-") that hands out chunks of whole lines.
class ChunkReader {
 public:
  static Result<std::unique_ptr<ChunkReader>> open(const std::string& path);
  ~ChunkReader();
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;

  // Fill `out` with about `target` bytes that end at a line boundary ('\n'), or with
  // the rest of the input at its end (which may then not end in '\n'). Returns false
  // at end of input with `out` empty. A line longer than `target` is returned whole.
  // From a pipe or terminal, complete lines are handed over as soon as no more input is
  // waiting, so that a pipeline runs line by line.
  Result<bool> next(std::string& out, std::size_t target);
  // Binary input: whatever is at hand, at most `max` bytes (bytes left over from next()
  // first). Returns false at end of input.
  Result<bool> next_bytes(std::string& out, std::size_t max);
  const std::string& name() const { return name_; }
  // Records end with `d` instead of '\n' (-z: NUL, as sort -z and xargs -0 use).
  void set_delimiter(char d) { delim_ = d; }
  std::uint64_t bytes_read() const { return bytes_read_; }
  std::uint64_t size_hint() const { return size_hint_; }  // 0 when unknown (pipe)

 private:
  ChunkReader() = default;
  int fd_ = -1;
  bool own_ = false;
  bool eof_ = false;
  bool interactive_ = false;  // a pipe or terminal, not a regular file
  char delim_ = '\n';
  std::string name_;
  std::string carry_;  // bytes after the last newline of the previous chunk
  std::uint64_t bytes_read_ = 0;
  std::uint64_t size_hint_ = 0;
};

// An output file written atomically: data goes to "<path>.tmp.XXXXXX" in the same
// folder and is renamed over `path` by commit(). Destroyed without commit, the
// temporary is removed, so a failed or interrupted run never leaves partial output.
// An existing path that is not a regular file (/dev/null, a FIFO) is written in place;
// a symbolic link is followed, so its target is replaced and the link kept.
class AtomicFile {
 public:
  static Result<std::unique_ptr<AtomicFile>> create(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  Status write(std::string_view data);
  Status commit();  // flush, fsync, rename
  const std::string& path() const { return path_; }

 private:
  AtomicFile() = default;
  int fd_ = -1;
  std::string path_, tmp_, target_;
  bool committed_ = false;
  bool direct_ = false;  // writing in place (not a regular file)
};

// Write `data` to `path` atomically ("-" writes to standard output).
Status write_file_atomic(const std::string& path, std::string_view data);

// Remove temporaries registered by live AtomicFiles; safe to call from a signal handler.
void remove_pending_temporaries_signal_safe();

// "No such file or directory" etc. for errno values.
std::string errno_message(int err);

}  // namespace lmp::io
