// SPDX-License-Identifier: Apache-2.0
#pragma once
// The registry of format readers: what detection (detect.cpp) knows of each
// format, and the one list of them (registry.cpp). A format is its reader's
// files and one entry of that list; detection, its messages and the remote
// folder lookup read everything else from the entries (ARCHITECTURE.md,
// "Adding a format").
#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

#include "formats/format_reader.hpp"
#include "io/zip_archive.hpp"

namespace modelfs {

// One kind of input a format reader takes. Each of the three pairs is
// optional (null when the reader takes no such input):
//   probe_file / open_file        a file, recognised by its first bytes
//   probe_archive / open_archive  a ZIP archive, recognised by its members:
//                                 detection opens a ZIP once and offers it
//                                 to these readers in registry order
//   probe_folder / open_folder    a folder (a sharded checkpoint, a split set)
// Probes decide by content (never the extension alone), cheaply: a file's
// probe sees at most its first 4 KiB, already made present.
struct FormatReader {
  std::string_view name;  // the format as errors and the catalog name it
  // How "not a model file" names the format among those expected ("GGUF");
  // entries of one format repeat it.
  std::string_view family;
  bool (*probe_file)(std::span<const std::byte> head) = nullptr;
  // A probe beyond the head, when no reader took the head: a signature
  // that may lie anywhere in the file (HDF5's, after a user block).
  bool (*probe_past_head)(const MappedFile& file, uint64_t head_bytes) = nullptr;
  Catalog (*open_file)(const ModelFile& model) = nullptr;
  bool (*probe_archive)(const ZipArchive& zip) = nullptr;
  Catalog (*open_archive)(const ModelFile& model, const ZipArchive& zip) = nullptr;
  bool (*probe_folder)(const std::filesystem::path& folder) = nullptr;
  Catalog (*open_folder)(const std::filesystem::path& folder, IntegrityChecks* checks) = nullptr;
  // What probe_folder looks for, for the message of a folder no reader
  // takes ("*.safetensors.index.json").
  std::string_view folder_holds = {};
  // Index files a remote folder (which cannot be listed) is tried for, in
  // order, when its URL names no file.
  std::span<const std::string_view> remote_index_names = {};
};

// Every reader, in probing order: formats with a magic first, ONNX (which
// has none) last; among archive readers, the one that takes any ZIP last.
std::span<const FormatReader> format_readers() noexcept;

}  // namespace modelfs
