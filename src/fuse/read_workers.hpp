// SPDX-License-Identifier: Apache-2.0
#pragma once
// The threads that serve a mount's READ requests.
//
// One thread receives every request and answers at once those that only
// look at the tree in memory (lookup, getattr, readdir...): a walk of the
// tree is one request at a time, and the thread that answered one is the
// one waiting for the next, as with -s. A READ may wait for the disk or the
// network, so it is handed to these workers, which reply from their own
// thread: readers of different files, and the kernel's read-ahead of one,
// are served side by side.
//
// Why not libfuse's own multi-threaded loop: all its workers wait in
// read() on the device and the kernel hands each request to the one that
// has waited longest, so a walk goes round every worker the pool has grown
// and costs far more than on one thread (bench/results/).
#include <fuse_lowlevel.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace modelfs {

struct ReadJob {
  fuse_req_t req;
  fuse_ino_t ino;
  size_t size;
  off_t offset;
};

class ReadWorkers {
 public:
  using Serve = void (*)(const ReadJob&);
  // Workers start as reads come and none is free, up to `most` of them,
  // and live until stop(); each job is passed to `serve`, which replies.
  ReadWorkers(unsigned most, Serve serve);
  ~ReadWorkers();
  ReadWorkers(const ReadWorkers&) = delete;
  ReadWorkers& operator=(const ReadWorkers&) = delete;

  // Called by the receiving thread. When no worker can be started (out of
  // threads), the job is served here rather than lost.
  void post(const ReadJob& job);

  // Serves what is queued, then ends the workers.
  void stop();

 private:
  void run();

  const unsigned most_;
  const Serve serve_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<ReadJob> queue_;
  std::vector<std::thread> workers_;
  size_t idle_ = 0;  // workers waiting for a job
  bool stopping_ = false;
};

}  // namespace modelfs
