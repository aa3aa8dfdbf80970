// GPT-2's byte ↔ unicode mapping (HF ByteLevel): every byte is shown as a printable
// character so that vocabularies can be stored as text. Bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF map to themselves; the other 68 map, in increasing order, to U+0100...
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lmp::tok {

// The code point that stands for byte b.
std::uint32_t byte_to_unicode(unsigned char b);
// The byte a code point stands for, if it is one of the 256.
std::optional<unsigned char> unicode_to_byte(std::uint32_t cp);
// Raw bytes → their byte-level text (UTF-8).
std::string bytes_to_byte_level(std::string_view bytes);
// Byte-level text → raw bytes; nullopt when a character is not one of the 256.
std::optional<std::string> byte_level_to_bytes(std::string_view text);
// The same into `out` (its buffer reused); false, with `out` unspecified, on failure.
bool byte_level_to_bytes(std::string_view text, std::string& out);
// The byte each code point below 512 stands for, or -1 (512 entries): for loops that
// decode byte-level text inline.
const std::int16_t* byte_level_decode_table();
// The same into `out`, which has room for text.size() bytes (never more are written):
// the number of bytes, or -1 when a character is not one of the 256.
std::ptrdiff_t byte_level_to_bytes(std::string_view text, char* out);

}  // namespace lmp::tok
