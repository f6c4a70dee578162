#pragma once
// Where modelfs's messages go. Warnings and errors go to stderr while the
// user is there; once the daemon detaches, stderr is /dev/null, so messages
// move to a log file (-o log_file=PATH) or to syslog, never vanish.
#include <string>

namespace modelfs {

enum class LogLevel { Warning, Info, Debug };

void log_to_stderr(LogLevel level);
// Returns false (and keeps the current sink) when the file cannot be opened.
bool log_to_file(const std::string& path, LogLevel level);
void log_to_syslog(LogLevel level);

}  // namespace modelfs
