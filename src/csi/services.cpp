// SPDX-License-Identifier: Apache-2.0
// The CSI Identity and Node services on the plugin's unix socket. No
// Controller service: a node-only plugin (the CSIDriver says attachRequired:
// false), and gRPC answers UNIMPLEMENTED for every method not served here.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "csi.grpc.pb.h"
#include "csi/plugin.hpp"
#include "csi/request.hpp"
#include "csi/volumes.hpp"

namespace modelfs::csi {
namespace {

class Identity final : public v1::Identity::Service {
 public:
  explicit Identity(const Config& config) : config_(config) {}

  grpc::Status GetPluginInfo(grpc::ServerContext*, const v1::GetPluginInfoRequest*,
                             v1::GetPluginInfoResponse* response) override {
    response->set_name(config_.driver_name);
    response->set_vendor_version(MODELFS_CSI_VERSION);
    return grpc::Status::OK;
  }

  // None: no Controller service, no topology, no expansion.
  grpc::Status GetPluginCapabilities(grpc::ServerContext*, const v1::GetPluginCapabilitiesRequest*,
                                     v1::GetPluginCapabilitiesResponse*) override {
    return grpc::Status::OK;
  }

  // Ready when a mount can be made: the FUSE device and the modelfs program.
  grpc::Status Probe(grpc::ServerContext*, const v1::ProbeRequest*, v1::ProbeResponse* response) override {
    if (::access("/dev/fuse", R_OK | W_OK) != 0)
      return {grpc::StatusCode::FAILED_PRECONDITION, std::string("/dev/fuse: ") + std::strerror(errno) +
                                                         " (the plugin's container needs the device)"};
    if (::access(config_.modelfs.c_str(), X_OK) != 0)
      return {grpc::StatusCode::FAILED_PRECONDITION, config_.modelfs + ": " + std::strerror(errno)};
    response->mutable_ready()->set_value(true);
    return grpc::Status::OK;
  }

 private:
  const Config& config_;
};

class Node final : public v1::Node::Service {
 public:
  explicit Node(const Config& config) : config_(config), volumes_(config) {}

  grpc::Status NodePublishVolume(grpc::ServerContext*, const v1::NodePublishVolumeRequest* request,
                                 v1::NodePublishVolumeResponse*) override {
    return volumes_.publish(*request);
  }

  grpc::Status NodeUnpublishVolume(grpc::ServerContext*, const v1::NodeUnpublishVolumeRequest* request,
                                   v1::NodeUnpublishVolumeResponse*) override {
    return volumes_.unpublish(*request);
  }

  // None: no staging (kubelet would call NodeStageVolume first), no stats,
  // no expansion.
  grpc::Status NodeGetCapabilities(grpc::ServerContext*, const v1::NodeGetCapabilitiesRequest*,
                                   v1::NodeGetCapabilitiesResponse*) override {
    return grpc::Status::OK;
  }

  grpc::Status NodeGetInfo(grpc::ServerContext*, const v1::NodeGetInfoRequest*,
                           v1::NodeGetInfoResponse* response) override {
    response->set_node_id(config_.node_id);
    return grpc::Status::OK;
  }

 private:
  const Config& config_;
  Volumes volumes_;
};

// A plugin restarted in place finds the socket it left (its folder is a
// hostPath): a socket there is removed before binding, anything else is not.
bool prepare_socket(const std::string& socket) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(socket).parent_path(), ec);
  struct stat st {};
  if (::lstat(socket.c_str(), &st) != 0) return errno == ENOENT;
  if (!S_ISSOCK(st.st_mode)) {
    spdlog::error("{}: exists and is not a socket; not removed", socket);
    return false;
  }
  return ::unlink(socket.c_str()) == 0;
}

}  // namespace

int serve(const Config& config) {
  // The signals that stop the plugin are taken by a thread of its own
  // (sigwait), blocked in every other, the server's included.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  if (!prepare_socket(config.socket)) {
    spdlog::error("{}: cannot use as the plugin's socket", config.socket);
    return 1;
  }
  Identity identity(config);
  Node node(config);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + config.socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&identity);
  builder.RegisterService(&node);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    spdlog::error("{}: cannot listen on the socket", config.socket);
    return 1;
  }
  spdlog::info("modelfs-csi {} ({}, node {}) listening on {}", MODELFS_CSI_VERSION, config.driver_name,
               config.node_id, config.socket);
  std::thread waiter([&] {
    int signal = 0;
    while (::sigwait(&stop, &signal) != 0) {
    }
    spdlog::info("signal {}: stopping; published mounts keep serving", signal);
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  });
  server->Wait();
  waiter.join();
  ::unlink(config.socket.c_str());
  return 0;
}

}  // namespace modelfs::csi
