#include "lmpipe/core/json.h"

#include "lmpipe/text/unicode.h"

#include <charconv>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace lmp::json {

Type Value::type() const { return doc_->nodes_[idx_].type; }

std::string_view Value::str() const {
  if (!doc_) return {};
  const auto& n = doc_->nodes_[idx_];
  if (n.type != Type::string) return {};
  if (n.flag) return doc_->arena_[n.a];
  return doc_->src_.substr(n.a, n.b);
}

double Value::num() const {
  if (!doc_) return 0.0;
  const auto& n = doc_->nodes_[idx_];
  if (n.type != Type::number) return 0.0;
  return n.flag ? static_cast<double>(n.i64()) : n.f64();
}
bool Value::boolean() const { return doc_ && doc_->nodes_[idx_].type == Type::boolean && doc_->nodes_[idx_].flag; }

std::optional<std::int64_t> Value::integer() const {
  if (!doc_) return std::nullopt;
  const auto& n = doc_->nodes_[idx_];
  if (n.type != Type::number || !n.flag) return std::nullopt;
  return n.i64();
}

const RawValue* Value::raw() const {
  if (!doc_) return nullptr;
  const auto& n = doc_->nodes_[idx_];
  return n.type == Type::raw ? &doc_->raws_[n.a] : nullptr;
}

std::size_t Value::size() const {
  if (!doc_) return 0;
  const auto& n = doc_->nodes_[idx_];
  if (n.type == Type::array) return n.b;
  if (n.type == Type::object) return n.b / 2;
  return 0;
}

Value Value::operator[](std::size_t i) const {
  if (!is_array() || i >= size()) return {};
  const auto& n = doc_->nodes_[idx_];
  return Value(doc_, doc_->kids_[n.a + i]);
}
Value Value::key(std::size_t i) const {
  if (!is_object() || i >= size()) return {};
  const auto& n = doc_->nodes_[idx_];
  return Value(doc_, doc_->kids_[n.a + 2 * i]);
}
Value Value::val(std::size_t i) const {
  if (!is_object() || i >= size()) return {};
  const auto& n = doc_->nodes_[idx_];
  return Value(doc_, doc_->kids_[n.a + 2 * i + 1]);
}
Value Value::get(std::string_view name) const {
  if (!is_object()) return {};
  for (std::size_t i = 0, e = size(); i < e; ++i)
    if (key(i).str() == name) return val(i);
  return {};
}

std::string Value::where() const {
  if (!doc_) return "?";
  return doc_->location(doc_->nodes_[idx_].pos);
}

std::string Document::location(std::uint32_t offset) const {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < offset && i < src_.size(); ++i) {
    if (src_[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return fmt::format("{}:{}:{}", name_, line, col);
}

namespace {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The offset of the first byte at or after p in s[0, n) that is not whitespace.
// Pretty-printed files (tokenizer.json: a newline and six spaces before each of ~400k
// entries) are a third whitespace: runs are skipped 16 bytes at a time.
std::size_t skip_ws_at(const char* s, std::size_t n, std::size_t p) {
  if (p >= n || !is_ws(s[p])) return p;
#if defined(__SSE2__)
  while (p + 16 <= n) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + p));
    __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\n'))),
                              _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('\t')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\r'))));
    auto other = static_cast<unsigned>(~_mm_movemask_epi8(ws)) & 0xFFFFu;
    if (other != 0) return p + static_cast<std::size_t>(__builtin_ctz(other));
    p += 16;
  }
#endif
  while (p < n && is_ws(s[p])) ++p;
  return p;
}

// The length of the run at p in s[0, n) free of '"', '\\' and control characters.
std::size_t plain_run(const char* s, std::size_t n, std::size_t p) {
  std::size_t b = p;
#if defined(__SSE2__)
  while (p + 16 <= n) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + p));
    __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                                _mm_cmpeq_epi8(_mm_max_epu8(x, _mm_set1_epi8(0x1F)), _mm_set1_epi8(0x1F)));
    auto m = static_cast<unsigned>(_mm_movemask_epi8(stop));
    if (m != 0) return p + static_cast<std::size_t>(__builtin_ctz(m)) - b;
    p += 16;
  }
#endif
  while (p < n) {
    auto c = static_cast<unsigned char>(s[p]);
    if (c == '"' || c == '\\' || c < 0x20) break;
    ++p;
  }
  return p - b;
}

// Four hex digits at p (p advanced past what was read) as a code unit in v; false when
// they are not four hex digits.
bool hex4(const char* s, std::size_t n, std::size_t& p, std::uint32_t& v) {
  if (n - p < 4) return false;
  v = 0;
  for (int k = 0; k < 4; ++k) {
    char c = s[p++];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<std::uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v |= static_cast<std::uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= static_cast<std::uint32_t>(c - 'A' + 10);
    else return false;
  }
  return true;
}

// The string whose opening quote is at s[p]: p moves past its closing quote and `out`
// is its contents, a view of s, or of `buf` when it has escapes. On failure, the
// error's text, with p at the fault.
const char* scan_string(const char* s, std::size_t n, std::size_t& p, std::string_view& out, std::string& buf) {
  ++p;  // opening quote
  std::size_t start = p;
  p += plain_run(s, n, p);  // fast scan: no escapes
  if (p >= n) return "unterminated string";
  if (s[p] == '"') {
    out = std::string_view(s + start, p - start);
    ++p;
    return nullptr;
  }
  if (s[p] != '\\') return "control character in string";
  buf.assign(s + start, p - start);
  while (p < n) {
    char c = s[p];
    if (c == '"') {
      ++p;
      out = buf;
      return nullptr;
    }
    if (static_cast<unsigned char>(c) < 0x20) return "control character in string";
    if (c != '\\') {
      std::size_t run = plain_run(s, n, p);
      buf.append(s + p, run);
      p += run;
      continue;
    }
    if (++p >= n) return "unterminated string";
    char e = s[p++];
    switch (e) {
      case '"': buf += '"'; break;
      case '\\': buf += '\\'; break;
      case '/': buf += '/'; break;
      case 'b': buf += '\b'; break;
      case 'f': buf += '\f'; break;
      case 'n': buf += '\n'; break;
      case 'r': buf += '\r'; break;
      case 't': buf += '\t'; break;
      case 'u': {
        std::uint32_t cp = 0;
        if (n - p < 4) return "truncated \\u escape";
        if (!hex4(s, n, p, cp)) return "invalid \\u escape";
        if (cp >= 0xD800 && cp < 0xDC00) {
          if (n - p >= 6 && s[p] == '\\' && s[p + 1] == 'u') {
            p += 2;
            std::uint32_t lo = 0;
            if (!hex4(s, n, p, lo)) return "invalid \\u escape";
            if (lo < 0xDC00 || lo > 0xDFFF) return "invalid surrogate pair";
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else {
            return "lone surrogate in \\u escape";
          }
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          return "lone surrogate in \\u escape";
        }
        text::append_utf8(buf, cp);
        break;
      }
      default: return "invalid escape";
    }
  }
  return "unterminated string";
}

}  // namespace

class Parser {
 public:
  Parser(Document& d, const ParseOptions& opts) : d_(d), s_(d.src_.data()), n_(d.src_.size()), raw_(opts.raw) {}
  // The children of the open containers wait on a stack: room for `n` of them up front,
  // so that an array of 280k merges is not copied as the stack doubles.
  void reserve(std::size_t n) { stack_.reserve(n); }

  Status run() {
    if (n_ > 0xFFFFFFF0u) return make_error(Errc::unsupported, "{}: file larger than 4 GiB", d_.name_);
    skip_ws();
    LMP_TRY(parse_value(0));
    skip_ws();
    if (p_ != n_) return err("unexpected text after the JSON value");
    return {};
  }

 private:
  Error err(std::string_view what) const {
    return make_error(Errc::parse, "{}: {}", d_.location(static_cast<std::uint32_t>(p_)), what);
  }

  void skip_ws() { p_ = skip_ws_at(s_, n_, p_); }

  std::uint32_t new_node(Type t) {
    Document::Node n{};
    n.type = t;
    n.pos = static_cast<std::uint32_t>(p_);
    d_.nodes_.push_back(n);
    return static_cast<std::uint32_t>(d_.nodes_.size() - 1);
  }

  Status parse_value(int depth) {
    if (depth > 512) return err("nesting deeper than 512 levels");
    if (p_ >= n_) return err("unexpected end of input, expected a value");
    char c = s_[p_];
    switch (c) {
      case '{': return parse_container(true, depth);
      case '[': return parse_container(false, depth);
      case '"': return parse_string();
      case 't': return literal("true", Type::boolean, true);
      case 'f': return literal("false", Type::boolean, false);
      case 'n': return literal("null", Type::null, false);
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
        return err(fmt::format("unexpected character '{}', expected a value", printable(c)));
    }
  }

  static std::string printable(char c) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) return std::string(1, c);
    return fmt::format("\\x{:02X}", u);
  }

  Status literal(std::string_view word, Type t, bool v) {
    if (n_ - p_ < word.size() || std::memcmp(s_ + p_, word.data(), word.size()) != 0)
      return err("invalid literal");
    auto i = new_node(t);
    d_.nodes_[i].flag = v;
    p_ += word.size();
    return {};
  }

  Status parse_number() {
    std::size_t start = p_;
    bool neg = s_[p_] == '-';
    if (neg) ++p_;
    bool integral = true;
    // Up to 18 digits are accumulated as they are scanned (no overflow); longer ones and
    // fractions go through from_chars.
    std::uint64_t acc = 0;
    std::size_t first = p_;
    while (p_ < n_ && s_[p_] >= '0' && s_[p_] <= '9') {
      acc = acc * 10 + static_cast<std::uint64_t>(s_[p_] - '0');
      ++p_;
    }
    std::size_t n_digits = p_ - first;
    if (n_digits == 0) return err("invalid number");
    auto digits = [&] {
      std::size_t b = p_;
      while (p_ < n_ && s_[p_] >= '0' && s_[p_] <= '9') ++p_;
      return p_ > b;
    };
    if (p_ < n_ && s_[p_] == '.') {
      integral = false;
      ++p_;
      if (!digits()) return err("invalid number");
    }
    if (p_ < n_ && (s_[p_] == 'e' || s_[p_] == 'E')) {
      integral = false;
      ++p_;
      if (p_ < n_ && (s_[p_] == '+' || s_[p_] == '-')) ++p_;
      if (!digits()) return err("invalid number");
    }
    std::size_t save = p_;
    p_ = start;
    auto i = new_node(Type::number);
    p_ = save;
    auto& node = d_.nodes_[i];
    if (integral && n_digits <= 18) {
      node.flag = true;
      auto v = static_cast<std::int64_t>(acc);
      node.set_bits(static_cast<std::uint64_t>(neg ? -v : v));
      return {};
    }
    const char* b = s_ + start;
    const char* e = s_ + p_;
    if (integral) {
      std::int64_t v = 0;
      auto r = std::from_chars(b, e, v);
      if (r.ec == std::errc()) {
        node.flag = true;
        node.set_bits(static_cast<std::uint64_t>(v));
        return {};
      }
    }
    double dv = 0;
    auto r = std::from_chars(b, e, dv);
    if (r.ec != std::errc() && r.ec != std::errc::result_out_of_range) return err("invalid number");
    std::uint64_t bits;
    std::memcpy(&bits, &dv, sizeof bits);
    node.set_bits(bits);
    return {};
  }

  Status parse_string() {
    auto i = new_node(Type::string);
    std::string_view v;
    if (const char* e = scan_string(s_, n_, p_, v, buf_)) return err(e);
    auto& node = d_.nodes_[i];
    if (v.data() == buf_.data()) {  // (escaped)
      d_.arena_.push_back(std::move(buf_));
      buf_ = std::string();
      node.flag = true;
      node.a = static_cast<std::uint32_t>(d_.arena_.size() - 1);
    } else {
      node.a = static_cast<std::uint32_t>(v.data() - s_);
      node.b = static_cast<std::uint32_t>(v.size());
    }
    return {};
  }

  // A value kept as text (ParseOptions::raw): its end found with strings and brackets
  // followed, and, in an array, where its elements start.
  Status parse_raw() {
    if (p_ >= n_ || (s_[p_] != '[' && s_[p_] != '{')) return parse_value(0);  // (a scalar: a node)
    auto i = new_node(Type::raw);
    RawValue r;
    r.begin = static_cast<std::uint32_t>(p_);
    r.array = s_[p_] == '[';
    std::string closers(1, r.array ? ']' : '}');
    ++p_;
    bool element = r.array;  // the next byte at depth 1 starts an element
    std::string_view v;
    while (!closers.empty()) {
      skip_ws();
      if (p_ >= n_) return err(closers[0] == ']' ? "unterminated array" : "unterminated object");
      char c = s_[p_];
      if (element && closers.size() == 1) {
        element = false;
        if (c != ']' || r.count > 0) {  // ("[]" has none; "[1,]" a bad second, for the reader)
          if (r.count % RawValue::kMarkEvery == 0) r.marks.push_back(static_cast<std::uint32_t>(p_));
          ++r.count;
        }
      }
      switch (c) {
        case '"':
          if (const char* e = scan_string(s_, n_, p_, v, buf_)) return err(e);
          break;
        case '[': closers += ']'; ++p_; break;
        case '{': closers += '}'; ++p_; break;
        case ']':
        case '}':
          if (closers.back() != c) return err(fmt::format("unexpected '{}'", c));
          closers.pop_back();
          ++p_;
          break;
        case ',':
          element = r.array && closers.size() == 1;
          ++p_;
          break;
        default: ++p_;  // (numbers, literals, ':' and the like: the reader checks them)
      }
      if (closers.size() > 512) return err("nesting deeper than 512 levels");
    }
    r.end = static_cast<std::uint32_t>(p_);
    d_.nodes_[i].a = static_cast<std::uint32_t>(d_.raws_.size());
    d_.raws_.push_back(std::move(r));
    return {};
  }

  Status parse_container(bool object, int depth) {
    auto i = new_node(object ? Type::object : Type::array);
    ++p_;
    std::size_t base = stack_.size();
    skip_ws();
    char close = object ? '}' : ']';
    if (p_ < n_ && s_[p_] == close) {
      ++p_;
    } else {
      for (;;) {
        skip_ws();
        if (object) {
          if (p_ >= n_ || s_[p_] != '"') return err("expected a member name in quotes");
          auto key = static_cast<std::uint32_t>(d_.nodes_.size());
          stack_.push_back(key);
          LMP_TRY(parse_string());
          skip_ws();
          if (p_ >= n_ || s_[p_] != ':') return err("expected ':' after member name");
          ++p_;
          skip_ws();
          // On the path to a raw value: its last name makes the value raw.
          if (matched_ == static_cast<std::size_t>(depth) && matched_ < raw_.size() &&
              Value(&d_, key).str() == raw_[matched_]) {
            stack_.push_back(static_cast<std::uint32_t>(d_.nodes_.size()));
            if (matched_ + 1 == raw_.size()) {
              LMP_TRY(parse_raw());
            } else {
              ++matched_;
              LMP_TRY(parse_value(depth + 1));
              --matched_;
            }
            goto next;
          }
        }
        stack_.push_back(static_cast<std::uint32_t>(d_.nodes_.size()));
        LMP_TRY(parse_value(depth + 1));
      next:
        skip_ws();
        if (p_ >= n_) return err(object ? "unterminated object" : "unterminated array");
        if (s_[p_] == ',') {
          ++p_;
          continue;
        }
        if (s_[p_] == close) {
          ++p_;
          break;
        }
        return err(object ? "expected ',' or '}'" : "expected ',' or ']'");
      }
    }
    auto& node = d_.nodes_[i];
    node.a = static_cast<std::uint32_t>(d_.kids_.size());
    node.b = static_cast<std::uint32_t>(stack_.size() - base);
    d_.kids_.insert(d_.kids_.end(), stack_.begin() + static_cast<std::ptrdiff_t>(base), stack_.end());
    stack_.resize(base);
    return {};
  }

  Document& d_;
  const char* s_;
  std::size_t n_;
  std::size_t p_ = 0;
  std::vector<std::uint32_t> stack_;
  const std::vector<std::string>& raw_;
  std::size_t matched_ = 0;  // names of raw_ matched by the objects open around p_
  std::string buf_;          // an escaped string's contents
};

Result<std::unique_ptr<Document>> Document::parse(std::string text, std::string name) {
  return parse(std::move(text), std::move(name), ParseOptions{});
}

Result<std::unique_ptr<Document>> Document::parse(MappedFile file, std::string name) {
  return parse(std::move(file), std::move(name), ParseOptions{});
}

Result<std::unique_ptr<Document>> Document::parse(std::string text, std::string name, const ParseOptions& opts) {
  std::unique_ptr<Document> d(new Document());
  d->text_ = std::move(text);
  d->src_ = d->text_;
  d->name_ = std::move(name);
  return parse_src(std::move(d), opts);
}

Result<std::unique_ptr<Document>> Document::parse(MappedFile file, std::string name, const ParseOptions& opts) {
  std::unique_ptr<Document> d(new Document());
  d->file_ = std::move(file);
  d->src_ = d->file_.view();
  d->name_ = std::move(name);
  return parse_src(std::move(d), opts);
}

Result<std::unique_ptr<Document>> Document::parse_src(std::unique_ptr<Document> d, const ParseOptions& opts) {
  d->nodes_.reserve(d->src_.size() / 8 + 16);
  d->kids_.reserve(d->src_.size() / 8 + 16);
  Parser p(*d, opts);
  p.reserve(d->src_.size() / 8 + 16);  // (pages are touched only as the stack grows)
  LMP_TRY(p.run());
  return d;
}

Cursor::Cursor(const Document& d, std::size_t at, std::size_t end)
    : d_(d), src_(d.src_.data()), p_(at), end_(std::min(end, d.src_.size())) {}

void Cursor::skip_ws() { p_ = skip_ws_at(src_, end_, p_); }

Status Cursor::string(std::string_view& out, std::string& buf) {
  skip_ws();
  if (p_ >= end_ || src_[p_] != '"') return error("expected a string");
  if (const char* e = scan_string(src_, end_, p_, out, buf)) return error(e);
  return {};
}

Error Cursor::error(std::string_view what) const {
  return make_error(Errc::parse, "{}: {}", d_.location(static_cast<std::uint32_t>(p_)), what);
}

void append_string(std::string& out, std::string_view s) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  std::size_t run = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

}  // namespace lmp::json
