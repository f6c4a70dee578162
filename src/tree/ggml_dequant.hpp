// SPDX-License-Identifier: Apache-2.0
#pragma once
// The values of ggml's block-quantized types, as ggml defines them: one
// function per type turns one stored block into its block_size float32
// values (the same values llama.cpp's dequantize_row_* give). Written from
// the types' definitions (block layouts and formulas: docs/formats.md
// §6.6, ggml dequantization); the lookup tables the IQ types need are in
// ggml_grids.*. The kernels are reached through the one ggml type table
// (GgmlType in dtype.hpp), defined in ggml_dequant.cpp.
#include <cstdint>

#include "modelfs/dtype.hpp"

namespace modelfs::ggml {

// IEEE half (binary16) to float32, exactly (subnormals, infinities, NaN
// payloads kept).
float half_to_float(uint16_t bits) noexcept;

}  // namespace modelfs::ggml
