// SPDX-License-Identifier: Apache-2.0
#include "tree/naming.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace modelfs {
namespace {

uint64_t fnv1a64(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// Length of the longest prefix of at most `limit` bytes that does not cut a
// UTF-8 sequence in two.
size_t utf8_prefix(std::string_view text, size_t limit) {
  if (text.size() <= limit) return text.size();
  size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

}  // namespace

std::string escape_component(std::string_view component) {
  if (component.empty()) return "%";
  if (component == ".") return "%2E";
  if (component == "..") return "%2E%2E";
  std::string out;
  out.reserve(component.size());
  for (char c : component) {
    switch (c) {
      case '%':
        out += "%25";
        break;
      case '\0':
        out += "%00";
        break;
      case '/':
        out += "%2F";
        break;
      default:
        out += c;
    }
  }
  if (out.size() > kMaxComponentBytes) {
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a64(component)));
    out = out.substr(0, utf8_prefix(out, 200)) + "%%" + hash;
  }
  return out;
}

std::vector<std::string> escaped_components(std::string_view text, std::string_view separators) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t end = std::min(text.find_first_of(separators, start), text.size());
    parts.push_back(escape_component(text.substr(start, end - start)));
    if (end == text.size()) return parts;
    start = end + 1;
  }
}

std::vector<std::string> tensor_path_components(std::string_view name, bool flat) {
  if (flat) return {escape_component(name)};
  return escaped_components(name, "./");
}

}  // namespace modelfs
