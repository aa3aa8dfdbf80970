#pragma once

#include <cstdint>
#include <string_view>

namespace lmp {
using TokenId = std::int32_t;

namespace tok {
// U+2581 LOWER ONE EIGHTH BLOCK, "▁": SentencePiece's (and HF Metaspace's) space.
inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";
}  // namespace tok
}  // namespace lmp
