// SPDX-License-Identifier: Apache-2.0
#pragma once
// The safetensors format's dtype codes, for its reader and for the tree's
// export (model.safetensors).
#include <optional>
#include <string_view>

#include "modelfs/dtype.hpp"

namespace modelfs {

// The safetensors dtype string ("F32", "BF16", "F8_E4M3", ...) where the
// format has the type, and its inverse.
std::optional<std::string_view> safetensors_dtype(DType dtype) noexcept;
std::optional<DType> dtype_from_safetensors(std::string_view code) noexcept;

}  // namespace modelfs
