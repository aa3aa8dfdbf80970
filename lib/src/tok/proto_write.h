// Writing protobuf wire format (the SentencePiece ModelProto): varints, tags, and the
// length-delimited, varint and float fields. Shared by the trainer (which writes .model
// files) and the GGUF tokenizer loader (which builds one in memory).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace lmp::tok::proto {

inline void put_varint(std::string& o, std::uint64_t v) {
  while (v >= 0x80) {
    o += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  o += static_cast<char>(v);
}
inline void put_tag(std::string& o, int field, int wire) {
  put_varint(o, static_cast<std::uint64_t>(field) << 3 | static_cast<unsigned>(wire));
}
inline void put_bytes(std::string& o, int field, std::string_view v) {
  put_tag(o, field, 2);
  put_varint(o, v.size());
  o += v;
}
inline void put_varint_field(std::string& o, int field, std::uint64_t v) {
  put_tag(o, field, 0);
  put_varint(o, v);
}
inline void put_float(std::string& o, int field, float f) {
  put_tag(o, field, 5);
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  for (int k = 0; k < 4; ++k) o += static_cast<char>((bits >> (8 * k)) & 0xFF);
}

}  // namespace lmp::tok::proto
