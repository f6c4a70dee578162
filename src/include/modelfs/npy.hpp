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

#include "modelfs/catalog.hpp"
#include "modelfs/tree.hpp"

namespace modelfs {

// What the .npy of `tensor` holds, judged from the tensor alone (the tree
// may still make none, or fall back to the stored integers of a quantized
// tensor whose parameters it cannot find); none where there is no .npy.
// `from` views the tensor.
std::optional<NpyContent> npy_content(const Tensor& tensor);

// Version 1.0 when the header fits a u16 length, 2.0 otherwise.
std::string npy_header(std::string_view descr, std::span<const uint64_t> shape,
                       bool fortran_order);

}  // namespace modelfs
