#pragma once
// Where modelfs's messages go. Warnings and errors go to stderr while the
// user is there; once the daemon detaches, stderr is /dev/null, so messages
// move to a log file (-o log_file=PATH) or to syslog, never vanish.
#include <string>
#include <string_view>

namespace modelfs {

enum class LogLevel { Warning, Info, Debug };

void log_to_stderr(LogLevel level);
// Returns false (and keeps the current sink) when the file cannot be opened.
bool log_to_file(const std::string& path, LogLevel level);
void log_to_syslog(LogLevel level);

// Sends libfuse's own messages through modelfs's logger, one line each:
// libfuse prints some in pieces (fuse_session_new's "fuse: unknown
// option(s): `", then "-o ", then "bogus'" and the newline), which are
// joined, per thread, up to the newline.
void route_libfuse_logs();
// The joining itself, for tests: `piece` at `level` (libfuse's
// fuse_log_level); whole lines are handed to `emit`.
void join_libfuse_piece(int level, std::string_view piece, void (*emit)(int level, std::string_view line));

}  // namespace modelfs
