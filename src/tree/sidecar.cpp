// SPDX-License-Identifier: Apache-2.0
#include "modelfs/sidecar.hpp"

#include "modelfs/json_text.hpp"

namespace modelfs {

std::string sidecar_text(const Tensor& tensor, std::string_view format,
                         const std::optional<NpyContent>& npy) {
  std::string out;
  out.reserve(256 + tensor.name.size() + tensor.extras_lines.size());
  out += "{\n  \"name\": ";
  append_json_string(out, tensor.name);
  out += ",\n  \"dtype\": ";
  append_json_string(out, tensor.dtype_name());
  out += ",\n  \"shape\": ";
  append_json_array(out, tensor.shape);
  out += ",\n  \"strides\": ";
  append_json_array(out, tensor.strides);
  out += ",\n  \"nbytes\": " + std::to_string(tensor.nbytes());
  out += ",\n  \"byte_order\": \"little\"";
  if (auto descr = numpy_descr(tensor.dtype)) {
    out += ",\n  \"numpy\": ";
    append_json_string(out, *descr);
  }
  if (npy) {
    out += ",\n  \"npy\": {\"dtype\":";
    append_json_string(out, dtype_name(npy->dtype));
    out += ",\"from\":";
    append_json_string(out, npy->from);
    out += npy->exact ? ",\"exact\":true}" : ",\"exact\":false}";
  }
  out += ",\n  \"format\": ";
  append_json_string(out, format);
  out += ",\n  \"source\": {\"file\":";
  append_json_string(out, tensor.source.file);
  if (tensor.source.offset) out += ",\"offset\":" + std::to_string(*tensor.source.offset);
  out += "}";
  out += tensor.extras_lines;
  out += "\n}\n";
  return out;
}

}  // namespace modelfs
