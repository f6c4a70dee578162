// SPDX-License-Identifier: Apache-2.0
#pragma once
// What detection hands a reader: the model file, mapped and probed
// (readers and the registry, src/formats/registry.hpp), private to the
// library.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "modelfs/catalog.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/remote.hpp"
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
  // A remote model's session (its options and Hub pins), which the files
  // opened beside it share (ModelFolder); null for a local model.
  std::shared_ptr<remote::Session> remote = nullptr;

  // Maps a local `path` (for callers that know the format: a shard, a fuzzer).
  static ModelFile open(const std::filesystem::path& path, IntegrityChecks* checks = nullptr) {
    return {path, MappedFile::open(path), checks};
  }
};

// A value of the file quoted in a reader's message: its first 80 bytes,
// "..." when there are more (the message's own bound cuts the rest).
inline std::string shown(std::string_view text) {
  constexpr size_t kShown = 80;
  std::string out = "\"";
  out.append(text.substr(0, kShown));
  if (text.size() > kShown) out += "...";
  return out + "\"";
}

}  // namespace modelfs
