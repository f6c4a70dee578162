// SPDX-License-Identifier: Apache-2.0
#pragma once
// The modelfs program's guard for reads of a model's mapping
// (modelfs/mapped_bytes.hpp): a fault reading a file that shrank under the
// mount fails that read (ModelError: EIO at the FUSE boundary) instead of
// killing the daemon. It needs a process-wide SIGBUS handler, which is the
// program's to install, never the library's.
//
// How: the handler jumps back (siglongjmp) to the guard of the faulting
// thread, and passes any fault outside a guard to the handler that was
// there before (the default one: the process dies as it would have;
// AddressSanitizer's: its report). A jump runs no destructor: the guarded
// bodies hold only trivially destructible objects (mapped_bytes.hpp).
namespace modelfs::cli {

// Installs the SIGBUS handler and sets the library's mapped-read guard to
// it, once per process; before any model is read (main, the unit tests).
void install_sigbus_guard();

}  // namespace modelfs::cli
