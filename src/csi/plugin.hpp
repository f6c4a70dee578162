// SPDX-License-Identifier: Apache-2.0
// modelfs-csi: what the operator configured, and the server that serves the
// CSI Identity and Node services with it (services.cpp).
#pragma once

#include <string>

namespace modelfs::csi {

struct Config {
  std::string socket;       // the unix socket's path (--endpoint without unix://)
  std::string node_id;      // NodeGetInfo's answer
  std::string driver_name;  // GetPluginInfo's name; the CSIDriver object's
  std::string cache_dir;    // every daemon's -o cache_dir (empty: modelfs's own)
  std::string local_root;   // node paths beneath it may be mounted (empty: none)
  std::string state_dir;    // one record a published target
  std::string modelfs;      // the program run for each volume
};

// Serves until SIGTERM or SIGINT; returns the process's exit status. The
// daemons started keep serving after it returns.
int serve(const Config& config);

}  // namespace modelfs::csi
