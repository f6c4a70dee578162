// SPDX-License-Identifier: Apache-2.0
#include "fuse/prefetcher.hpp"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "fuse/threads.hpp"

namespace modelfs {

Prefetcher::Prefetcher(const Tree& tree, std::string mountpoint)
    : tree_(tree), mountpoint_(std::move(mountpoint)) {
  relative_.reserve(PATH_MAX);
  path_.reserve(mountpoint_.size() + 1 + PATH_MAX);
  try {
    thread_ = thread_without_exit_signals([this] {
      ::pthread_setname_np(::pthread_self(), "read-ahead");  // told apart from the workers in ps, tests
      thread_id_ = ::gettid();
      run();
    });
  } catch (const std::system_error& e) {
    disabled_ = true;
    spdlog::debug("no reading ahead of sequential readers: {}", e.what());
  }
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Prefetcher::note_read(uint64_t ino, uint64_t offset, uint64_t length, pid_t reader) {
  // The reads this thread's own WILLNEED causes are not a reader's progress.
  if (disabled_.load(std::memory_order_relaxed) || reader == thread_id_.load(std::memory_order_relaxed))
    return;
  const uint64_t end = offset + length;
  std::lock_guard lock(mutex_);
  Stream& stream = streams_[ino % kStreams];
  // A reader shows itself sequential when a read continues those before:
  // the kernel's readahead asks for its next window only once the reader
  // has consumed into the last. The reads of one window reach the workers
  // in any order, so "continues" means: starting at or a little before the
  // furthest end seen. A first read alone says nothing (np.load reading a
  // .npy header, `head -c 100` and `file` make one of 256 KiB), and random
  // reads seldom land just below the frontier.
  const bool continues = stream.ino == ino && offset > 0 && offset <= stream.reader_end &&
                         offset + 2 * length >= stream.reader_end;
  if (stream.ino != ino) stream = Stream{ino};
  stream.reader_end = std::max(stream.reader_end, end);
  if (!continues) return;
  stream.target_end = std::max(stream.target_end, end + kAhead);
  if (!stream.queued && stream.target_end > std::max(stream.asked_end, end)) {
    stream.queued = true;
    wake_.notify_one();
  }
}

void Prefetcher::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    auto queued = streams_.end();
    wake_.wait(lock, [&] {
      queued = std::find_if(streams_.begin(), streams_.end(), [](const Stream& s) { return s.queued; });
      return stopping_ || queued != streams_.end();
    });
    if (stopping_) return;
    queued->queued = false;
    const uint64_t ino = queued->ino;
    const uint64_t from = std::max(queued->asked_end, queued->reader_end + kLeftToReader);
    const uint64_t to = queued->target_end;
    const Node* file = tree_.node(ino);
    if (file == nullptr || file->kind != NodeKind::File || from >= std::min(to, file->size)) continue;
    lock.unlock();
    read_ahead(ino, from, std::min(to, file->size));
    lock.lock();
    if (disabled_) return;
  }
}

// The path resolves to this mount (not one mounted over it since, nor another
// namespace's): the root must be inode 1 and every file opened on its device.
bool Prefetcher::mount_is_ours() {
  if (device_) return true;
  struct stat root {};
  if (::stat(mountpoint_.c_str(), &root) != 0 || root.st_ino != Tree::kRootIno) return false;
  device_ = root.st_dev;
  return true;
}

void Prefetcher::read_ahead(uint64_t ino, uint64_t from, uint64_t to) {
  if (!mount_is_ours()) {
    disabled_ = true;
    return;
  }
  tree_.path(ino, relative_);
  path_.assign(mountpoint_);
  path_ += '/';
  path_ += relative_;

  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_dev != *device_ || st.st_ino != ino) {
    ::close(fd);
    disabled_ = true;
    spdlog::debug("reading ahead stopped: {} is not this mount's inode {}", path_, ino);
    return;
  }
  for (uint64_t at = from; at < to; at += kStep) {
    const uint64_t length = std::min(kStep, to - at);
    {
      std::lock_guard lock(mutex_);
      const Stream& stream = streams_[ino % kStreams];
      // Stopping, another file took the slot, or the reader got there first.
      if (stopping_ || stream.ino != ino || stream.reader_end >= to) break;
      if (stream.reader_end >= at + length) continue;
    }
    if (::posix_fadvise(fd, static_cast<off_t>(at), static_cast<off_t>(length), POSIX_FADV_WILLNEED) != 0)
      break;
    std::lock_guard lock(mutex_);
    Stream& stream = streams_[ino % kStreams];
    if (stream.ino == ino) stream.asked_end = std::max(stream.asked_end, at + length);
  }
  ::close(fd);
}

}  // namespace modelfs
