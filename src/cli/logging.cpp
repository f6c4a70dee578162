// SPDX-License-Identifier: Apache-2.0
#include "cli/logging.hpp"

#include <fuse_log.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <syslog.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <string_view>

#include "io/terminal_text.hpp"

namespace modelfs {
namespace {

// Hands each message on with its text made printable and one line of less
// than 4 KiB: messages quote tensor and member names from the model, which
// could hold escape sequences for the terminal, a newline that forges a line
// of the log, or megabytes.
class PrintableSink final : public spdlog::sinks::sink {
 public:
  explicit PrintableSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}

  void log(const spdlog::details::log_msg& msg) override {
    // Bounded as ModelError's messages are: a warning may quote a name too.
    const std::string text =
        printable(bounded_message(std::string_view(msg.payload.data(), msg.payload.size())));
    spdlog::details::log_msg clean = msg;
    clean.payload = spdlog::string_view_t(text.data(), text.size());
    inner_->log(clean);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

// Makes the logger `name` the default one, with `pattern` and `level`. A
// logger is registered once by name: asking again (-d re-installs the
// stderr logger at debug level) reuses it instead of making a second.
template <typename MakeSink>
void use_logger(const std::string& name, MakeSink&& make_sink, const char* pattern, LogLevel level) {
  auto logger = spdlog::get(name);
  if (!logger) {
    logger = std::make_shared<spdlog::logger>(name, std::make_shared<PrintableSink>(make_sink()));
    spdlog::register_logger(logger);
  }
  logger->set_pattern(pattern);
  logger->set_level(static_cast<spdlog::level::level_enum>(level));
  logger->flush_on(spdlog::level::debug);
  spdlog::set_default_logger(std::move(logger));
}

void emit_libfuse_line(int level, std::string_view line) {
  if (level <= FUSE_LOG_ERR)
    spdlog::error("{}", line);
  else if (level <= FUSE_LOG_WARNING)
    spdlog::warn("{}", line);
  else
    spdlog::debug("{}", line);
}

// Joins libfuse's pieces (logging.hpp) per thread up to the newline: what
// this thread has been given since its last newline, and the level of its
// first piece. A line that never ends is cut at 4 KiB.
void log_from_libfuse(fuse_log_level level, const char* fmt, va_list ap) {
  char text[1024];
  const int n = std::vsnprintf(text, sizeof text, fmt, ap);
  if (n < 0) return;
  std::string_view piece(text, std::min(size_t(n), sizeof text - 1));
  thread_local std::string pending;
  thread_local int pending_level = 0;
  constexpr size_t kLongestLine = 4096;
  while (!piece.empty()) {
    if (pending.empty()) pending_level = level;
    const size_t newline = piece.find('\n');
    pending.append(piece.substr(0, newline));
    if (newline == std::string_view::npos && pending.size() < kLongestLine) return;
    if (!pending.empty()) emit_libfuse_line(pending_level, pending);
    pending.clear();
    piece.remove_prefix(newline == std::string_view::npos ? piece.size() : newline + 1);
  }
}

}  // namespace

void route_libfuse_logs() { fuse_set_log_func(log_from_libfuse); }

void log_to_stderr(LogLevel level) {
  use_logger(
      "modelfs-stderr", [] { return std::make_shared<spdlog::sinks::stderr_sink_mt>(); }, "modelfs: %l: %v",
      level);
}

bool log_to_file(const std::string& path, LogLevel level) {
  try {
    use_logger(
        "modelfs-file", [&] { return std::make_shared<spdlog::sinks::basic_file_sink_mt>(path); },
        "%Y-%m-%d %H:%M:%S.%e modelfs[%P] %l: %v", level);
    return true;
  } catch (const spdlog::spdlog_ex&) {
    return false;
  }
}

void log_to_syslog(LogLevel level) {
  use_logger(
      "modelfs-syslog",
      [] { return std::make_shared<spdlog::sinks::syslog_sink_mt>("modelfs", LOG_PID, LOG_DAEMON, false); },
      "%l: %v", level);
}

}  // namespace modelfs
