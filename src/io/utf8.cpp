// SPDX-License-Identifier: Apache-2.0
#include "io/utf8.hpp"

namespace modelfs {

std::optional<Utf8Char> decode_utf8(std::string_view text) {
  if (text.empty()) return std::nullopt;
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return Utf8Char{lead, 1};
  size_t length;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  char32_t value;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    value = lead & 0x0F;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    value = lead & 0x07;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return std::nullopt;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return std::nullopt;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return std::nullopt;
    value = (value << 6) | (byte(i) & 0x3F);
  }
  return Utf8Char{value, length};
}

std::optional<uint64_t> latin1_size(std::string_view text) noexcept {
  uint64_t bytes = 0;
  for (size_t i = 0; i < text.size(); ++bytes) {
    const auto lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    if ((lead != 0xC2 && lead != 0xC3) || i + 1 >= text.size() ||
        (static_cast<unsigned char>(text[i + 1]) & 0xC0) != 0x80)
      return std::nullopt;
    i += 2;
  }
  return bytes;
}

}  // namespace modelfs
