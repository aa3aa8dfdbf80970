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
