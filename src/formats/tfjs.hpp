// SPDX-License-Identifier: Apache-2.0
#pragma once
// TensorFlow.js models (docs/formats.md, "TensorFlow.js"): a model.json beside the
// binary weight shards it names.
//
//   model.json  {"format", "generatedBy", "convertedBy", "modelTopology",
//                "weightsManifest": [group, ...], "trainingConfig", ...}
//   group       {"paths": [shard file, ...], "weights": [entry, ...]}
//   entry       {"name", "shape": [n, ...], "dtype", "quantization"?}
//
// A group's weights are its shards' bytes concatenated in "paths" order:
// each entry's bytes follow the previous entry's with no padding (offsets
// are implicit), so a weight may start in one shard and end in another; it
// is then served as run pieces of those shards (catalog.hpp, Piece).
// Elements are little-endian: float32, int32, complex64 (two float32),
// bool (one byte), and string (per element a u32 byte length, then the
// bytes), whose length is only known by walking its prefixes. A quantized
// entry stores uint8 or uint16 values q of q x scale + min, or float16
// bits, in place of its dtype's.
//
// Refused: JSON that does not parse, nests too deep or repeats a key; no
// weightsManifest array; a shard that is not a file inside the model's
// folder, missing, or named twice; a weight name twice; a shape that is not
// non-negative integers, or whose size overflows; an unknown dtype or
// quantization, or one whose parameters are missing; a string weight whose
// lengths run past its group; a group whose weights and shards disagree in
// size (the weights need more, or leave bytes over).
#include <cstdint>
#include <filesystem>
#include <span>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::tfjs {

inline constexpr uint64_t kMaxModelJsonBytes = uint64_t{256} << 20;
// A Keras topology nests a layer's config in its model's, a wrapper's in
// its layer's: tens of levels at most.
inline constexpr int kMaxJsonDepth = 100;

// A JSON object whose first keys (in the first 4 KiB) are TensorFlow.js's.
bool probe_file(std::span<const std::byte> head);
// A folder holding a model.json.
bool probe_folder(const std::filesystem::path& folder);

Catalog open_file(const ModelFile& model);
Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks);

}  // namespace modelfs::tfjs
