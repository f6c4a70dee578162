#include "modelfs/sidecar.hpp"

#include "modelfs/json_text.hpp"

namespace modelfs {

nlohmann::ordered_json sidecar_json(const Tensor& tensor, std::string_view format) {
  nlohmann::ordered_json out;
  out["name"] = tensor.name;
  out["dtype"] = tensor.dtype_name();
  out["shape"] = tensor.shape;
  out["strides"] = tensor.strides;
  out["nbytes"] = tensor.bytes.size();
  out["byte_order"] = "little";
  if (auto descr = numpy_descr(tensor.dtype)) out["numpy"] = *descr;
  out["format"] = format;
  nlohmann::ordered_json source;
  source["file"] = tensor.source.file;
  if (tensor.source.offset) source["offset"] = *tensor.source.offset;
  out["source"] = source;
  for (const auto& [key, value] : tensor.extras.items()) out[key] = value;
  return out;
}

std::string sidecar_text(const Tensor& tensor, std::string_view format) {
  return readable_json(sidecar_json(tensor, format));
}

}  // namespace modelfs
