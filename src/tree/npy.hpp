// SPDX-License-Identifier: Apache-2.0
#pragma once
// NumPy .npy headers (docs/formats.md, "NumPy .npy headers") for the .npy views: magic, version,
// header length, then the dict literal padded with spaces and '\n' so the
// data that follows starts 64-byte aligned, as numpy's own writer does.
// The data itself is never copied: the view is this header followed by the
// tensor's mapped bytes, or by its values converted for each read
// (numeric_views.hpp in the tree).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "io/checked_math.hpp"
#include "modelfs/catalog.hpp"
#include "modelfs/tree.hpp"

namespace modelfs {

// How many bytes a computed view of a tensor (its .npy, its part of the
// export file) may have. A view widens values (bfloat16 to float32, ggml
// blocks to float32: a few tens of times at most) and may repeat them (an
// expand(): stride 0), so it may be larger than the bytes it reads; but a
// few stored bytes claiming terabytes would make a tiny file a terabyte
// copy (cp -r, the export). A view may have `floor` bytes
// whatever it stores, and past that at most `growth` times what it stores;
// beyond it the .npy is not made and the export leaves the tensor out,
// saying why in export.json.
struct ViewBound {
  uint64_t floor;
  uint64_t growth;
  constexpr bool allows(uint64_t view_bytes, uint64_t stored_bytes) const noexcept {
    const auto most = Size(stored_bytes) * growth;
    return view_bytes <= floor || !most.ok() || view_bytes <= *most.get();
  }
};
inline constexpr ViewBound kViewBound{uint64_t{1} << 30, 1024};

// What the .npy of `tensor` holds, judged from the tensor alone (the tree
// may still make none, or fall back to the stored integers of a quantized
// tensor whose parameters it cannot find); none where there is no .npy.
// `from` views the tensor.
std::optional<NpyContent> npy_content(const Tensor& tensor);

// Version 1.0 when the header fits a u16 length, 2.0 otherwise.
std::string npy_header(std::string_view descr, std::span<const uint64_t> shape, bool fortran_order);

}  // namespace modelfs
