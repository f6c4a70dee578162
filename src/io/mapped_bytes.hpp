// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one way the daemon's own code reads a model's mapping after mounting.
// A mapped file can shrink under the mount (truncated, or a storage error on
// its pages): a read of a page past its end is a SIGBUS, which would kill
// the process. Bytes handed to the kernel as iovecs never fault here (the
// kernel's copy fails and the reader gets EIO); the bytes the daemon copies
// or computes itself (a converted .npy, a strided view gathered, ggml blocks
// dequantized, the copied rest of a large read) are read under this guard,
// which turns such a fault into a ModelError for that read (EIO at the FUSE
// boundary).
//
// The guard is the program's, not the library's: a library must not
// install a process-wide signal handler in its host. The modelfs
// executable sets one at start (set_mapped_read_guard; cli/sigbus_guard.cpp
// holds the SIGBUS handler it installs). Without one (a host program that
// links libmodelfs.so), a guarded body simply runs: a file shrunk before a
// read is still refused by the per-read size check below (ServedRead), and
// only a file cut while its bytes are being copied faults, as it would in
// any program that reads a mapping.
//
// Whatever guard the program sets may leave the body by a jump that runs no
// destructor, so the guarded code holds only trivially destructible objects
// in every frame live while it reads mapped bytes: copy and convert loops
// into a caller's buffer. Work that allocates, locks or fetches
// (MappedFile::ensure) happens before, outside the guard.
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace modelfs {

// A program's guard: runs body(context), throwing ModelError when a read of
// mapped bytes in it faulted (what it wrote before then is left as it
// stands); an exception thrown by the body passes through; guards nest.
using MappedReadGuard = void (*)(void (*body)(void*), void* context);

// Sets the guard run_guarded runs bodies under (null: none, the default).
// Set before any model is read, by the program's main.
void set_mapped_read_guard(MappedReadGuard guard) noexcept;

// Runs body(context) under the program's guard, or as is when there is none.
void run_guarded(void (*body)(void*), void* context);

// body() under the guard (run_guarded).
template <typename Body>
void read_mapped(Body&& body) {
  using Callable = std::remove_reference_t<Body>;
  run_guarded([](void* callable) { (*static_cast<Callable*>(callable))(); },
              const_cast<void*>(static_cast<const void*>(&body)));
}

// `size` bytes from `from` (mapped) into `to`, under the guard.
void copy_mapped(void* to, const void* from, size_t size);

// The guard cannot see a file cut inside its last page: the rest of that
// page reads as zeros, without a fault. So while a ServedRead lives on a
// thread (the tree's reads: FUSE, --export), MappedFile::read looks up each
// local file's size once (fstat of its descriptor) and refuses bytes past
// it (ModelError: EIO), as it refuses bytes past the size it was mapped at.
class ServedRead {
 public:
  ServedRead();
  ~ServedRead();
  ServedRead(const ServedRead&) = delete;
  ServedRead& operator=(const ServedRead&) = delete;
};

// The size `fd` has now when a ServedRead lives on this thread (looked up
// once per file and read), else `mapped`: what a read of the file may reach.
uint64_t served_size(const void* file, int fd, uint64_t mapped);

}  // namespace modelfs
