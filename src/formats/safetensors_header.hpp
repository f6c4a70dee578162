// SPDX-License-Identifier: Apache-2.0
#pragma once
// The safetensors header's JSON, read in one streaming pass straight into
// tensor entries: no JSON document is built. A header as a DOM is several
// small allocations per entry (a map, a string per key, arrays), which would
// be most of the time and memory of mounting a model of many tensors.
//
// The rules are those of a DOM read (safetensors.cpp's checks on top of
// parse_json_limited): syntax errors first, then nesting and duplicate keys,
// then the first bad entry in key order, each with the same message.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "modelfs/dtype.hpp"

namespace modelfs::safetensors {

// One tensor entry of the header, its fields checked for type and dtype but
// not yet against its neighbours' offsets.
struct HeaderEntry {
  std::string name;
  DType dtype = DType::UInt8;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct Header {
  std::vector<HeaderEntry> entries;                    // in header order
  nlohmann::json metadata = nlohmann::json::object();  // "__metadata__"
};

// `text` is the header (file bytes [8, 8 + N)); `file` names it in errors.
// Throws ModelError at the header's byte (or the entry's key) at fault.
Header read_header(std::string_view text, const std::string& file);

// The file offset of `key`'s first appearance in the header (8, the
// header's start, if it has none): where a message about that key points.
// A linear search, so only on the way to an error, never per tensor.
uint64_t key_position(std::string_view text, const std::string& key);

}  // namespace modelfs::safetensors
