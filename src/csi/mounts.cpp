// SPDX-License-Identifier: Apache-2.0
#include "csi/mounts.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace modelfs::csi {
namespace {

// mountinfo writes a space, tab, newline or backslash in a path as \ooo.
std::string mountinfo_path(const std::string& field) {
  std::string path;
  path.reserve(field.size());
  for (size_t at = 0; at < field.size(); ++at) {
    const auto digit = [&](size_t i) { return i < field.size() && field[i] >= '0' && field[i] <= '7'; };
    const bool octal = field[at] == '\\' && digit(at + 1) && digit(at + 2) && digit(at + 3);
    if (!octal) {
      path += field[at];
      continue;
    }
    path += static_cast<char>(std::stoi(field.substr(at + 1, 3), nullptr, 8));
    at += 3;
  }
  return path;
}

// The output kept of a program: its message is one line, and a runaway
// writer must not grow the plugin.
constexpr size_t kOutputCap = 64 * 1024;

void read_until_closed(int fd, std::chrono::steady_clock::time_point deadline, std::string& out,
                       bool& timed_out) {
  char buffer[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      return;
    }
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    if (out.size() < kOutputCap)
      out.append(buffer, std::min(static_cast<size_t>(got), kOutputCap - out.size()));
  }
}

}  // namespace

MountState mount_state(const std::string& path) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  MountState state = MountState::kNone;
  std::string line;
  while (std::getline(mountinfo, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPEROPTIONS
    std::istringstream fields(line);
    std::vector<std::string> parts;
    for (std::string part; fields >> part;) parts.push_back(part);
    size_t dash = 6;
    while (dash < parts.size() && parts[dash] != "-") ++dash;
    if (parts.size() < 5 || dash + 1 >= parts.size() || mountinfo_path(parts[4]) != path) continue;
    // Later lines are mounted later, on top of earlier ones.
    state = parts[dash + 1] == "fuse.modelfs" ? MountState::kModelfs : MountState::kOther;
  }
  return state;
}

Daemon ask_daemon(const std::string& path, std::chrono::seconds limit) {
  // The child only calls statfs and _exit, which a fork of a threaded
  // process may.
  const pid_t pid = ::fork();
  if (pid == 0) {
    struct statfs fs {};
    if (::statfs(path.c_str(), &fs) == 0) ::_exit(0);
    ::_exit(errno == ENOTCONN ? 1 : 2);
  }
  if (pid < 0) return Daemon::kSilent;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return Daemon::kSilent;
    if (std::chrono::steady_clock::now() >= deadline) {
      // A request the daemon has taken but not answered waits even past
      // SIGKILL: the child is reaped by a thread of its own whenever it ends.
      ::kill(pid, SIGKILL);
      std::thread([pid] {
        int ignored = 0;
        while (::waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
        }
      }).detach();
      return Daemon::kSilent;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 1 ? Daemon::kGone : Daemon::kAnswers;
}

std::string unmount(const std::string& path) {
  if (::umount2(path.c_str(), UMOUNT_NOFOLLOW) == 0) return {};
  // A reader still holds it (kubelet unpublishes after the pod's containers
  // are gone, so rarely): detached now, gone when the last file closes.
  if (errno == EBUSY && ::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) return {};
  return std::strerror(errno);
}

Finished run_program(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     std::chrono::seconds limit) {
  Finished finished;
  std::vector<char*> args, envp;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  for (const auto& var : env) envp.push_back(const_cast<char*>(var.c_str()));
  args.push_back(nullptr);
  envp.push_back(nullptr);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    finished.output = std::string("pipe: ") + std::strerror(errno);
    return finished;
  }
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  // The gRPC server's sockets and whatever else the plugin holds stay here.
  ::posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  ::posix_spawnattr_init(&attributes);
  // Its own session: a signal to the plugin's process group, or the end of
  // its terminal, does not reach the daemon.
  // Nor does it inherit the plugin's signal mask (SIGTERM blocked for the
  // thread that waits for it) or its ignored SIGPIPE.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  ::posix_spawnattr_setsigmask(&attributes, &none);
  ::posix_spawnattr_setsigdefault(&attributes, &defaults);
  ::posix_spawnattr_setflags(&attributes,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, &attributes, args.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attributes);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    finished.output = argv[0] + ": " + std::strerror(spawned);
    return finished;
  }
  bool timed_out = false;
  read_until_closed(pipe_fds[0], std::chrono::steady_clock::now() + limit, finished.output, timed_out);
  ::close(pipe_fds[0]);
  if (timed_out) {
    // Its process group: the program, and a child it forked that has not
    // left the session yet.
    ::kill(-pid, SIGKILL);
    finished.output += "\n" + argv[0] + " did not finish in " + std::to_string(limit.count()) + " s";
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!timed_out && WIFEXITED(status)) finished.exit_code = WEXITSTATUS(status);
  return finished;
}

}  // namespace modelfs::csi
