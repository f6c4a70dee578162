// SPDX-License-Identifier: Apache-2.0
#pragma once
// Every thread the daemon starts (the loop's workers, the readahead raiser,
// the read-ahead thread) must never take the signals that end serving: the
// main thread takes them, waiting for the end (loop.hpp; under -s it is the
// one thread of libfuse's loop).
#include <functional>
#include <thread>

namespace modelfs {

// Starts `body` on a thread born with SIGINT, SIGTERM and SIGHUP blocked
// (the signals libfuse's handlers turn into the end of serving): one landing
// there would mark the session exited without waking the loop. Throws what
// std::thread throws; the caller's signal mask is as it was either way.
std::thread thread_without_exit_signals(std::function<void()> body);

}  // namespace modelfs
