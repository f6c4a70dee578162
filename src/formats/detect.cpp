// SPDX-License-Identifier: Apache-2.0
// Format detection and dispatch: the only place that knows every reader.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <system_error>

#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/formats/gguf.hpp"
#include "modelfs/formats/onnx.hpp"
#include "modelfs/formats/safetensors.hpp"
#include "modelfs/formats/torch.hpp"
#include "modelfs/remote.hpp"

namespace modelfs {
namespace {

const std::array kReaders{
    FormatReader{"safetensors", safetensors::probe_file, safetensors::open_file, safetensors::probe_folder,
                 safetensors::open_folder},
    // Before the safetensors index, whose probe takes any weight_map JSON;
    // this one takes only those whose shards are torch.save files.
    FormatReader{"pytorch index", torch::probe_index_file, torch::open_index_file, nullptr, nullptr},
    FormatReader{"safetensors index", safetensors::probe_index_file, safetensors::open_index_file,
                 nullptr, nullptr},
    FormatReader{"gguf", gguf::probe_file, gguf::open_file, gguf::probe_folder, gguf::open_folder},
    // torch.save and TorchScript; PT2 archives share the container, and
    // open_zip hands them to the PT2 reader (their records are only known
    // from the central directory, past the probed head).
    FormatReader{"pytorch", torch::probe_zip, torch::open_zip, nullptr, nullptr},
    FormatReader{"pytorch legacy", torch::probe_legacy, torch::open_legacy, nullptr, nullptr},
    FormatReader{"pytorch sharded", nullptr, nullptr, torch::probe_folder, torch::open_folder},
    // ONNX has no magic: probed last, by a bounded trial parse of its first
    // fields, so that every format with a magic is recognised before it.
    FormatReader{"onnx", onnx::probe_file, onnx::open_file, nullptr, nullptr},
};

}  // namespace

std::span<const FormatReader> format_readers() { return kReaders; }

namespace {

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
Catalog open_remote(const std::string& url) {
  std::string folder = url;
  while (folder.ends_with('/')) folder.pop_back();
  const bool hub_root = url.starts_with("hf://") && std::count(url.begin() + 5, url.end(), '/') < 2;
  auto open_index = [&](const char* name) -> std::optional<Catalog> {
    const std::string index = folder + "/" + name;
    try {
      return open_file(ModelFile{remote::display_url(index), MappedFile::open(index)});
    } catch (const ModelError& e) {
      if (is_missing(e) && e.file() == remote::display_url(index)) return std::nullopt;
      throw;
    }
  };
  if (!url.ends_with('/') && !hub_root) {
    try {
      return open_file(ModelFile{remote::display_url(url), MappedFile::open(url)});
    } catch (const ModelError& e) {
      if (!is_missing(e) || e.file() != remote::display_url(url)) throw;
      for (const char* name : kRemoteIndexNames)
        if (auto catalog = open_index(name)) return std::move(*catalog);
      throw;
    }
  }
  for (const char* name : kRemoteIndexNames)
    if (auto catalog = open_index(name)) return std::move(*catalog);
  throw ModelError(remote::display_url(url), "folder", std::nullopt,
                   "holds none of the index files modelfs looks for in a remote folder (" +
                       std::string(kRemoteIndexNames[0]) + ", " + kRemoteIndexNames[1] + ", " +
                       kRemoteIndexNames[2] + "); name a model file instead");
}

Catalog open_detected(const std::filesystem::path& model) {
  if (remote::is_url(model.native())) return open_remote(model.native());
  std::error_code ec;
  const auto status = std::filesystem::status(model, ec);
  if (ec || !std::filesystem::exists(status))
    throw ModelError(model.string(), "file", std::nullopt,
                     "cannot open: " + (ec ? ec.message() : std::string("No such file or directory")));

  if (std::filesystem::is_directory(status)) {
    for (const auto& reader : kReaders)
      if (reader.probe_folder && reader.probe_folder(model)) return reader.open_folder(model);
    throw ModelError(model.string(), "folder", std::nullopt,
                     "holds no model modelfs can mount as a whole (looked for "
                     "*.safetensors.index.json, *.bin.index.json and *-00001-of-NNNNN.gguf); "
                     "name a model file instead");
  }

  return open_file(ModelFile::open(model));
}

Catalog open_file(const ModelFile& file) {
  const std::filesystem::path& model = file.path;
  auto head = file.mapped->bytes().first(std::min<uint64_t>(file.mapped->size(), 4096));
  file.mapped->ensure(0, head.size());
  for (const auto& reader : kReaders)
    if (reader.probe_file && reader.probe_file(head)) return reader.open_file(file);
  throw ModelError(model.string(), "unknown", 0,
                   "not a model file modelfs recognises (" + std::to_string(file.mapped->size()) +
                       " bytes; expected safetensors, GGUF, ONNX or a PyTorch file)");
}

}  // namespace

Catalog open_model(const std::filesystem::path& model) {
  if (current_budget() != nullptr) return open_detected(model);
  Budget budget;
  BudgetScope scope(budget);
  return open_detected(model);
}

}  // namespace modelfs
