// SPDX-License-Identifier: Apache-2.0
#pragma once
// A model file mapped read-only into memory for the life of the mount.
// Every tensor byte modelfs serves comes from one of these mappings; the
// object is shared (shared_ptr) by every tensor that points into it, so the
// mapping lives exactly as long as something can still be read from it.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <ctime>

namespace modelfs {

class MappedFile {
 public:
  // Opens and maps `path`. Throws ModelError (format "file") when the file
  // cannot be opened, is not a regular file, or cannot be mapped. Never
  // blocks on a FIFO: the open is non-blocking and the type checked before
  // anything is read.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);
  // Bytes modelfs made (an inflated ZIP member holding a nested archive),
  // placed in an anonymous memory file and mapped like a model file, so the
  // readers that take a mapped file read them unchanged. `name` is for
  // messages ("model.pt2:serialized_state_dict.pt").
  static std::shared_ptr<const MappedFile> from_bytes(std::string_view bytes, std::string name);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  const std::byte* data() const noexcept { return data_; }
  uint64_t size() const noexcept { return size_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  // The name used in messages and sidecars: the path as the user gave it.
  std::string display_name() const { return path_.string(); }
  timespec mtime() const noexcept { return mtime_; }
  int fd() const noexcept { return fd_; }

 private:
  MappedFile() = default;
  std::filesystem::path path_;
  int fd_ = -1;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  timespec mtime_{};
};

}  // namespace modelfs
