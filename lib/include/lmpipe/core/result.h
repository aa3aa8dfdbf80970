// lmp::Result<T>: a value or a located error. The library returns it from every
// fallible call (I/O, parsing, user configuration); it never throws, exits or prints.
// A stand-in for std::expected (C++23), which g++ 12 lacks.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace lmp {

enum class Errc { io = 1, parse, unsupported, invalid_argument, out_of_range, internal };

struct Error {
  Errc code = Errc::internal;
  std::string message;  // names the file, line, key or token it is about
};

template <class... Args>
Error make_error(Errc code, fmt::format_string<Args...> f, Args&&... args) {
  return Error{code, fmt::format(f, std::forward<Args>(args)...)};
}

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error e) : v_(std::move(e)) {}      // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error e) : err_(std::move(e)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const& { return err_; }
  Error&& error() && { return std::move(err_); }

 private:
  Error err_;
  bool ok_ = true;
};

using Status = Result<void>;

// Prefix an error message with context ("tok.json: " + message).
inline Error with_context(Error e, std::string_view ctx) {
  e.message = fmt::format("{}: {}", ctx, e.message);
  return e;
}

}  // namespace lmp

// Return the error of a Result/Status early, like sentencepiece's RETURN_IF_ERROR.
#define LMP_TRY(expr)                                  \
  do {                                                 \
    auto&& lmp_try_r_ = (expr);                        \
    if (!lmp_try_r_.ok()) return std::move(lmp_try_r_).error(); \
  } while (0)

#define LMP_CONCAT_INNER(a, b) a##b
#define LMP_CONCAT(a, b) LMP_CONCAT_INNER(a, b)
// LMP_ASSIGN(auto x, expr): declare x from a Result's value or return its error.
#define LMP_ASSIGN(decl, expr) LMP_ASSIGN_IMPL(LMP_CONCAT(lmp_r_, __LINE__), decl, expr)
#define LMP_ASSIGN_IMPL(tmp, decl, expr)           \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).error();    \
  decl = std::move(tmp).value()

// Programmer errors: a violated precondition aborts with file:line, also in release builds.
#define LMP_ASSERT(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: internal error: assertion '%s' failed\n", __FILE__, \
                   __LINE__, #cond);                                                 \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)
