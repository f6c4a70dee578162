// SPDX-License-Identifier: Apache-2.0
#pragma once
// TensorFlow checkpoint bundles (docs/formats.md, "TensorFlow checkpoint
// bundles"): PREFIX.index, a LevelDB-format table, and the data shards
// PREFIX.data-SSSSS-of-NNNNN it points into.
//
//   .index: [data block + trailer]... [metaindex block + trailer]
//           [index block + trailer] [footer: two block handles, padding,
//           magic 0xdb4775248b80fb57, 48 bytes]
//   block:  entries (varint shared, varint non_shared, varint value length,
//           key delta, value), uint32 restarts[n], uint32 n
//   trailer: type (0 raw, 1 snappy), masked CRC-32C of contents + type
//
// Key "" (the first) holds BundleHeaderProto (num_shards, endianness,
// version); every other key a BundleEntryProto (dtype, shape, shard_id,
// offset, size, masked crc32c, slices). A partitioned variable's entry
// lists its slices, each stored under the key EncodeTensorNameSlice(name,
// slice), which starts with 0x00.
//
// Checked, every step: the footer's magic and handles (inside the file,
// blocks in order and not overlapping the footer), each block's type and
// CRC (at every open, as TensorFlow does), restart arrays (count that
// fits, offsets increasing, each the start of an entry with no shared
// prefix), shared prefixes no longer than the previous key, varints inside
// the block, keys strictly increasing and within their index separators,
// snappy's declared length (kMaxBlockBytes and the budget) before anything
// is allocated. Entries: a known dtype, a valid shape, shard_id below
// num_shards, the range inside its data file (opened only through
// ModelFolder::open), size equal to what dtype and shape need, slices
// inside the shape and stored under their keys.
//
// Tensors: every entry but the header, named by its key. Numeric data is
// served from the data file's mapping; DT_STRING is decoded at open into
// JSON Lines (as ONNX STRING tensors); a partitioned variable is one
// tensor of box pieces, one per slice. DT_VARIANT and DT_RESOURCE entries
// (iterator and resource state, not weights) are left out and listed in
// metadata.json. Big-endian bundles are refused.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/format_reader.hpp"
#include "formats/leveldb_table.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::tfckpt {

inline constexpr std::string_view kFormat = "tensorflow checkpoint";
inline constexpr uint64_t kMaxShards = 65536;
inline constexpr size_t kMaxRank = 254;  // TensorShape's own limit

// A partitioned variable's slice key, decoded: the full tensor's name and,
// per dimension, (start, length), length -1 for the whole dimension.
struct SliceKey {
  std::string name;
  std::vector<std::pair<int64_t, int64_t>> extents;
};
// nullopt when `key` is not exactly an encoded name and slice.
std::optional<SliceKey> decode_slice_key(std::string_view key);

// The first block's first entry is key "" and a BundleHeaderProto (a raw
// block, or a snappy one whose first literal holds it); a file that fits
// the head must also end in the table magic.
bool probe_file(std::span<const std::byte> head);
Catalog open_file(const ModelFile& model);

// A SavedModel folder (variables/variables.index), its variables/ folder,
// or a folder holding one *.index bundle.
bool probe_folder(const std::filesystem::path& folder);
Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks);

}  // namespace modelfs::tfckpt
