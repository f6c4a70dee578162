// SPDX-License-Identifier: Apache-2.0
#pragma once
// torch.distributed.checkpoint (DCP) folders as FileSystemWriter writes
// them (docs/formats.md, "torch.distributed.checkpoint"):
//
//   .metadata           pickle of Metadata(state_dict_metadata, planner_data,
//                       storage_data, storage_meta, version)
//   __R_N.distcp        per rank, payloads concatenated: each tensor chunk a
//                       complete torch.save archive (a ZIP of one tensor)
//
//   state_dict_metadata  {fqn: TensorStorageMetadata(properties, size, chunks)
//                              | BytesStorageMetadata()}
//   chunks               [ChunkStorageMetadata(offsets, sizes), ...]
//   storage_data         {MetadataIndex(fqn, offset): _StorageInfo(
//                              relative_path, offset, length)}
//
// The pickle is read by the project's unpickler, which calls nothing: the
// classes are recognised by name from a fixed list (any other global is
// refused, named), dataclasses as NEWOBJ/REDUCE of the class and a BUILD
// dict, TensorProperties as its 5-tuple state (or a dict). Each chunk's
// (offset, length) slice of its data file is opened as a ZIP over that
// range and read by the torch.save reader (torch_save.hpp): its one tensor
// must have the declared dtype and the chunk's sizes, in C order. A tensor
// of one chunk is served as that archive's stored bytes; a tensor of
// several is box pieces (catalog.hpp, Piece), one per chunk: whole-row
// blocks served in place, others gathered per read. BytesStorageMetadata
// entries are listed in metadata.json (never unpickled).
//
// Refused (ModelError naming "torch.distributed.checkpoint"): a pickle that
// does not parse or names a class not on the list; a Metadata, entry,
// chunk or storage record of the wrong shape; a dtype modelfs does not
// serve; a chunk outside the tensor's size, chunks that overlap or leave a
// hole; an FQN twice; a chunk without its storage record (or a record
// twice); a bytes item's range past its file; a relative_path that is not a
// file inside the folder (ModelFolder); a slice past its file; a slice that
// is not a torch.save archive of one tensor of the declared dtype and size.
#include <cstdint>
#include <filesystem>
#include <span>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::dcp {

inline constexpr uint64_t kMaxMetadataBytes = uint64_t{1} << 30;
// Chunks in all; each needs its own archive in a data file, so a real
// checkpoint has far fewer.
inline constexpr uint64_t kMaxChunks = 4'000'000;
// Data files: one or a few per rank.
inline constexpr uint64_t kMaxFiles = 65'536;
// planner_data keys and bytes entries listed in metadata.json.
inline constexpr uint64_t kMaxListed = 10'000;

// A pickle whose first class (in the first 4 KiB) is DCP's Metadata.
bool probe_file(std::span<const std::byte> head);
// A folder holding a .metadata that probe_file takes.
bool probe_folder(const std::filesystem::path& folder);

// The .metadata file; its data files are beside it.
Catalog open_file(const ModelFile& model);
Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks);

}  // namespace modelfs::dcp
