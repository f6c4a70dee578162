// SPDX-License-Identifier: Apache-2.0
#pragma once
// Serving a Tree over FUSE (libfuse3 low-level API). The operations know
// nothing of formats: they read the immutable inode table and hand slices of
// the mapped model files to the kernel.
#include <fuse_lowlevel.h>

#include <functional>
#include <string>

#include "modelfs/tree.hpp"

namespace modelfs {

struct ServeOptions {
  std::string mountpoint;
  bool foreground = false;
  // One thread answers every request (-s, libfuse's own loop). Otherwise
  // loop.hpp's, with up to `max_threads` workers (-o max_threads).
  bool single_thread = false;
  unsigned max_threads = 10;
  // Readahead of the mount's backing device, in KiB; 0 leaves the kernel's
  // default (128 KiB). Larger requests are the biggest lever on sequential
  // throughput (docs/performance.md, "Readahead"). Needs root; skipped with a note otherwise.
  unsigned readahead_kb = 0;
  // Serve user.modelfs.dtype and user.modelfs.shape as extended attributes.
  // Off by default: the kernel then never asks again (ENOSYS), which spares
  // `ls -l` two round trips a file.
  bool xattrs = false;
  // Read ahead of sequential readers from a thread of the daemon's own
  // (prefetcher.hpp); -o noprefetch turns it off.
  bool prefetch = true;
  // Called once the mount is live and before the daemon detaches, so the
  // CLI can say where the model is mounted while stderr still reaches the user.
  std::function<void()> on_mounted;
  // Called after daemonizing, so logging can move off stderr.
  std::function<void()> on_daemonized;
};

// Mounts `tree` with the FUSE options in `args` and serves until unmounted
// or signalled (SIGINT, SIGTERM, SIGHUP unmount cleanly). Returns 0 on a
// clean exit, 1 when the mount failed; nothing is left mounted either way.
int serve(const Tree& tree, fuse_args& args, const ServeOptions& options);

}  // namespace modelfs
