// SPDX-License-Identifier: Apache-2.0
#pragma once
// The loop that takes FUSE requests from the kernel and answers them.
//
// Threads wait on the device for requests and answer them, as in libfuse's
// multi-threaded loop, but how many may wait there at once follows the
// requests:
// - a request other than READ is answered from the tree in memory, so one
//   thread on the device is enough: a walk of the tree (one request at a
//   time) is served by one thread, as with -s;
// - a READ that finds further requests waiting, or that may wait itself for
//   the disk or a server (expect_long_request), lets one more thread onto
//   the device, starting one if none is idle, up to max_threads; a READ
//   that finds none waiting lets one fewer.
// Threads over the number allowed wait idle, off the device.
//
// Why: libfuse's loop keeps every worker it ever started waiting on the
// device, and the kernel gives each request to the one that has waited
// longest, so after any burst of reads a walk goes round all of them and
// costs about half again as much CPU as on one thread; one thread alone
// serves reads side by side poorly, and one slow read would hold up the
// whole mount (bench/results/2026-12-01_loop2.md).
#include <fuse_lowlevel.h>

namespace modelfs {

// Serves `session` until it ends: unmounted, or a signal that libfuse's
// handlers turn into the session's exit. The calling thread only waits for
// that end (it alone takes those signals); requests are served by up to
// `max_threads` threads of the loop's own. Returns 0 or a negative errno
// of the device.
int serve_session(fuse_session* session, unsigned max_threads);

// Called by a request's handler before something that may wait long (a
// READ from a server, or of pages not in memory): another thread is let
// onto the device. A no-op on a thread the loop did not start (-s).
void expect_long_request();

}  // namespace modelfs
