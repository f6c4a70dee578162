// SPDX-License-Identifier: Apache-2.0
#include "modelfs/error.hpp"

#include "io/terminal_text.hpp"

namespace modelfs {
namespace {

// The text of message() (error.hpp), each NUL spelt as printable() spells
// it; `bounded`, that of what(), with long names cut.
std::string message_of(const std::string& file, const std::string& format, std::optional<uint64_t> offset,
                       const std::string& reason, bool bounded) {
  std::string text = file + ": " + format + ": ";
  if (offset) text += "at byte " + std::to_string(*offset) + ": ";
  text += reason;
  if (bounded) text = bounded_message(text);
  if (text.find('\0') == std::string::npos) return text;
  std::string out;
  out.reserve(text.size() + 16);
  for (char c : text) {
    if (c == '\0')
      out += "\\x00";
    else
      out += c;
  }
  return out;
}

}  // namespace

ModelError::ModelError(std::string file, std::string format, std::optional<uint64_t> offset,
                       std::string reason)
    : std::runtime_error(message_of(file, format, offset, reason, true)),
      file_(std::move(file)),
      format_(std::move(format)),
      offset_(offset),
      reason_(std::move(reason)) {}

std::string ModelError::message() const { return message_of(file_, format_, offset_, reason_, false); }

}  // namespace modelfs
