// SPDX-License-Identifier: Apache-2.0
#pragma once
// The sidecar's fixed keys (docs/design.md, "The sidecar"), in the order
// the printer (sidecar.hpp) writes them; the catalog refuses a reader's
// extra that reuses one.
#include <cstddef>
#include <string_view>

namespace modelfs {

enum class SidecarKey : size_t {
  Name,
  DType,
  Shape,
  Strides,
  NBytes,
  ByteOrder,
  Numpy,
  Npy,
  Format,
  Source,
  Pieces,
};

inline constexpr std::string_view kSidecarKeys[] = {"name",   "dtype",      "shape", "strides",
                                                    "nbytes", "byte_order", "numpy", "npy",
                                                    "format", "source",     "pieces"};

constexpr std::string_view sidecar_key(SidecarKey key) noexcept {
  return kSidecarKeys[static_cast<size_t>(key)];
}

}  // namespace modelfs
