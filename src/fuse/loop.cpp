// SPDX-License-Identifier: Apache-2.0
#include "loop.hpp"

#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <list>
#include <mutex>
#include <system_error>
#include <thread>

#include "threads.hpp"

namespace modelfs {
namespace {

// Sent to the loop's threads at the end, to interrupt their wait on the
// device; its handler does nothing (and reads are not restarted after it).
constexpr int kWakeSignal = SIGUSR1;

class Loop {
 public:
  Loop(fuse_session* session, unsigned most) : session_(session), device_(fuse_session_fd(session)), most_(most) {
    ::sem_init(&ended_, 0, 0);
  }
  ~Loop() { ::sem_destroy(&ended_); }

  int run();
  void grow();

 private:
  struct Worker {
    std::thread thread;
    bool done = false;
  };
  void work(Worker& self);
  bool start_worker();  // under mutex_
  void end(int result);  // under mutex_
  bool requests_waiting() const {
    pollfd device{device_, POLLIN, 0};
    return ::poll(&device, 1, 0) > 0;
  }

  fuse_session* const session_;
  const int device_;
  const unsigned most_;
  sem_t ended_;  // posted when serving ends
  std::mutex mutex_;
  std::condition_variable wake_;  // room on the device, or serving ends
  unsigned allowed_ = 1;          // threads that may wait on the device at once
  unsigned on_device_ = 0;
  unsigned idle_ = 0;
  bool stopping_ = false;
  std::list<Worker> workers_;  // a list: a Worker never moves
  int error_ = 0;
};

thread_local Loop* current = nullptr;

bool Loop::start_worker() {
  try {
    Worker& worker = workers_.emplace_back();
    worker.thread = thread_without_exit_signals([this, &worker] {
      ::pthread_setname_np(::pthread_self(), "worker");
      work(worker);
    });
    return true;
  } catch (const std::system_error& e) {
    workers_.pop_back();
    spdlog::debug("no further worker: {}", e.what());
    return false;
  }
}

void Loop::grow() {
  std::lock_guard lock(mutex_);
  if (stopping_ || allowed_ >= most_) return;
  ++allowed_;
  if (idle_ > 0)
    wake_.notify_one();
  else if (workers_.size() < most_)
    start_worker();
}

void Loop::end(int result) {
  if (!stopping_ && result < 0) error_ = result;
  stopping_ = true;
  fuse_session_exit(session_);
  wake_.notify_all();
  ::sem_post(&ended_);
}

void Loop::work(Worker& self) {
  current = this;
  struct Buffer {
    fuse_buf buf{};  // libfuse allocates its memory at the first request
    ~Buffer() { std::free(buf.mem); }
  } buffer;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (on_device_ >= allowed_) {
      ++idle_;
      wake_.wait(lock, [this] { return stopping_ || on_device_ < allowed_; });
      --idle_;
      continue;
    }
    ++on_device_;
    lock.unlock();
    const int result = fuse_session_receive_buf(session_, &buffer.buf);
    lock.lock();
    --on_device_;
    if (result == -EINTR || result == -EAGAIN) continue;
    if (result <= 0 || fuse_session_exited(session_)) {
      end(result);  // 0: unmounted
      break;
    }
    bool read = false;
    if (buffer.buf.size >= sizeof(fuse_in_header)) {
      read = static_cast<const fuse_in_header*>(buffer.buf.mem)->opcode == FUSE_READ;
    }
    if (!read) allowed_ = 1;
    lock.unlock();
    if (read) {
      if (requests_waiting())
        grow();
      else {
        std::lock_guard shrink(mutex_);
        allowed_ = std::max(1u, allowed_ - 1);
      }
    }
    fuse_session_process_buf(session_, &buffer.buf);
    lock.lock();
  }
  self.done = true;
  current = nullptr;
}

int Loop::run() {
  struct sigaction wake {};
  wake.sa_handler = [](int) {};
  sigemptyset(&wake.sa_mask);
  struct sigaction before {};
  ::sigaction(kWakeSignal, &wake, &before);
  {
    std::lock_guard lock(mutex_);
    if (!start_worker()) {
      ::sigaction(kWakeSignal, &before, nullptr);
      return fuse_session_loop(session_);
    }
  }
  // The exit signals interrupt this wait (sem_wait is never restarted).
  while (!fuse_session_exited(session_)) ::sem_wait(&ended_);
  std::unique_lock lock(mutex_);
  end(0);
  // A worker waiting on the device is interrupted by the signal; one about
  // to wait there may miss it, so it is sent until every worker is done.
  for (;;) {
    bool all_done = true;
    for (Worker& worker : workers_) {
      if (worker.done) continue;
      all_done = false;
      ::pthread_kill(worker.thread.native_handle(), kWakeSignal);
    }
    if (all_done) break;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    lock.lock();
  }
  lock.unlock();
  for (Worker& worker : workers_) worker.thread.join();
  ::sigaction(kWakeSignal, &before, nullptr);
  return error_;
}

}  // namespace

int serve_session(fuse_session* session, unsigned max_threads) {
  return Loop(session, max_threads).run();
}

void expect_long_request() {
  if (current != nullptr) current->grow();
}

}  // namespace modelfs
