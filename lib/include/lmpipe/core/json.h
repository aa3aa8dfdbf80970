// A small, fast JSON reader (DOM over one buffer) and writer.
//
// Written for tokenizer.json files: a Llama-3 tokenizer.json is 9 MB with ~400k
// strings, and loading it must take well under 100 ms. Strings without escapes are
// views into the source buffer; nodes live in one vector. Errors are located as
// "name:line:col: message".
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/big_alloc.h"
#include "lmpipe/core/mmap.h"
#include "lmpipe/core/result.h"

namespace lmp::json {

// raw: a value the parser was asked to keep as text (ParseOptions::raw), read with a Cursor.
enum class Type : std::uint8_t { null, boolean, number, string, array, object, raw };

class Document;

// A value kept as text: its bytes in the source, and, for an array, its elements' count
// and where every kMarkEvery-th element starts (so that threads can each read a share).
struct RawValue {
  static constexpr std::size_t kMarkEvery = 1024;
  std::uint32_t begin = 0, end = 0;  // byte offsets in the source
  bool array = false;
  std::size_t count = 0;             // array elements
  std::vector<std::uint32_t> marks;  // offset of element 0, kMarkEvery, 2 kMarkEvery, ...
};

struct ParseOptions {
  // Member names from the top-level object down ({"model", "merges"}): the value there
  // is not parsed into nodes but kept as raw text, checked only for what finding its
  // end needs (strings closed and free of control characters, brackets matched); its
  // reader checks the rest. A 280k-entry merges array is then read, in parallel, by the
  // code that needs it, and costs the parse a scan instead of 280k nodes.
  std::vector<std::string> raw;
};

// A handle to one node of a Document (cheap to copy; valid while the Document lives).
// An invalid Value (a missing member, an index past the end) answers every accessor
// with an empty result: "", 0, false, nullopt, size 0, invalid children.
class Value {
 public:
  Value() = default;
  Type type() const;
  bool is_null() const { return doc_ == nullptr || type() == Type::null; }
  bool is_string() const { return doc_ && type() == Type::string; }
  bool is_number() const { return doc_ && type() == Type::number; }
  bool is_bool() const { return doc_ && type() == Type::boolean; }
  bool is_array() const { return doc_ && type() == Type::array; }
  bool is_object() const { return doc_ && type() == Type::object; }
  bool is_raw() const { return doc_ && type() == Type::raw; }
  bool valid() const { return doc_ != nullptr; }

  std::string_view str() const;  // string contents (unescaped)
  double num() const;
  bool boolean() const;
  std::optional<std::int64_t> integer() const;  // set when the number is integral
  const RawValue* raw() const;                    // a raw value's text; else nullptr

  std::size_t size() const;        // elements of an array, members of an object
  Value operator[](std::size_t i) const;  // array element
  Value key(std::size_t i) const;         // object member name
  Value val(std::size_t i) const;         // object member value
  Value get(std::string_view name) const; // object member, or an invalid Value

  // "name:line:col" of this node, for error messages.
  std::string where() const;

 private:
  friend class Document;
  friend class Parser;
  Value(const Document* d, std::uint32_t i) : doc_(d), idx_(i) {}
  const Document* doc_ = nullptr;
  std::uint32_t idx_ = 0;
};

class Document {
 public:
  // Parse `text` (kept by the Document). `name` is used in error messages.
  static Result<std::unique_ptr<Document>> parse(std::string text, std::string name);
  // Parse a mapped file in place (kept mapped by the Document): no copy of the text.
  static Result<std::unique_ptr<Document>> parse(MappedFile file, std::string name);
  static Result<std::unique_ptr<Document>> parse(MappedFile file, std::string name, const ParseOptions& opts);
  static Result<std::unique_ptr<Document>> parse(std::string text, std::string name, const ParseOptions& opts);
  Value root() const { return Value(this, 0); }
  std::string_view source() const { return src_; }
  const std::string& name() const { return name_; }
  std::string location(std::uint32_t offset) const;  // "name:line:col"

 private:
  friend class Value;
  friend class Parser;
  friend class Cursor;
  struct Node {          // 16 bytes: a 9 MB tokenizer.json has ~700k of them
    Type type;
    bool flag;           // booleans: the value; numbers: integral; strings: unescaped in arena_
    std::uint32_t pos;   // byte offset in the source
    std::uint32_t a;     // string: offset or arena index; containers: first kid; numbers: low 32 bits
    std::uint32_t b;     // string: length; containers: kid count; numbers: high 32 bits
    // Numbers: the 64 bits of a and b hold the integer (integral) or the double.
    std::uint64_t bits() const { return std::uint64_t{a} | (std::uint64_t{b} << 32); }
    void set_bits(std::uint64_t v) {
      a = static_cast<std::uint32_t>(v);
      b = static_cast<std::uint32_t>(v >> 32);
    }
    std::int64_t i64() const { return static_cast<std::int64_t>(bits()); }
    double f64() const {
      double d;
      std::uint64_t v = bits();
      std::memcpy(&d, &v, sizeof d);
      return d;
    }
  };
  static Result<std::unique_ptr<Document>> parse_src(std::unique_ptr<Document> d, const ParseOptions& opts);
  std::string text_;        // the text, when given as a string
  MappedFile file_;         // or the file it is mapped from
  std::string_view src_;    // the one of the two that holds the text
  std::string name_;
  big_vector<Node> nodes_;
  big_vector<std::uint32_t> kids_;  // container children (objects: key, value, key, ...)
  std::deque<std::string> arena_;    // unescaped strings
  std::vector<RawValue> raws_;       // raw values (a raw node's a)
};

// Reads JSON text in place, one token at a time: the reader of a raw value. Errors are
// located as the Document's ("name:line:col: what").
class Cursor {
 public:
  // At byte offset `at` of d's source, reading no further than `end`.
  Cursor(const Document& d, std::size_t at, std::size_t end);
  void skip_ws();
  // The byte at the cursor, no whitespace skipped; 0 at the end.
  char peek() const { return p_ < end_ ? src_[p_] : '\0'; }
  // Skips whitespace; then, if the next byte is c, takes it.
  bool eat(char c) {
    skip_ws();
    if (p_ < end_ && src_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  // A string at the cursor (after whitespace): its contents, a view into the source or,
  // when it has escapes, into `buf`.
  Status string(std::string_view& out, std::string& buf);
  std::size_t offset() const { return p_; }
  void seek(std::size_t at) { p_ = at < end_ ? at : end_; }  // (to a place a caller read itself)
  std::size_t end() const { return end_; }
  Error error(std::string_view what) const;

 private:
  const Document& d_;
  const char* src_;
  std::size_t p_, end_;
};

// Append `s` to `out` as a JSON string literal, escaped as serde_json does
// (", \, and control characters; everything else verbatim UTF-8).
void append_string(std::string& out, std::string_view s);

}  // namespace lmp::json
