// SPDX-License-Identifier: Apache-2.0
#pragma once
// PyTorch files, all read without running a pickle (docs/formats.md, "ZIP
// container", "PyTorch files"): torch.save ZIP archives (any top folder name;
// `byteorder` big is byte-swapped), TorchScript archives (the same container
// with constants.pkl), legacy (pre-1.6) torch.save files, and sharded
// checkpoints of these. Tensors are named by their path from the pickled root
// (docs/design.md, "Tensor names") and served from the mapping.
// PT2 archives (torch.export) share the ZIP container: detection opens the
// ZIP once and offers it to the archive readers in registry order, PT2
// (formats/pt2.hpp) before this one's open_zip, which takes any other. Both
// read torch.save archives through src/formats/torch_save.hpp.
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "formats/format_reader.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::torch {

inline constexpr int kMaxArchiveVersion = 10;  // as PyTorch's kMaxSupportedFileFormatVersion

bool probe_zip(std::span<const std::byte> head);
bool probe_legacy(std::span<const std::byte> head);

// torch.save ZIP or TorchScript archive `zip`, which lies in `model`.
Catalog open_zip(const ModelFile& model, const ZipArchive& zip);
// The same, opening the ZIP itself (a shard, a fuzzer).
Catalog open_zip(const ModelFile& model);
// Legacy (pre-1.6) torch.save.
Catalog open_legacy(const ModelFile& model);

// Sharded checkpoints (pytorch_model.bin.index.json beside its shards): the
// same {"weight_map": {name: shard}} scheme as safetensors, with shards that
// are torch.save files (ZIP or legacy); merged into one catalog.
bool probe_index_file(std::span<const std::byte> head);
bool probe_folder(const std::filesystem::path& folder);
// A sharded checkpoint: its index JSON, or a folder holding one.
Catalog open_index_file(const ModelFile& index);
Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks);

}  // namespace modelfs::torch
