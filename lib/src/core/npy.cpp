#include "lmpipe/core/npy.h"

#include <cstring>
#include <limits>

namespace lmp::npy {

void append_header(std::string& out, std::string_view descr, const std::vector<std::int64_t>& shape) {
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (", descr);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += ",";
    if (i + 1 < shape.size()) dict += " ";
  }
  dict += "), }";
  // Pad with spaces so that the data starts on a multiple of 64 bytes.
  std::size_t pre = 10;
  bool v2 = dict.size() + 1 + pre > 65535;
  if (v2) pre = 12;
  std::size_t total = pre + dict.size() + 1;
  std::size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  out += kMagic;
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  std::size_t hl = dict.size();
  out += static_cast<char>(hl & 0xFF);
  out += static_cast<char>((hl >> 8) & 0xFF);
  if (v2) {
    out += static_cast<char>((hl >> 16) & 0xFF);
    out += static_cast<char>((hl >> 24) & 0xFF);
  }
  out += dict;
}

void append_i32(std::string& out, const std::int32_t* data, std::size_t n) {
  append_header(out, "<i4", {static_cast<std::int64_t>(n)});
  std::size_t old = out.size();
  out.resize(old + n * 4);
  // x86-64 and aarch64 Linux are little-endian, as the '<i4' header says.
  if (n) std::memcpy(out.data() + old, data, n * 4);
}

namespace {

std::size_t dtype_size(std::string_view d) {
  if (d.size() < 3) return 0;
  char kind = d[1];
  if (kind != 'i' && kind != 'u' && kind != 'f' && kind != 'b') return 0;
  std::size_t sz = 0;
  for (char c : d.substr(2)) {
    if (c < '0' || c > '9') return 0;
    sz = sz * 10 + static_cast<std::size_t>(c - '0');
    if (sz > 16) return 0;
  }
  return sz;
}

// Value of key `k` in the header dict text (a Python literal).
std::string_view dict_value(std::string_view dict, std::string_view k) {
  std::string q1 = fmt::format("'{}'", k);
  auto p = dict.find(q1);
  if (p == std::string_view::npos) return {};
  p = dict.find(':', p + q1.size());
  if (p == std::string_view::npos) return {};
  ++p;
  while (p < dict.size() && dict[p] == ' ') ++p;
  if (p >= dict.size()) return {};
  if (dict[p] == '\'') {
    auto e = dict.find('\'', p + 1);
    return e == std::string_view::npos ? std::string_view{} : dict.substr(p + 1, e - p - 1);
  }
  if (dict[p] == '(') {
    auto e = dict.find(')', p);
    return e == std::string_view::npos ? std::string_view{} : dict.substr(p + 1, e - p - 1);
  }
  auto e = dict.find_first_of(",}", p);
  return dict.substr(p, e == std::string_view::npos ? std::string_view::npos : e - p);
}

}  // namespace

Result<Header> parse_header(std::string_view buf, const std::string& name, std::size_t offset, bool require_data,
                            bool* incomplete) {
  auto err = [&](std::string_view what) {
    return make_error(Errc::parse, "{}: array at byte {}: {}", name, offset, what);
  };
  if (incomplete) *incomplete = false;
  auto short_of = [&](std::size_t need) {  // true when more bytes may complete the header
    if (buf.size() >= need || require_data || !incomplete) return false;
    *incomplete = true;
    return true;
  };
  if (short_of(10)) return Header{};
  if (buf.size() < 10 || buf.substr(0, 6) != kMagic) return err("not a .npy array (bad magic)");
  auto major = static_cast<unsigned char>(buf[6]);
  std::size_t hl, pre;
  if (major == 1) {
    hl = static_cast<unsigned char>(buf[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(buf[9])) << 8);
    pre = 10;
  } else if (major == 2 || major == 3) {
    if (short_of(12)) return Header{};
    if (buf.size() < 12) return err("truncated header");
    hl = 0;
    for (int k = 3; k >= 0; --k) hl = (hl << 8) | static_cast<unsigned char>(buf[8 + static_cast<std::size_t>(k)]);
    pre = 12;
  } else {
    return err(fmt::format("unsupported .npy version {}", major));
  }
  if (hl > 1u << 20) return err(fmt::format("header of {} bytes (at most 1 MiB)", hl));
  if (short_of(pre + hl)) return Header{};
  if (hl > buf.size() - pre) return err("truncated header");
  std::string_view dict = buf.substr(pre, hl);
  Header h;
  h.header_bytes = pre + hl;
  h.descr = std::string(dict_value(dict, "descr"));
  h.fortran_order = dict_value(dict, "fortran_order").substr(0, 4) == "True";
  std::string_view shape = dict_value(dict, "shape");
  if (h.descr.empty() || dict.find("'shape'") == std::string_view::npos) return err("malformed header");
  std::size_t esz = dtype_size(h.descr);
  if (esz == 0) return err(fmt::format("unsupported dtype '{}'", h.descr));
  std::uint64_t count = 1;
  std::size_t i = 0;
  while (i < shape.size()) {
    while (i < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i >= shape.size()) break;
    std::int64_t v = 0;
    std::size_t s = i;
    while (i < shape.size() && shape[i] >= '0' && shape[i] <= '9') {
      v = v * 10 + (shape[i] - '0');
      if (v > (std::int64_t{1} << 48)) return err("dimension too large");
      ++i;
    }
    if (i == s) return err("malformed shape");
    h.shape.push_back(v);
    if (v != 0 && count > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(v))
      return err("shape overflows");
    count *= static_cast<std::uint64_t>(v);
  }
  if (count > (std::numeric_limits<std::uint64_t>::max() / esz)) return err("shape overflows");
  h.data_bytes = static_cast<std::size_t>(count * esz);
  if (require_data && h.data_bytes > buf.size() - h.header_bytes)
    return err(fmt::format("header announces {} bytes of data but only {} follow", h.data_bytes,
                           buf.size() - h.header_bytes));
  return h;
}

Status read_id_arrays(std::string_view buf, const std::string& name, std::vector<std::vector<std::int32_t>>& out) {
  std::size_t off = 0;
  while (off < buf.size()) {
    LMP_ASSIGN(Header h, parse_header(buf.substr(off), name, off));
    if (h.descr != "<i4" && h.descr != "<i8" && h.descr != "|i4" && h.descr != "|i8")
      return make_error(Errc::parse, "{}: array at byte {}: token ids must be int32 or int64, not '{}'", name,
                        off, h.descr);
    if (h.shape.size() > 1)
      return make_error(Errc::parse, "{}: array at byte {}: token ids must be 1-D, got {} dimensions", name, off,
                        h.shape.size());
    const char* d = buf.data() + off + h.header_bytes;
    std::vector<std::int32_t> ids;
    bool wide = h.descr[2] == '8';
    std::size_t n = h.data_bytes / (wide ? 8 : 4);
    ids.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      if (wide) {
        std::int64_t v;
        std::memcpy(&v, d + k * 8, 8);
        if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max())
          return make_error(Errc::out_of_range, "{}: array at byte {}: id {} out of range", name, off, v);
        ids[k] = static_cast<std::int32_t>(v);
      } else {
        std::memcpy(&ids[k], d + k * 4, 4);
      }
    }
    out.push_back(std::move(ids));
    off += h.header_bytes + h.data_bytes;
  }
  return {};
}

}  // namespace lmp::npy
