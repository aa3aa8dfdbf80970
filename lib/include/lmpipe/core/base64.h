// Standard base64 (RFC 4648, "+/" with "=" padding): tokenizer.json's
// precompiled_charsmap and tiktoken's token bytes.
#pragma once

#include <string>
#include <string_view>

namespace lmp {

std::string base64_encode(std::string_view bytes);
// False on a character outside the alphabet or padding before the end; `out` holds the
// bytes decoded so far.
bool base64_decode(std::string_view text, std::string& out);

}  // namespace lmp
