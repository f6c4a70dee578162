// SPDX-License-Identifier: Apache-2.0
#include "formats/string_lines.hpp"

#include "io/budget_charge.hpp"
#include "io/json_text.hpp"

namespace modelfs {

StringLines::Text StringLines::write(uint64_t count, const Element& element) {
  const uint64_t left = cap_ - used_;
  std::string out;
  uint64_t length = 0;  // an element takes at most seven bytes of text per byte stored: no overflow
  bool fits = true;
  for (uint64_t i = 0; i < count; ++i) {
    if (i % 4096 == 0) check_budget();
    const std::string_view bytes = element(i);
    length += json_bytes_length(bytes) + 1;
    if (fits && length > left) {
      fits = false;
      std::string().swap(out);  // given back: none of it is served
    }
    if (!fits) continue;
    append_json_bytes(out, bytes);
    out += '\n';
  }
  Text text;
  text.length = length;
  if (fits) {
    used_ += length;
    text.lines = std::move(out);
  }
  return text;
}

std::string StringLines::over_cap(uint64_t length) const {
  return "its strings as JSON Lines take " + std::to_string(length) + " bytes, over the " +
         std::to_string(cap_ - used_) + " left of the " + std::to_string(cap_) +
         "-byte limit on a model's string tensors";
}

}  // namespace modelfs
