// SPDX-License-Identifier: Apache-2.0
#include "fuse/loop.hpp"

#include <linux/fuse.h>
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

#include "fuse/threads.hpp"

namespace modelfs {
namespace {

// Sent to the loop's threads at the end, to interrupt their wait on the
// device; its handler does nothing (and reads are not restarted after it).
constexpr int kWakeSignal = SIGUSR1;

// Requests other than READ in a row that make a walk of the tree. A reader
// going from file to file makes a few between its reads (a lookup, an
// open); letting the other threads off the device for those, and waking
// them again at the next read, cost a first pass over a model's tensors a
// tenth of its speed.
constexpr unsigned kWalk = 16;

class Loop {
 public:
  Loop(fuse_session* session, unsigned most) : session_(session), most_(most) { ::sem_init(&ended_, 0, 0); }
  ~Loop() { ::sem_destroy(&ended_); }

  int run();

 private:
  struct Worker {
    std::thread thread;
    bool done = false;
  };
  void work(Worker& self);
  bool start_worker();  // these three under mutex_
  void another_on_device();
  void end(int result);

  fuse_session* const session_;
  const unsigned most_;
  sem_t ended_;  // posted when serving ends
  std::mutex mutex_;
  std::condition_variable wake_;  // room on the device, or serving ends
  unsigned allowed_ = 1;          // threads that may wait on the device
  unsigned on_device_ = 0;
  unsigned idle_ = 0;    // waiting off the device
  unsigned others_ = 0;  // requests other than READ since the last READ
  bool stopping_ = false;
  std::list<Worker> workers_;  // a list: a Worker never moves
  int error_ = 0;
};

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

void Loop::another_on_device() {
  if (on_device_ > 0) return;
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
  fuse_buf buffer{};  // libfuse allocates its memory at the first request
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
    const int result = fuse_session_receive_buf(session_, &buffer);
    lock.lock();
    --on_device_;
    if (result == -EINTR || result == -EAGAIN) continue;
    if (result <= 0 || fuse_session_exited(session_)) {
      end(result);  // 0: unmounted
      break;
    }
    // The request is in memory (modelfs turns splice off at INIT).
    const bool read = !(buffer.flags & FUSE_BUF_IS_FD) && buffer.size >= sizeof(fuse_in_header) &&
                      static_cast<const fuse_in_header*>(buffer.mem)->opcode == FUSE_READ;
    if (read) {
      others_ = 0;
      allowed_ = most_;
      another_on_device();
    } else if (++others_ == kWalk) {
      allowed_ = 1;
    }
    lock.unlock();
    fuse_session_process_buf(session_, &buffer);
    lock.lock();
  }
  self.done = true;
  std::free(buffer.mem);
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
  // A signal that ends serving interrupts this wait (sem_wait is never
  // restarted); the end of serving on a worker posts it.
  while (!fuse_session_exited(session_)) ::sem_wait(&ended_);
  std::unique_lock lock(mutex_);
  end(0);
  // A worker waiting on the device is interrupted by the signal; one about
  // to wait there may miss it, so it is sent until every worker is done.
  while (std::ranges::any_of(workers_, [](const Worker& worker) { return !worker.done; })) {
    for (Worker& worker : workers_)
      if (!worker.done) ::pthread_kill(worker.thread.native_handle(), kWakeSignal);
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

int serve_session(fuse_session* session, unsigned max_threads) { return Loop(session, max_threads).run(); }

}  // namespace modelfs
