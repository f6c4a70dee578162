// SPDX-License-Identifier: Apache-2.0
#pragma once
// The process libhdf5 runs in. libhdf5 has a long record of memory-safety
// bugs on crafted files, so it never runs in the daemon or the CLI: each
// HDF5 file is walked once, at open, by a forked child that
//   - keeps one descriptor, its end of a SOCK_SEQPACKET socketpair, and
//     closes every other;
//   - runs under rlimits (data: what it inherited plus what the model's
//     budget has left and a fixed margin for libhdf5, so a crafted file
//     cannot make it grow past the budget as the parent cannot; address
//     space: that and room for malloc's reservations; CPU seconds; no
//     file writes, no core, few descriptors),
//     PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, and a seccomp filter that
//     kills it on any system call but reading and writing its socket,
//     memory management, futex and exiting (so it cannot open a file);
//   - reads the file only by asking the parent for (offset, length) over
//     the socket: the parent answers from the model's mapping through
//     MappedFile::read, bounds-checked to the HDF5 bytes' range (a remote
//     model fetches what is asked, a .keras member is a sub-range);
//   - sends back records (packets), which the parent validates itself
//     (hdf5.cpp): nothing the child says is trusted.
// The parent waits with a deadline and kills a child past it; a child that
// dies is a one-line ModelError naming the signal.
//
// Why fork() is safe here although the process may have threads (remote
// fetch threads; the daemon opens models before its FUSE threads start):
// the child runs only this file's code and libhdf5, never a lock another
// thread may have held. Between fork and the filter it makes only
// async-signal-safe calls (open, read and close of /proc/self/statm, to
// measure what it inherited; dup2, close_range, setrlimit, prctl, getppid)
// and builds the seccomp program in memory allocated before the fork.
// Afterwards libhdf5 allocates with malloc, which glibc makes usable in a
// forked child (fork takes every malloc arena lock and releases them in
// both processes). libhdf5 is initialised only in the child, never in the
// parent, so no library state is shared. The child ends with _exit: no
// atexit handler and no stdio buffer of the parent's runs twice.
#include <cstdint>
#include <string>

#include "modelfs/mapped_file.hpp"

namespace modelfs::hdf5 {

// Child -> parent packets start with one of these bytes.
enum class Packet : uint8_t {
  Read = 'R',         // u64 offset, u64 length: answered with the bytes
  Record = 'D',       // a record for the parent (hdf5.cpp parses them)
  End = 'E',          // the walk ended; the child exits 0
  Failure = 'F',      // libhdf5 refused the file: the text says why
  OutOfMemory = 'M',  // as Failure, where an allocation failed: it reached its memory limit
};
// The largest read the child asks for at once, and the largest packet.
inline constexpr uint64_t kMaxReadChunk = 64 * 1024;
inline constexpr uint64_t kMaxPacket = kMaxReadChunk + 64;

struct SandboxLimits {
  uint64_t deadline_ms = 15'000;  // wall time the child may take, beyond the parent's own reads
  unsigned cpu_seconds = 8;
  // What the child may allocate on top of what it inherits (RLIMIT_DATA):
  // past it, malloc fails in the child and the walk with it. What it
  // inherits includes the heap the parent freed and kept, which the
  // child's malloc reuses first.
  uint64_t memory_bytes = uint64_t{1} << 30;
  uint64_t max_record_bytes = uint64_t{256} << 20;  // all records together
};

// What a child body is given: its socket and the length of the HDF5 bytes.
// It returns the exit status; it must not return through exceptions.
using ChildBody = int (*)(int socket, uint64_t length);

// Forks a sandboxed child running `body` over bytes [base, base + length)
// of `file`, serves its reads, and returns its record stream (the payloads
// of its Record packets, concatenated). Throws ModelError(display, "hdf5") when
// the child dies, passes the deadline, sends a malformed packet, fails, or
// asks for bytes outside the range.
std::string run_sandboxed(const MappedFile& file, uint64_t base, uint64_t length, const std::string& display,
                          ChildBody body, const SandboxLimits& limits = {});

// For child bodies: sends one packet; false when the parent is gone.
bool send_packet(int socket, Packet kind, const void* payload, uint64_t size);
// For child bodies: bytes [offset, offset + size) of the file into `out`,
// through the parent; false when it refuses or is gone.
bool read_through_parent(int socket, uint64_t offset, uint64_t size, void* out);

// The body that walks an HDF5 file with libhdf5 (hdf5_child.cpp).
int walk_hdf5_child(int socket, uint64_t length);

}  // namespace modelfs::hdf5
