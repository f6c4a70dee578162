// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fills the mount's page cache ahead of sequential readers, from a thread of
// its own.
//
// A reader of a FUSE file allocates the cache pages its readahead asks for
// on its own CPU, and copies out of them only once the daemon has filled
// them: in a first pass that allocation, on the reader's CPU, is much of
// the reader's time while other CPUs wait. When a file's reads
// show a sequential reader, this thread opens the file through the mount and
// asks the kernel to read ahead of the reader (POSIX_FADV_WILLNEED): the
// pages are allocated here, the READ requests they make are served by the
// workers as any other, and the reader finds its bytes cached.
//
// Pages read ahead so are not marked accessed (FUSE_NOTIFY_STORE's are), so
// what a reader reads once through the mount stays on the inactive list, as
// with the kernel's own readahead. Only a read that continues those before
// starts it: not a file's first read, not random reads. The thread holds a
// file open only while it asks for one step ahead of a reader that is still
// reading, so an unmount after the reader is done finds nothing open.
#include <sys/types.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "modelfs/tree.hpp"

namespace modelfs {

class Prefetcher {
 public:
  // `mountpoint` is absolute; the thread starts at once and waits for reads.
  Prefetcher(const Tree& tree, std::string mountpoint);
  // Ends the thread. Destroy it once the session is unmounted: a request the
  // thread waits on can then no longer hang, the kernel having failed it.
  ~Prefetcher();

  // A READ of [offset, offset + length) of file `ino`, made for process
  // `reader` (the request's pid), was answered. Any worker may call it.
  void note_read(uint64_t ino, uint64_t offset, uint64_t length, pid_t reader);

 private:
  // A sequential reader of one file: where its reads have reached, how far
  // ahead it should be read, and how far that has been asked for.
  struct Stream {
    uint64_t ino = 0;
    uint64_t reader_end = 0;
    uint64_t target_end = 0;
    uint64_t asked_end = 0;
    bool queued = false;
  };
  static constexpr size_t kStreams = 64;  // readers followed at once
  // The next few MiB are the reader's own readahead's (1 MiB as root); this
  // thread reads from there on, up to 16 MiB ahead of the reader (a longer
  // lead does not speed a first pass; less is less to waste when a reader
  // stops early).
  static constexpr uint64_t kLeftToReader = 4 << 20;
  static constexpr uint64_t kAhead = 16 << 20;
  // One WILLNEED (one 1 MiB request) at a time: the file is open for as
  // long as one takes, and the reader's progress is looked at between them.
  static constexpr uint64_t kStep = 1 << 20;

  void run();
  void read_ahead(uint64_t ino, uint64_t from, uint64_t to);
  bool mount_is_ours();

  const Tree& tree_;
  const std::string mountpoint_;
  // Scratch, reserved up front so that the thread never allocates while it
  // follows readers (no heap traffic beside the workers').
  std::string relative_;
  std::string path_;
  std::array<Stream, kStreams> streams_{};
  // Guards streams_ and stopping_. note_read takes it on every READ: a
  // stream's fields change together and the thread reads them together.
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::atomic<bool> disabled_{false};
  std::atomic<pid_t> thread_id_{-1};  // the thread's, as FUSE requests carry it
  std::optional<dev_t> device_;       // the mount's, once the thread has seen it
  std::thread thread_;
};

}  // namespace modelfs
