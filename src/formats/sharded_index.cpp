// SPDX-License-Identifier: Apache-2.0
#include "formats/sharded_index.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "formats/json_limits.hpp"
#include "formats/model_folder.hpp"
#include "io/budget_charge.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"

namespace modelfs {

std::vector<std::filesystem::path> index_files_in(const std::filesystem::path& folder,
                                                  std::initializer_list<std::string_view> suffixes) {
  auto is_index_name = [&](const std::filesystem::path& p) {
    const std::string name = p.filename().string();
    for (std::string_view suffix : suffixes)
      if (name.size() > suffix.size() && name.ends_with(suffix)) return true;
    return false;
  };
  std::vector<std::filesystem::path> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec))
    if (is_index_name(entry.path()) && entry.is_regular_file(ec)) found.push_back(entry.path());
  std::sort(found.begin(), found.end());
  return found;
}

ModelFile single_index_in(const std::filesystem::path& folder,
                          std::initializer_list<std::string_view> suffixes, const ShardedFormat& format,
                          IntegrityChecks* checks) {
  const auto indexes = index_files_in(folder, suffixes);
  if (indexes.size() != 1) {
    std::string names;
    for (const auto& p : indexes) names += (names.empty() ? "" : ", ") + p.filename().string();
    throw ModelError(folder.string(), std::string(format.index), std::nullopt,
                     "folder holds " + std::to_string(indexes.size()) + " *" +
                         std::string(*suffixes.begin()) + " files" +
                         (names.empty() ? std::string() : " (" + names + ")") + "; name the one to mount");
  }
  return ModelFile::open(indexes.front(), checks);
}

Catalog open_sharded_index(const ModelFile& index_model, const ShardedFormat& format,
                           const OpenShard& open_shard) {
  const std::filesystem::path& index_path = index_model.path;
  const std::string index_name = index_path.string();
  auto refuse = [&](const std::string& reason) {
    return ModelError(index_name, std::string(format.index), std::nullopt, reason);
  };
  const auto& index_file = index_model.mapped;
  const auto bytes = index_file->read(0, index_file->size());
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  nlohmann::json index = parse_json_limited(text, index_name, format.index, 0, format.max_json_depth);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw refuse("no \"weight_map\" object mapping tensor names to shard files");
  if (index.contains("metadata") && !index["metadata"].is_object())
    throw refuse("\"metadata\" is not an object");

  std::map<std::string, std::set<std::string>> names_by_shard;
  for (auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) throw refuse("weight_map entry \"" + tensor + "\" is not a file name");
    names_by_shard[shard.get<std::string>()].insert(tensor);
  }
  if (names_by_shard.empty()) throw refuse("weight_map is empty");
  // Every shard opened inside the index's folder (model_folder.hpp) before
  // any is read, and read from what was opened.
  const ModelFolder folder = ModelFolder::of_file(index_path, std::string(format.index));
  std::map<std::string, std::shared_ptr<const MappedFile>> mapped_shards;
  std::vector<std::string> names;
  for (const auto& entry : names_by_shard) names.push_back(entry.first);
  auto opened = folder.open_all(names, format.head_bytes, format.tail_bytes);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    auto& shard = opened[i];
    if (shard.problem == ModelFolder::Problem::NotAName)
      throw refuse("weight_map names shard \"" + name +
                   "\", which is not a file name inside the index's folder (it " + shard.reason + ")");
    if (!shard) throw refuse("weight_map names shard \"" + name + "\", which " + shard.reason);
    mapped_shards.emplace(name, std::move(shard.file));
  }
  opened.clear();

  Catalog catalog;
  catalog.format = std::string(format.catalog);
  catalog.mtime = index_file->mtime();
  catalog.files.push_back(index_path.filename().string());
  nlohmann::json shards = nlohmann::json::object();
  std::unordered_map<std::string, std::string> shard_of;  // tensor name -> the shard holding it
  for (const auto& [shard, expected] : names_by_shard) {
    const auto& mapped = mapped_shards.at(shard);
    Catalog part = open_shard(ModelFile{mapped->display_name(), mapped, index_model.checks}, shard);
    catalog.files.push_back(shard);
    shards[shard] = std::move(part.metadata);
    for (const auto& tensor : part.tensors()) {
      const std::string name(tensor.name);
      if (auto [first, added] = shard_of.emplace(name, shard); !added)
        throw refuse("tensor \"" + name + "\" of " + shard + " is also stored in another shard (" +
                     first->second + ")");
      if (!expected.count(name))
        spdlog::warn("{}: tensor \"{}\" is not listed in {}'s weight_map; mounted anyway", shard, tensor.name,
                     index_path.filename().string());
      catalog.add(tensor);
    }
    for (const auto& name : expected)
      if (auto holder = shard_of.find(name); holder == shard_of.end() || holder->second != shard)
        throw refuse("weight_map places tensor \"" + name + "\" in " + shard + ", which does not hold it");
  }
  catalog.metadata["index"] = index.value("metadata", nlohmann::json::object());
  catalog.metadata["shards"] = std::move(shards);
  return catalog;
}

}  // namespace modelfs
