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

class Parser {
 public:
  explicit Parser(Document& d) : d_(d), s_(d.src_.data()), n_(d.src_.size()) {}
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

  static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

  // Pretty-printed files (tokenizer.json: a newline and six spaces before each of ~400k
  // entries) are a third whitespace: runs are skipped 16 bytes at a time.
  void skip_ws() {
    if (p_ >= n_ || !is_ws(s_[p_])) return;
#if defined(__SSE2__)
    while (p_ + 16 <= n_) {
      __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s_ + p_));
      __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\n'))),
                                _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('\t')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\r'))));
      auto other = static_cast<unsigned>(~_mm_movemask_epi8(ws)) & 0xFFFFu;
      if (other != 0) {
        p_ += static_cast<std::size_t>(__builtin_ctz(other));
        return;
      }
      p_ += 16;
    }
#endif
    while (p_ < n_ && is_ws(s_[p_])) ++p_;
  }

  // The length of the run at `p` free of '"', '\\' and control characters.
  std::size_t plain_run(std::size_t p) const {
    std::size_t b = p;
#if defined(__SSE2__)
    while (p + 16 <= n_) {
      __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s_ + p));
      __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                                  _mm_cmpeq_epi8(_mm_max_epu8(x, _mm_set1_epi8(0x1F)), _mm_set1_epi8(0x1F)));
      auto m = static_cast<unsigned>(_mm_movemask_epi8(stop));
      if (m != 0) return p + static_cast<std::size_t>(__builtin_ctz(m)) - b;
      p += 16;
    }
#endif
    while (p < n_) {
      auto c = static_cast<unsigned char>(s_[p]);
      if (c == '"' || c == '\\' || c < 0x20) break;
      ++p;
    }
    return p - b;
  }

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

  Result<std::uint32_t> hex4() {
    if (n_ - p_ < 4) return err("truncated \\u escape");
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[p_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<std::uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<std::uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<std::uint32_t>(c - 'A' + 10);
      else return err("invalid \\u escape");
    }
    return v;
  }

  Status parse_string() {
    auto i = new_node(Type::string);
    ++p_;  // opening quote
    std::size_t start = p_;
    // Fast scan: no escapes.
    p_ += plain_run(p_);
    if (p_ >= n_) return err("unterminated string");
    if (s_[p_] == '"') {
      d_.nodes_[i].a = static_cast<std::uint32_t>(start);
      d_.nodes_[i].b = static_cast<std::uint32_t>(p_ - start);
      ++p_;
      return {};
    }
    if (s_[p_] != '\\') return err("control character in string");
    std::string out(s_ + start, p_ - start);
    while (p_ < n_) {
      char c = s_[p_];
      if (c == '"') {
        ++p_;
        d_.arena_.push_back(std::move(out));
        d_.nodes_[i].flag = true;
        d_.nodes_[i].a = static_cast<std::uint32_t>(d_.arena_.size() - 1);
        return {};
      }
      if (static_cast<unsigned char>(c) < 0x20) return err("control character in string");
      if (c != '\\') {
        out += c;
        ++p_;
        continue;
      }
      if (++p_ >= n_) return err("unterminated string");
      char e = s_[p_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          LMP_ASSIGN(std::uint32_t cp, hex4());
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (n_ - p_ >= 6 && s_[p_] == '\\' && s_[p_ + 1] == 'u') {
              p_ += 2;
              LMP_ASSIGN(std::uint32_t lo, hex4());
              if (lo < 0xDC00 || lo > 0xDFFF) return err("invalid surrogate pair");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              return err("lone surrogate in \\u escape");
            }
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return err("lone surrogate in \\u escape");
          }
          text::append_utf8(out, cp);
          break;
        }
        default: return err("invalid escape");
      }
    }
    return err("unterminated string");
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
          stack_.push_back(static_cast<std::uint32_t>(d_.nodes_.size()));
          LMP_TRY(parse_string());
          skip_ws();
          if (p_ >= n_ || s_[p_] != ':') return err("expected ':' after member name");
          ++p_;
          skip_ws();
        }
        stack_.push_back(static_cast<std::uint32_t>(d_.nodes_.size()));
        LMP_TRY(parse_value(depth + 1));
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
};

Result<std::unique_ptr<Document>> Document::parse(std::string text, std::string name) {
  std::unique_ptr<Document> d(new Document());
  d->text_ = std::move(text);
  d->src_ = d->text_;
  d->name_ = std::move(name);
  return parse_src(std::move(d));
}

Result<std::unique_ptr<Document>> Document::parse(MappedFile file, std::string name) {
  std::unique_ptr<Document> d(new Document());
  d->file_ = std::move(file);
  d->src_ = d->file_.view();
  d->name_ = std::move(name);
  return parse_src(std::move(d));
}

Result<std::unique_ptr<Document>> Document::parse_src(std::unique_ptr<Document> d) {
  d->nodes_.reserve(d->src_.size() / 8 + 16);
  d->kids_.reserve(d->src_.size() / 8 + 16);
  Parser p(*d);
  p.reserve(d->src_.size() / 8 + 16);  // (pages are touched only as the stack grows)
  LMP_TRY(p.run());
  return d;
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
