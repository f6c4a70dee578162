// Format detection and dispatch: the only place that knows every reader.
#include <algorithm>
#include <array>
#include <cstring>
#include <system_error>

#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/formats/safetensors.hpp"
#include "modelfs/formats/torch.hpp"

namespace modelfs {
namespace {

bool starts_with(std::span<const std::byte> head, std::string_view magic) {
  return head.size() >= magic.size() && std::memcmp(head.data(), magic.data(), magic.size()) == 0;
}

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
    // torch.save and TorchScript; PT2 archives share the container and are
    // refused by name inside.
    FormatReader{"pytorch", torch::probe_zip, never_a_folder, torch::open_zip},
    FormatReader{"pytorch legacy", torch::probe_legacy, never_a_folder, torch::open_legacy},
    FormatReader{"pytorch sharded", never_a_file, torch::probe_folder, torch::open_index},
};

// Formats recognised by their magic bytes whose readers have not landed yet:
// refusing them by name beats calling a known model "not a model".
struct KnownMagic {
  std::string_view magic;
  std::string_view format;
};
constexpr KnownMagic kNotYetRead[] = {
    {"GGUF", "GGUF"},
};

}  // namespace

std::span<const FormatReader> format_readers() { return kReaders; }

Catalog open_model(const std::filesystem::path& model) {
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
                     "*.safetensors.index.json and *.bin.index.json); name a model file instead");
  }

  auto file = MappedFile::open(model);
  auto head = file->bytes().first(std::min<uint64_t>(file->size(), 4096));
  for (const auto& reader : kReaders)
    if (reader.probe_file(head)) return reader.open(model);
  for (const auto& known : kNotYetRead)
    if (starts_with(head, known.magic))
      throw ModelError(model.string(), std::string(known.format), 0,
                       "this format is recognised but not yet supported by this modelfs build");
  throw ModelError(model.string(), "unknown", 0,
                   "not a model file modelfs recognises (" + std::to_string(file->size()) +
                       " bytes; expected safetensors or a PyTorch file)");
}

}  // namespace modelfs
