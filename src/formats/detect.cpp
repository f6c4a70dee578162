// Format detection and dispatch: the only place that knows every reader.
#include <algorithm>
#include <array>
#include <cstring>
#include <system_error>

#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/formats/gguf.hpp"
#include "modelfs/formats/onnx.hpp"
#include "modelfs/formats/safetensors.hpp"

namespace modelfs {
namespace {

bool starts_with(std::span<const std::byte> head, std::string_view magic) {
  return head.size() >= magic.size() && std::memcmp(head.data(), magic.data(), magic.size()) == 0;
}

bool never_a_folder(const std::filesystem::path&) { return false; }

const std::array kReaders{
    FormatReader{"safetensors", safetensors::probe_file, safetensors::probe_folder,
                 safetensors::open},
    FormatReader{"safetensors index", safetensors::probe_index_file, never_a_folder,
                 safetensors::open},
    FormatReader{"gguf", gguf::probe_file, gguf::probe_folder, gguf::open},
    // ONNX has no magic: probed last, by a bounded trial parse of its first
    // fields, so that every format with a magic is recognised before it.
    FormatReader{"onnx", onnx::probe_file, never_a_folder, onnx::open},
};

// Formats recognised by their magic bytes whose readers have not landed yet:
// refusing them by name beats calling a known model "not a model".
struct KnownMagic {
  std::string_view magic;
  std::string_view format;
};
constexpr KnownMagic kNotYetRead[] = {
    {"PK\x03\x04", "ZIP archive (torch.save, TorchScript or PT2)"},
    {"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", "legacy torch.save"},
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
                     "*.safetensors.index.json and *-00001-of-NNNNN.gguf); name a model "
                     "file instead");
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
                       " bytes; expected safetensors, GGUF or ONNX)");
}

}  // namespace modelfs
