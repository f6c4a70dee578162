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
// How: a process-wide SIGBUS handler, installed on first use, that jumps
// back (siglongjmp) to the guard of the faulting thread, and passes any
// fault outside a guard to the handler that was there before (the default
// one: the process dies as it would have; AddressSanitizer's: its report).
// A jump runs no destructor, so the guarded code must hold only trivially
// destructible objects in every frame live while it reads mapped bytes:
// copy and convert loops into a caller's buffer. Work that allocates, locks
// or fetches (MappedFile::ensure) happens before, outside the guard.
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace modelfs {

// Runs body(context) under the guard. Throws ModelError when a read of
// mapped bytes in it faulted (what it wrote before then is left as it
// stands); an exception thrown by the body passes through. Guards nest.
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
