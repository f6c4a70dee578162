// SPDX-License-Identifier: Apache-2.0
#include "fuse/threads.hpp"

#include <pthread.h>
#include <signal.h>

#include <utility>

namespace modelfs {

std::thread thread_without_exit_signals(std::function<void()> body) {
  sigset_t ending;
  sigemptyset(&ending);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&ending, signal);
  sigset_t before;
  ::pthread_sigmask(SIG_BLOCK, &ending, &before);
  struct Restore {
    const sigset_t& mask;
    ~Restore() { ::pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{before};
  return std::thread(std::move(body));
}

}  // namespace modelfs
