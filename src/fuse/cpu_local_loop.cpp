#include "cpu_local_loop.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <system_error>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

namespace modelfs {
namespace {

constexpr int kExitSignals[] = {SIGINT, SIGTERM, SIGHUP};

struct Loop {
  fuse_session* session;
  int device;              // the session's /dev/fuse descriptor, made non-blocking
  int stop;                // eventfd, readable once any worker has ended the loop
  std::atomic<int> error;  // the first device error, as -errno
};

// Ends the loop for every worker: the session is marked exited, and the
// stop descriptor wakes those waiting in poll().
void end_loop(Loop& loop, int error) {
  int none = 0;
  if (error < 0) loop.error.compare_exchange_strong(none, error);
  fuse_session_exit(loop.session);
  const uint64_t one = 1;
  if (::write(loop.stop, &one, sizeof one) < 0) spdlog::debug("waking the workers: {}", errno);
}

// One worker's loop. `signals_open_while_waiting` is the mask that lets the
// exit signals in during ppoll() (the calling thread's), or null for the
// other workers, which never take them. Checking the exited flag and then
// sleeping could otherwise miss a signal that lands between the two.
void serve_requests(Loop& loop, const sigset_t* signals_open_while_waiting) {
  fuse_buf buffer{};
  pollfd waits[2] = {{loop.device, POLLIN, 0}, {loop.stop, POLLIN, 0}};
  int error = 0;
  while (!fuse_session_exited(loop.session)) {
    const int got = fuse_session_receive_buf(loop.session, &buffer);
    if (got > 0) {
      fuse_session_process_buf(loop.session, &buffer);
      continue;
    }
    if (got == -EINTR) continue;
    if (got != -EAGAIN) {
      error = got;  // 0: the kernel ended the session (unmounted)
      break;
    }
    if (::ppoll(waits, 2, nullptr, signals_open_while_waiting) < 0 && errno != EINTR) {
      error = -errno;
      break;
    }
    if (waits[1].revents != 0) break;
  }
  std::free(buffer.mem);
  end_loop(loop, error);
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  // Not fatal: an unpinned worker still serves, only without the locality.
  if (const int err = ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set); err != 0)
    spdlog::debug("could not pin a worker to CPU {}: {}", cpu, err);
}

std::vector<int> usable_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

}  // namespace

sigset_t exit_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int signal : kExitSignals) sigaddset(&signals, signal);
  return signals;
}

int serve_on_each_cpu(fuse_session* session, unsigned max_workers) {
  const int device = fuse_session_fd(session);
  const int flags = ::fcntl(device, F_GETFL);
  if (flags < 0 || ::fcntl(device, F_SETFL, flags | O_NONBLOCK) < 0) return -errno;
  Loop loop{session, device, ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), {0}};
  if (loop.stop < 0) return -errno;

  // The exit signals go to this thread only, and only while it waits.
  const sigset_t ending = exit_signals();
  sigset_t before, while_waiting;
  ::pthread_sigmask(SIG_BLOCK, &ending, &before);
  while_waiting = before;
  for (int signal : kExitSignals) sigdelset(&while_waiting, signal);

  std::vector<int> cpus = usable_cpus();
  if (cpus.empty()) cpus.push_back(-1);  // unknown: one unpinned worker
  cpus.resize(std::min<size_t>(cpus.size(), std::max(1u, max_workers)));

  std::vector<std::thread> workers;
  for (size_t i = 1; i < cpus.size(); ++i) {
    try {
      workers.emplace_back([&loop, cpu = cpus[i]] {
        if (cpu >= 0) pin_to(cpu);
        serve_requests(loop, nullptr);
      });
    } catch (const std::system_error& e) {
      spdlog::warn("serving with {} threads: {}", workers.size() + 1, e.what());
      break;
    }
  }
  cpu_set_t own_cpus;
  const bool restore_cpus = ::pthread_getaffinity_np(::pthread_self(), sizeof own_cpus, &own_cpus) == 0;
  if (cpus[0] >= 0) pin_to(cpus[0]);
  serve_requests(loop, &while_waiting);
  for (auto& worker : workers) worker.join();

  if (restore_cpus) ::pthread_setaffinity_np(::pthread_self(), sizeof own_cpus, &own_cpus);
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  ::close(loop.stop);
  fuse_session_reset(session);
  return loop.error.load();
}

}  // namespace modelfs
