// SPDX-License-Identifier: Apache-2.0
// NodePublishVolume and NodeUnpublishVolume: one modelfs daemon a published
// target, started in a session of its own so that it outlives the plugin.
// Calls for one target are served one at a time; calls for others, side by
// side.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "csi.pb.h"
#include "csi/plugin.hpp"
#include "csi/request.hpp"

namespace modelfs::csi {

class Volumes {
 public:
  explicit Volumes(Config config) : config_(std::move(config)) {}

  grpc::Status publish(const v1::NodePublishVolumeRequest& request);
  grpc::Status unpublish(const v1::NodeUnpublishVolumeRequest& request);

 private:
  // Holds a target's lock; the lock is forgotten when nobody holds or waits for it.
  class TargetLock {
   public:
    TargetLock(Volumes& volumes, const std::string& target);
    ~TargetLock();
    TargetLock(const TargetLock&) = delete;
    TargetLock& operator=(const TargetLock&) = delete;

   private:
    Volumes& volumes_;
    std::string target_;
    std::shared_ptr<std::mutex> mutex_;
  };

  grpc::Status mount(const Publish& publish);

  const Config config_;
  std::mutex locks_mutex_;
  std::map<std::string, std::shared_ptr<std::mutex>> locks_;
};

}  // namespace modelfs::csi
