// SPDX-License-Identifier: Apache-2.0
#pragma once
// The values of ggml's block-quantized types, as ggml defines them: one
// function per type turns one stored block into its block_size float32
// values (the same values llama.cpp's dequantize_row_* give). Written from
// the types' definitions (block layouts and formulas: docs/formats.md,
// "ggml dequantization"); the lookup tables the IQ types need are in
// ggml_grids.*. The kernels are found by the type (GgmlType in dtype.hpp,
// its table in io/ggml_table.hpp), which knows nothing of them.
#include <cstddef>
#include <cstdint>

#include "modelfs/dtype.hpp"

namespace modelfs::ggml {

// A block type's values: `block` turns one stored block (type_size bytes,
// any bytes valid: a hostile block gives some values, never a fault) into
// its block_size float32 values; `row` does `count` consecutive blocks,
// the block kernel inlined in its loop.
struct GgmlKernels {
  void (*block)(const uint8_t* block, float* out);
  void (*row)(const uint8_t* blocks, size_t count, float* out);
};

// The kernels of `type`; null for a plain type.
const GgmlKernels* kernels(const GgmlType& type) noexcept;

// IEEE half (binary16) to float32, exactly (subnormals, infinities, NaN
// payloads kept).
float half_to_float(uint16_t bits) noexcept;

}  // namespace modelfs::ggml
