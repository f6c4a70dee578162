// SPDX-License-Identifier: Apache-2.0
// Format detection and dispatch over the registry of readers (registry.cpp).
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "formats/format_reader.hpp"
#include "formats/registry.hpp"
#include "io/budget_charge.hpp"
#include "modelfs/error.hpp"
#include "remote/remote.hpp"

namespace modelfs {
namespace {

// "a, b or c", each name once, in order.
std::string one_of(std::span<const std::string_view> names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out.append(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ").append(names[i]);
  return out;
}

template <typename Field>
std::vector<std::string_view> distinct(Field field) {
  std::vector<std::string_view> out;
  for (const auto& reader : format_readers())
    if (const std::string_view value = reader.*field;
        !value.empty() && std::find(out.begin(), out.end(), value) == out.end())
      out.push_back(value);
  return out;
}

constexpr std::string_view kZipMagic = "PK\x03\x04";
constexpr std::string_view kEmptyZipMagic = "PK\x05\x06";

bool is_zip(std::span<const std::byte> head) {
  const std::string_view text(reinterpret_cast<const char*>(head.data()), head.size());
  return text.starts_with(kZipMagic) || text.starts_with(kEmptyZipMagic);
}

// A ZIP is opened once and offered to the archive readers in order; which
// one it is shows only in its central directory, past the probed head.
std::optional<Catalog> open_archive(const ModelFile& model) {
  const ZipArchive zip = within_budget(model.path.string(), "ZIP archive", "reading the model",
                                       [&] { return ZipArchive::open(model.mapped, "ZIP archive"); });
  for (const auto& reader : format_readers())
    if (reader.probe_archive && reader.probe_archive(zip))
      return within_budget(model.path.string(), reader.name, "reading the model",
                           [&] { return reader.open_archive(model, zip); });
  return std::nullopt;
}

Catalog open_file(const ModelFile& file);

// What every reader's probe_file is shown of a file.
constexpr uint64_t kHeadBytes = 4096;

// The index names tried in a remote folder, which cannot be listed.
std::vector<std::string_view> remote_index_names() {
  std::vector<std::string_view> out;
  for (const auto& reader : format_readers())
    out.insert(out.end(), reader.remote_index_names.begin(), reader.remote_index_names.end());
  return out;
}

bool is_missing(const ModelError& e) {
  // A folder's URL is a 404, or (a server that lists no folders) a 403.
  return e.reason().find("HTTP 404") != std::string::npos || e.reason().find("HTTP 403") != std::string::npos;
}

// A URL: a file, or a folder (ending in '/', an hf:// repository's root,
// or a name the server has no file for) read through its index.
Catalog open_remote(const std::string& url, IntegrityChecks* checks,
                    const std::shared_ptr<remote::Session>& session) {
  const remote::FetchProgress progress;  // a line on a terminal while a large header comes
  std::string folder = url;
  while (folder.ends_with('/')) folder.pop_back();
  const bool hub_root = url.starts_with("hf://") && std::count(url.begin() + 5, url.end(), '/') < 2;
  // The first of the index files the folder has.
  auto open_an_index = [&]() -> std::optional<Catalog> {
    for (const std::string_view name : remote_index_names()) {
      const std::string index = folder + "/" + std::string(name);
      try {
        return open_file(
            ModelFile{remote::display_url(index), remote::open(index, *session), checks, session});
      } catch (const ModelError& e) {
        if (!is_missing(e) || e.file() != remote::display_url(index)) throw;
      }
    }
    return std::nullopt;
  };
  if (!url.ends_with('/') && !hub_root) {
    try {
      return open_file(ModelFile{remote::display_url(url), remote::open(url, *session), checks, session});
    } catch (const ModelError& e) {
      if (!is_missing(e) || e.file() != remote::display_url(url)) throw;
      if (auto catalog = open_an_index()) return std::move(*catalog);
      throw;
    }
  }
  if (auto catalog = open_an_index()) return std::move(*catalog);
  std::string names;
  for (const std::string_view name : remote_index_names())
    names.append(names.empty() ? "" : ", ").append(name);
  throw ModelError(remote::display_url(url), "folder", std::nullopt,
                   "holds none of the index files modelfs looks for in a remote folder (" + names +
                       "); name a model file instead");
}

Catalog open_detected(const std::filesystem::path& model, const OpenOptions& options) {
  IntegrityChecks* const checks = options.checks;
  if (remote::is_url(model.native()))
    return open_remote(model.native(), checks, std::make_shared<remote::Session>(options.remote));
  std::error_code ec;
  const auto status = std::filesystem::status(model, ec);
  if (ec || !std::filesystem::exists(status))
    throw ModelError(model.string(), "file", std::nullopt,
                     "cannot open: " + (ec ? ec.message() : std::string("No such file or directory")));

  if (std::filesystem::is_directory(status)) {
    for (const auto& reader : format_readers())
      if (reader.probe_folder && reader.probe_folder(model))
        return within_budget(model.string(), reader.name, "reading the model",
                             [&] { return reader.open_folder(model, checks); });
    throw ModelError(model.string(), "folder", std::nullopt,
                     "holds no model modelfs can mount as a whole (looked for " +
                         one_of(distinct(&FormatReader::folder_holds)) + "); name a model file instead");
  }

  return open_file(ModelFile::open(model, checks));
}

Catalog open_file(const ModelFile& file) {
  const auto head = file.mapped->read(0, std::min<uint64_t>(file.mapped->size(), kHeadBytes));
  const auto open_with = [&](const FormatReader& reader) {
    return within_budget(file.path.string(), reader.name, "reading the model",
                         [&] { return reader.open_file(file); });
  };
  bool zip_tried = false;
  for (const auto& reader : format_readers()) {
    if (reader.probe_file && reader.probe_file(head)) return open_with(reader);
    // Archives are tried where the first archive reader stands in the order.
    if (reader.probe_archive && is_zip(head) && !zip_tried) {
      zip_tried = true;
      if (auto catalog = open_archive(file)) return std::move(*catalog);
    }
  }
  // Only once every reader has passed on the head: a few reads further in.
  for (const auto& reader : format_readers())
    if (reader.probe_past_head && reader.probe_past_head(*file.mapped, head.size())) return open_with(reader);
  throw ModelError(file.path.string(), "unknown", 0,
                   "not a model file modelfs recognises (" + std::to_string(file.mapped->size()) +
                       " bytes; expected " + one_of(distinct(&FormatReader::family)) + ")");
}

}  // namespace

Catalog open_model(const std::filesystem::path& model, const OpenOptions& options) {
  if (options.budget != nullptr) {
    BudgetScope scope(*options.budget);
    return open_detected(model, options);
  }
  // A budget bound by this project's own tests and fuzzers, which read
  // with one of their own.
  if (current_budget() != nullptr) return open_detected(model, options);
  Budget budget;
  BudgetScope scope(budget);
  return open_detected(model, options);
}

Catalog open_model(const std::filesystem::path& model, IntegrityChecks* checks) {
  return open_model(model, OpenOptions{.checks = checks, .remote = {}});
}

}  // namespace modelfs
