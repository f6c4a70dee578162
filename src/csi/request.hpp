// SPDX-License-Identifier: Apache-2.0
// A NodePublishVolume request checked and turned into what the mount needs:
// the model (a URL, or a node path beneath --local-root), the modelfs
// options a pod spec may choose, and the credentials for the daemon's
// environment. Everything here comes from whoever wrote the pod.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <string>
#include <vector>

#include "csi.pb.h"
#include "csi/plugin.hpp"

namespace modelfs::csi {

// The generated messages (package csi.v1 of src/csi/csi.proto).
namespace v1 = ::csi::v1;

struct Publish {
  std::string volume_id;
  std::string target;                          // absolute, normalized
  std::string source;                          // volume_context["source"] as given
  std::string model;                           // what modelfs is given: the URL, or the resolved path
  std::vector<std::string> options;            // allowed modelfs -o options, in order
  std::map<std::string, std::string> secrets;  // environment variables for the daemon
};

// OK and `out` filled, or the status to answer: INVALID_ARGUMENT for a
// missing or malformed field or a refused option, PERMISSION_DENIED for a
// node path without --local-root or outside it, NOT_FOUND for a node path
// that does not exist, FAILED_PRECONDITION for a block volume.
grpc::Status read_publish(const v1::NodePublishVolumeRequest& request, const Config& config, Publish& out);

// The target a request names, absolute and normalized; empty when it is not
// an absolute path.
std::string normal_target(const std::string& target_path);

// A source as logs and messages show it: a URL without what may be a
// credential (user:password@, a query such as a presigned signature).
std::string shown_source(const std::string& source);

// The secret keys a daemon is given (the variables modelfs reads).
const std::vector<std::string>& secret_keys();

}  // namespace modelfs::csi
