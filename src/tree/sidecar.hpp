// SPDX-License-Identifier: Apache-2.0
#pragma once
// The JSON sidecar beside every tensor file (docs/design.md, "The sidecar"):
// the fixed keys (sidecar_keys.hpp; "npy" says what the .npy holds:
// {"dtype", "from", "exact"}), then the extras in key order, the typed
// fields' (the ggml type, a torch quantization) among the reader's. Keys
// keep this order so `cat P.json` reads well, one key a line (as
// json_text.hpp's readable_json prints).
#include <optional>
#include <string>
#include <string_view>

#include "modelfs/catalog.hpp"
#include "tree/npy.hpp"

namespace modelfs {

// The sidecar of `tensor`; `npy`: what its .npy holds (none: no .npy).
std::string sidecar_text(const Tensor& tensor, std::string_view format, const std::optional<NpyContent>& npy);

}  // namespace modelfs
