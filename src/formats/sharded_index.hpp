// SPDX-License-Identifier: Apache-2.0
#pragma once
// A sharded checkpoint: an index JSON beside its shard files, as Hugging
// Face writes it for safetensors and for torch .bin shards:
//
//   {"metadata": {...}, "weight_map": {"tensor name": "shard file", ...}}
//
// Shards are opened in file-name order (model-00001-of-00003 first), each
// once. Every shard must lie inside the index's folder, hold every tensor
// weight_map places in it, and no tensor may be stored in two shards; a
// tensor a shard holds but weight_map does not list is mounted with a
// warning (writers have been seen to leave buffers out).
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs {

// Names the index and the merged catalog in messages and in the tree.
struct ShardedFormat {
  std::string_view index;    // "safetensors index", "pytorch index"
  std::string_view catalog;  // "safetensors", "pytorch"
  int max_json_depth;
  // What a shard's reader parses first, from its start and its end: a
  // remote index's shards have those bytes fetched side by side
  // (ModelFolder::open_all) before any is read.
  uint64_t head_bytes = 0;
  uint64_t tail_bytes = 0;
};

// Reads one shard (mapped already, where it was checked: ModelFolder::open;
// its integrity checks go to the index's), given its name as weight_map
// gives it. The shard's `metadata` becomes the merged catalog's
// metadata.shards.<name>.
using OpenShard = std::function<Catalog(const ModelFile& shard, const std::string& name)>;

// The index files in `folder`: regular files whose names end with one of
// `suffixes` (".safetensors.index.json") after at least one character, in
// name order.
std::vector<std::filesystem::path> index_files_in(const std::filesystem::path& folder,
                                                  std::initializer_list<std::string_view> suffixes);

// The one index file in `folder` (index_files_in); a ModelError in
// `format`'s words when there is none or more than one.
ModelFile single_index_in(const std::filesystem::path& folder,
                          std::initializer_list<std::string_view> suffixes, const ShardedFormat& format,
                          IntegrityChecks* checks);

// The merged catalog: files (the index, then each shard), tensors in shard
// order, and metadata {"index": the index's
// "metadata", "shards": {name: shard metadata}}.
Catalog open_sharded_index(const ModelFile& index, const ShardedFormat& format, const OpenShard& open_shard);

}  // namespace modelfs
