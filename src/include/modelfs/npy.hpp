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

namespace modelfs {

// What a tensor's .npy holds: its values as numpy's `dtype` (the stored
// type where numpy has it; else the nearest numpy type that holds them
// exactly or as the format defines them: float32 for bfloat16, the float8,
// float6 and float4 types and every dequantized type; int8/uint8 for the
// 2- and 4-bit integers), converted from `from` (the stored type's name:
// "bfloat16", "q4_k", torch's "qint8"). `exact`: every value is the stored
// one (the stored type itself, or a widening); false for dequantized types.
struct NpyContent {
  DType dtype = DType::Float32;
  std::string_view from;
  bool exact = true;
};

// What the .npy of `tensor` holds, judged from the tensor alone (the tree
// may still make none, or fall back to the stored integers of a quantized
// tensor whose parameters it cannot find); none where there is no .npy.
// `from` views the tensor.
std::optional<NpyContent> npy_content(const Tensor& tensor);

// Version 1.0 when the header fits a u16 length, 2.0 otherwise.
std::string npy_header(std::string_view descr, std::span<const uint64_t> shape,
                       bool fortran_order);

}  // namespace modelfs
