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
#include "modelfs/formats/safetensors.hpp"
#include "modelfs/formats/torch.hpp"

namespace modelfs {
namespace {

bool never_a_folder(const std::filesystem::path&) { return false; }
bool never_a_file(std::span<const std::byte>) { return false; }

const std::array kReaders{
    FormatReader{"safetensors", safetensors::probe_file, safetensors::probe_folder,
                 safetensors::open},
    // Before the safetensors index, whose probe takes any weight_map JSON;
    // this one takes only those whose shards are torch.save files.
    FormatReader{"pytorch index", torch::probe_index_file, never_a_folder, torch::open_index},
    FormatReader{"safetensors index", safetensors::probe_index_file, never_a_folder,
                 safetensors::open},
    FormatReader{"gguf", gguf::probe_file, gguf::probe_folder, gguf::open},
    // torch.save and TorchScript; PT2 archives share the container, and
    // open_zip hands them to the PT2 reader (their records are only known
    // from the central directory, past the probed head).
    FormatReader{"pytorch", torch::probe_zip, never_a_folder, torch::open_zip},
    FormatReader{"pytorch legacy", torch::probe_legacy, never_a_folder, torch::open_legacy},
    FormatReader{"pytorch sharded", never_a_file, torch::probe_folder, torch::open_index},
    // ONNX has no magic: probed last, by a bounded trial parse of its first
    // fields, so that every format with a magic is recognised before it.
    FormatReader{"onnx", onnx::probe_file, never_a_folder, onnx::open},
};

}  // namespace

std::span<const FormatReader> format_readers() { return kReaders; }

namespace {

Catalog open_detected(const std::filesystem::path& model) {
  std::error_code ec;
  const auto status = std::filesystem::status(model, ec);
  if (ec || !std::filesystem::exists(status))
    throw ModelError(model.string(), "file", std::nullopt,
                     "cannot open: " + (ec ? ec.message() : std::string("No such file or directory")));

  if (std::filesystem::is_directory(status)) {
    for (const auto& reader : kReaders)
      if (reader.probe_folder(model)) return reader.open(model);
    throw ModelError(model.string(), "folder", std::nullopt,
                     "holds no model modelfs can mount as a whole (looked for "
                     "*.safetensors.index.json, *.bin.index.json and *-00001-of-NNNNN.gguf); "
                     "name a model file instead");
  }

  auto file = MappedFile::open(model);
  auto head = file->bytes().first(std::min<uint64_t>(file->size(), 4096));
  for (const auto& reader : kReaders)
    if (reader.probe_file(head)) return reader.open(model);
  throw ModelError(model.string(), "unknown", 0,
                   "not a model file modelfs recognises (" + std::to_string(file->size()) +
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
