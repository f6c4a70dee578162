// SPDX-License-Identifier: Apache-2.0
#include "formats/torch.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <ranges>

#include "formats/sharded_index.hpp"
#include "formats/torch_objects.hpp"
#include "formats/torch_save.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "io/unpickler.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/error.hpp"

namespace modelfs::torch {
namespace {

using torch_save::archive_folder;
using torch_save::trimmed;
using torch_save::walk_record;

using pickle::Kind;
using pickle::Value;

constexpr std::string_view kZipMagic = "PK\x03\x04";
// PROTO 2, LONG1 of 10 bytes: the magic number 0x1950a86a20f9469cfc6c
// (docs/formats.md, "Legacy torch.save").
constexpr std::string_view kLegacyMagic = "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";
constexpr std::string_view kLegacyMagicNumber = "\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";
constexpr int64_t kLegacyProtocolVersion = 1001;
// TorchScript source files are read (inflated) only to learn which
// attributes are parameters and buffers; larger ones are not worth it.
constexpr uint64_t kMaxScriptSourceBytes = uint64_t{16} << 20;

bool starts_with(std::span<const std::byte> head, std::string_view magic) {
  return head.size() >= magic.size() && std::memcmp(head.data(), magic.data(), magic.size()) == 0;
}

// The quoted names of a `__parameters__ = ["weight", "bias", ]` line.
std::vector<std::string> quoted_names(std::string_view line) {
  std::vector<std::string> names;
  size_t pos = 0;
  while ((pos = line.find('"', pos)) != std::string_view::npos) {
    const size_t end = line.find('"', pos + 1);
    if (end == std::string_view::npos) break;
    names.emplace_back(line.substr(pos + 1, end - pos - 1));
    pos = end + 1;
  }
  return names;
}

// TorchScript's code/ files declare, per class, which attributes are
// parameters and buffers; the pickle does not say.
void read_script_classes(const ZipArchive& zip, const std::string& prefix, WalkOptions& options) {
  const std::string code = prefix + "code/";
  for (const auto& member : zip.members()) {
    if (!member.name.starts_with(code) || !member.name.ends_with(".py") ||
        member.uncompressed_size > kMaxScriptSourceBytes)
      continue;
    std::string module = member.name.substr(code.size(), member.name.size() - code.size() - 3);
    std::ranges::replace(module, '/', '.');
    std::string text;
    try {
      text = std::string(zip.contents(member).view());
    } catch (const ModelError& e) {
      spdlog::warn("{}: TorchScript source not read, parameter/buffer kinds unknown: {}", options.file,
                   e.what());
      continue;
    }
    std::string current;
    // Lines one by one (std::views::split is beyond clang 14 with libstdc++ 12,
    // which the fuzz build uses).
    for (size_t start = 0, end = 0; start < text.size(); start = end + 1) {
      end = std::min(text.find('\n', start), text.size());
      const std::string_view line(text.data() + start, end - start);
      if (line.starts_with("class ")) {
        // No '(' or ':' (npos): npos - 6 still reaches the end of the line.
        current = module + "." + std::string(line.substr(6, line.find_first_of("(:", 6) - 6));
      } else if (!current.empty()) {
        const std::string_view body = line.substr(std::min(line.find_first_not_of(' '), line.size()));
        if (body.starts_with("__parameters__ ="))
          options.parameters_by_class[current] = quoted_names(body);
        else if (body.starts_with("__buffers__ ="))
          options.buffers_by_class[current] = quoted_names(body);
      }
    }
  }
}

std::string file_name(const std::filesystem::path& model) { return model.filename().string(); }

}  // namespace

bool probe_zip(std::span<const std::byte> head) { return starts_with(head, kZipMagic); }
bool probe_legacy(std::span<const std::byte> head) { return starts_with(head, kLegacyMagic); }

Catalog open_zip(const ModelFile& model) {
  return open_zip(model, ZipArchive::open(model.mapped, "ZIP archive"));
}

Catalog open_zip(const ModelFile& model, const ZipArchive& zip) {
  const auto& file = model.mapped;
  const std::string display = file->display_name();
  auto refuse = [&](const std::string& format, const std::string& reason) {
    return ModelError(display, format, std::nullopt, reason);
  };
  if (zip.members().empty()) throw refuse("ZIP archive", "archive is empty");

  const std::string prefix = archive_folder(zip);
  const ZipMember* data_pkl = zip.find(prefix + "data.pkl");
  if (!data_pkl) {
    // torch 1.0-1.3 described the module in JSON, its tensors in tensors/;
    // torch dropped that layout (1.13 cannot load it either).
    if (zip.find(prefix + "model.json"))
      throw refuse("torchscript",
                   "a TorchScript archive from before torch 1.4 (" + prefix + "model.json and tensors/, no " +
                       prefix +
                       "data.pkl): that old layout is not supported, and torch itself no longer loads it");
    throw refuse("ZIP archive", "holds no " + prefix + "data.pkl: not a torch.save or TorchScript archive");
  }
  const bool script = zip.find(prefix + "constants.pkl") != nullptr;
  const std::string format = script ? "torchscript" : "pytorch";
  WalkOptions options;
  options.file = display;
  options.format = format;
  options.source = file_name(model.path);
  options.collect_values = !script;

  nlohmann::json info = {{"serialization", "zip"},
                         {"archive", prefix.substr(0, prefix.empty() ? 0 : prefix.size() - 1)}};
  const ZipMember* version = zip.find(prefix + ".data/version");
  if (!version) version = zip.find(prefix + "version");
  if (version) {
    const std::string text = trimmed(zip.contents(*version).view());
    int value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value < 1 || value > kMaxArchiveVersion)
      throw refuse(format, "archive version \"" + text.substr(0, 20) + "\" is not one of 1.." +
                               std::to_string(kMaxArchiveVersion) + " (PyTorch's supported range)");
    info["version"] = value;
  }
  if (const ZipMember* order = zip.find(prefix + "byteorder")) {
    const std::string text = trimmed(zip.contents(*order).view());
    if (text != "little" && text != "big")
      throw refuse(format, "byteorder record says \"" + text.substr(0, 20) + "\", not little or big");
    options.byte_swap = text == "big";
    info["byteorder"] = text;
  }

  Catalog catalog = torch_save::torch_catalog(format, *file, file_name(model.path));
  if (script) read_script_classes(zip, prefix, options);

  auto data = walk_record(zip, *data_pkl, prefix + "data/", options, "", true);
  catalog.reserve(data.tensors.size());
  for (const auto& t : data.tensors) catalog.add(t);
  if (!script) catalog.metadata["values"] = std::move(data.values);
  info["protocol"] = data.protocol;
  nlohmann::json skipped = std::move(data.skipped_objects);
  if (script) {
    options.default_kind = "constant";
    auto constants = walk_record(zip, *zip.find(prefix + "constants.pkl"), prefix + "constants/", options,
                                 "constants", true);
    for (const auto& t : constants.tensors) catalog.add(t);
    for (auto& name : constants.skipped_objects) skipped.push_back(name);
  }
  catalog.metadata["torch"] = info;
  if (!skipped.empty()) catalog.metadata["skipped_objects"] = skipped;
  catalog.tensors_may_share_bytes = true;  // tied weights and views share storages
  if (model.checks)
    for (auto& check : zip.crc_checks()) model.checks->push_back(std::move(check));
  return catalog;
}

Catalog open_legacy(const ModelFile& model) {
  const auto& file = model.mapped;
  const std::string display = file->display_name();
  const std::string format = "pytorch";
  // Not made present here: the unpickler's cursor makes present what it
  // reads, and the counts below are read through file->read.
  const auto bytes = file->unchecked_bytes();
  uint64_t position = 0;
  auto fail = [&](uint64_t at, const std::string& reason) {
    return ModelError(display, "legacy torch.save", at, reason);
  };
  // The next pickle, and the offset it starts at.
  auto next = [&]() {
    const uint64_t at = position;
    pickle::Pickle p = pickle::unpickle(bytes.subspan(position), display, "legacy torch.save", position);
    position += p.end;
    return std::pair{std::move(p), at};
  };

  auto [magic, magic_at] = next();
  if (magic.root->kind != Kind::BigInt || magic.root->text != kLegacyMagicNumber)
    throw fail(magic_at, "first pickle is not the legacy torch.save magic number");
  auto [protocol, protocol_at] = next();
  if (!protocol.root->is_int() || protocol.root->integer != kLegacyProtocolVersion)
    throw fail(protocol_at, "protocol version is not " + std::to_string(kLegacyProtocolVersion));
  auto [sys_info, sys_info_at] = next();
  if (sys_info.root->kind != Kind::Dict) throw fail(sys_info_at, "sys_info is not a dict");
  nlohmann::json info = {{"serialization", "legacy"}, {"version", kLegacyProtocolVersion}};
  for (const auto& [key, value] : sys_info.root->entries)
    if (key->is_string() && key->text == "little_endian" && value->kind == Kind::Bool) {
      // Writers on big-endian hosts convert storages to little-endian.
      info["writer_little_endian"] = value->boolean;
    }

  auto [object, object_at] = next();
  // Element sizes of every storage, from the storage ids in the object.
  std::map<std::string, StorageId> ids;
  for (const Value& v : object.values) {
    if (v.kind != Kind::PersistentId || v.items.empty()) continue;
    auto id = parse_storage_id(*v.items[0], nullptr);
    if (!id) continue;
    auto [it, inserted] = ids.emplace(id->key, *id);
    if (!inserted && (it->second.type.element_size != id->type.element_size || it->second.numel != id->numel))
      throw fail(object_at, "storage " + id->key + " is referenced with two different types or sizes");
  }

  auto [keys, keys_at] = next();
  if (keys.root->kind != Kind::List) throw fail(keys_at, "storage key list is not a list");
  std::map<std::string, StorageBytes> storages;
  for (const Value* key : keys.root->items) {
    if (!key->is_string()) throw fail(keys_at, "storage key list holds a non-string");
    auto id = ids.find(key->text);
    if (id == ids.end())
      throw fail(position, "storage " + key->text +
                               " is listed but no tensor refers to it, so its element size is unknown");
    if (bytes.size() - position < 8)
      throw fail(position, "storage " + key->text + ": element count runs past the end of the file");
    const auto numel = load_le<int64_t>(file->read(position, 8));
    if (numel < 0 || static_cast<uint64_t>(numel) != id->second.numel)
      throw fail(position, "storage " + key->text + " holds " + std::to_string(numel) +
                               " elements, but the object says " + std::to_string(id->second.numel));
    auto length = checked_mul(static_cast<uint64_t>(numel), id->second.type.element_size);
    if (!length || !range_fits(position + 8, *length, bytes.size()))
      throw fail(position, "storage " + key->text + " runs past the end of the file");
    const StorageBytes storage{ByteSpan::mapped(file, position + 8, *length), position + 8};
    if (!storages.emplace(key->text, storage).second)
      throw fail(keys_at, "storage key " + key->text + " is listed twice");
    position += 8 + *length;
  }
  if (position != bytes.size())
    spdlog::warn("{}: legacy torch.save: {} bytes after the last storage are ignored", display,
                 bytes.size() - position);

  WalkOptions options;
  options.file = display;
  options.format = format;
  options.source = file_name(model.path);
  ObjectWalker walker(options, [&](const StorageId& id) {
    auto it = storages.find(id.key);
    if (it == storages.end())
      throw ModelError(display, "legacy torch.save", std::nullopt,
                       "storage " + id.key + " is not in the file's storage list");
    return it->second;
  });
  walker.walk(object.root, "", object.end);

  Catalog catalog = torch_save::torch_catalog(format, *file, file_name(model.path));
  catalog.reserve(walker.tensors().size());
  for (const auto& t : walker.tensors()) catalog.add(t);
  catalog.metadata["values"] = std::move(walker.values());
  catalog.metadata["torch"] = info;
  if (!object.unknown_globals.empty()) catalog.metadata["skipped_objects"] = object.unknown_globals;
  catalog.tensors_may_share_bytes = true;  // tied weights and views share storages
  return catalog;
}

namespace {

constexpr int kMaxIndexJsonDepth = 64;
constexpr std::string_view kIndexFormat = "pytorch index";

const std::initializer_list<std::string_view> kIndexSuffixes = {".bin.index.json", ".pt.index.json",
                                                                ".pth.index.json"};
// A ZIP shard is read from its end (the central directory), then its
// pickle near the start.
const ShardedFormat kSharded{kIndexFormat, "pytorch", kMaxIndexJsonDepth, 256 << 10, 256 << 10};

Catalog open_shard(const ModelFile& shard, const std::string&) {
  const std::filesystem::path& path = shard.path;
  const auto head = shard.mapped->read(0, std::min<uint64_t>(shard.mapped->size(), 64));
  if (probe_zip(head)) return open_zip(shard);
  if (probe_legacy(head)) return open_legacy(shard);
  throw ModelError(path.string(), std::string(kIndexFormat), 0,
                   "shard is neither a torch.save ZIP archive nor a legacy torch.save file");
}

}  // namespace

bool probe_index_file(std::span<const std::byte> head) {
  std::string_view text(reinterpret_cast<const char*>(head.data()), head.size());
  const auto start = text.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || text[start] != '{') return false;
  const auto map = text.find("\"weight_map\"");
  if (map == std::string_view::npos) return false;
  const auto shards = text.substr(map);
  const bool torch_shard = shards.find(".bin\"") != std::string_view::npos ||
                           shards.find(".pt\"") != std::string_view::npos ||
                           shards.find(".pth\"") != std::string_view::npos;
  return torch_shard && shards.find(".safetensors\"") == std::string_view::npos;
}

bool probe_folder(const std::filesystem::path& folder) {
  return !index_files_in(folder, kIndexSuffixes).empty();
}

Catalog open_index_file(const ModelFile& index) {
  Catalog catalog = open_sharded_index(index, kSharded, open_shard);
  catalog.export_hints.checkpoint_format = std::string(torch_save::kCheckpointFormat);
  catalog.tensors_may_share_bytes = true;
  return catalog;
}

Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks) {
  return open_index_file(single_index_in(folder, kIndexSuffixes, kSharded, checks));
}

}  // namespace modelfs::torch
