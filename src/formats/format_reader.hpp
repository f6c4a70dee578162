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

#include "io/tensor_spec.hpp"
#include "modelfs/catalog.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "remote/remote.hpp"

namespace modelfs {

// A model file as detection hands it to its reader: the path the user gave
// (or the index named) and the file, mapped once and probed.
// A local path mapped, or a URL opened through the remote layer's cache:
// where a path a reader is given becomes a mapping.
inline std::shared_ptr<const MappedFile> open_mapped(const std::filesystem::path& path) {
  return remote::is_url(path.native()) ? remote::open(path.native()) : MappedFile::open(path);
}

struct ModelFile {
  std::filesystem::path path;
  std::shared_ptr<const MappedFile> mapped;
  // Where the reader adds the format's integrity checks; null when the
  // caller wants none (a mount).
  IntegrityChecks* checks = nullptr;

  // Maps `path` (for callers that know the format: a shard, a fuzzer).
  static ModelFile open(const std::filesystem::path& path, IntegrityChecks* checks = nullptr) {
    return {path, open_mapped(path), checks};
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

// The whole of a text file a reader parses at once (an IR's .xml, a
// model.json), present; refused (ModelError in `format`) over `max` bytes,
// `what` saying what it is ("a model.json").
inline std::string_view whole_text(const MappedFile& file, uint64_t max, std::string_view format,
                                   std::string_view what) {
  if (file.size() > max)
    throw ModelError(file.display_name(), std::string(format), std::nullopt,
                     "is " + std::to_string(file.size()) + " bytes; " + std::string(what) +
                         " is read whole, up to " + std::to_string(max));
  const auto bytes = file.read(0, file.size());
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace modelfs
