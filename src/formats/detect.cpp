// SPDX-License-Identifier: Apache-2.0
// Format detection and dispatch: the only place that knows every reader.
#include <algorithm>
#include <array>
#include <cstring>
#include <system_error>

#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/formats/gguf.hpp"
#include "modelfs/formats/onnx.hpp"
#include "modelfs/formats/pt2.hpp"
#include "modelfs/formats/safetensors.hpp"
#include "modelfs/formats/torch.hpp"

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
    FormatReader{"safetensors index", safetensors::probe_index_file, safetensors::open_index_file,
                 nullptr, nullptr},
    FormatReader{"gguf", gguf::probe_file, gguf::open_file, gguf::probe_folder, gguf::open_folder},
    // torch.save, TorchScript and PT2 (open_zip_container above).
    FormatReader{"pytorch", torch::probe_zip, open_zip_container, nullptr, nullptr},
    FormatReader{"pytorch legacy", torch::probe_legacy, torch::open_legacy, nullptr, nullptr},
    FormatReader{"pytorch sharded", nullptr, nullptr, torch::probe_folder, torch::open_folder},
    // ONNX has no magic: probed last, by a bounded trial parse of its first
    // fields, so that every format with a magic is recognised before it.
    FormatReader{"onnx", onnx::probe_file, onnx::open_file, nullptr, nullptr},
};

}  // namespace

std::span<const FormatReader> format_readers() { return kReaders; }

namespace {

Catalog open_detected(const std::filesystem::path& model, IntegrityChecks* checks) {
  std::error_code ec;
  const auto status = std::filesystem::status(model, ec);
  if (ec || !std::filesystem::exists(status))
    throw ModelError(model.string(), "file", std::nullopt,
                     "cannot open: " + (ec ? ec.message() : std::string("No such file or directory")));

  if (std::filesystem::is_directory(status)) {
    for (const auto& reader : kReaders)
      if (reader.probe_folder && reader.probe_folder(model)) return reader.open_folder(model, checks);
    throw ModelError(model.string(), "folder", std::nullopt,
                     "holds no model modelfs can mount as a whole (looked for "
                     "*.safetensors.index.json, *.bin.index.json and *-00001-of-NNNNN.gguf); "
                     "name a model file instead");
  }

  const ModelFile file = ModelFile::open(model, checks);
  auto head = file.mapped->bytes().first(std::min<uint64_t>(file.mapped->size(), 4096));
  for (const auto& reader : kReaders)
    if (reader.probe_file && reader.probe_file(head)) return reader.open_file(file);
  throw ModelError(model.string(), "unknown", 0,
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
