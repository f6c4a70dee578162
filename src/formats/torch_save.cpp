// SPDX-License-Identifier: Apache-2.0
#include "formats/torch_save.hpp"

#include <string>

#include "io/trim.hpp"
#include "io/unpickler.hpp"
#include "modelfs/error.hpp"

namespace modelfs::torch_save {

std::string trimmed(std::string_view text) { return std::string(trim_blanks(text)); }

std::string archive_folder(const ZipArchive& zip) {
  if (zip.members().empty()) return "";
  const std::string& first = zip.members().front().name;
  const size_t slash = first.find('/');
  return slash == std::string::npos ? "" : first.substr(0, slash + 1);
}

SaveContents walk_record(const ZipArchive& zip, const ZipMember& member, const std::string& storage_folder,
                         torch::WalkOptions options, const std::string& name_prefix, bool in_file) {
  const std::string& format = options.format;
  const std::string& display = options.file;
  if (member.uncompressed_size > kMaxPickleBytes)
    throw ModelError(display, format, std::nullopt,
                     member.name + " is " + std::to_string(member.uncompressed_size) +
                         " bytes, over the limit of " + std::to_string(kMaxPickleBytes));
  const ByteSpan bytes = zip.contents(member);
  const bool offsets_in_file = in_file && member.stored();
  pickle::Pickle pickled =
      pickle::unpickle(bytes.span(), display, format, offsets_in_file ? zip.file_offset(member) : 0);
  options.pickle_in_file = offsets_in_file;
  torch::ObjectWalker walker(
      options, [&zip, in_file, display, format, storage_folder](const torch::StorageId& id) {
        const ZipMember* record = zip.find(storage_folder + id.key);
        if (!record)
          throw ModelError(display, format, std::nullopt,
                           "storage record " + storage_folder + id.key + " is missing from the archive");
        torch::StorageBytes out{zip.contents(*record), std::nullopt};
        if (record->stored() && in_file) out.file_offset = zip.file_offset(*record);
        return out;
      });
  walker.walk(pickled.root, name_prefix, pickled.end);
  return {std::move(walker.tensors()), std::move(walker.values()), pickled.unknown_globals, pickled.protocol};
}

SaveContents read_save(const ZipArchive& zip, torch::WalkOptions options, const std::string& name_prefix,
                       bool in_file) {
  const std::string prefix = archive_folder(zip);
  const ZipMember* data_pkl = zip.find(prefix + "data.pkl");
  if (!data_pkl)
    throw ModelError(options.file, options.format, zip.base(),
                     "nested archive holds no " + prefix + "data.pkl: not a torch.save archive");
  if (const ZipMember* order = zip.find(prefix + "byteorder")) {
    const std::string text = trimmed(zip.contents(*order).view());
    if (text != "little" && text != "big")
      throw ModelError(
          options.file, options.format, std::nullopt,
          "nested archive's byteorder record says \"" + text.substr(0, 20) + "\", not little or big");
    options.byte_swap = text == "big";
  }
  return walk_record(zip, *data_pkl, prefix + "data/", options, name_prefix, in_file);
}

}  // namespace modelfs::torch_save
