// SPDX-License-Identifier: Apache-2.0
#include "tree/sidecar.hpp"

#include <algorithm>

#include "io/json_text.hpp"
#include "io/pieces.hpp"
#include "io/sidecar_keys.hpp"

namespace modelfs {
namespace {

// ",\n  \"key\": ", a line's start.
void append_key(std::string& out, std::string_view key) {
  out += ",\n  ";
  append_json_string(out, key);
  out += ": ";
}

void append_key(std::string& out, SidecarKey key) { append_key(out, sidecar_key(key)); }

// The key of the first of the catalog's extras lines (",\n  \"key\": value"
// each), as printed: reader keys are plain names, which print as they are.
std::string_view first_key(std::string_view lines) {
  size_t end = 5;
  while (end < lines.size() && lines[end] != '"') end += lines[end] == '\\' ? 2 : 1;
  return lines.substr(5, end - 5);
}

// The extras in key order, as the catalog printed the reader's (its JSON
// object sorts them): the typed fields' lines among the reader's, each at
// its key's place. No line holds a newline (values are printed compact),
// so a line ends where the next ",\n  \"" begins.
void append_extras(std::string& out, const Tensor& tensor) {
  std::string_view lines = tensor.extras_lines;
  const nlohmann::json typed = tensor.typed_extras();
  for (const auto& [key, value] : typed.items()) {
    while (!lines.empty() && first_key(lines) < key) {
      const size_t next = std::min(lines.find(",\n  \"", 1), lines.size());
      out += lines.substr(0, next);
      lines.remove_prefix(next);
    }
    append_key(out, key);
    out += nlohmann::ordered_json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  out += lines;
}

}  // namespace

std::string sidecar_text(const Tensor& tensor, std::string_view format,
                         const std::optional<NpyContent>& npy) {
  std::string out;
  out.reserve(256 + tensor.name.size() + tensor.extras_lines.size());
  out += "{\n  ";
  append_json_string(out, sidecar_key(SidecarKey::Name));
  out += ": ";
  append_json_string(out, tensor.name);
  append_key(out, SidecarKey::DType);
  append_json_string(out, tensor.dtype_name());
  append_key(out, SidecarKey::Shape);
  append_json_array(out, tensor.shape);
  append_key(out, SidecarKey::Strides);
  append_json_array(out, tensor.strides);
  append_key(out, SidecarKey::NBytes);
  out += std::to_string(tensor.nbytes());
  append_key(out, SidecarKey::ByteOrder);
  out += "\"little\"";
  if (auto descr = numpy_descr(tensor.dtype)) {
    append_key(out, SidecarKey::Numpy);
    append_json_string(out, *descr);
  }
  if (npy) {
    append_key(out, SidecarKey::Npy);
    out += "{\"dtype\":";
    append_json_string(out, dtype_name(npy->dtype));
    out += ",\"from\":";
    append_json_string(out, npy->from);
    out += npy->exact ? ",\"exact\":true}" : ",\"exact\":false}";
  }
  append_key(out, SidecarKey::Format);
  append_json_string(out, format);
  append_key(out, SidecarKey::Source);
  out += "{\"file\":";
  append_json_string(out, tensor.source.file);
  if (tensor.source.offset) out += ",\"offset\":" + std::to_string(*tensor.source.offset);
  out += "}";
  if (!tensor.pieces.empty()) {
    append_key(out, SidecarKey::Pieces);
    append_pieces_json(out, tensor);
  }
  append_extras(out, tensor);
  out += "\n}\n";
  return out;
}

}  // namespace modelfs
