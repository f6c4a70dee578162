// SPDX-License-Identifier: Apache-2.0
#include "modelfs/model_folder.hpp"

#include <algorithm>

#include "modelfs/error.hpp"
#include "modelfs/remote.hpp"

namespace modelfs {
namespace fs = std::filesystem;
namespace {

bool is_dotdot_free(const fs::path& p) {
  return std::find(p.begin(), p.end(), "..") == p.end();
}

fs::path resolved_folder(const fs::path& folder, const fs::path& named, const std::string& format) {
  std::error_code ec;
  fs::path absolute = fs::absolute(folder, ec);
  if (!ec) absolute = fs::canonical(absolute, ec);
  if (ec)
    throw ModelError(named.string(), format, std::nullopt,
                     "cannot resolve the model's folder: " + ec.message());
  return absolute;
}

// models--ORG--NAME (datasets--, spaces--): a repository of the hub cache.
bool is_hub_repository(const fs::path& folder) {
  const std::string name = folder.filename().string();
  for (std::string_view kind : {"models--", "datasets--", "spaces--"})
    if (name.size() > kind.size() && name.starts_with(kind)) return true;
  return false;
}

}  // namespace

ModelFolder::ModelFolder(fs::path folder, bool remote) : folder_(std::move(folder)), remote_(remote) {
  // REPO/snapshots/REV, or a folder below it (a model in a subfolder of
  // the repository links to ../../../blobs/HASH).
  for (fs::path at = folder_; at.has_relative_path(); at = at.parent_path()) {
    const fs::path snapshots = at.parent_path();
    if (snapshots.filename() == "snapshots" && is_hub_repository(snapshots.parent_path())) {
      hub_blobs_ = snapshots.parent_path() / "blobs";
      break;
    }
  }
}

ModelFolder ModelFolder::of_file(const fs::path& model, const std::string& format) {
  if (remote::is_url(model.native())) return ModelFolder(remote::parent_url(model.native()), true);
  std::error_code ec;
  const fs::path absolute = fs::absolute(model, ec);
  if (ec)
    throw ModelError(model.string(), format, std::nullopt,
                     "cannot resolve the model's folder: " + ec.message());
  return ModelFolder(resolved_folder(absolute.parent_path(), model, format), false);
}

ModelFolder ModelFolder::at(const fs::path& folder, const std::string& format) {
  if (remote::is_url(folder.native())) {
    std::string url = folder.native();
    while (url.ends_with('/')) url.pop_back();
    return ModelFolder(url, true);
  }
  return ModelFolder(resolved_folder(folder, folder, format), false);
}

ModelFolder::Resolved ModelFolder::resolve(std::string_view name) const {
  auto refuse = [](Problem problem, std::string reason) {
    return Resolved{problem, {}, std::move(reason)};
  };
  if (name.empty()) return refuse(Problem::NotAName, "is empty");
  // Checked before a path is made of it: the system would read the name
  // as a C string and stop at the NUL.
  if (name.find('\0') != std::string_view::npos) return refuse(Problem::NotAName, "contains a NUL byte");
  const fs::path relative(name);
  if (relative.is_absolute())
    return refuse(Problem::NotAName, "is absolute; it must be relative to the model's folder");
  if (!is_dotdot_free(relative))
    return refuse(Problem::NotAName, "contains \"..\"; it must stay inside the model's folder");
  if (remote_) {
    if (name.find_first_of("?#%\\") != std::string_view::npos)
      return refuse(Problem::NotAName, "contains '?', '#', '%' or '\\', which a URL reads as more than a name");
    return Resolved{Problem::None, folder_.native() + "/" + std::string(name), {}};
  }
  std::error_code ec;
  fs::path resolved = fs::canonical(folder_ / relative, ec);
  if (ec) return refuse(Problem::Unresolvable, "cannot be opened: " + ec.message());
  // The folder itself (".") is inside; opening it is refused as a folder.
  const fs::path inside = resolved.lexically_relative(folder_);
  const bool in_hub_blobs = !hub_blobs_.empty() && resolved.parent_path() == hub_blobs_;
  if (!in_hub_blobs && (inside.empty() || inside.is_absolute() || !is_dotdot_free(inside)))
    return refuse(Problem::Outside, "resolves to " + resolved.string() + ", outside the model's folder " +
                                        folder_.string());
  return Resolved{Problem::None, std::move(resolved), {}};
}

}  // namespace modelfs
