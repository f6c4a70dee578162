#pragma once
// The request loop modelfs serves with by default: one worker per CPU, each
// pinned to its CPU and waiting in poll() on the FUSE device.
//
// Why not libfuse's multi-threaded loop: its workers sleep in read(), and
// the kernel hands a request to whichever worker has waited longest, on
// whatever CPU that worker last ran. Every round trip then crosses CPUs
// twice (request to the worker, reply back to the reader), and waking an
// idle CPU is the dearest thing a request pays where vCPUs halt when idle
// (a VM exit each; docs/performance.md, "The request loop"). poll() wakes every worker,
// and the one already on the reader's CPU runs as soon as the reader
// sleeps: it nearly always takes the request before the others wake.
// The herd this costs grows with the worker count, so workers stop at
// `max_workers` (libfuse's max_threads, default 10).
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace modelfs {

// SIGINT, SIGTERM and SIGHUP: the signals libfuse's handlers turn into the
// end of serving. Threads other than the loop's caller must block them.
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

// Serves `session` until it is unmounted or the process gets SIGINT,
// SIGTERM or SIGHUP (libfuse's handlers, installed by the caller, mark the
// session exited; only the calling thread ever takes those signals). The
// calling thread is one of the workers. Returns 0 on such an end, or
// -errno when the FUSE device failed.
int serve_on_each_cpu(fuse_session* session, unsigned max_workers);

}  // namespace modelfs
