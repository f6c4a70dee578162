// SPDX-License-Identifier: Apache-2.0
#pragma once
// Every thread the daemon starts (the loop's workers, the readahead raiser,
// the read-ahead thread) must never take the signals that end serving: the
// main thread takes them, waiting for the end (loop.hpp; under -s it is the
// one thread of libfuse's loop).
#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace modelfs {

// SIGINT, SIGTERM and SIGHUP: the signals libfuse's handlers turn into the
// end of serving. Threads other than the main one must block them.
sigset_t exit_signals();

// Starts `body` on a thread born with the exit signals blocked: one landing
// there would mark the session exited without waking the loop. Throws what
// std::thread throws; the caller's signal mask is as it was either way.
template <typename Body>
std::thread thread_without_exit_signals(Body&& body) {
  const sigset_t ending = exit_signals();
  sigset_t before;
  ::pthread_sigmask(SIG_BLOCK, &ending, &before);
  struct Restore {
    const sigset_t& mask;
    ~Restore() { ::pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{before};
  return std::thread(std::forward<Body>(body));
}

}  // namespace modelfs
