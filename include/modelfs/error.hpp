// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one error type of modelfs. Everything a model file can do wrong is a
// ModelError carrying what the one-line message needs: which file, which
// format, where in it, and why. The CLI prints it and exits 2; the FUSE layer
// never sees one, since models are fully checked before mounting.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "modelfs/api.hpp"

namespace modelfs {

// message() is "FILE: FORMAT: at byte N: REASON" (the offset part only when
// known), with every NUL byte written as \x00: callers read it as a C
// string, and names from a model may hold NULs. what(), the text printed to
// stderr and logs, is message() with every quoted name of more than 256
// bytes and then the whole cut to at most 960 bytes, head and tail kept
// around "…[N bytes cut]…" (terminal_text.hpp's bounded_message): a
// 20 MB tensor name makes one short line. The accessors and message() keep
// the parts as they were given, for JSON outputs.
class MODELFS_API ModelError : public std::runtime_error {
 public:
  ModelError(std::string file, std::string format, std::optional<uint64_t> offset, std::string reason);

  const std::string& file() const noexcept { return file_; }
  const std::string& format() const noexcept { return format_; }
  std::optional<uint64_t> offset() const noexcept { return offset_; }
  const std::string& reason() const noexcept { return reason_; }
  std::string message() const;

 private:
  std::string file_;
  std::string format_;
  std::optional<uint64_t> offset_;
  std::string reason_;
};

}  // namespace modelfs
