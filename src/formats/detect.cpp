// SPDX-License-Identifier: Apache-2.0
// Format detection and dispatch: the only place that knows every reader.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <system_error>

#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"
#include "modelfs/format_reader.hpp"
#include "modelfs/formats/gguf.hpp"
#include "modelfs/formats/onnx.hpp"
#include "modelfs/formats/pt2.hpp"
#include "modelfs/formats/safetensors.hpp"
#include "modelfs/formats/torch.hpp"
#include "modelfs/remote.hpp"

namespace modelfs {
namespace {

// torch.save, TorchScript and PT2 archives share the ZIP container; which
// one a file is shows only in its central directory, past the probed head,
// so the ZIP is opened once here and handed to the reader it belongs to.
Catalog open_zip_container(const ModelFile& model) {
  const ZipArchive zip = ZipArchive::open(model.mapped, "ZIP archive");
  if (pt2::is_pt2_archive(zip)) return pt2::open_archive(model, zip);
  return torch::open_zip(model, zip);
}

const std::array kReaders{
    FormatReader{"safetensors", safetensors::probe_file, safetensors::open_file, safetensors::probe_folder,
                 safetensors::open_folder},
    // Before the safetensors index, whose probe takes any weight_map JSON;
    // this one takes only those whose shards are torch.save files.
    FormatReader{"pytorch index", torch::probe_index_file, torch::open_index_file, nullptr, nullptr},
    FormatReader{"safetensors index", safetensors::probe_index_file, safetensors::open_index_file, nullptr,
                 nullptr},
    FormatReader{"gguf", gguf::probe_file, gguf::open_file, gguf::probe_folder, gguf::open_folder},
    // torch.save, TorchScript and PT2 (open_zip_container above).
    FormatReader{"pytorch", torch::probe_zip, open_zip_container, nullptr, nullptr},
    FormatReader{"pytorch legacy", torch::probe_legacy, torch::open_legacy, nullptr, nullptr},
    FormatReader{"pytorch sharded", nullptr, nullptr, torch::probe_folder, torch::open_folder},
    // ONNX has no magic: probed last, by a bounded trial parse of its first
    // fields, so that every format with a magic is recognised before it.
    FormatReader{"onnx", onnx::probe_file, onnx::open_file, nullptr, nullptr},
};

Catalog open_file(const ModelFile& file);

// The index names tried in a remote folder, which cannot be listed.
constexpr std::array kRemoteIndexNames{"model.safetensors.index.json", "pytorch_model.bin.index.json",
                                       "diffusion_pytorch_model.safetensors.index.json"};

bool is_missing(const ModelError& e) {
  // A folder's URL is a 404, or (a server that lists no folders) a 403.
  return e.reason().find("HTTP 404") != std::string::npos || e.reason().find("HTTP 403") != std::string::npos;
}

// A URL: a file, or a folder (ending in '/', an hf:// repository's root,
// or a name the server has no file for) read through its index.
Catalog open_remote(const std::string& url, IntegrityChecks* checks) {
  const remote::FetchProgress progress;  // a line on a terminal while a large header comes
  std::string folder = url;
  while (folder.ends_with('/')) folder.pop_back();
  const bool hub_root = url.starts_with("hf://") && std::count(url.begin() + 5, url.end(), '/') < 2;
  // The first of the index files the folder has.
  auto open_an_index = [&]() -> std::optional<Catalog> {
    for (const char* name : kRemoteIndexNames) {
      const std::string index = folder + "/" + name;
      try {
        return open_file(ModelFile{remote::display_url(index), MappedFile::open(index), checks});
      } catch (const ModelError& e) {
        if (!is_missing(e) || e.file() != remote::display_url(index)) throw;
      }
    }
    return std::nullopt;
  };
  if (!url.ends_with('/') && !hub_root) {
    try {
      return open_file(ModelFile{remote::display_url(url), MappedFile::open(url), checks});
    } catch (const ModelError& e) {
      if (!is_missing(e) || e.file() != remote::display_url(url)) throw;
      if (auto catalog = open_an_index()) return std::move(*catalog);
      throw;
    }
  }
  if (auto catalog = open_an_index()) return std::move(*catalog);
  throw ModelError(remote::display_url(url), "folder", std::nullopt,
                   "holds none of the index files modelfs looks for in a remote folder (" +
                       std::string(kRemoteIndexNames[0]) + ", " + kRemoteIndexNames[1] + ", " +
                       kRemoteIndexNames[2] + "); name a model file instead");
}

Catalog open_detected(const std::filesystem::path& model, IntegrityChecks* checks) {
  if (remote::is_url(model.native())) return open_remote(model.native(), checks);
  std::error_code ec;
  const auto status = std::filesystem::status(model, ec);
  if (ec || !std::filesystem::exists(status))
    throw ModelError(model.string(), "file", std::nullopt,
                     "cannot open: " + (ec ? ec.message() : std::string("No such file or directory")));

  if (std::filesystem::is_directory(status)) {
    for (const auto& reader : kReaders)
      if (reader.probe_folder && reader.probe_folder(model))
        return within_budget(model.string(), reader.name, "reading the model",
                             [&] { return reader.open_folder(model, checks); });
    throw ModelError(model.string(), "folder", std::nullopt,
                     "holds no model modelfs can mount as a whole (looked for "
                     "*.safetensors.index.json, *.bin.index.json and *-00001-of-NNNNN.gguf); "
                     "name a model file instead");
  }

  return open_file(ModelFile::open(model, checks));
}

Catalog open_file(const ModelFile& file) {
  auto head = file.mapped->bytes().first(std::min<uint64_t>(file.mapped->size(), 4096));
  file.mapped->ensure(0, head.size());
  for (const auto& reader : kReaders)
    if (reader.probe_file && reader.probe_file(head))
      return within_budget(file.path.string(), reader.name, "reading the model",
                           [&] { return reader.open_file(file); });
  throw ModelError(file.path.string(), "unknown", 0,
                   "not a model file modelfs recognises (" + std::to_string(file.mapped->size()) +
                       " bytes; expected safetensors, GGUF, ONNX or a PyTorch file)");
}

}  // namespace

Catalog open_model(const std::filesystem::path& model, IntegrityChecks* checks) {
  if (current_budget() != nullptr) return open_detected(model, checks);
  Budget budget;
  BudgetScope scope(budget);
  return open_detected(model, checks);
}

}  // namespace modelfs
