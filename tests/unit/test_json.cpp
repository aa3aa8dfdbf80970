#include <catch2/catch.hpp>

#include "lmpipe/core/json.h"

using namespace lmp;

TEST_CASE("json parses objects, arrays, strings and numbers", "[core][json]") {
  auto d = json::Document::parse(R"({"a": [1, -2.5, true, null], "b\u00e9": "x\ny", "c": {}})", "t.json");
  REQUIRE(d.ok());
  auto r = d.value()->root();
  REQUIRE(r.is_object());
  REQUIRE(r.size() == 3);
  auto a = r.get("a");
  REQUIRE(a.size() == 4);
  CHECK(a[0].integer() == 1);
  CHECK(a[1].num() == -2.5);
  CHECK_FALSE(a[1].integer());
  CHECK(a[2].boolean());
  CHECK(a[3].is_null());
  CHECK(r.key(1).str() == "b\xc3\xa9");
  CHECK(r.get("b\xc3\xa9").str() == "x\ny");
  CHECK(r.get("c").is_object());
  CHECK_FALSE(r.get("missing").valid());
}

TEST_CASE("json decodes surrogate pairs", "[core][json]") {
  auto d = json::Document::parse(R"(["\ud83d\ude00"])", "t");
  REQUIRE(d.ok());
  CHECK(d.value()->root()[0].str() == "\xF0\x9F\x98\x80");
}

TEST_CASE("json errors are located by line and column", "[core][json]") {
  auto d = json::Document::parse("{\n  \"a\": 1,\n  \"b\" 2\n}", "bad.json");
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().message.find("bad.json:3:7") != std::string::npos);
  CHECK_FALSE(json::Document::parse("[1, 2", "t").ok());
  CHECK_FALSE(json::Document::parse("\"abc", "t").ok());
  CHECK_FALSE(json::Document::parse("[\"\\ud800\"]", "t").ok());
  CHECK_FALSE(json::Document::parse("{} x", "t").ok());
  CHECK_FALSE(json::Document::parse("", "t").ok());
  std::string deep(1000, '[');
  CHECK_FALSE(json::Document::parse(deep, "t").ok());
}

TEST_CASE("json strings are escaped as serde_json does", "[core][json]") {
  std::string o;
  json::append_string(o, "a\"b\\c\n\x01\xc3\xa9");
  CHECK(o == "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\"");
}

TEST_CASE("json numbers: integers to 64 bits, exactly at every digit count", "[core][json]") {
  auto d = json::Document::parse(
      "[0, -0, 123456789012345678, -123456789012345678, 1234567890123456789, 9223372036854775807, "
      "-9223372036854775808, 9223372036854775808, 1e3, 0.5, -1.25e-2]",
      "t");
  REQUIRE(d.ok());
  auto a = d.value()->root();
  CHECK(a[0].integer() == 0);
  CHECK(a[1].integer() == 0);
  CHECK(a[2].integer() == 123456789012345678);       // 18 digits: accumulated while scanning
  CHECK(a[3].integer() == -123456789012345678);
  CHECK(a[4].integer() == 1234567890123456789);      // 19 digits: through from_chars
  CHECK(a[5].integer() == INT64_MAX);
  CHECK(a[6].integer() == INT64_MIN);
  CHECK_FALSE(a[7].integer());                       // past int64: a double
  CHECK(a[7].num() == 9223372036854775808.0);
  CHECK_FALSE(a[8].integer());
  CHECK(a[8].num() == 1000.0);
  CHECK(a[9].num() == 0.5);
  CHECK(a[10].num() == -0.0125);
  CHECK(a[5].num() == static_cast<double>(INT64_MAX));
  for (const char* bad : {"[-]", "[1.]", "[1e]", "[-x]", "[.5]"}) CHECK_FALSE(json::Document::parse(bad, "t").ok());
}

TEST_CASE("json whitespace runs and strings of every length around the 16-byte scan", "[core][json]") {
  for (std::size_t ws = 0; ws < 40; ++ws)
    for (std::size_t len = 0; len < 40; ++len) {
      std::string body(len, 'x');
      for (std::size_t i = 0; i < len; ++i) body[i] = static_cast<char>('a' + (i * 7 + ws) % 26);
      std::string pad(ws, " \n\t\r"[(ws + len) % 4]);
      std::string text = pad + "[" + pad + "\"" + body + "\"" + pad + "," + pad + "\"" + body + "\\n\"" + pad + "]" + pad;
      auto d = json::Document::parse(text, "t");
      REQUIRE(d.ok());
      CHECK(d.value()->root()[0].str() == body);
      CHECK(d.value()->root()[1].str() == body + "\n");
      // A control character anywhere in the string is an error, located at it.
      if (len > 0) {
        std::string bad = text;
        bad[pad.size() + 1 + pad.size() + 1 + len - 1] = '\x01';
        auto e = json::Document::parse(bad, "t");
        REQUIRE_FALSE(e.ok());
        CHECK(e.error().message.find("control character") != std::string::npos);
      }
      // Cut inside the string: unterminated, at any length (no read past the end).
      auto cut = json::Document::parse(text.substr(0, pad.size() + 2 + pad.size() + len), "t");
      CHECK_FALSE(cut.ok());
    }
}

TEST_CASE("json raw values: kept as text at their path, elements counted and marked", "[core][json]") {
  json::ParseOptions raw{{"model", "merges"}};
  std::string text = R"({"merges": [1], "model": {"x": {"merges": [2]}, "merges": [ "a b" , ["c", "d\"]"], {"e": [1]}, [] ], "y": 3}})";
  auto d = json::Document::parse(text, "t.json", raw);
  REQUIRE(d.ok());
  auto root = d.value()->root();
  CHECK(root.get("merges").is_array());  // (not on the path)
  CHECK(root.get("model").get("x").get("merges").is_array());
  CHECK(root.get("model").get("y").integer() == 3);
  json::Value m = root.get("model").get("merges");
  REQUIRE(m.is_raw());
  const json::RawValue* r = m.raw();
  REQUIRE(r != nullptr);
  CHECK(r->array);
  CHECK(r->count == 4);
  CHECK(text.substr(r->begin, r->end - r->begin) == R"([ "a b" , ["c", "d\"]"], {"e": [1]}, [] ])");
  REQUIRE(r->marks.size() == 1);
  CHECK(r->marks[0] == text.find("\"a b\""));
  // The cursor reads it in place; escapes are decoded into the caller's buffer.
  json::Cursor c(*d.value(), r->marks[0], r->end);
  std::string buf;
  std::string_view s;
  REQUIRE(c.string(s, buf).ok());
  CHECK(s == "a b");
  CHECK(c.eat(','));
  CHECK(c.eat('['));
  REQUIRE(c.string(s, buf).ok());
  CHECK(s == "c");
  CHECK(c.eat(','));
  REQUIRE(c.string(s, buf).ok());
  CHECK(s == "d\"]");
  CHECK(c.eat(']'));
  CHECK_FALSE(c.eat(']'));
  CHECK(c.eat(','));
  auto e = c.string(s, buf);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.find("t.json:1:") == 0);
  // A scalar at the path stays a node; an empty array has no elements.
  auto d2 = json::Document::parse(R"({"model": {"merges": null}})", "t", raw);
  REQUIRE(d2.ok());
  CHECK(d2.value()->root().get("model").get("merges").is_null());
  auto d3 = json::Document::parse(R"({"model": {"merges": [ ]}})", "t", raw);
  REQUIRE(d3.ok());
  CHECK(d3.value()->root().get("model").get("merges").raw()->count == 0);
}

TEST_CASE("json raw values: a mark every 1024 elements, their ends found or the fault located", "[core][json]") {
  json::ParseOptions raw{{"m"}};
  std::string text = "{\"m\": [";
  std::vector<std::size_t> starts;
  for (int i = 0; i < 3000; ++i) {
    if (i) text += i % 7 == 0 ? ",\n  " : ",";
    starts.push_back(text.size());
    text += i % 3 == 0 ? "\"x\\\"]\"" : i % 3 == 1 ? "[\"a\", [\"b\"]]" : "{\"k\": \"}\"}";
  }
  text += "]}";
  auto d = json::Document::parse(text, "t", raw);
  REQUIRE(d.ok());
  const json::RawValue* r = d.value()->root().get("m").raw();
  REQUIRE(r != nullptr);
  CHECK(r->count == 3000);
  REQUIRE(r->marks.size() == 3);
  for (std::size_t k = 0; k < 3; ++k) CHECK(r->marks[k] == starts[k * json::RawValue::kMarkEvery]);
  struct Bad {
    std::string text, what;
  };
  for (const Bad& b : {Bad{"{\"m\": [\"a\", [\"b\"]", "unterminated array"}, Bad{"{\"m\": [\"a\", [\"b\"}]}", "unexpected '}'"},
                       Bad{"{\"m\": [\"a\n\"]}", "control character in string"}, Bad{"{\"m\": [\"a\\x\"]}", "invalid escape"},
                       Bad{"{\"m\": [\"a]}", "unterminated string"}}) {
    auto e = json::Document::parse(b.text, "t", raw);
    REQUIRE_FALSE(e.ok());
    INFO(e.error().message);
    CHECK(e.error().message.find(b.what) != std::string::npos);
  }
}
