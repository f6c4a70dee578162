#include "logging.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <syslog.h>

namespace modelfs {
namespace {

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::Debug: return spdlog::level::debug;
    case LogLevel::Info: return spdlog::level::info;
    case LogLevel::Warning: break;
  }
  return spdlog::level::warn;
}

void install(std::shared_ptr<spdlog::logger> logger, LogLevel level) {
  logger->set_level(to_spdlog(level));
  logger->flush_on(spdlog::level::debug);
  spdlog::set_default_logger(std::move(logger));
}

// A logger is registered once by name: asking again (-d re-installs the
// stderr logger at debug level) reuses it instead of throwing.
template <typename Make>
std::shared_ptr<spdlog::logger> registered(const std::string& name, Make&& make) {
  if (auto existing = spdlog::get(name)) return existing;
  return make();
}

}  // namespace

void log_to_stderr(LogLevel level) {
  auto logger = registered("modelfs-stderr", [] { return spdlog::stderr_logger_mt("modelfs-stderr"); });
  logger->set_pattern("modelfs: %l: %v");
  install(std::move(logger), level);
}

bool log_to_file(const std::string& path, LogLevel level) {
  try {
    auto logger = registered("modelfs-file", [&] { return spdlog::basic_logger_mt("modelfs-file", path); });
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e modelfs[%P] %l: %v");
    install(std::move(logger), level);
    return true;
  } catch (const spdlog::spdlog_ex&) {
    return false;
  }
}

void log_to_syslog(LogLevel level) {
  auto logger = registered("modelfs-syslog", [] {
    return spdlog::syslog_logger_mt("modelfs-syslog", "modelfs", LOG_PID, LOG_DAEMON);
  });
  logger->set_pattern("%l: %v");
  install(std::move(logger), level);
}

}  // namespace modelfs
