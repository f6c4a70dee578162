// SPDX-License-Identifier: Apache-2.0
#pragma once
// The torch.save ZIP archive (docs/formats.md, "ZIP container"): <archive>/
// data.pkl and its <archive>/data/<key> storages, unpickled and walked into
// tensors. Shared by the torch.save/TorchScript reader (formats/torch.hpp)
// and the PT2 reader (formats/pt2.hpp), whose archives nest torch.save
// archives, so that neither of those two calls the other.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/torch_objects.hpp"
#include "io/tensor_spec.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/catalog.hpp"
#include "modelfs/mapped_file.hpp"

namespace modelfs::torch_save {

inline constexpr uint64_t kMaxPickleBytes = uint64_t{1} << 31;

// What an export's __metadata__ says of a torch checkpoint's tensors:
// torch's names and layouts (what transformers expects of a PyTorch
// checkpoint).
inline constexpr std::string_view kCheckpointFormat = "pt";

// The catalog of a checkpoint torch writes (torch.save, TorchScript, a
// distributed checkpoint): `format`, the file's time and `name`.
inline Catalog torch_catalog(std::string format, const MappedFile& file, std::string name) {
  Catalog catalog;
  catalog.format = std::move(format);
  catalog.export_hints.checkpoint_format = std::string(kCheckpointFormat);
  catalog.mtime = file.mtime();
  catalog.files.push_back(std::move(name));
  return catalog;
}

struct SaveContents {
  std::vector<TensorSpec> tensors;
  nlohmann::json values = nlohmann::json::object();          // plain values, by path
  nlohmann::json skipped_objects = nlohmann::json::array();  // globals not rebuilt
  int protocol = 0;                                          // of the pickle
};

// Reads the torch.save archive `zip` (its data.pkl and data/ storages), part of
// a larger file (a PT2 archive's serialized_state_dict.pt, a use_pickle
// payload): `options` say how to name and describe what it holds, the rest
// is as for walk_record.
SaveContents read_save(const ZipArchive& zip, torch::WalkOptions options, const std::string& name_prefix,
                       bool in_file);

// The pieces read_save is made of, which the TorchScript reader also walks
// its constants.pkl with.

// `text` without leading and trailing blanks (small text records).
std::string trimmed(std::string_view text);

// The folder PyTorch's reader takes as the archive name: that of the first
// entry, with its '/' ("" when the first entry lies at the root).
std::string archive_folder(const ZipArchive& zip);

// Unpickles `member` and walks it, storages resolved in `storage_folder`.
// `in_file`: the archive lies in the model file as is, so offsets are file
// offsets (an inflated nested archive has none).
SaveContents walk_record(const ZipArchive& zip, const ZipMember& member, const std::string& storage_folder,
                         torch::WalkOptions options, const std::string& name_prefix, bool in_file);

}  // namespace modelfs::torch_save
