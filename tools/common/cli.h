// The one boundary between the library and the shell, shared by every tool:
// option parsing, exit codes, error messages, output streams and progress.
//
// Exit status: 0 success, 1 runtime or data error, 2 usage error. Killed by SIGPIPE
// (`| head`) is normal. Diagnostics go to stderr as "tool: error: ...".
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include "lmpipe/core/io.h"
#include "lmpipe/core/result.h"

namespace lmp::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// Thrown by a tool's body for a bad combination of options: exit 2 with "Try --help".
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ToolSpec {
  std::string name;         // tok-encode
  std::string synopsis;     // "[OPTION]... -t TOKENIZER [FILE]..."
  std::string description;  // one line
  std::string details;      // paragraphs after the options
  std::string examples;     // lines, already indented
  bool reads_stdin = true;  // help says: with no FILE, or FILE -, standard input
};

// Parse argv with `app` (options added by the caller), then run `body`.
// Maps every outcome to an exit code and prints errors in the house format.
int run_tool(const ToolSpec& spec, CLI::App& app, int argc, char** argv,
             const std::function<Status()>& body);

bool quiet();
void set_quiet(bool q);

// Warnings and notes on stderr: "tool: warning: ...".
void warn(std::string_view msg);
void note(std::string_view msg);  // silenced by --quiet

// CLI::Range with a plain message: "--top-p: 1.5 is outside [0, 1]" rather than CLI11's
// "Value 1.5 not in range 0.000000 to 1.000000"; the help text is CLI11's own.
class Range : public CLI::Range {
 public:
  template <typename T>
  Range(T lo, T hi) : CLI::Range(lo, hi) {
    func_ = [lo, hi](std::string& input) {
      T v{};
      if (!CLI::detail::lexical_cast(input, v))
        return fmt::format("'{}' is not {}", input, std::is_integral_v<T> ? "an integer" : "a number");
      if (v < lo || v > hi) return fmt::format("{} is outside [{}, {}]", input, lo, hi);
      return std::string();
    };
  }
};

// An error message made safe for a terminal: control bytes (but newlines and tabs) and
// bytes that are not UTF-8 become \xNN, and it is cut to at most `max_bytes`.
std::string printable_message(std::string_view msg, std::size_t max_bytes = 2000);

// A text as one field of a tab-separated line: tab, newline, carriage return and
// backslash escaped (\t \n \r \\), so that it stays in its column.
std::string tsv_field(std::string_view s);

// Standard output or an atomically written file. Writes are buffered; EPIPE ends the
// process as SIGPIPE would (quietly).
class Output {
 public:
  static Result<std::unique_ptr<Output>> open(const std::string& path, bool binary, bool force);
  ~Output();
  Status write(std::string_view data);
  Status close();  // flush and check; commit a file
  // Standard output: write out what is buffered now, so that the next stage of a
  // pipeline sees each batch as it is made. A file: nothing (it is written at close).
  Status flush_stdout() { return file_ ? Status{} : flush(); }
  bool is_stdout() const { return !file_; }

 private:
  Output() = default;
  Status flush();
  std::unique_ptr<io::AtomicFile> file_;
  std::string buf_;
};

// Progress on stderr when it is a terminal (and not --quiet), at most 10 times a second.
class Progress {
 public:
  explicit Progress(std::string label);
  ~Progress();
  void update(double fraction, std::string_view detail = {});
  void done();
  bool enabled() const { return enabled_; }

 private:
  std::string label_;
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
  std::chrono::steady_clock::time_point start_;
};

// True; its reference keeps memory_guard.cpp (the counting operator new) in every tool.
bool memory_guard_linked();

// The default of a -j option: the processors this process may run on (up to 16).
int default_threads();

// Peak resident memory of this process, in bytes.
std::uint64_t peak_rss_bytes();
// "12.3 MB", "512 KiB"-style figures.
std::string human_bytes(double bytes);
std::string with_commas(std::uint64_t n);
// "24GiB", "512 MiB", "1.5GB", "4096" (bytes): binary (KiB, MiB, GiB, TiB) and decimal
// (KB, MB, GB, TB) units; a usage error for anything else.
std::uint64_t parse_bytes(std::string_view s, std::string_view option);

}  // namespace lmp::cli
