// SPDX-License-Identifier: Apache-2.0
#pragma once
// PyTorch files (docs/formats.md, "ZIP container", "PyTorch files"), all
// read without running a pickle:
//
//   torch.save ZIP    <archive>/data.pkl + <archive>/data/<key> storages
//                     (any top folder name; `byteorder` big is byte-swapped)
//   TorchScript       the same container with constants.pkl: the module tree
//                     of data.pkl (storages data/<key>) and the constants
//                     tuple of constants.pkl (storages constants/<key>)
//   legacy torch.save five pickles (magic, protocol, sys_info, object, storage
//                     keys) followed by the raw storages, in key order
//
// Tensors are named by the path of dict keys, attributes and indices from the
// pickled root, joined with '.' (a lone tensor is "tensor", a tensor under an
// empty key "": {'': t} is "", never "tensor"); their bytes are
// the part of their storage their view covers, served from the mapping.
// PT2 archives (torch.export) share the ZIP container: open_zip hands them to
// the PT2 reader (formats/pt2.hpp), which reads its nested saves through
// read_save below.
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "modelfs/catalog.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/zip_archive.hpp"

namespace modelfs::torch {

inline constexpr int kMaxArchiveVersion = 10;  // as PyTorch's kMaxSupportedFileFormatVersion
inline constexpr uint64_t kMaxPickleBytes = uint64_t{1} << 31;

bool probe_zip(std::span<const std::byte> head);
bool probe_legacy(std::span<const std::byte> head);

// torch.save ZIP or TorchScript archive.
Catalog open_zip(const ModelFile& model);
// A torch.save archive that is part of a larger file (a PT2 archive's
// serialized_state_dict.pt, a use_pickle payload): how to name and describe
// what it holds.
struct NestedSave {
  std::string file;          // for messages
  std::string format;        // for messages and sidecars
  std::string source;        // Catalog::files entry the bytes lie in
  std::string name_prefix;   // tensor names start with it; "" as torch.save names them
  std::string default_kind;  // sidecar "kind" of tensors not pickled as parameters ("" none)
  // False when `zip` lies in an inflated copy: offsets into it are not file
  // offsets, so sidecars get none.
  bool in_file = true;
};

struct SaveContents {
  std::vector<TensorSpec> tensors;
  nlohmann::json values = nlohmann::json::object();           // plain values, by path
  nlohmann::json skipped_objects = nlohmann::json::array();  // globals not rebuilt
};

// Reads the torch.save archive `zip` (its data.pkl and data/ storages).
SaveContents read_save(const ZipArchive& zip, const NestedSave& how);

// Legacy (pre-1.6) torch.save.
Catalog open_legacy(const ModelFile& model);

// Sharded checkpoints (pytorch_model.bin.index.json beside its shards): the
// same {"weight_map": {name: shard}} scheme as safetensors, with shards that
// are torch.save files (ZIP or legacy); merged into one catalog.
bool probe_index_file(std::span<const std::byte> head);
bool probe_folder(const std::filesystem::path& folder);
// A sharded checkpoint: its index JSON, or a folder holding one.
Catalog open_index_file(const ModelFile& index);
Catalog open_folder(const std::filesystem::path& folder);

}  // namespace modelfs::torch
