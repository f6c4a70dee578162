// SPDX-License-Identifier: Apache-2.0
#pragma once
// The loop that takes FUSE requests from the kernel and answers them.
//
// Threads wait on the device for requests and answer them, as in libfuse's
// multi-threaded loop, but how many may wait there follows the requests:
// - after a READ, any number up to max_threads, and one more is woken or
//   started whenever none is left waiting (libfuse's rule): reads are
//   served side by side, and one that waits for the disk or a server never
//   holds up the others;
// - after a run of other requests (16), one: they are answered from the
//   tree in memory, so a walk of the tree (one request at a time) is served
//   by one thread, as with -s. The others, as they come back, wait off the
//   device.
//
// Why: libfuse's loop keeps every worker it ever started waiting on the
// device, and the kernel gives each request to the one that has waited
// longest, so after any burst of reads a walk goes round all of them, each
// woken cold, and costs far more than on one thread; one thread for every
// request serves readers at once poorly, and one slow read would hold up
// the whole mount (bench/results/2026-12-01_loop2.md).
#include <fuse_lowlevel.h>

namespace modelfs {

// Serves `session` until it ends: unmounted, or a signal that libfuse's
// handlers turn into the session's exit. The calling thread only waits for
// that end (it alone takes those signals); requests are served by up to
// `max_threads` threads of the loop's own. Returns 0 or a negative errno
// of the device.
int serve_session(fuse_session* session, unsigned max_threads);

}  // namespace modelfs
