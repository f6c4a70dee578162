// SPDX-License-Identifier: Apache-2.0
#pragma once
// How modelfs prints the JSON files it makes (sidecars, index.json,
// metadata.json): one top-level key per line, values compact, and arrays of
// objects one element per line — readable with cat, greppable line by line,
// and small even for 100 000 tensors. Invalid UTF-8 in names (binary formats
// may store any bytes) is replaced, never thrown on.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace modelfs {

std::string readable_json(const nlohmann::ordered_json& value);
// readable_json of {"format": format, "files": files, then every key of
// `metadata`} (metadata.json), printed from `metadata` where it is, with no
// ordered copy of it.
std::string readable_metadata(const std::string& format, const std::vector<std::string>& files,
                              const nlohmann::json& metadata);

// Appends `text` as a JSON string, exactly as readable_json prints it. The
// tree prints one sidecar and one index line per tensor, so these direct
// appenders replace building a JSON object for each (a heap node per value,
// made and freed for every tensor).
void append_json_string(std::string& out, std::string_view text);
// Appends `bytes` as a JSON string that gives them back exactly: well-formed
// UTF-8 as it is (`"`, `\` and control characters escaped as JSON does),
// and every byte that is not part of well-formed UTF-8 as the lone
// surrogate \udcXX, XX its value (80-ff; Python's "surrogateescape", PEP
// 383). No well-formed UTF-8 encodes a surrogate, so nothing is ambiguous:
// in Python, json.loads(text).encode("utf-8", "surrogateescape") == bytes.
void append_json_bytes(std::string& out, std::string_view bytes);
// What a sidecar says of the raw file of a string tensor (DType::String),
// one append_json_bytes line per element.
inline constexpr std::string_view kJsonLinesText =
    "JSON Lines: one JSON string per element, in C order; a byte that is not UTF-8 is \\udcXX";
// The length append_json_bytes would add, without making the text.
size_t json_bytes_length(std::string_view bytes);

// True when `value` is a non-empty array whose elements are all objects or
// arrays: readable_json prints such a list one element a line.
template <typename Json>
bool is_list_of_containers(const Json& value) {
  if (!value.is_array() || value.empty()) return false;
  for (const auto& element : value)
    if (!element.is_structured()) return false;
  return true;
}

// One top-level member as readable_json prints it, after "{\n  " (the
// first) or ",\n  ": `"key": ` and the value, a list one element a line
// when `one_per_line`, else compact. `value(out, item)` prints each compact
// value, so the same layout serves files (readable_json) and the terminal
// (--info, which shortens long arrays). `Out` is anything that text is
// appended to with +=.
template <typename Out, typename Json, typename Value>
void append_member(Out& out, bool first, std::string_view key, const Json& item, bool one_per_line,
                   Value&& value) {
  std::string quoted = first ? "{\n  " : ",\n  ";
  append_json_string(quoted, key);
  quoted += ": ";
  out += quoted;
  if (!one_per_line) {
    value(out, item);
    return;
  }
  out += "[\n";
  for (size_t i = 0; i < item.size(); ++i) {
    out += "    ";
    value(out, item[i]);
    out += i + 1 < item.size() ? ",\n" : "\n";
  }
  out += "  ]";
}

// Appends "[a,b,c]" (a vector or span of integers).
template <typename Integers>
void append_json_array(std::string& out, const Integers& values) {
  out += '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(values[i]);
  }
  out += ']';
}

}  // namespace modelfs
