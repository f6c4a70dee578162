// SPDX-License-Identifier: Apache-2.0
// modelfs-csi: the Kubernetes CSI node plugin. Serves the CSI Identity and
// Node services on a unix socket and mounts each published volume with a
// modelfs daemon of its own (docs/kubernetes.md, man/modelfs-csi.1).
#include <limits.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <utility>

#include "csi/plugin.hpp"
#include "csi/request.hpp"

namespace {

using modelfs::csi::Config;

void print_usage(std::ostream& out) {
  out << "usage: modelfs-csi --endpoint unix:///PATH/csi.sock --node-id NAME [options]\n"
         "\n"
         "Kubernetes CSI node plugin: mounts a model (a URL, or a path beneath --local-root)\n"
         "read-only at the target kubelet names, one modelfs daemon a volume.\n"
         "\n"
         "    --endpoint unix:///PATH  the socket to serve (default: $CSI_ENDPOINT)\n"
         "    --node-id NAME           this node's name, as NodeGetInfo answers it\n"
         "    --driver-name NAME       the driver's name (default csi.modelfs)\n"
         "    --cache-dir DIR          remote models' block cache, shared by every volume\n"
         "                             (default /var/cache/modelfs)\n"
         "    --local-root DIR         node paths beneath DIR may be mounted (default: none\n"
         "                             may; a pod's author writes the volume's source)\n"
         "    --state-dir DIR          the records of published targets (default: the\n"
         "                             socket's folder/state)\n"
         "    --modelfs PATH           the modelfs program (default: beside this one, else\n"
         "                             modelfs on PATH)\n"
         "    -V, --version            print the version\n"
         "    -h, --help               print this help\n";
}

// The driver's name as the specification allows it: at most 63 characters,
// alphanumeric at both ends, '-', '.' and alphanumerics between.
bool valid_driver_name(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (const char c : name)
    if (!alnum(c) && c != '-' && c != '.') return false;
  return true;
}

std::string default_modelfs() {
  char self[PATH_MAX];
  const ssize_t length = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (length > 0) {
    const auto beside =
        std::filesystem::path(std::string(self, static_cast<size_t>(length))).parent_path() / "modelfs";
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  const char* path = std::getenv("PATH");
  const std::string_view dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0, end = 0; end != std::string_view::npos; start = end + 1) {
    end = dirs.find(':', start);
    const std::string candidate = std::string(dirs.substr(start, end - start)) + "/modelfs";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "/usr/bin/modelfs";
}

// "unix:///a/b.sock" or "unix:/a/b.sock" (as gRPC and Kubernetes write it).
std::string socket_of(const std::string& endpoint) {
  for (const std::string_view prefix : {"unix://", "unix:"}) {
    if (endpoint.starts_with(prefix)) {
      const std::string path = modelfs::csi::normal_target(endpoint.substr(prefix.size()));
      if (!path.empty()) return path;
    }
  }
  return {};
}

int fail(const std::string& message) {
  std::cerr << "modelfs-csi: error: " << message << "\n";
  return 1;
}

// An existing folder, absolute and normalized; empty when it is not one.
std::string existing_folder(const std::string& given) {
  char resolved[PATH_MAX];
  if (::realpath(given.c_str(), resolved) == nullptr || !std::filesystem::is_directory(resolved)) return {};
  return resolved;
}

int run(int argc, char** argv) {
  Config config;
  config.driver_name = "csi.modelfs";
  config.cache_dir = "/var/cache/modelfs";
  const char* env_endpoint = std::getenv("CSI_ENDPOINT");
  std::string endpoint = env_endpoint ? env_endpoint : "";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      print_usage(std::cout);
      return 0;
    }
    if (arg == "-V" || arg == "--version") {
      std::cout << "modelfs-csi " << MODELFS_CSI_VERSION << "\n";
      return 0;
    }
    std::string value;
    const auto equals = arg.find('=');
    const bool joined = arg.starts_with("--") && equals != std::string::npos;
    if (joined) {
      value = arg.substr(equals + 1);
      arg.resize(equals);
    }
    const std::pair<const char*, std::string*> flags[] = {{"--endpoint", &endpoint},
                                                          {"--node-id", &config.node_id},
                                                          {"--driver-name", &config.driver_name},
                                                          {"--cache-dir", &config.cache_dir},
                                                          {"--local-root", &config.local_root},
                                                          {"--state-dir", &config.state_dir},
                                                          {"--modelfs", &config.modelfs}};
    const auto flag =
        std::find_if(std::begin(flags), std::end(flags), [&](const auto& f) { return arg == f.first; });
    if (flag == std::end(flags)) return fail("unknown option " + arg + " (modelfs-csi --help)");
    if (!joined && i + 1 >= argc) return fail(arg + " needs a value (modelfs-csi --help)");
    *flag->second = joined ? value : argv[++i];
  }
  config.socket = socket_of(endpoint);
  if (config.socket.empty())
    return fail("--endpoint must be unix:///ABSOLUTE/PATH (or set CSI_ENDPOINT), got '" + endpoint + "'");
  if (config.node_id.empty()) return fail("--node-id is required (the node's name)");
  if (!valid_driver_name(config.driver_name))
    return fail("--driver-name " + config.driver_name +
                ": at most 63 characters, alphanumeric at both ends, '-', '.' and alphanumerics between");
  if (!config.local_root.empty()) {
    const std::string root = existing_folder(config.local_root);
    if (root.empty()) return fail("--local-root " + config.local_root + ": not an existing folder");
    config.local_root = root;
  }
  if (config.state_dir.empty())
    config.state_dir = std::filesystem::path(config.socket).parent_path().string() + "/state";
  std::error_code ec;
  for (std::string* dir : {&config.state_dir, &config.cache_dir}) {
    std::filesystem::create_directories(*dir, ec);
    const std::string folder = existing_folder(*dir);
    if (folder.empty()) return fail(*dir + ": cannot create the folder");
    *dir = folder;
  }
  // The records name every published source: the plugin's alone.
  ::chmod(config.state_dir.c_str(), 0700);
  if (config.modelfs.empty()) config.modelfs = default_modelfs();
  return modelfs::csi::serve(config);
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_logger_mt("modelfs-csi"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
