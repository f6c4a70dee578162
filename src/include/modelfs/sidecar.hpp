// SPDX-License-Identifier: Apache-2.0
#pragma once
// The JSON sidecar beside every tensor file (docs/design.md, "The sidecar"):
// name, dtype, shape, strides, nbytes, byte_order, numpy, npy (what the
// .npy holds: {"dtype", "from", "exact"}), format, source, then the
// format's extras. Keys keep this order so `cat P.json` reads well.
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "modelfs/catalog.hpp"
#include "modelfs/npy.hpp"
#include "modelfs/tensor_record.hpp"

namespace modelfs {

nlohmann::ordered_json sidecar_json(const Tensor& tensor, std::string_view format);
// With what the tree made of its .npy (none: no .npy) in place of what
// npy_content judges from the tensor alone.
nlohmann::ordered_json sidecar_json(const Tensor& tensor, std::string_view format,
                                    const std::optional<NpyContent>& npy);
// The file's content: one key per line (see json_text.hpp).
std::string sidecar_text(const Tensor& tensor, std::string_view format);

// The lines the format's extras add after "source", printed once so that a
// tree can keep them as text rather than as parsed JSON (a heap node per
// value, where text is a few bytes each). None when an extra reuses a
// fixed key: it then replaces that key in place, and only sidecar_json
// prints it.
std::optional<std::string> sidecar_extras_lines(const nlohmann::json& extras);
// The file's content from what a tree keeps of the tensor.
std::string sidecar_text(const TensorRecord& tensor, std::string_view format);

}  // namespace modelfs
