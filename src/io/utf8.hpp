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

// UTF-8 text whose characters are all below U+0100 stands for the bytes
// of those codes (latin-1): how a protocol-2 pickle stores `bytes`. Each
// byte below 0x80 is itself; each other is 0xC2 or 0xC3, then a byte of
// 0x80..0xBF. The number of bytes `text` stands for, or nullopt when it is
// not such text.
std::optional<uint64_t> latin1_size(std::string_view text) noexcept;
// The byte the latin-1 character at `lead` (and `next`, when lead >= 0x80)
// stands for.
constexpr unsigned char latin1_byte(unsigned char lead, unsigned char next) noexcept {
  return lead < 0x80 ? lead : static_cast<unsigned char>(((lead & 0x03) << 6) | (next & 0x3F));
}

}  // namespace modelfs
