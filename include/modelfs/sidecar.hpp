#pragma once
// The JSON sidecar beside every tensor file (design.md, "The sidecar"):
// name, dtype, shape, strides, nbytes, byte_order, numpy, format, source,
// then the format's extras. Keys keep this order so `cat P.json` reads well.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "modelfs/catalog.hpp"

namespace modelfs {

nlohmann::ordered_json sidecar_json(const Tensor& tensor, std::string_view format);
// The file's content: one key per line (see json_text.hpp).
std::string sidecar_text(const Tensor& tensor, std::string_view format);

}  // namespace modelfs
