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
