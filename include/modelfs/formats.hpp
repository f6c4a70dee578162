#pragma once
// Opening a model: detect its format from the content (never the extension
// alone) and dispatch to the reader that turns it into a Catalog.
#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

#include "modelfs/catalog.hpp"

namespace modelfs {

// One entry per format modelfs reads. Adding a format is adding a reader
// and one entry in the table of src/formats/detect.cpp.
struct FormatReader {
  std::string_view name;
  // True when the first bytes of a file (up to 4 KiB) are this format's.
  bool (*probe_file)(std::span<const std::byte> head);
  // True when a folder is a model of this format (a sharded checkpoint).
  bool (*probe_folder)(const std::filesystem::path& folder);
  Catalog (*open)(const std::filesystem::path& model);
};

std::span<const FormatReader> format_readers();

// Opens MODEL, a file or a folder. Throws ModelError naming the file, the
// format, the offset and the reason when it is not a model modelfs can read.
Catalog open_model(const std::filesystem::path& model);

}  // namespace modelfs
