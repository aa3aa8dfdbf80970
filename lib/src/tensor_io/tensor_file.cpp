#include "lmpipe/tensor_io/tensor_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "lmpipe/core/io.h"
#include "lmpipe/core/json.h"
#include "lmpipe/core/npy.h"
#include "lmpipe/tensor_io/npy_stream.h"

namespace lmp::tensor_io {

std::string_view format_name(Format f) {
  switch (f) {
    case Format::npy: return "npy";
    case Format::safetensors: return "safetensors";
    case Format::gguf: return "gguf";
    case Format::llama2c: return "llama2.c";
  }
  return "?";
}

std::string_view meta_type_name(MetaType t) {
  static constexpr std::string_view kNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                "bool", "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<std::size_t>(t);
  return i < std::size(kNames) ? kNames[i] : "?";
}

// ---- MetaValue -------------------------------------------------------------------------

MetaValue MetaValue::of_u32(std::uint32_t v) { MetaValue m; m.type = MetaType::u32; m.u = v; return m; }
MetaValue MetaValue::of_u64(std::uint64_t v) { MetaValue m; m.type = MetaType::u64; m.u = v; return m; }
MetaValue MetaValue::of_i32(std::int32_t v) { MetaValue m; m.type = MetaType::i32; m.i = v; return m; }
MetaValue MetaValue::of_f32(float v) { MetaValue m; m.type = MetaType::f32; m.f = static_cast<double>(v); return m; }
MetaValue MetaValue::of_bool(bool v) { MetaValue m; m.type = MetaType::boolean; m.u = v; return m; }
MetaValue MetaValue::of_string(std::string v) { MetaValue m; m.type = MetaType::string; m.s = std::move(v); return m; }
MetaValue MetaValue::of_array(MetaType elem, std::vector<MetaValue> items) {
  MetaValue m;
  m.type = MetaType::array;
  m.elem = elem;
  m.items = std::move(items);
  return m;
}

bool MetaValue::is_integer() const {
  switch (type) {
    case MetaType::u8: case MetaType::i8: case MetaType::u16: case MetaType::i16: case MetaType::u32:
    case MetaType::i32: case MetaType::u64: case MetaType::i64: return true;
    default: return false;
  }
}
namespace {
bool is_unsigned(MetaType t) {
  return t == MetaType::u8 || t == MetaType::u16 || t == MetaType::u32 || t == MetaType::u64 || t == MetaType::boolean;
}
}  // namespace
std::optional<std::int64_t> MetaValue::as_int() const {
  if (!is_integer()) return std::nullopt;
  if (is_unsigned(type)) {
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  return i;
}
std::optional<double> MetaValue::as_double() const {
  if (type == MetaType::f32 || type == MetaType::f64) return f;
  if (is_unsigned(type) && type != MetaType::boolean) return static_cast<double>(u);
  if (is_integer()) return static_cast<double>(i);
  return std::nullopt;
}
std::string MetaValue::to_string(std::size_t max_items) const {
  switch (type) {
    case MetaType::string: {
      std::string o;
      json::append_string(o, s.size() > 80 ? s.substr(0, 80) + "…" : s);
      return o;
    }
    case MetaType::boolean: return u ? "true" : "false";
    case MetaType::f32: return fmt::format("{}", static_cast<float>(f));  // the shortest form that reads back
    case MetaType::f64: return fmt::format("{}", f);
    case MetaType::array: {
      std::string o = fmt::format("[{} × {}]", items.size(), meta_type_name(elem));
      if (max_items == 0) return o;
      o += " [";
      for (std::size_t k = 0; k < items.size() && k < max_items; ++k) o += (k ? ", " : "") + items[k].to_string(0);
      if (items.size() > max_items) o += ", …";
      return o + "]";
    }
    default: return is_unsigned(type) ? std::to_string(u) : std::to_string(i);
  }
}

std::uint64_t TensorInfo::count() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

const TensorInfo* TensorFile::find(std::string_view n) const {
  auto it = index_.find(n);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}
const MetaValue* TensorFile::meta(std::string_view key) const {
  auto it = meta_index_.find(key);
  return it == meta_index_.end() ? nullptr : &meta_[it->second].second;
}

// ---- parsers ---------------------------------------------------------------------------

namespace {

constexpr std::string_view kGgufMagic = "GGUF";

// Bounds-checked little-endian reading; every error names the file and byte offset.
struct Reader {
  Reader(std::string_view b, std::string n) : buf(b), name(std::move(n)) {}
  std::string_view buf;
  std::string name;
  std::size_t pos = 0;
  std::string what;  // what is being read, for messages

  Error err(std::string_view msg, std::size_t at) const {
    return make_error(Errc::parse, "{}: byte {}: {}{}", name, at, what.empty() ? "" : what + ": ", msg);
  }
  std::size_t left() const { return buf.size() - pos; }
  template <class T>
  Result<T> get() {
    if (left() < sizeof(T)) return err(fmt::format("truncated (needs {} bytes, {} left)", sizeof(T), left()), pos);
    T v;
    std::memcpy(&v, buf.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  Result<std::string_view> str(std::uint64_t max_len) {
    std::size_t at = pos;
    LMP_ASSIGN(auto n, get<std::uint64_t>());
    if (n > left()) return err(fmt::format("string of {} bytes, but only {} left in the file", n, left()), at);
    if (n > max_len) return err(fmt::format("string of {} bytes (at most {})", n, max_len), at);
    std::string_view s = buf.substr(pos, static_cast<std::size_t>(n));
    pos += static_cast<std::size_t>(n);
    return s;
  }
};

struct GgmlType {
  std::uint32_t id;
  DType dtype;
};
constexpr GgmlType kGgmlTypes[] = {{0, DType::f32}, {1, DType::f16}, {2, DType::q4_0}, {8, DType::q8_0},
                                   {10, DType::q2_K}, {11, DType::q3_K}, {12, DType::q4_K}, {13, DType::q5_K}, {14, DType::q6_K}, {20, DType::iq4_nl}, {23, DType::iq4_xs}, {3, DType::q4_1}, {6, DType::q5_0}, {7, DType::q5_1}, {24, DType::i8}, {25, DType::i16}, {26, DType::i32}, {27, DType::i64},
                                   {28, DType::f64}, {30, DType::bf16}};
std::string_view ggml_type_name(std::uint32_t id) {
  static constexpr std::pair<std::uint32_t, std::string_view> kNames[] = {
      {3, "q4_1"}, {6, "q5_0"}, {7, "q5_1"}, {9, "q8_1"}, {10, "q2_K"}, {11, "q3_K"}, {12, "q4_K"},
      {13, "q5_K"}, {14, "q6_K"}, {15, "q8_K"}, {16, "iq2_xxs"}, {17, "iq2_xs"}, {18, "iq3_xxs"},
      {19, "iq1_s"}, {20, "iq4_nl"}, {21, "iq3_s"}, {22, "iq2_s"}, {23, "iq4_xs"}, {29, "iq1_m"},
      {34, "tq1_0"}, {35, "tq2_0"}, {39, "mxfp4"}};
  for (auto& [k, v] : kNames)
    if (k == id) return v;
  return "unknown";
}

Result<MetaValue> read_meta_value(Reader& r, MetaType type, int depth) {
  MetaValue v;
  v.type = type;
  std::size_t at = r.pos;
  switch (type) {
    case MetaType::u8: { LMP_ASSIGN(auto x, r.get<std::uint8_t>()); v.u = x; break; }
    case MetaType::i8: { LMP_ASSIGN(auto x, r.get<std::int8_t>()); v.i = x; break; }
    case MetaType::u16: { LMP_ASSIGN(auto x, r.get<std::uint16_t>()); v.u = x; break; }
    case MetaType::i16: { LMP_ASSIGN(auto x, r.get<std::int16_t>()); v.i = x; break; }
    case MetaType::u32: { LMP_ASSIGN(auto x, r.get<std::uint32_t>()); v.u = x; break; }
    case MetaType::i32: { LMP_ASSIGN(auto x, r.get<std::int32_t>()); v.i = x; break; }
    case MetaType::u64: { LMP_ASSIGN(auto x, r.get<std::uint64_t>()); v.u = x; break; }
    case MetaType::i64: { LMP_ASSIGN(auto x, r.get<std::int64_t>()); v.i = x; break; }
    case MetaType::f32: { LMP_ASSIGN(auto x, r.get<float>()); v.f = static_cast<double>(x); break; }
    case MetaType::f64: { LMP_ASSIGN(auto x, r.get<double>()); v.f = x; break; }
    case MetaType::boolean: {
      LMP_ASSIGN(auto x, r.get<std::uint8_t>());
      if (x > 1) return r.err(fmt::format("bool value {} (must be 0 or 1)", x), at);
      v.u = x;
      break;
    }
    case MetaType::string: {
      LMP_ASSIGN(auto s, r.str(std::numeric_limits<std::uint64_t>::max()));
      v.s = std::string(s);
      break;
    }
    case MetaType::array: {
      if (depth >= 8) return r.err("arrays nested more than 8 deep", at);
      LMP_ASSIGN(auto et, r.get<std::uint32_t>());
      if (et > 12) return r.err(fmt::format("array of unknown value type {}", et), at);
      LMP_ASSIGN(auto n, r.get<std::uint64_t>());
      // The smallest element: 1 byte, 8 for a string (its length), 12 for an array.
      static constexpr std::size_t kMin[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};
      if (n > r.left() / kMin[et])
        return r.err(fmt::format("array of {} elements cannot fit in the {} bytes left", n, r.left()), at);
      v.elem = static_cast<MetaType>(et);
      v.items.reserve(static_cast<std::size_t>(n));
      for (std::uint64_t k = 0; k < n; ++k) {
        LMP_ASSIGN(auto item, read_meta_value(r, v.elem, depth + 1));
        v.items.push_back(std::move(item));
      }
      break;
    }
  }
  return v;
}

}  // namespace

struct Parsers {
  static Status index(TensorFile& f) {
    for (std::size_t i = 0; i < f.tensors_.size(); ++i)
      if (!f.index_.emplace(f.tensors_[i].name, i).second)
        return make_error(Errc::parse, "{}: tensor '{}' appears twice", f.name(), f.tensors_[i].name);
    for (std::size_t i = 0; i < f.meta_.size(); ++i)
      if (!f.meta_index_.emplace(f.meta_[i].first, i).second)
        return make_error(Errc::parse, "{}: metadata key '{}' appears twice", f.name(), f.meta_[i].first);
    return {};
  }

  static Status gguf(TensorFile& f) {
    Reader r{f.map_.view(), f.name()};
    r.pos = 4;
    r.what = "GGUF header";
    LMP_ASSIGN(auto version, r.get<std::uint32_t>());
    if (version != 2 && version != 3)
      return r.err(fmt::format("GGUF version {} is not supported (2 and 3 are)", version), 4);
    f.version_ = static_cast<int>(version);
    LMP_ASSIGN(auto n_tensors, r.get<std::uint64_t>());
    LMP_ASSIGN(auto n_kv, r.get<std::uint64_t>());
    // A key-value pair takes at least 13 bytes, a tensor info at least 24: check the
    // counts against the file before reserving anything.
    if (n_kv > r.left() / 13) return r.err(fmt::format("{} metadata pairs cannot fit in the file", n_kv), 16);
    if (n_tensors > r.left() / 24) return r.err(fmt::format("{} tensors cannot fit in the file", n_tensors), 8);
    f.meta_.reserve(static_cast<std::size_t>(n_kv));
    for (std::uint64_t k = 0; k < n_kv; ++k) {
      r.what = fmt::format("metadata pair {}", k);
      LMP_ASSIGN(auto key, r.str(65535));
      r.what = fmt::format("metadata '{}'", key);
      std::size_t at = r.pos;
      LMP_ASSIGN(auto type, r.get<std::uint32_t>());
      if (type > 12) return r.err(fmt::format("unknown value type {}", type), at);
      LMP_ASSIGN(auto v, read_meta_value(r, static_cast<MetaType>(type), 0));
      f.meta_.emplace_back(std::string(key), std::move(v));
    }
    f.alignment_ = 32;
    for (auto& [key, v] : f.meta_)
      if (key == "general.alignment") {
        if (v.type != MetaType::u32 || v.u == 0 || (v.u & (v.u - 1)) != 0)
          return make_error(Errc::parse, "{}: general.alignment must be a u32 power of two, got {} {}", f.name(),
                            meta_type_name(v.type), v.to_string());
        f.alignment_ = v.u;
      }
    f.tensors_.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t k = 0; k < n_tensors; ++k) {
      r.what = fmt::format("tensor info {}", k);
      LMP_ASSIGN(auto name, r.str(64));
      r.what = fmt::format("tensor '{}'", name);
      std::size_t at = r.pos;
      LMP_ASSIGN(auto nd, r.get<std::uint32_t>());
      if (nd > 4) return r.err(fmt::format("{} dimensions (at most 4)", nd), at);
      TensorInfo t;
      t.name = std::string(name);
      std::uint64_t count = 1;
      for (std::uint32_t d = 0; d < nd; ++d) {
        at = r.pos;
        LMP_ASSIGN(auto ne, r.get<std::uint64_t>());
        if (ne > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
            (ne != 0 && count > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / ne))
          return r.err("the number of elements overflows", at);
        count *= ne;
        t.shape.insert(t.shape.begin(), static_cast<std::int64_t>(ne));  // ggml order → row-major
      }
      at = r.pos;
      LMP_ASSIGN(auto type, r.get<std::uint32_t>());
      const GgmlType* g = nullptr;
      for (const auto& x : kGgmlTypes)
        if (x.id == type) g = &x;
      if (!g)
        return r.err(fmt::format("ggml type {} ({}) is not supported (f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K and the integer "
                                 "types are)",
                                 type, ggml_type_name(type)),
                     at);
      t.dtype = g->dtype;
      at = r.pos;
      LMP_ASSIGN(t.offset, r.get<std::uint64_t>());
      if (t.offset % f.alignment_ != 0)
        return r.err(fmt::format("data offset {} is not a multiple of the alignment {}", t.offset, f.alignment_), at);
      std::uint64_t row = t.shape.empty() ? 1 : static_cast<std::uint64_t>(t.shape.back());
      auto nb = tensor_bytes(t.dtype, count, row);
      if (!nb)
        return r.err(fmt::format("rows of {} elements are not whole {}-element blocks of {}", row,
                                 dtype_info(t.dtype).block, dtype_name(t.dtype)),
                     at);
      t.nbytes = *nb;
      f.tensors_.push_back(std::move(t));
    }
    std::uint64_t data_start = (r.pos + f.alignment_ - 1) / f.alignment_ * f.alignment_;
    std::uint64_t size = f.map_.size();
    for (auto& t : f.tensors_) {
      if (data_start > size || t.offset > size - data_start || t.nbytes > size - data_start - t.offset)
        return make_error(Errc::parse,
                          "{}: tensor '{}': data at bytes {}..{} of the data section, which ends after {} bytes "
                          "(truncated file?)",
                          f.name(), t.name, t.offset, t.offset + t.nbytes, data_start > size ? 0 : size - data_start);
      t.offset += data_start;
    }
    return index(f);
  }

  // One array, or a stream of arrays back to back ("array.0", "array.1", ...).
  static Status npy(TensorFile& f) {
    auto buf = f.map_.view();
    std::size_t off = 0;
    f.version_ = static_cast<unsigned char>(buf[6]);
    while (off < buf.size()) {
      if (off > 0 && buf.substr(off, npy::kMagic.size()) != npy::kMagic)
        return make_error(Errc::parse, "{}: {} bytes after the last array at byte {} are not a .npy array", f.name(),
                          buf.size() - off, off);
      LMP_ASSIGN(auto h, npy::parse_header(buf.substr(off), f.name(), off));
      if (h.fortran_order)
        return make_error(Errc::unsupported, "{}: array at byte {}: Fortran order is not supported (save in C order)",
                          f.name(), off);
      auto dt = npy_dtype(h.descr);
      if (!dt) return make_error(Errc::unsupported, "{}: array at byte {}: dtype '{}' is not supported", f.name(), off, h.descr);
      TensorInfo t;
      t.name = fmt::format("array.{}", f.tensors_.size());
      t.dtype = *dt;
      t.shape = h.shape;
      t.offset = off + h.header_bytes;
      t.nbytes = h.data_bytes;
      f.tensors_.push_back(std::move(t));
      off += h.header_bytes + h.data_bytes;
    }
    if (f.tensors_.size() == 1) f.tensors_[0].name = "array";
    return index(f);
  }

  static Status safetensors(TensorFile& f) {
    auto buf = f.map_.view();
    std::uint64_t n;
    std::memcpy(&n, buf.data(), 8);
    constexpr std::uint64_t kMaxHeader = 100u << 20;
    if (n > kMaxHeader) return make_error(Errc::parse, "{}: safetensors header of {} bytes (at most 100 MB)", f.name(), n);
    if (n > buf.size() - 8)
      return make_error(Errc::parse, "{}: safetensors header of {} bytes, but the file has only {} after the length",
                        f.name(), n, buf.size() - 8);
    LMP_ASSIGN(auto doc, json::Document::parse(std::string(buf.substr(8, static_cast<std::size_t>(n))),
                                               f.name() + " (safetensors header)"));
    json::Value root = doc->root();
    if (!root.is_object()) return make_error(Errc::parse, "{}: the safetensors header is not a JSON object", f.name());
    const std::uint64_t data_start = 8 + n, data_size = buf.size() - data_start;
    static constexpr std::pair<std::string_view, DType> kTypes[] = {
        {"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16}, {"F64", DType::f64}, {"I32", DType::i32},
        {"I64", DType::i64}, {"I16", DType::i16}, {"I8", DType::i8},     {"U8", DType::u8}};
    for (std::size_t k = 0; k < root.size(); ++k) {
      std::string key(root.key(k).str());
      json::Value v = root.val(k);
      if (key == "__metadata__") {
        if (!v.is_object()) return make_error(Errc::parse, "{}: __metadata__ is not an object", v.where());
        for (std::size_t m = 0; m < v.size(); ++m) {
          if (!v.val(m).is_string())
            return make_error(Errc::parse, "{}: __metadata__ values must be strings", v.val(m).where());
          f.meta_.emplace_back(std::string(v.key(m).str()), MetaValue::of_string(std::string(v.val(m).str())));
        }
        continue;
      }
      auto bad = [&](std::string_view what) {
        return make_error(Errc::parse, "{}: tensor '{}': {}", v.where(), key, what);
      };
      if (!v.is_object()) return bad("not an object");
      json::Value dt = v.get("dtype"), shape = v.get("shape"), offs = v.get("data_offsets");
      if (!dt.is_string() || !shape.is_array() || !offs.is_array() || offs.size() != 2)
        return bad("needs \"dtype\", \"shape\" and \"data_offsets\": [begin, end]");
      TensorInfo t;
      t.name = key;
      bool known = false;
      for (auto& [s, d] : kTypes)
        if (dt.str() == s) {
          t.dtype = d;
          known = true;
        }
      if (!known) return bad(fmt::format("dtype {} is not supported", dt.str()));
      std::uint64_t count = 1;
      for (std::size_t d = 0; d < shape.size(); ++d) {
        auto x = shape[d].integer();
        if (!x || *x < 0) return bad("shape entries must be non-negative integers");
        if (*x != 0 && count > (std::uint64_t{1} << 62) / static_cast<std::uint64_t>(*x)) return bad("shape overflows");
        count *= static_cast<std::uint64_t>(*x);
        t.shape.push_back(*x);
      }
      auto b = offs[0].integer(), e = offs[1].integer();
      if (!b || !e || *b < 0 || *e < *b) return bad("data_offsets must be integers with begin <= end");
      t.nbytes = count * dtype_info(t.dtype).block_bytes;
      if (static_cast<std::uint64_t>(*e - *b) != t.nbytes)
        return bad(fmt::format("data_offsets span {} bytes, but shape and dtype need {}", *e - *b, t.nbytes));
      if (static_cast<std::uint64_t>(*e) > data_size)
        return bad(fmt::format("data ends at byte {} of the buffer, which has only {} (truncated file?)", *e,
                               data_size));
      t.offset = data_start + static_cast<std::uint64_t>(*b);
      f.tensors_.push_back(std::move(t));
    }
    // The buffer must be covered exactly, without holes or overlaps.
    std::vector<const TensorInfo*> by_offset;
    for (const auto& t : f.tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    std::uint64_t at = data_start;
    for (const auto* t : by_offset) {
      if (t->offset != at)
        return make_error(Errc::parse, "{}: tensor '{}' starts at buffer byte {}, expected {} (a hole or an overlap)",
                          f.name(), t->name, t->offset - data_start, at - data_start);
      at += t->nbytes;
    }
    f.version_ = 0;
    return index(f);
  }

  // llama2.c legacy checkpoint: 7 × i32 config, then f32 arrays.
  static std::optional<Llama2cConfig> l2c_header(std::string_view buf) {
    if (buf.size() < 28) return std::nullopt;
    std::int32_t h[7];
    std::memcpy(h, buf.data(), 28);
    Llama2cConfig c{h[0], h[1], h[2], h[3], h[4], std::abs(h[5]), h[6], h[5] > 0};
    if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 ||
        c.vocab_size <= 0 || c.seq_len <= 0 || h[5] == std::numeric_limits<std::int32_t>::min())
      return std::nullopt;
    if (c.dim % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0 || (c.dim / c.n_heads) % 2 != 0) return std::nullopt;
    return c;
  }
  struct L2cTensor {
    std::string name;
    std::vector<std::int64_t> shape;
  };
  // The tensors of a checkpoint in file order, named as GGUF names them.
  static std::vector<L2cTensor> l2c_layout(const Llama2cConfig& c) {
    const std::int64_t dim = c.dim, hid = c.hidden_dim, L = c.n_layers, V = c.vocab_size;
    const std::int64_t hs = dim / c.n_heads, kv = dim * c.n_kv_heads / c.n_heads;
    std::vector<L2cTensor> v;
    v.push_back({"token_embd.weight", {V, dim}});
    auto per_layer = [&](std::string_view n, std::vector<std::int64_t> s) {
      for (std::int64_t l = 0; l < L; ++l) v.push_back({fmt::format("blk.{}.{}", l, n), s});
    };
    per_layer("attn_norm.weight", {dim});
    per_layer("attn_q.weight", {dim, dim});
    per_layer("attn_k.weight", {kv, dim});
    per_layer("attn_v.weight", {kv, dim});
    per_layer("attn_output.weight", {dim, dim});
    per_layer("ffn_norm.weight", {dim});
    per_layer("ffn_gate.weight", {hid, dim});  // w1
    per_layer("ffn_down.weight", {dim, hid});  // w2
    per_layer("ffn_up.weight", {hid, dim});    // w3
    v.push_back({"output_norm.weight", {dim}});
    v.push_back({"rope_freqs.real", {c.seq_len, hs / 2}});  // legacy tables, unused by run.c
    v.push_back({"rope_freqs.imag", {c.seq_len, hs / 2}});
    if (!c.shared_classifier) v.push_back({"output.weight", {V, dim}});
    return v;
  }
  // The file size the header announces, by formula (the layout is built only once the
  // size matches the file: a header claiming 2^31 layers must not allocate per layer).
  static std::optional<std::uint64_t> l2c_size(const Llama2cConfig& c) {
    // Every factor is below 2^31, so each product of two fits in 64 bits; the sums and
    // the products by the layer count are checked.
    const std::uint64_t dim = static_cast<std::uint64_t>(c.dim), hid = static_cast<std::uint64_t>(c.hidden_dim),
                        V = static_cast<std::uint64_t>(c.vocab_size), hs = dim / static_cast<std::uint64_t>(c.n_heads),
                        kv = dim * static_cast<std::uint64_t>(c.n_kv_heads) / static_cast<std::uint64_t>(c.n_heads);
    std::uint64_t per_layer = 0, layers = 0, floats = 0;
    bool over = __builtin_add_overflow(2 * dim * dim + 2 * dim, 2 * kv * dim, &per_layer) ||
                __builtin_add_overflow(per_layer, 3 * hid * dim, &per_layer) ||
                __builtin_mul_overflow(per_layer, static_cast<std::uint64_t>(c.n_layers), &layers) ||
                __builtin_add_overflow(layers, V * dim + dim + static_cast<std::uint64_t>(c.seq_len) * (hs / 2) * 2,
                                       &floats) ||
                (!c.shared_classifier && __builtin_add_overflow(floats, V * dim, &floats)) ||
                __builtin_mul_overflow(floats, std::uint64_t{4}, &floats) ||
                __builtin_add_overflow(floats, std::uint64_t{28}, &floats);
    if (over) return std::nullopt;
    return floats;
  }
  static Status llama2c(TensorFile& f, const Llama2cConfig& c) {
    std::uint64_t off = 28;
    for (auto& t : l2c_layout(c)) {
      TensorInfo ti;
      ti.name = t.name;
      ti.shape = t.shape;
      ti.dtype = DType::f32;
      ti.offset = off;
      ti.nbytes = ti.count() * 4;
      off += ti.nbytes;
      f.tensors_.push_back(std::move(ti));
    }
    auto u32 = [](std::int32_t v) { return MetaValue::of_u32(static_cast<std::uint32_t>(v)); };
    f.meta_ = {{"general.architecture", MetaValue::of_string("llama")},
               {"llama.embedding_length", u32(c.dim)},
               {"llama.feed_forward_length", u32(c.hidden_dim)},
               {"llama.block_count", u32(c.n_layers)},
               {"llama.attention.head_count", u32(c.n_heads)},
               {"llama.attention.head_count_kv", u32(c.n_kv_heads)},
               {"llama.context_length", u32(c.seq_len)},
               {"llama.vocab_size", u32(c.vocab_size)},
               {"llama2c.shared_classifier", MetaValue::of_bool(c.shared_classifier)}};
    f.version_ = 0;
    return index(f);
  }

  static Result<std::unique_ptr<TensorFile>> parse(MappedFile map) {
    std::unique_ptr<TensorFile> f(new TensorFile());
    f->map_ = std::move(map);
    auto buf = f->map_.view();
    Status st;
    if (buf.empty()) return make_error(Errc::parse, "{}: empty file", f->name());
    if (buf.substr(0, 4) == kGgufMagic) {
      f->format_ = Format::gguf;
      st = gguf(*f);
    } else if (buf.substr(0, 6) == npy::kMagic) {
      f->format_ = Format::npy;
      st = npy(*f);
    } else if (buf.size() >= 9 && buf[8] == '{') {
      f->format_ = Format::safetensors;
      st = safetensors(*f);
    } else if (auto c = l2c_header(buf); c && l2c_size(*c) == buf.size()) {
      f->format_ = Format::llama2c;
      st = llama2c(*f, *c);
    } else if (c) {
      auto want = l2c_size(*c);
      return make_error(Errc::parse,
                        "{}: a llama2.c header (dim {}, hidden {}, {} layers, {} heads, {} kv heads, vocab {}, seq {}) "
                        "announces {} bytes, but the file has {}",
                        f->name(), c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size,
                        c->seq_len, want ? std::to_string(*want) : "more than 2^64", buf.size());
    } else {
      return make_error(Errc::parse,
                        "{}: not a tensor file (no GGUF or .npy magic, no safetensors header, no llama2.c header)",
                        f->name());
    }
    if (!st) return std::move(st).error();
    return f;
  }
};

Result<std::unique_ptr<TensorFile>> TensorFile::from(MappedFile map) { return Parsers::parse(std::move(map)); }

Result<std::unique_ptr<TensorFile>> TensorFile::open(const std::string& path, MappedFile::Load how) {
  if (how == MappedFile::Load::map) {
    LMP_ASSIGN(auto map, MappedFile::open(path, how));
    return Parsers::parse(std::move(map));
  }
  // Copied: the header is read from a mapping first, to learn where the tensors lie, and
  // the copy then puts the most tensor bytes on 64-byte boundaries. GGUF aligns tensors to
  // 32 bytes by default and its data section often starts at 32 mod 64, so a copy placed
  // as the file is would split every 64-byte load of a row over two cache lines, which
  // costs 3-7% of one Zen 5 core's stream rate (scripts/bench/row_placement.c,
  // docs/benchmarks.md). llama2.c checkpoints start their arrays at byte 28. The tensor
  // offsets stay file offsets; only the base moves.
  LMP_ASSIGN(auto map, MappedFile::open(path, MappedFile::Load::map));
  if (!map.mapped()) return Parsers::parse(std::move(map));  // standard input: read already
  const std::uint64_t size = map.size();
  LMP_ASSIGN(auto f, Parsers::parse(std::move(map)));
  std::uint64_t bytes_at[64] = {};
  for (const auto& t : f->tensors()) bytes_at[t.offset % 64] += t.nbytes;
  const auto best = static_cast<std::size_t>(std::max_element(std::begin(bytes_at), std::end(bytes_at)) - std::begin(bytes_at));
  LMP_ASSIGN(auto copy, MappedFile::open(path, how, best));
  if (copy.size() != size)
    return make_error(Errc::io, "{}: the file changed size while being read ({} bytes, then {})", path, size, copy.size());
  f->map_ = std::move(copy);
  return f;
}

Result<Llama2cConfig> llama2c_config(const TensorFile& f) {
  auto get = [&](std::string_view k) -> std::int32_t {
    const MetaValue* v = f.meta(k);
    auto x = v ? v->as_int() : std::nullopt;
    return x ? static_cast<std::int32_t>(*x) : 0;
  };
  Llama2cConfig c;
  c.dim = get("llama.embedding_length");
  c.hidden_dim = get("llama.feed_forward_length");
  c.n_layers = get("llama.block_count");
  c.n_heads = get("llama.attention.head_count");
  c.n_kv_heads = get("llama.attention.head_count_kv");
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;
  c.seq_len = get("llama.context_length");
  const TensorInfo* emb = f.find("token_embd.weight");
  c.vocab_size = emb && emb->shape.size() == 2 ? static_cast<std::int32_t>(emb->shape[0]) : 0;
  c.shared_classifier = f.find("output.weight") == nullptr;
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.seq_len <= 0 || c.vocab_size <= 0)
    return make_error(Errc::invalid_argument, "{}: not a LLaMA model with the llama.* keys a llama2.c checkpoint needs",
                      f.name());
  return c;
}

// ---- writers ---------------------------------------------------------------------------

namespace {
Result<std::uint64_t> out_bytes(const TensorOut& t) {
  std::uint64_t count = 1;
  for (auto d : t.shape) {
    if (d < 0) return make_error(Errc::invalid_argument, "tensor '{}': negative dimension", t.name);
    count *= static_cast<std::uint64_t>(d);
  }
  auto nb = tensor_bytes(t.dtype, count, t.shape.empty() ? 1 : static_cast<std::uint64_t>(t.shape.back()));
  if (!nb)
    return make_error(Errc::invalid_argument, "tensor '{}': rows are not whole blocks of {}", t.name,
                      dtype_name(t.dtype));
  return *nb;
}

Status write_all(const std::string& path, const std::vector<std::string_view>& parts) {
  LMP_ASSIGN(auto out, io::AtomicFile::create(path));
  for (auto p : parts) LMP_TRY(out->write(p));
  return out->commit();
}

std::string_view bytes_of(const TensorOut& t, std::uint64_t n) { return {static_cast<const char*>(t.data), n}; }
}  // namespace

Result<std::string> npy_bytes(const TensorOut& t) {
  static constexpr std::pair<DType, std::string_view> kDescr[] = {
      {DType::f32, "<f4"}, {DType::f16, "<f2"}, {DType::f64, "<f8"}, {DType::i32, "<i4"},
      {DType::i64, "<i8"}, {DType::i16, "<i2"}, {DType::i8, "|i1"},  {DType::u8, "|u1"}};
  std::string_view descr;
  for (auto& [d, s] : kDescr)
    if (d == t.dtype) descr = s;
  if (descr.empty())
    return make_error(Errc::unsupported, ".npy has no {} type (use f32, f16 or an integer type)", dtype_name(t.dtype));
  LMP_ASSIGN(auto n, out_bytes(t));
  std::string o;
  npy::append_header(o, descr, t.shape);
  o.append(bytes_of(t, n));
  return o;
}

Status write_npy(const std::string& path, const TensorOut& t) {
  LMP_ASSIGN(auto b, npy_bytes(t));
  return io::write_file_atomic(path, b);
}

Status write_safetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                         const std::vector<std::pair<std::string, std::string>>& metadata) {
  static constexpr std::pair<DType, std::string_view> kTypes[] = {
      {DType::f32, "F32"}, {DType::f16, "F16"}, {DType::bf16, "BF16"}, {DType::f64, "F64"}, {DType::i32, "I32"},
      {DType::i64, "I64"}, {DType::i16, "I16"}, {DType::i8, "I8"},     {DType::u8, "U8"}};
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (std::size_t i = 0; i < metadata.size(); ++i) {
      if (i) h += ",";
      json::append_string(h, metadata[i].first);
      h += ":";
      json::append_string(h, metadata[i].second);
    }
    h += "}";
  }
  std::uint64_t off = 0;
  std::vector<std::string_view> parts{std::string_view{}, std::string_view{}};
  for (const auto& t : tensors) {
    std::string_view ty;
    for (auto& [d, s] : kTypes)
      if (d == t.dtype) ty = s;
    if (ty.empty()) return make_error(Errc::unsupported, "safetensors has no {} type (tensor '{}')", dtype_name(t.dtype), t.name);
    LMP_ASSIGN(auto n, out_bytes(t));
    if (h.size() > 1) h += ",";
    json::append_string(h, t.name);
    h += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[", ty);
    for (std::size_t d = 0; d < t.shape.size(); ++d) h += fmt::format("{}{}", d ? "," : "", t.shape[d]);
    h += fmt::format("],\"data_offsets\":[{},{}]}}", off, off + n);
    off += n;
    parts.push_back(bytes_of(t, n));
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');  // the data starts 8-aligned, as the reference writer pads
  std::string len(8, '\0');
  std::uint64_t hl = h.size();
  std::memcpy(len.data(), &hl, 8);
  parts[0] = len;
  parts[1] = h;
  return write_all(path, parts);
}

namespace {
void put_str(std::string& o, std::string_view s) {
  std::uint64_t n = s.size();
  o.append(reinterpret_cast<const char*>(&n), 8);
  o.append(s);
}
template <class T>
void put(std::string& o, T v) {
  o.append(reinterpret_cast<const char*>(&v), sizeof v);
}
Status put_value(std::string& o, const MetaValue& v, bool with_type) {
  if (with_type) put(o, static_cast<std::uint32_t>(v.type));
  switch (v.type) {
    case MetaType::u8: case MetaType::boolean: put(o, static_cast<std::uint8_t>(v.u)); break;
    case MetaType::i8: put(o, static_cast<std::int8_t>(v.i)); break;
    case MetaType::u16: put(o, static_cast<std::uint16_t>(v.u)); break;
    case MetaType::i16: put(o, static_cast<std::int16_t>(v.i)); break;
    case MetaType::u32: put(o, static_cast<std::uint32_t>(v.u)); break;
    case MetaType::i32: put(o, static_cast<std::int32_t>(v.i)); break;
    case MetaType::u64: put(o, v.u); break;
    case MetaType::i64: put(o, v.i); break;
    case MetaType::f32: put(o, static_cast<float>(v.f)); break;
    case MetaType::f64: put(o, v.f); break;
    case MetaType::string: put_str(o, v.s); break;
    case MetaType::array:
      put(o, static_cast<std::uint32_t>(v.elem));
      put(o, static_cast<std::uint64_t>(v.items.size()));
      for (const auto& it : v.items) {
        if (it.type != v.elem)
          return make_error(Errc::invalid_argument, "array of {} holds a {}", meta_type_name(v.elem),
                            meta_type_name(it.type));
        LMP_TRY(put_value(o, it, false));
      }
      break;
  }
  return {};
}
}  // namespace

Status write_gguf(const std::string& path, const std::vector<std::pair<std::string, MetaValue>>& metadata,
                  const std::vector<TensorOut>& tensors) {
  std::uint64_t align = 32;
  for (const auto& [k, v] : metadata)
    if (k == "general.alignment") {
      if (v.type != MetaType::u32 || v.u == 0 || (v.u & (v.u - 1)))
        return make_error(Errc::invalid_argument, "general.alignment must be a u32 power of two");
      align = v.u;
    }
  std::string h = "GGUF";
  put(h, std::uint32_t{3});
  put(h, static_cast<std::uint64_t>(tensors.size()));
  put(h, static_cast<std::uint64_t>(metadata.size()));
  for (const auto& [k, v] : metadata) {
    put_str(h, k);
    if (auto st = put_value(h, v, true); !st) return with_context(std::move(st).error(), "metadata '" + k + "'");
  }
  std::uint64_t off = 0;
  std::vector<std::uint64_t> sizes;
  for (const auto& t : tensors) {
    if (t.name.size() > 64) return make_error(Errc::invalid_argument, "tensor name '{}' is over 64 bytes", t.name);
    if (t.shape.size() > 4) return make_error(Errc::invalid_argument, "tensor '{}' has over 4 dimensions", t.name);
    std::uint32_t id = 0;
    bool known = false;
    for (const auto& g : kGgmlTypes)
      if (g.dtype == t.dtype) {
        id = g.id;
        known = true;
      }
    if (!known) return make_error(Errc::unsupported, "GGUF has no {} type", dtype_name(t.dtype));
    LMP_ASSIGN(auto n, out_bytes(t));
    put_str(h, t.name);
    put(h, static_cast<std::uint32_t>(t.shape.size()));
    for (std::size_t d = t.shape.size(); d-- > 0;) put(h, static_cast<std::uint64_t>(t.shape[d]));  // ggml order
    put(h, id);
    put(h, off);
    sizes.push_back(n);
    off += (n + align - 1) / align * align;
  }
  LMP_ASSIGN(auto out, io::AtomicFile::create(path));
  LMP_TRY(out->write(h));
  LMP_TRY(out->write(std::string((align - h.size() % align) % align, '\0')));
  std::vector<std::byte> buf;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorOut& t = tensors[i];
    if (t.data) {
      LMP_TRY(out->write(bytes_of(t, sizes[i])));
    } else if (t.fill) {
      buf.assign(sizes[i], std::byte{0});
      t.fill(buf.data());
      LMP_TRY(out->write(std::string_view(reinterpret_cast<const char*>(buf.data()), buf.size())));
    } else {
      return make_error(Errc::invalid_argument, "tensor '{}' has neither data nor a fill function", t.name);
    }
    // Each tensor's data is padded to the alignment, the last one too (ggml pads the data size).
    LMP_TRY(out->write(std::string((align - sizes[i] % align) % align, '\0')));
  }
  return out->commit();
}

Status write_llama2c(const std::string& path, const TensorFile& f) {
  LMP_ASSIGN(auto c, llama2c_config(f));
  std::string h;
  for (std::int32_t v : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                         c.shared_classifier ? c.vocab_size : -c.vocab_size, c.seq_len})
    put(h, v);
  std::vector<std::string_view> parts{h};
  std::vector<std::string> zero_tables;
  for (const auto& t : Parsers::l2c_layout(c)) {
    const TensorInfo* ti = f.find(t.name);
    std::uint64_t want = 4;
    for (auto d : t.shape) want *= static_cast<std::uint64_t>(d);
    if (!ti && t.name.rfind("rope_freqs.", 0) == 0) {  // run.c skips them: zeros will do
      zero_tables.emplace_back(want, '\0');
      parts.push_back(zero_tables.back());
      continue;
    }
    if (!ti) return make_error(Errc::invalid_argument, "{}: no tensor '{}' for the llama2.c checkpoint", f.name(), t.name);
    if (ti->dtype != DType::f32 || ti->shape != t.shape)
      return make_error(Errc::invalid_argument, "{}: tensor '{}' must be f32 of shape [{}] for llama2.c", f.name(),
                        t.name, fmt::join(t.shape, ", "));
    parts.emplace_back(reinterpret_cast<const char*>(f.data(*ti)), ti->nbytes);
  }
  return write_all(path, parts);
}

Result<Llama2cVocab> read_llama2c_tokenizer(const std::string& path, std::size_t vocab_size) {
  LMP_ASSIGN(auto map, MappedFile::open(path));
  Reader r{map.view(), map.name()};
  Llama2cVocab v;
  r.what = "tokenizer.bin header";
  LMP_ASSIGN(v.max_token_length, r.get<std::uint32_t>());
  if (vocab_size > r.left() / 8)
    return r.err(fmt::format("{} tokens (the model's vocabulary) cannot fit in the {} bytes left", vocab_size, r.left()), 4);
  v.tokens.reserve(vocab_size);
  v.scores.reserve(vocab_size);
  for (std::size_t k = 0; k < vocab_size; ++k) {
    r.what = fmt::format("token {}", k);
    LMP_ASSIGN(auto score, r.get<float>());
    std::size_t at = r.pos;
    LMP_ASSIGN(auto len, r.get<std::int32_t>());
    if (len < 0 || static_cast<std::size_t>(len) > r.left())
      return r.err(fmt::format("length {} with {} bytes left", len, r.left()), at);
    v.tokens.emplace_back(r.buf.substr(r.pos, static_cast<std::size_t>(len)));
    r.pos += static_cast<std::size_t>(len);
    v.scores.push_back(score);
  }
  if (r.left() != 0)
    return make_error(Errc::parse, "{}: {} bytes after the {} tokens of the model's vocabulary (another model's tokenizer?)",
                      map.name(), r.left(), vocab_size);
  return v;
}

Status write_llama2c_tokenizer(const std::string& path, const Llama2cVocab& v) {
  std::string o;
  put(o, v.max_token_length);
  for (std::size_t k = 0; k < v.tokens.size(); ++k) {
    put(o, k < v.scores.size() ? v.scores[k] : 0.0f);
    put(o, static_cast<std::int32_t>(v.tokens[k].size()));
    o += v.tokens[k];
  }
  return io::write_file_atomic(path, o);
}

}  // namespace lmp::tensor_io
