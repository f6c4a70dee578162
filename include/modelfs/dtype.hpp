// SPDX-License-Identifier: Apache-2.0
#pragma once
// Element types, under the canonical lowercase names of the sidecar contract
// (docs/design.md, "The sidecar"). Each format maps its own type codes onto these.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
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
  // tensor points at its ggml type (see Tensor::ggml).
  GgmlBlock,
  // After GgmlBlock so that the values above keep their numbers.
  // Bits packed most significant first (numpy.packbits' default order;
  // OpenVINO u1), unlike the other sub-byte types, lowest bits first.
  UInt1,
  // 4-bit indices, low nibble first, into the NF4 table of 16 floats
  // (QLoRA's NormalFloat; OpenVINO nf4).
  NF4,
};

// Canonical name ("float32", "bfloat16", ...); "block" for GgmlBlock.
MODELFS_API std::string_view dtype_name(DType dtype) noexcept;
// Bits per element; 0 for GgmlBlock (its size is per block) and String.
MODELFS_API uint32_t dtype_bits(DType dtype) noexcept;
// The NumPy descr ("<f4", "|b1", ...) where numpy has the type natively.
MODELFS_API std::optional<std::string_view> numpy_descr(DType dtype) noexcept;

// How a quantized tensor's stored values become its values: torch's
// schemes (torch.qscheme), then those of other formats.
enum class QScheme : uint8_t {
  PerTensorAffine,
  PerTensorSymmetric,
  PerChannelAffine,
  PerChannelSymmetric,
  PerChannelAffineFloatQParams,
  // q x scale + min, one scale and minimum per tensor, over unsigned
  // integers (uint8, uint16): TensorFlow.js's affine quantization.
  MinScaleAffine,
  // The stored floats widened to the values' type (float16 to float32):
  // TensorFlow.js's float16 quantization, which has no parameters.
  Widened,
};
// The scheme's name ("per_tensor_affine", ..., "min_scale_affine",
// "widened"); the inverse knows torch's names only, so that a pickle
// cannot name another format's scheme.
std::string_view qscheme_name(QScheme scheme) noexcept;
std::optional<QScheme> qscheme_from_name(std::string_view name) noexcept;
// Per tensor: one set of parameters; per channel: tensors of them.
bool qscheme_per_tensor(QScheme scheme) noexcept;

// One ggml tensor type (docs/formats.md, "ggml types"): the GGUF reader
// takes its sizes, the tree its kernels (src/tree/ggml_dequant.hpp, by id).
struct GgmlType {
  uint32_t id;
  std::string_view name;       // lowercase ggml name: "f32", "q4_k", ...
  uint32_t block_size;         // elements per block
  uint32_t type_size;          // bytes per block
  std::optional<DType> plain;  // the canonical dtype of an unblocked type
};

// The type with this id, or null for an unknown or removed id.
const GgmlType* ggml_type(uint32_t id) noexcept;
// The type of this lowercase ggml name, or null.
const GgmlType* ggml_type_named(std::string_view name) noexcept;
// Every type of the table, by id.
std::span<const GgmlType> ggml_types() noexcept;

}  // namespace modelfs
