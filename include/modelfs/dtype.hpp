// SPDX-License-Identifier: Apache-2.0
#pragma once
// Element types, under the canonical lowercase names of the sidecar contract
// (docs/design.md, "The sidecar"). Each format maps its own type codes onto these.
#include <cstdint>
#include <optional>
#include <string_view>

#include "modelfs/api.hpp"

namespace modelfs {

enum class DType : uint8_t {
  Bool,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  UInt16,
  UInt32,
  UInt64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Complex64,
  Complex128,
  Float8E4M3FN,
  Float8E4M3FNUZ,
  Float8E5M2,
  Float8E5M2FNUZ,
  Float8E8M0FNU,
  Int4,
  UInt4,
  Float4E2M1,
  Int2,  // ONNX INT2/UINT2 (IR 13): four per byte
  UInt2,
  Float6E2M3FN,
  Float6E3M2FN,
  // Text elements (ONNX STRING): no fixed size. The raw file holds them as
  // JSON Lines, one JSON string per element in C order (append_json_bytes
  // in json_text.hpp: lossless for any bytes), so its size is that text's.
  String,
  // A ggml block-quantized type: the element size is per block, and the
  // tensor carries the ggml type's name (see Tensor::block_type).
  GgmlBlock,
};

// Canonical name ("float32", "bfloat16", ...); "block" for GgmlBlock.
MODELFS_API std::string_view dtype_name(DType dtype) noexcept;
// Bits per element; 0 for GgmlBlock (its size is per block) and String.
MODELFS_API uint32_t dtype_bits(DType dtype) noexcept;
// The NumPy descr ("<f4", "|b1", ...) where numpy has the type natively.
MODELFS_API std::optional<std::string_view> numpy_descr(DType dtype) noexcept;

}  // namespace modelfs
