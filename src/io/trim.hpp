// SPDX-License-Identifier: Apache-2.0
#pragma once
// Text without its leading and trailing blanks (space, tab, CR, LF): the
// numbers and names readers take from text records and attributes.
// Private to the library.
#include <string_view>

namespace modelfs {

inline std::string_view trim_blanks(std::string_view text) {
  constexpr std::string_view kBlanks = " \t\r\n";
  const auto first = text.find_first_not_of(kBlanks);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kBlanks) - first + 1);
}

}  // namespace modelfs
