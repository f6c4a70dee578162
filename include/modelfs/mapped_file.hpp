// SPDX-License-Identifier: Apache-2.0
#pragma once
// A model file mapped read-only into memory for the life of the mount.
// Every tensor byte modelfs serves comes from one of these mappings; the
// object is shared (shared_ptr) by every tensor that points into it, so the
// mapping lives exactly as long as something can still be read from it.
//
// A remote model (a URL) is mapped the same way, from a sparse local cache
// file whose blocks are fetched when first needed. Nothing may read the
// mapping before ensure() has made the range present: ensure() is the one
// chokepoint (a no-op for local files). Readers and views take bytes
// through read() (here, ByteSpan::read, ByteReader), which bounds-checks the
// range and makes it present before handing it out, so none can forget;
// the few that read a file with pread (--check's read-back) or fetch ahead
// (ModelFolder::open_all) call it first (ARCHITECTURE.md, "Remote models").
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "modelfs/api.hpp"

namespace modelfs {

namespace remote {
class Blocks;
}

class MODELFS_API MappedFile {
 public:
  // What makes a sparse mapping's missing bytes present: a remote model's
  // block cache (src/remote).
  class Fetcher {
   public:
    virtual ~Fetcher() = default;
    // Makes [offset, offset + length) present (clamped to the file), or
    // throws ModelError.
    virtual void make_present(uint64_t offset, uint64_t length) = 0;
  };

  // Opens and maps `path`. Throws ModelError (format "file") when the file
  // cannot be opened, is not a regular file, or cannot be mapped. Never
  // blocks on a FIFO: the open is non-blocking and the type checked before
  // anything is read.
  // A local path only: a URL (http://, https://, s3://, hf://) is opened
  // by open_model, through the remote layer's cache.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);
  // Maps the file open at `fd`, which it takes (closed when the mapping is,
  // or at once when it is refused), with open's checks and messages;
  // `name` is the display name. For a file opened once where it was
  // checked (ModelFolder::open), so no name is looked up again.
  static std::shared_ptr<const MappedFile> open_descriptor(int fd, const std::filesystem::path& name);
  // Bytes modelfs made (an inflated ZIP member holding a nested archive),
  // placed in an anonymous memory file and mapped like a model file, so the
  // readers that take a mapped file read them unchanged. `name` is for
  // messages ("model.pt2:serialized_state_dict.pt").
  static std::shared_ptr<const MappedFile> from_bytes(std::string_view bytes, std::string name);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Bytes [offset, offset + length) of the file, present: bounds-checked
  // (ModelError past the end, naming the file) and, for a remote model,
  // fetched first (ModelError when they cannot be had).
  std::span<const std::byte> read(uint64_t offset, uint64_t length) const;
  // The whole mapping, not made present: only for the cursors that make
  // present what they hand out (ByteReader, the protobuf and ZIP readers)
  // and the tree's held parts, which its read path makes present.
  std::span<const std::byte> unchecked_bytes() const noexcept { return {data_, size_}; }
  const std::byte* unchecked_data() const noexcept { return data_; }
  uint64_t size() const noexcept { return size_; }
  // The name used in messages and sidecars: the path as the user gave it.
  std::string display_name() const { return path_.string(); }
  timespec mtime() const noexcept { return mtime_; }
  int fd() const noexcept { return fd_; }

  // Makes bytes [offset, offset + length) of the mapping readable: for a
  // remote model, fetches the blocks missing from the cache (throws
  // ModelError when they cannot be had: a read fails with EIO); for a local
  // file, nothing. The range is clamped to the file.
  void ensure(uint64_t offset, uint64_t length) const {
    if (fetcher_ != nullptr) fetcher_->make_present(offset, length);
  }
  // The same for bytes known only by address: those that lie in a remote
  // mapping are ensured, any others (local mappings, buffers) are left be.
  // Costs one atomic load while no remote model is open.
  static void ensure_at(const std::byte* at, uint64_t length) {
    if (remote_mappings_.load(std::memory_order_acquire) != 0) ensure_at_slow(at, length);
  }

 private:
  friend class remote::Blocks;
  friend struct MappedFileTesting;  // a sparse file with a fetcher of its own (tests/unit)
  MappedFile() = default;
  // Maps size_ bytes of fd_ (nothing when 0).
  void map();
  static void ensure_at_slow(const std::byte* at, uint64_t length);
  static void register_remote(const MappedFile* file);
  static void unregister_remote(const MappedFile* file);
  static inline std::atomic<int> remote_mappings_{0};
  std::shared_ptr<remote::Blocks> remote_;
  Fetcher* fetcher_ = nullptr;  // a remote model's: remote_
  std::filesystem::path path_;
  int fd_ = -1;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  timespec mtime_{};
};

}  // namespace modelfs
