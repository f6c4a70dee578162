// SPDX-License-Identifier: Apache-2.0
#include "modelfs/naming.hpp"

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
      case '%': out += "%25"; break;
      case '\0': out += "%00"; break;
      case '/': out += "%2F"; break;
      default: out += c;
    }
  }
  if (out.size() > kMaxComponentBytes) {
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx",
                  static_cast<unsigned long long>(fnv1a64(component)));
    out = out.substr(0, utf8_prefix(out, 200)) + "%%" + hash;
  }
  return out;
}

std::vector<std::string> tensor_path_components(std::string_view name, bool flat) {
  std::vector<std::string> parts;
  if (flat) {
    parts.push_back(escape_component(name));
    return parts;
  }
  size_t start = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.' || name[i] == '/') {
      parts.push_back(escape_component(name.substr(start, i - start)));
      start = i + 1;
    }
  }
  return parts;
}

}  // namespace modelfs
