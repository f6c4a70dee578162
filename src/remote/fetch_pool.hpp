// SPDX-License-Identifier: Apache-2.0
#pragma once
// The remote fetch threads (blocks.cpp).
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "remote/http.hpp"

namespace modelfs::remote {

// The threads that make the window's requests and the pieces of a long run
// a reader waits for, each on a connection of its own (thread_handle): at
// most CacheOptions::parallel, started when a job finds none idle, never
// ended while the process runs on. A job never waits on another, so none
// can wait on a queued one.
//
// The pool is the program's to stop: a library registers no fork or exit
// handler in the process that links it. At the program's end (its
// FetchThreadsOwner, remote.hpp) every transfer is cut at its next progress
// callback, the jobs left fail at once, and the threads are joined: no
// thread of ours runs while the process's statics are destroyed.
//
// A fork copies the pool but none of its threads: a child would wait on a
// condition variable whose waiters it does not have, on blocks marked in
// flight by jobs that never run there. So a program whose child goes on
// reading (the mount's fuse_daemonize) stops the pool first
// (stop_fetch_threads: until no job is queued or running, then the threads
// ended, each closing its handle); threads start afresh as jobs come. A
// child that reads nothing remote (the HDF5 sandbox, a host's child) needs
// nothing of it.
class FetchPool {
 public:
  static FetchPool& get() {
    static std::once_flag made;
    std::call_once(made, [] { pool_.store(new FetchPool); });
    return *pool_.load();
  }
  // Until no job is queued or running, then every thread joined.
  static void stop() {
    if (FetchPool* pool = pool_.load(); pool != nullptr) pool->stop_when_quiet();
  }
  // Every transfer cut, the jobs left failed, every thread joined.
  static void stop_at_exit() {
    if (FetchPool* pool = pool_.load(); pool != nullptr) pool->end_for_exit();
  }
  // False when no thread runs jobs (none could be started): the caller
  // runs `job` itself.
  bool submit(std::function<void()> job, bool urgent) {
    std::lock_guard guard(lock_);
    if (stopping_ && process_ending.load()) return false;
    if (jobs_.size() >= idle_ && threads_.size() < std::max(1u, cache_options.parallel)) start();
    if (threads_.empty()) return false;
    if (urgent)
      jobs_.push_front(std::move(job));
    else
      jobs_.push_back(std::move(job));
    wake_.notify_one();
    return true;
  }

 private:
  void start() {
    // The signals that end the daemon are for the threads that serve it.
    sigset_t all, previous;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &previous);
    try {
      threads_.emplace_back([this] { run(); });
    } catch (const std::system_error& e) {
      spdlog::debug("no more remote fetch threads: {}", e.what());
    }
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }
  void run() {
    ::pthread_setname_np(::pthread_self(), "remote-fetch");
    in_pool_thread = true;
    std::unique_lock guard(lock_);
    for (;;) {
      ++idle_;
      wake_.wait(guard, [&] { return !jobs_.empty() || stopping_; });
      --idle_;
      if (jobs_.empty()) return;  // stopping
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      ++running_;
      guard.unlock();
      job();
      job = nullptr;  // what it holds is released outside the lock
      guard.lock();
      if (--running_ == 0 && jobs_.empty()) quiet_.notify_all();
    }
  }
  void stop_when_quiet() {
    std::unique_lock guard(lock_);
    quiet_.wait(guard, [&] { return jobs_.empty() && running_ == 0; });
    end_threads(guard);
    guard.lock();
    stopping_ = false;
  }
  void end_for_exit() {
    if (in_pool_thread) return;  // a job that exits cannot join itself
    process_ending.store(true);
    std::unique_lock guard(lock_);
    end_threads(guard);
  }
  // Every thread told to stop once the queue is empty, and joined outside
  // the lock (`guard` is released).
  void end_threads(std::unique_lock<std::mutex>& guard) {
    stopping_ = true;
    wake_.notify_all();
    std::vector<std::thread> ending = std::move(threads_);
    threads_.clear();
    guard.unlock();
    for (std::thread& t : ending) t.join();
  }
  static inline std::atomic<FetchPool*> pool_{nullptr};  // made once, never destroyed
  static inline thread_local bool in_pool_thread = false;
  std::mutex lock_;
  std::condition_variable wake_;
  std::condition_variable quiet_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  size_t running_ = 0;
  bool stopping_ = false;
};

}  // namespace modelfs::remote
