// SPDX-License-Identifier: Apache-2.0
#include "read_workers.hpp"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <system_error>

#include "threads.hpp"

namespace modelfs {

ReadWorkers::ReadWorkers(unsigned most, Serve serve) : most_(most), serve_(serve) {}

ReadWorkers::~ReadWorkers() { stop(); }

void ReadWorkers::post(const ReadJob& job) {
  std::unique_lock lock(mutex_);
  queue_.push_back(job);
  if (queue_.size() > idle_ && workers_.size() < most_) {
    try {
      workers_.push_back(thread_without_exit_signals([this] {
        ::pthread_setname_np(::pthread_self(), "reader");
        run();
      }));
    } catch (const std::system_error& e) {
      if (workers_.empty()) {
        // No worker at all to take it: serve it on this thread.
        queue_.pop_back();
        lock.unlock();
        spdlog::debug("reads served on the receiving thread: {}", e.what());
        serve_(job);
        return;
      }
    }
  }
  lock.unlock();
  wake_.notify_one();
}

void ReadWorkers::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    ++idle_;
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping, and nothing left to serve
    const ReadJob job = queue_.front();
    queue_.pop_front();
    lock.unlock();
    serve_(job);
    lock.lock();
  }
}

void ReadWorkers::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_)
    if (worker.joinable()) worker.join();
}

}  // namespace modelfs
