// SPDX-License-Identifier: Apache-2.0
#pragma once
// How a remote model (a URL) is fetched and cached: the caller's choice,
// passed to open_model (formats.hpp) and kept by each remote file it opens.
#include <cstdint>
#include <filesystem>

namespace modelfs {

struct RemoteOptions {
  std::filesystem::path dir;  // the cache; empty: $XDG_CACHE_HOME/modelfs or ~/.cache/modelfs
  // The most bytes this process's remote objects keep in the cache; 0: no
  // bound. Least recently used blocks are evicted (docs/remote.md).
  uint64_t max_bytes = 0;
  // How long one request may take, connecting and transferring, before it is
  // cut (and tried again, four tries in all; a read waits at most four).
  unsigned timeout_seconds = 20;
  // The most range requests in flight at once (each on a connection of its
  // own), and the most bytes fetched ahead of one sequential reader
  // (docs/remote.md, "Fetching").
  unsigned parallel = 16;
  uint64_t window_bytes = uint64_t{64} << 20;
};

}  // namespace modelfs
