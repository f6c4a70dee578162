// SPDX-License-Identifier: Apache-2.0
#include "modelfs/error.hpp"

namespace modelfs {
namespace {

// The text of what() (error.hpp), each NUL spelt as printable() spells it.
std::string message_of(const std::string& file, const std::string& format,
                       std::optional<uint64_t> offset, const std::string& reason) {
  std::string text = file + ": " + format + ": ";
  if (offset) text += "at byte " + std::to_string(*offset) + ": ";
  text += reason;
  for (size_t at = text.find('\0'); at != std::string::npos; at = text.find('\0', at + 4))
    text.replace(at, 1, "\\x00");
  return text;
}

}  // namespace

ModelError::ModelError(std::string file, std::string format, std::optional<uint64_t> offset,
                       std::string reason)
    : std::runtime_error(message_of(file, format, offset, reason)),
      file_(std::move(file)),
      format_(std::move(format)),
      offset_(offset),
      reason_(std::move(reason)) {}

}  // namespace modelfs
