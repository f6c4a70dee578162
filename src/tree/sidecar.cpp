// SPDX-License-Identifier: Apache-2.0
#include "modelfs/sidecar.hpp"

#include "modelfs/json_text.hpp"

namespace modelfs {

nlohmann::ordered_json sidecar_json(const Tensor& tensor, std::string_view format) {
  return sidecar_json(tensor, format, npy_content(tensor));
}

nlohmann::ordered_json sidecar_json(const Tensor& tensor, std::string_view format,
                                    const std::optional<NpyContent>& npy) {
  nlohmann::ordered_json out;
  out["name"] = tensor.name;
  out["dtype"] = tensor.dtype_name();
  out["shape"] = tensor.shape;
  out["strides"] = tensor.strides;
  out["nbytes"] = tensor.bytes.size();
  out["byte_order"] = "little";
  if (auto descr = numpy_descr(tensor.dtype)) out["numpy"] = *descr;
  if (npy) {
    nlohmann::ordered_json content;
    content["dtype"] = dtype_name(npy->dtype);
    content["from"] = npy->from;
    content["exact"] = npy->exact;
    out["npy"] = content;
  }
  out["format"] = format;
  nlohmann::ordered_json source;
  source["file"] = tensor.source.file;
  if (tensor.source.offset) source["offset"] = *tensor.source.offset;
  out["source"] = source;
  for (const auto& [key, value] : tensor.extras.items()) out[key] = value;
  return out;
}

std::optional<std::string> sidecar_extras_lines(const nlohmann::json& extras) {
  static constexpr std::string_view kFixedKeys[] = {"name",       "dtype", "shape",  "strides", "nbytes",
                                                    "byte_order", "numpy", "npy", "format", "source"};
  std::string out;
  for (const auto& [key, value] : extras.items()) {
    // An extra that reuses a fixed key replaces it in place: the general path.
    for (auto fixed : kFixedKeys)
      if (key == fixed) return std::nullopt;
    out += ",\n  ";
    append_json_string(out, key);
    out += ": ";
    out += nlohmann::ordered_json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return out;
}

std::string sidecar_text(const TensorRecord& tensor, std::string_view format) {
  if (tensor.sidecar_printed_whole) return std::string(tensor.extras_lines);
  // The same text as readable_json(sidecar_json(...)), printed directly.
  std::string out;
  out.reserve(256 + tensor.name.size() + tensor.extras_lines.size());
  out += "{\n  \"name\": ";
  append_json_string(out, tensor.name);
  out += ",\n  \"dtype\": ";
  append_json_string(out, tensor.dtype_name);
  out += ",\n  \"shape\": ";
  append_json_array(out, tensor.shape);
  out += ",\n  \"strides\": ";
  append_json_array(out, tensor.strides);
  out += ",\n  \"nbytes\": " + std::to_string(tensor.nbytes);
  out += ",\n  \"byte_order\": \"little\"";
  if (auto descr = numpy_descr(tensor.dtype)) {
    out += ",\n  \"numpy\": ";
    append_json_string(out, *descr);
  }
  if (tensor.npy_dtype) {
    out += ",\n  \"npy\": {\"dtype\":";
    append_json_string(out, dtype_name(*tensor.npy_dtype));
    out += ",\"from\":";
    append_json_string(out, tensor.npy_from);
    out += tensor.npy_exact ? ",\"exact\":true}" : ",\"exact\":false}";
  }
  out += ",\n  \"format\": ";
  append_json_string(out, format);
  out += ",\n  \"source\": {\"file\":";
  append_json_string(out, tensor.source_file);
  if (tensor.source_offset) out += ",\"offset\":" + std::to_string(*tensor.source_offset);
  out += "}";
  out += tensor.extras_lines;
  out += "\n}\n";
  return out;
}

std::string sidecar_text(const Tensor& tensor, std::string_view format) {
  auto lines = sidecar_extras_lines(tensor.extras);
  if (!lines) return readable_json(sidecar_json(tensor, format));
  TensorRecord record = record_of(tensor);
  record.extras_lines = *lines;
  if (auto npy = npy_content(tensor)) {
    record.npy_dtype = npy->dtype;
    record.npy_from = npy->from;
    record.npy_exact = npy->exact;
  }
  return sidecar_text(record, format);
}

}  // namespace modelfs
