// SPDX-License-Identifier: Apache-2.0
#pragma once
// safetensors (huggingface/safetensors; docs/formats.md, "safetensors"):
//
//   u64 LE N | N bytes of UTF-8 JSON header | data buffer (rest of the file)
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end)} relative to the buffer, plus an optional "__metadata__"
// object of strings. Validation follows the reference crate's
// SafeTensors::read_metadata rule for rule: header size cap, offsets tiling
// the buffer exactly (no hole, no overlap, no trailing byte), byte size equal
// to the element count times the element size, all overflow-checked.
// A sharded checkpoint is an index JSON ({"weight_map": {name: shard}})
// beside its shards; they are merged into one catalog.
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::safetensors {

inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference crate
inline constexpr int kMaxJsonDepth = 64;                  // tensors sit at depth 2

// What one .safetensors file holds.
struct File {
  std::vector<TensorSpec> tensors;                     // ordered by data offset
  nlohmann::json metadata = nlohmann::json::object();  // "__metadata__"
};

// Parses and validates a mapped .safetensors file. `name` is what tensors'
// sources and messages call it.
File parse(std::shared_ptr<const MappedFile> file, const std::string& name);

bool probe_file(std::span<const std::byte> head);
bool probe_index_file(std::span<const std::byte> head);
bool probe_folder(const std::filesystem::path& folder);

// A single file; an index JSON and its shards; a folder holding one index.
Catalog open_file(const ModelFile& model);
Catalog open_index_file(const ModelFile& index);
Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks);

}  // namespace modelfs::safetensors
