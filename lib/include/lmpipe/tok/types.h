#pragma once

#include <cstdint>

namespace lmp {
using TokenId = std::int32_t;
}  // namespace lmp
