// SPDX-License-Identifier: Apache-2.0
#include "modelfs/error.hpp"

namespace modelfs {
namespace {

// what() is read as a C string, so a NUL from a name in the model (a
// tensor "a\0b", an ONNX location) would end the message there and lose
// the reason after it. The NUL is spelt as printable() spells it.
std::string nul_safe(std::string text) {
  for (size_t at = text.find('\0'); at != std::string::npos; at = text.find('\0', at + 4))
    text.replace(at, 1, "\\x00");
  return text;
}

}  // namespace

std::string format_model_error(const std::string& file, const std::string& format,
                               std::optional<uint64_t> offset, const std::string& reason) {
  std::string message = file + ": " + format + ": ";
  if (offset) message += "at byte " + std::to_string(*offset) + ": ";
  return nul_safe(message + reason);
}

ModelError::ModelError(std::string file, std::string format, std::optional<uint64_t> offset,
                       std::string reason)
    : std::runtime_error(format_model_error(file, format, offset, reason)),
      file_(std::move(file)),
      format_(std::move(format)),
      offset_(offset),
      reason_(std::move(reason)) {}

}  // namespace modelfs
