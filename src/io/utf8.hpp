// SPDX-License-Identifier: Apache-2.0
#pragma once
// Well-formed UTF-8, as Unicode's table 3-7 defines it: no overlong forms,
// no surrogates, nothing past U+10FFFF. Model files may hold any bytes where
// text is expected; what is shown to a person (terminal_text.hpp) and what
// is printed losslessly as JSON (json_text.hpp) both decide by this.
#include <cstddef>
#include <optional>
#include <string_view>

namespace modelfs {

struct Utf8Char {
  char32_t code_point;
  size_t length;  // bytes, 1-4
};

// The character at the start of `text`, if it begins with a well-formed
// UTF-8 sequence (nothing for empty text).
std::optional<Utf8Char> decode_utf8(std::string_view text);

}  // namespace modelfs
