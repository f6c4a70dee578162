// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where modelfs's messages go. Warnings and errors go to stderr while the
// user is there; once the daemon detaches, stderr is /dev/null, so messages
// move to a log file (-o log_file=PATH) or to syslog, never vanish.
#include <spdlog/common.h>

#include <string>

namespace modelfs {

// spdlog's levels, by the names modelfs uses.
enum class LogLevel {
  Warning = spdlog::level::warn,
  Info = spdlog::level::info,
  Debug = spdlog::level::debug,
};

void log_to_stderr(LogLevel level);
// Returns false (and keeps the current sink) when the file cannot be opened.
bool log_to_file(const std::string& path, LogLevel level);
void log_to_syslog(LogLevel level);

// Sends libfuse's own messages through modelfs's logger, one line each:
// libfuse prints some in pieces (fuse_session_new's "fuse: unknown
// option(s): `", then "-o ", then "bogus'" and the newline), which are
// joined, per thread, up to the newline.
void route_libfuse_logs();

}  // namespace modelfs
