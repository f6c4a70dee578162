// SPDX-License-Identifier: Apache-2.0
#include "formats/read_back.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "modelfs/error.hpp"

namespace modelfs {

void read_back(const MappedFile& file, uint64_t begin, uint64_t end, std::string_view format,
               std::string_view what, std::vector<char>& buffer,
               const std::function<void(uint64_t)>& progress) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  ReadScope in_order(ReadScope::Kind::InOrder);  // a remote model's blocks fetched ahead, side by side
  for (uint64_t at = begin; at < end;) {
    const uint64_t want = std::min<uint64_t>(kChunk, end - at);
    if (buffer.size() < want) buffer.resize(want);
    const auto cannot = [&](const std::string& why) {
      return ModelError(file.display_name(), std::string(format), at,
                        std::string(what) + " cannot be read: " + why);
    };
    // Taken through the mapping only so that a remote model's blocks are
    // fetched into its cache file: the bytes read back are pread's.
    try {
      file.read(at, want, &in_order);
    } catch (const ModelError& e) {
      throw cannot(e.reason());
    }
    const ssize_t got = ::pread(file.fd(), buffer.data(), want, static_cast<off_t>(at));
    if (got <= 0)
      throw cannot(got < 0 ? std::strerror(errno) : "it ends here, shorter than when it was opened");
    at += static_cast<uint64_t>(got);
    progress(static_cast<uint64_t>(got));
  }
}

void read_back_whole(const MappedFile& file, std::string_view format, std::string_view what,
                     const std::function<void(uint64_t)>& progress) {
  std::vector<char> buffer;
  read_back(file, 0, file.size(), format, what, buffer, progress);
}

}  // namespace modelfs
