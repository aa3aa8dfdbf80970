#include "lmpipe/tok/ids.h"

#include "lmpipe/core/npy.h"

namespace lmp::tok {

Status parse_id_line(std::string_view line, const std::string& name, std::size_t line_no, std::vector<TokenId>& ids) {
  ids.clear();
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    if (i >= line.size()) break;
    std::size_t s = i;
    std::int64_t v = 0;
    bool neg = line[i] == '-';
    if (neg) ++i;
    while (i < line.size() && line[i] >= '0' && line[i] <= '9' && v <= 0x7FFFFFFF) v = v * 10 + (line[i++] - '0');
    bool bad = i == s + (neg ? 1 : 0) || v > 0x7FFFFFFF ||
               (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r');
    if (bad) {
      std::size_t e = line.find_first_of(" \t", s);
      std::string_view word = line.substr(s, e == std::string_view::npos ? line.size() - s : e - s);
      constexpr std::size_t kShown = 32;  // a binary file has no spaces to end the word
      return make_error(Errc::parse, "{}:{}: invalid token id '{}{}'", name, line_no, word.substr(0, kShown),
                        word.size() > kShown ? "..." : "");
    }
    ids.push_back(static_cast<TokenId>(neg ? -v : v));
  }
  return {};
}

Status parse_ids(std::string_view buf, const std::string& name, std::vector<TokenId>& ids) {
  ids.clear();
  if (buf.substr(0, npy::kMagic.size()) == npy::kMagic) {
    std::vector<std::vector<std::int32_t>> arrays;
    LMP_TRY(npy::read_id_arrays(buf, name, arrays));
    for (const auto& a : arrays) ids.insert(ids.end(), a.begin(), a.end());
    return {};
  }
  std::vector<TokenId> line_ids;
  std::size_t pos = 0, line_no = 0;
  while (pos < buf.size()) {
    std::size_t nl = buf.find('\n', pos);
    std::string_view line = buf.substr(pos, (nl == std::string_view::npos ? buf.size() : nl) - pos);
    pos = nl == std::string_view::npos ? buf.size() : nl + 1;
    LMP_TRY(parse_id_line(line, name, ++line_no, line_ids));
    ids.insert(ids.end(), line_ids.begin(), line_ids.end());
  }
  return {};
}

}  // namespace lmp::tok
