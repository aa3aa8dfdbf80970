#include "common/cli.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#include <fmt/format.h>

#include "lmpipe/core/cpu.h"
#include "lmpipe/core/memory_limit.h"
#include "lmpipe/text/unicode.h"

#ifndef LMP_VERSION
#define LMP_VERSION "0.0.0"
#endif

namespace lmp::cli {

namespace {
std::string g_tool = "lmpipe";
bool g_quiet = false;

void on_fatal_signal(int sig) {
  io::remove_pending_temporaries_signal_safe();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void die_of_sigpipe() {
  io::remove_pending_temporaries_signal_safe();
  std::signal(SIGPIPE, SIG_DFL);
  std::raise(SIGPIPE);
  _exit(141);
}

void print_error(std::string_view msg) {
  std::fflush(stdout);
  fmt::print(stderr, "{}: error: {}\n", g_tool, printable_message(msg));
}

std::string help_text(const ToolSpec& spec, CLI::App& app) {
  std::string opts = app.help();
  // CLI11 prints its own usage line and description first; keep only the options.
  auto p = opts.find("Options:");
  if (p == std::string::npos) p = opts.find("OPTIONS:");
  std::string body = p == std::string::npos ? opts : opts.substr(p);
  return fmt::format(
      "Usage: {} {}\n{}\n\n{}{}{}\nExamples:\n{}\n\nExit status: 0 if OK, 1 on a runtime or data error, 2 on a "
      "usage error.\n",
      spec.name, spec.synopsis, spec.description,
      spec.reads_stdin ? "With no FILE, or when FILE is -, read standard input.\n" : "", body,
      spec.details.empty() ? "" : "\n" + spec.details + "\n", spec.examples);
}
}  // namespace

bool quiet() { return g_quiet; }
void set_quiet(bool q) { g_quiet = q; }

void warn(std::string_view msg) {
  std::fflush(stdout);
  fmt::print(stderr, "{}: warning: {}\n", g_tool, printable_message(msg));
}

void note(std::string_view msg) {
  if (g_quiet) return;
  fmt::print(stderr, "{}: {}\n", g_tool, printable_message(msg));
}

std::string tsv_field(std::string_view s) {
  std::string o;
  for (char ch : s) {
    if (ch == '\t') o += "\\t";
    else if (ch == '\n') o += "\\n";
    else if (ch == '\r') o += "\\r";
    else if (ch == '\\') o += "\\\\";
    else o += ch;
  }
  return o;
}

std::string printable_message(std::string_view msg, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(msg.size(), max_bytes) + 16);
  const auto* s = reinterpret_cast<const unsigned char*>(msg.data());
  std::size_t i = 0;
  while (i < msg.size() && out.size() < max_bytes) {
    // A whole UTF-8 sequence passes (text::decode_utf8's rules); a control byte other than
    // newline and tab, and any byte that is not UTF-8, is shown as \xNN.
    const text::CodePoint c = text::decode_utf8(s, msg.size(), i);
    const bool shown = c.cp >= text::kInvalidBase || (c.cp < 0x20 && c.cp != '\n' && c.cp != '\t') || c.cp == 0x7F;
    if (shown) out += fmt::format("\\x{:02x}", s[i]);
    else out.append(msg.substr(i, c.len));
    i += c.len;
  }
  if (i < msg.size()) out += fmt::format("... ({} more bytes)", msg.size() - i);
  return out;
}

int run_tool(const ToolSpec& spec, CLI::App& app, int argc, char** argv, const std::function<Status()>& body) {
  g_tool = spec.name;
  std::signal(SIGINT, on_fatal_signal);
  std::signal(SIGTERM, on_fatal_signal);
  std::signal(SIGHUP, on_fatal_signal);
  std::signal(SIGPIPE, SIG_DFL);

  app.name(spec.name);
  app.description(spec.description);
  app.set_help_flag();  // our own -h/--help
  bool want_help = false, want_version = false;
  app.add_flag("-h,--help", want_help, "display this help and exit");
  app.add_flag("--version", want_version, "output version information and exit");
  bool q = false;
  if (!app.get_option_no_throw("--quiet")) app.add_flag("-q,--quiet", q, "no progress or report on stderr");
  std::string max_memory;
  // Options of the tool itself (--max-memory, -q) are taken after a subcommand's name too.
  for (CLI::App* sc : app.get_subcommands([](CLI::App*) { return true; })) sc->fallthrough();
  if (memory_guard_linked())
    app.add_option("--max-memory", max_memory,
                   "stop with an error (exit 1) rather than hold more than SIZE of memory (512MiB, 4GiB; "
                   "mapped input files are not counted)")
        ->type_name("SIZE");
  // --help and --version win over missing required options. After a subcommand's name,
  // --help shows that subcommand's options.
  CLI::App* sub = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") break;
    if (!sub && !a.empty() && a[0] != '-') {
      for (CLI::App* sc : app.get_subcommands([](CLI::App*) { return true; }))
        if (sc->get_name() == a) sub = sc;
    }
    if (a == "-h" || a == "--help") {
      if (sub) {
        std::string opts = sub->help();
        auto p = opts.find("Positionals:");
        if (p == std::string::npos) p = opts.find("POSITIONALS:");
        if (p == std::string::npos) p = opts.find("Options:");
        if (p == std::string::npos) p = opts.find("OPTIONS:");
        // The examples of this subcommand, when some name it; else all of them.
        std::string examples, line;
        const std::string word = " " + sub->get_name() + " ";
        for (std::size_t k = 0; k <= spec.examples.size(); ++k) {
          if (k < spec.examples.size() && spec.examples[k] != '\n') {
            line += spec.examples[k];
            continue;
          }
          if ((line + " ").find(word) != std::string::npos) examples += (examples.empty() ? "" : "\n") + line;
          line.clear();
        }
        if (examples.empty()) examples = spec.examples;
        std::fputs(fmt::format("Usage: {} {} [OPTION]...\n{}\n\n{}\nExamples:\n{}\n\nThe options of '{} --help' are "
                               "taken after '{}' too; it lists the other commands.\n",
                               spec.name, sub->get_name(), sub->get_description(),
                               p == std::string::npos ? opts : opts.substr(p), examples, spec.name, sub->get_name())
                       .c_str(),
                   stdout);
      } else {
        std::fputs(help_text(spec, app).c_str(), stdout);
      }
      return std::fflush(stdout) == 0 ? kExitOk : kExitError;
    }
    if (a == "--version") {
      fmt::print("{} (lmpipe) {}\n", spec.name, LMP_VERSION);
      return std::fflush(stdout) == 0 ? kExitOk : kExitError;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    print_error(e.what());
    fmt::print(stderr, "Try '{} --help' for more information.\n", spec.name);
    return kExitUsage;
  }
  g_quiet = g_quiet || q;
  try {
    if (!max_memory.empty()) {
      const std::uint64_t limit = parse_bytes(max_memory, "--max-memory");
      if (limit < (std::uint64_t{1} << 20)) throw UsageError("--max-memory: give at least 1MiB");
      memory::set_limit(limit);
    }
    Status st = body();
    if (!st.ok()) {
      print_error(st.error().message);
      return st.error().code == Errc::invalid_argument ? kExitUsage : kExitError;
    }
  } catch (const UsageError& e) {
    print_error(e.what());
    fmt::print(stderr, "Try '{} --help' for more information.\n", spec.name);
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    const std::uint64_t limit = memory::limit();
    memory::set_limit(0);  // the message itself needs memory
    const auto r = memory::last_refusal();
    if (limit != 0 && r.asked != 0)
      print_error(fmt::format("memory limit reached: {} more needed with {} in use, over --max-memory {}",
                              human_bytes(static_cast<double>(r.asked)), human_bytes(static_cast<double>(r.in_use)),
                              human_bytes(static_cast<double>(limit))));
    else
      print_error("out of memory");
    return kExitError;
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitError;
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    if (errno == EPIPE) die_of_sigpipe();
    print_error(fmt::format("write error on standard output: {}", std::strerror(errno)));
    return kExitError;
  }
  return kExitOk;
}

// ---- Output -----------------------------------------------------------------------

Result<std::unique_ptr<Output>> Output::open(const std::string& path, bool binary, bool force) {
  std::unique_ptr<Output> o(new Output());
  if (path.empty() || path == "-") {
    if (binary && !force && ::isatty(1))
      return make_error(Errc::invalid_argument,
                        "refusing to write binary .npy data to a terminal (redirect it, or use --force)");
    return o;
  }
  LMP_ASSIGN(o->file_, io::AtomicFile::create(path));
  return o;
}

Output::~Output() = default;

Status Output::flush() {
  if (buf_.empty()) return {};
  if (file_) {
    LMP_TRY(file_->write(buf_));
    buf_.clear();
    return {};
  }
  std::string_view d = buf_;
  while (!d.empty()) {
    ssize_t w = ::write(1, d.data(), d.size());
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) die_of_sigpipe();
      return make_error(Errc::io, "write error on standard output: {}", std::strerror(errno));
    }
    d.remove_prefix(static_cast<std::size_t>(w));
  }
  buf_.clear();
  return {};
}

Status Output::write(std::string_view data) {
  buf_.append(data);
  if (buf_.size() >= (1u << 20)) return flush();
  return {};
}

Status Output::close() {
  LMP_TRY(flush());
  if (file_) {
    LMP_TRY(file_->commit());
    file_.reset();
  }
  return {};
}

// ---- Progress ---------------------------------------------------------------------

Progress::Progress(std::string label)
    : label_(std::move(label)), enabled_(!g_quiet && ::isatty(2)), start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { done(); }

void Progress::update(double fraction, std::string_view detail) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (shown_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  shown_ = true;
  double secs = std::chrono::duration<double>(now - start_).count();
  if (fraction >= 0)
    fmt::print(stderr, "\r\033[K{}: {} {:5.1f}%  {}  {:.1f}s", g_tool, label_, fraction * 100.0, detail, secs);
  else
    fmt::print(stderr, "\r\033[K{}: {}  {}  {:.1f}s", g_tool, label_, detail, secs);
  std::fflush(stderr);
}

void Progress::done() {
  if (enabled_ && shown_) {
    fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  shown_ = false;
}

// ---- Figures ----------------------------------------------------------------------

std::uint64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.1f} {}", b, units[u]);
}

int default_threads() {
  return std::min(cpu::processors(), 16);
}

std::string with_commas(std::uint64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

std::uint64_t parse_bytes(std::string_view s, std::string_view option) {
  std::string t(s);
  std::size_t used = 0;
  double v = -1;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = t.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  static const std::pair<const char*, double> units[] = {
      {"", 1},          {"B", 1},           {"KiB", 1024.0},    {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"K", 1024.0}, {"M", 1048576.0},
      {"G", 1073741824.0}};
  if (used > 0 && v >= 0)
    for (const auto& [name, mult] : units)
      if (unit == name) return static_cast<std::uint64_t>(v * mult);
  throw UsageError(fmt::format("{}: '{}' is not a size (examples: 4096, 512MiB, 24GiB, 1.5GB)", option, s));
}

}  // namespace lmp::cli
