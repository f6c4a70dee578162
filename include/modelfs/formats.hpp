// SPDX-License-Identifier: Apache-2.0
#pragma once
// Opening a model: detect its format from the content (never the extension
// alone) and dispatch to the reader that turns it into a Catalog.
#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

#include "modelfs/catalog.hpp"

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

// Opens MODEL, a file or a folder. Throws ModelError naming the file, the
// format, the offset and the reason when it is not a model modelfs can read.
// With `checks`, the format's integrity checks are added there (for
// check_model, check.hpp).
Catalog open_model(const std::filesystem::path& model, IntegrityChecks* checks = nullptr);

}  // namespace modelfs
