// SPDX-License-Identifier: Apache-2.0
// What is mounted at a target, taking it down, and running modelfs.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace modelfs::csi {

enum class MountState {
  kNone,     // nothing mounted at the path
  kModelfs,  // a modelfs mount
  kOther,    // another file system
};

// The topmost mount at `path` (absolute, normalized), from
// /proc/self/mountinfo alone: nothing here asks the mount's daemon.
MountState mount_state(const std::string& path);

enum class Daemon {
  kAnswers,  // the mount's daemon answered
  kGone,     // it has exited: the kernel answers ENOTCONN
  kSilent,   // no answer within the limit (stopped, deadlocked, or swamped)
};

// Asks the daemon of the FUSE mount at `path` (statfs, which always reaches
// it) from a child process, killed past `limit`: a daemon that never
// answers must not hold a thread of the plugin.
Daemon ask_daemon(const std::string& path, std::chrono::seconds limit);

// Unmounts `path` (lazily when busy); an empty string, or why it failed.
std::string unmount(const std::string& path);

struct Finished {
  int exit_code = -1;  // -1: killed, timed out or not started
  std::string output;  // what it wrote to stderr (capped)
};

// Runs `argv` with exactly `env`, in a session of its own, stdin and stdout
// /dev/null, no descriptor of this process but stderr (a pipe read here);
// waits for it to exit, killing it past `limit`.
Finished run_program(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     std::chrono::seconds limit);

}  // namespace modelfs::csi
