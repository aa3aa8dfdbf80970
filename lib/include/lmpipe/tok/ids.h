// Token ids as text (docs/formats.md): one sequence per line, ids separated by spaces.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lmpipe/core/result.h"
#include "lmpipe/tok/types.h"

namespace lmp::tok {

// Parse one line of ids into `ids` (cleared first); `name` and `line_no` locate errors.
Status parse_id_line(std::string_view line, const std::string& name, std::size_t line_no, std::vector<TokenId>& ids);

// Every id of a text or .npy (a stream of int32/int64 arrays) input, in order.
Status parse_ids(std::string_view buf, const std::string& name, std::vector<TokenId>& ids);

}  // namespace lmp::tok
