#include "lmpipe/tensor_io/npy_stream.h"

#include "lmpipe/core/npy.h"

namespace lmp::tensor_io {

std::uint64_t NpyArray::count() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::optional<DType> npy_dtype(std::string_view d) {
  static constexpr std::pair<std::string_view, DType> kDescr[] = {
      {"<f4", DType::f32}, {"<f2", DType::f16}, {"<f8", DType::f64}, {"<i4", DType::i32}, {"<i8", DType::i64},
      {"<i2", DType::i16}, {"|i1", DType::i8},  {"|u1", DType::u8},  {"|i4", DType::i32}, {"|i8", DType::i64}};
  for (auto& [s, t] : kDescr)
    if (s == d) return t;
  return std::nullopt;
}

Result<std::unique_ptr<NpyStreamReader>> NpyStreamReader::open(const std::string& path) {
  std::unique_ptr<NpyStreamReader> r(new NpyStreamReader());
  LMP_ASSIGN(r->reader_, io::ChunkReader::open(path));
  return r;
}

std::unique_ptr<NpyStreamReader> NpyStreamReader::from(std::unique_ptr<io::ChunkReader> reader, std::string head) {
  std::unique_ptr<NpyStreamReader> r(new NpyStreamReader());
  r->reader_ = std::move(reader);
  r->buf_ = std::move(head);
  return r;
}

Result<bool> NpyStreamReader::fill() {
  if (eof_) return false;
  if (pos_ > 0) {  // drop what was handed out: one move per read, not per array
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  std::string more;
  LMP_ASSIGN(bool got, reader_->next_bytes(more, std::size_t{1} << 20));
  if (!got) {
    eof_ = true;
    return false;
  }
  buf_ += more;
  return true;
}

Result<bool> NpyStreamReader::next(NpyArray& out) {
  npy::Header h;
  for (;;) {
    if (buf_.size() == pos_ && eof_) return false;
    bool incomplete = false;
    auto r = npy::parse_header(std::string_view(buf_).substr(pos_), name(), consumed_, eof_, &incomplete);
    if (!r) return std::move(r).error();
    if (!incomplete) {
      h = std::move(r).value();
      break;
    }
    LMP_ASSIGN(bool got, fill());
    if (!got && buf_.size() == pos_) return false;  // a clean end between arrays
  }
  if (h.fortran_order) return make_error(Errc::unsupported, "{}: array at byte {}: Fortran order is not supported", name(), consumed_);
  auto dt = npy_dtype(h.descr);
  if (!dt) return make_error(Errc::unsupported, "{}: array at byte {}: dtype '{}' is not supported", name(), consumed_, h.descr);
  const std::size_t total = h.header_bytes + h.data_bytes;
  while (buf_.size() - pos_ < total) {
    LMP_ASSIGN(bool got, fill());
    if (!got)
      return make_error(Errc::parse, "{}: array at byte {}: truncated: the header announces {} bytes of data, {} followed",
                        name(), consumed_, h.data_bytes, buf_.size() - pos_ - h.header_bytes);
  }
  out.dtype = *dt;
  out.shape = h.shape;
  out.data.assign(buf_, pos_ + h.header_bytes, h.data_bytes);
  out.index = ++index_;
  out.offset = consumed_;
  pos_ += total;
  consumed_ += total;
  return true;
}

}  // namespace lmp::tensor_io
