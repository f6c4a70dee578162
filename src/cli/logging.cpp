#include "logging.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <syslog.h>

#include "modelfs/terminal_text.hpp"

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

// Hands each message on with its text made printable: messages quote
// tensor and member names from the model, which could hold escape
// sequences for the terminal or a newline that forges a line of the log.
class PrintableSink final : public spdlog::sinks::sink {
 public:
  explicit PrintableSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}

  void log(const spdlog::details::log_msg& msg) override {
    const std::string text = printable(std::string_view(msg.payload.data(), msg.payload.size()));
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

// A logger is registered once by name: asking again (-d re-installs the
// stderr logger at debug level) reuses it instead of making a second.
template <typename MakeSink>
std::shared_ptr<spdlog::logger> registered(const std::string& name, MakeSink&& make_sink) {
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = std::make_shared<spdlog::logger>(name, std::make_shared<PrintableSink>(make_sink()));
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace

void log_to_stderr(LogLevel level) {
  auto logger = registered("modelfs-stderr", [] { return std::make_shared<spdlog::sinks::stderr_sink_mt>(); });
  logger->set_pattern("modelfs: %l: %v");
  install(std::move(logger), level);
}

bool log_to_file(const std::string& path, LogLevel level) {
  try {
    auto logger = registered("modelfs-file", [&] { return std::make_shared<spdlog::sinks::basic_file_sink_mt>(path); });
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e modelfs[%P] %l: %v");
    install(std::move(logger), level);
    return true;
  } catch (const spdlog::spdlog_ex&) {
    return false;
  }
}

void log_to_syslog(LogLevel level) {
  auto logger = registered("modelfs-syslog", [] {
    return std::make_shared<spdlog::sinks::syslog_sink_mt>("modelfs", LOG_PID, LOG_DAEMON, false);
  });
  logger->set_pattern("%l: %v");
  install(std::move(logger), level);
}

}  // namespace modelfs
