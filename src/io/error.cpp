#include "modelfs/error.hpp"

namespace modelfs {

std::string format_model_error(const std::string& file, const std::string& format,
                               std::optional<uint64_t> offset, const std::string& reason) {
  std::string message = file + ": " + format + ": ";
  if (offset) message += "at byte " + std::to_string(*offset) + ": ";
  return message + reason;
}

ModelError::ModelError(std::string file, std::string format, std::optional<uint64_t> offset,
                       std::string reason)
    : std::runtime_error(format_model_error(file, format, offset, reason)),
      file_(std::move(file)),
      format_(std::move(format)),
      offset_(offset),
      reason_(std::move(reason)) {}

}  // namespace modelfs
