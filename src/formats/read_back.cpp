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

void read_back_whole(const MappedFile& file, std::string_view format, std::string_view what,
                     const std::function<void(uint64_t)>& progress) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  std::vector<char> buffer(std::min<uint64_t>(kChunk, file.size()));
  for (uint64_t at = 0; at < file.size();) {
    const uint64_t want = std::min<uint64_t>(kChunk, file.size() - at);
    const auto cannot = [&](const std::string& why) {
      return ModelError(file.display_name(), std::string(format), at,
                        std::string(what) + " cannot be read: " + why);
    };
    // Taken through the mapping only so that a remote model's blocks are
    // fetched into its cache file: the bytes read back are pread's.
    try {
      file.read(at, want);
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

}  // namespace modelfs
