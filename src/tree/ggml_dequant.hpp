// SPDX-License-Identifier: Apache-2.0
#pragma once
// The values of ggml's block-quantized types, as ggml defines them: one
// function per type turns one stored block into its block_size float32
// values (the same values llama.cpp's dequantize_row_* give). Written from
// the types' definitions (block layouts and formulas: docs/formats.md,
// "ggml dequantization"); the lookup tables the IQ types need are in
// ggml_grids.*.
//
// A kernel reads exactly `type_size` bytes at `block` and writes exactly
// `block_size` floats at `out`; any bytes are valid input (a hostile block
// dequantizes to some values, never to a fault).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace modelfs::ggml {

using BlockKernel = void (*)(const uint8_t* block, float* out);
// `count` consecutive blocks at `blocks` into count x block_size floats.
using RowKernel = void (*)(const uint8_t* blocks, size_t count, float* out);

struct BlockCodec {
  std::string_view name;  // lowercase ggml name, as Tensor::block_type holds it
  uint32_t block_size;    // elements per block
  uint32_t type_size;     // bytes per block
  BlockKernel dequantize;
  RowKernel dequantize_row;  // the same, the block kernel inlined in the loop
};

// The codec of a block type, or null where modelfs has none.
const BlockCodec* block_codec(std::string_view name) noexcept;
// Every block type modelfs dequantizes.
std::span<const BlockCodec> block_codecs() noexcept;

// IEEE half (binary16) to float32, exactly (subnormals, infinities, NaN
// payloads kept).
float half_to_float(uint16_t bits) noexcept;

}  // namespace modelfs::ggml
