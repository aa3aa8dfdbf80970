#include "lmpipe/tok/byte_level.h"

#include <array>

#include "lmpipe/text/unicode.h"

namespace lmp::tok {

namespace {
struct Tables {
  std::array<std::uint32_t, 256> to_cp{};
  std::array<std::int16_t, 512> from_cp{};  // code points < 512 only
  Tables() {
    from_cp.fill(-1);
    std::uint32_t next = 256;
    for (std::uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? b : next++;
      from_cp[to_cp[b]] = static_cast<std::int16_t>(b);
    }
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}
}  // namespace

std::uint32_t byte_to_unicode(unsigned char b) { return tables().to_cp[b]; }

const std::int16_t* byte_level_decode_table() { return tables().from_cp.data(); }

std::optional<unsigned char> unicode_to_byte(std::uint32_t cp) {
  if (cp >= 512) return std::nullopt;
  auto v = tables().from_cp[cp];
  if (v < 0) return std::nullopt;
  return static_cast<unsigned char>(v);
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) text::append_utf8(out, byte_to_unicode(static_cast<unsigned char>(c)));
  return out;
}

std::ptrdiff_t byte_level_to_bytes(std::string_view s, char* out) {
  // All 256 stand-ins are below U+0200: one UTF-8 byte, or two with lead C2..C7.
  const auto& from = tables().from_cp;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  char* o = out;
  for (std::size_t i = 0, n = s.size(); i < n; ++i) {
    std::uint32_t cp = p[i];
    if (cp >= 0x80) {
      if (cp < 0xC2 || cp > 0xC7 || i + 1 == n || (p[i + 1] & 0xC0) != 0x80) return -1;
      cp = ((cp & 0x1F) << 6) | (p[++i] & 0x3F);
    }
    std::int16_t b = from[cp];
    if (b < 0) return -1;
    *o++ = static_cast<char>(b);
  }
  return o - out;
}

bool byte_level_to_bytes(std::string_view s, std::string& out) {
  out.resize(s.size());  // (the bytes are never more than the text)
  std::ptrdiff_t n = byte_level_to_bytes(s, out.data());
  if (n < 0) return false;
  out.resize(static_cast<std::size_t>(n));
  return true;
}

std::optional<std::string> byte_level_to_bytes(std::string_view s) {
  std::string out;
  if (!byte_level_to_bytes(s, out)) return std::nullopt;
  return out;
}

}  // namespace lmp::tok
