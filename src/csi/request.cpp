// SPDX-License-Identifier: Apache-2.0
#include "csi/request.hpp"

#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <regex>

namespace modelfs::csi {
namespace {

namespace fs = std::filesystem;

grpc::Status refuse(grpc::StatusCode code, const std::string& message) { return {code, message}; }

// The modelfs -o options a pod spec may choose: they change how the tree is
// named and how fast it is served, never which files the daemon writes or
// reads (log_file, cache_dir, cache_max are the operator's), nor libfuse's
// own options (allow_other, default_permissions, fsname, ...).
struct Allowed {
  const char* name;
  const char* value;  // a regular expression its value matches; nullptr: takes none
};
constexpr Allowed kAllowed[] = {
    {"flat", nullptr},
    {"xattr", nullptr},
    {"noprefetch", nullptr},
    {"export", "float32"},
    {"remote_parallel", "[0-9]{1,3}"},
    {"remote_window", "[0-9]{1,12}[KMGkmg]?"},
    {"remote_timeout", "[0-9]{1,5}"},
    {"max_threads", "[0-9]{1,4}"},
    {"readahead_kb", "[0-9]{1,7}"},
    {"max_parse_mb", "[0-9]{1,7}"},
};
// What the plugin sets for every mount, allowed also in a PV's mountOptions.
constexpr const char* kImplied[] = {"ro"};

bool allowed_option(const std::string& option) {
  const auto equals = option.find('=');
  const std::string name = option.substr(0, equals);
  for (const auto& allowed : kAllowed) {
    if (name != allowed.name) continue;
    if (allowed.value == nullptr) return equals == std::string::npos;
    return equals != std::string::npos &&
           std::regex_match(option.substr(equals + 1), std::regex(allowed.value));
  }
  return false;
}

std::string allowed_list() {
  std::string list;
  for (const auto& allowed : kAllowed) {
    if (!list.empty()) list += ", ";
    list += allowed.name;
    if (allowed.value != nullptr) list += allowed.name == std::string("export") ? "=float32" : "=N";
  }
  return list;
}

// Splits a comma list; each piece trimmed, empty ones dropped.
void add_options(const std::string& list, std::vector<std::string>& options) {
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    std::string piece = list.substr(start, comma - start);
    piece.erase(0, piece.find_first_not_of(" \t"));
    piece.erase(piece.find_last_not_of(" \t") + 1);
    if (!piece.empty()) options.push_back(piece);
    start = comma + 1;
  }
}

grpc::Status read_options(const v1::NodePublishVolumeRequest& request, std::vector<std::string>& out) {
  std::vector<std::string> options;
  if (const auto it = request.volume_context().find("options"); it != request.volume_context().end())
    add_options(it->second, options);
  // A PV's mountOptions arrive as mount flags: the same list applies.
  for (const auto& flag : request.volume_capability().mount().mount_flags()) add_options(flag, options);
  std::string refused;
  for (const auto& option : options) {
    if (std::find(std::begin(kImplied), std::end(kImplied), option) != std::end(kImplied)) continue;
    if (allowed_option(option)) {
      if (std::find(out.begin(), out.end(), option) == out.end()) out.push_back(option);
      continue;
    }
    // The name only: a value may be a path the pod author should not see echoed.
    if (!refused.empty()) refused += ", ";
    refused += option.substr(0, option.find('='));
  }
  if (!refused.empty())
    return refuse(grpc::StatusCode::INVALID_ARGUMENT, "options not allowed in a volume's attributes: " +
                                                          refused + " (allowed: " + allowed_list() + ")");
  return grpc::Status::OK;
}

bool beneath(const fs::path& path, const fs::path& root) {
  const auto relative = path.lexically_relative(root);
  return !relative.empty() && *relative.begin() != "..";
}

grpc::Status read_local_source(const std::string& source, const Config& config, std::string& model) {
  if (config.local_root.empty())
    return refuse(grpc::StatusCode::PERMISSION_DENIED,
                  "source " + source +
                      " is a path on the node; this plugin mounts node paths only beneath "
                      "a root its operator configures (--local-root), and none is configured");
  const fs::path path(source);
  if (!path.is_absolute())
    return refuse(grpc::StatusCode::INVALID_ARGUMENT,
                  "source " + source +
                      " is neither a URL (http://, https://, s3://, hf://, oci://) nor an "
                      "absolute path");
  // Lexically first, so that nothing outside the root is even looked at.
  const fs::path root(config.local_root);
  if (!beneath(path.lexically_normal(), root))
    return refuse(grpc::StatusCode::PERMISSION_DENIED,
                  "source " + source + " is outside the plugin's --local-root " + config.local_root);
  char resolved[PATH_MAX];
  if (::realpath(source.c_str(), resolved) == nullptr) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR)
      return refuse(grpc::StatusCode::NOT_FOUND, "source " + source + ": " + std::strerror(error));
    return refuse(grpc::StatusCode::PERMISSION_DENIED, "source " + source + ": " + std::strerror(error));
  }
  // A link beneath the root may point anywhere: where it ends is checked.
  char real_root[PATH_MAX];
  if (::realpath(config.local_root.c_str(), real_root) == nullptr || !beneath(resolved, real_root))
    return refuse(grpc::StatusCode::PERMISSION_DENIED,
                  "source " + source + " resolves outside the plugin's --local-root " + config.local_root);
  model = resolved;
  return grpc::Status::OK;
}

grpc::Status read_source(const std::string& source, const Config& config, std::string& model) {
  const auto scheme_end = source.find("://");
  if (scheme_end == std::string::npos) return read_local_source(source, config, model);
  static const std::string kSchemes[] = {"http", "https", "s3", "hf", "oci"};
  const std::string scheme = source.substr(0, scheme_end);
  if (std::find(std::begin(kSchemes), std::end(kSchemes), scheme) == std::end(kSchemes))
    return refuse(grpc::StatusCode::INVALID_ARGUMENT,
                  "source scheme " + scheme + ":// is not one modelfs mounts (http, https, s3, hf, oci)");
  model = source;
  return grpc::Status::OK;
}

}  // namespace

const std::vector<std::string>& secret_keys() {
  static const std::vector<std::string> keys = {"HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                "AWS_SESSION_TOKEN"};
  return keys;
}

std::string shown_source(const std::string& source) {
  const auto scheme = source.find("://");
  if (scheme == std::string::npos) return source;
  std::string shown = source.substr(0, source.find_first_of("?#"));
  const auto host = scheme + 3;
  const auto at = shown.find('@', host);
  if (at != std::string::npos && at < shown.find('/', host)) shown.erase(host, at + 1 - host);
  return shown;
}

std::string normal_target(const std::string& target_path) {
  fs::path target(target_path);
  if (!target.is_absolute()) return {};
  target = target.lexically_normal();
  std::string text = target.string();
  while (text.size() > 1 && text.back() == '/') text.pop_back();
  return text;
}

grpc::Status read_publish(const v1::NodePublishVolumeRequest& request, const Config& config, Publish& out) {
  if (request.volume_id().empty()) return refuse(grpc::StatusCode::INVALID_ARGUMENT, "volume_id is missing");
  if (request.target_path().empty())
    return refuse(grpc::StatusCode::INVALID_ARGUMENT, "target_path is missing");
  if (!request.has_volume_capability())
    return refuse(grpc::StatusCode::INVALID_ARGUMENT, "volume_capability is missing");
  out.volume_id = request.volume_id();
  out.target = normal_target(request.target_path());
  if (out.target.empty() || out.target == "/")
    return refuse(grpc::StatusCode::INVALID_ARGUMENT,
                  "target_path " + request.target_path() + " is not absolute");
  const auto& capability = request.volume_capability();
  if (capability.has_block())
    return refuse(grpc::StatusCode::FAILED_PRECONDITION,
                  "a model is a file system, not a block device: use a mount volume");
  if (!capability.has_mount())
    return refuse(grpc::StatusCode::INVALID_ARGUMENT, "volume_capability names no access type (mount)");
  // Every access mode is accepted and the mount is read-only whatever it
  // says: kubelet sends SINGLE_NODE_WRITER for every inline volume.
  const auto source = request.volume_context().find("source");
  if (source == request.volume_context().end() || source->second.empty())
    return refuse(grpc::StatusCode::INVALID_ARGUMENT,
                  "volume_context has no source (the model's URL or path)");
  out.source = source->second;
  if (auto status = read_options(request, out.options); !status.ok()) return status;
  if (auto status = read_source(out.source, config, out.model); !status.ok()) return status;
  for (const auto& [key, value] : request.secrets()) {
    const auto& keys = secret_keys();
    if (std::find(keys.begin(), keys.end(), key) != keys.end())
      out.secrets[key] = value;
    else
      spdlog::warn("volume {}: secret key {} is not one modelfs reads; ignored", out.volume_id, key);
  }
  return grpc::Status::OK;
}

}  // namespace modelfs::csi
