// SPDX-License-Identifier: Apache-2.0
#pragma once
// What open_model (formats.hpp) dispatches to: the readers' side of
// detection, private to the library.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>

#include "modelfs/catalog.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/tensor_spec.hpp"

namespace modelfs {

// A model file as detection hands it to its reader: the path the user gave
// (or the index named) and the file, mapped once and probed.
struct ModelFile {
  std::filesystem::path path;
  std::shared_ptr<const MappedFile> mapped;
  // Where the reader adds the format's integrity checks; null when the
  // caller wants none (a mount).
  IntegrityChecks* checks = nullptr;

  // Maps `path` (for callers that know the format: a shard, a fuzzer).
  static ModelFile open(const std::filesystem::path& path, IntegrityChecks* checks = nullptr) {
    return {path, MappedFile::open(path), checks};
  }
};

// One entry per format modelfs reads. Adding a format is adding a reader
// and one entry in the table of src/formats/detect.cpp. A reader of files
// has probe_file and open_file; a reader of folders (a sharded checkpoint,
// a split set) has probe_folder and open_folder; the others are null.
struct FormatReader {
  std::string_view name;
  // True when the first bytes of a file (up to 4 KiB) are this format's.
  bool (*probe_file)(std::span<const std::byte> head);
  Catalog (*open_file)(const ModelFile& model);
  // True when a folder is a model of this format.
  bool (*probe_folder)(const std::filesystem::path& folder);
  Catalog (*open_folder)(const std::filesystem::path& folder, IntegrityChecks* checks);
};

}  // namespace modelfs
