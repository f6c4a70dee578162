// SPDX-License-Identifier: Apache-2.0
#include "modelfs/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "io/mapped_bytes.hpp"
#include "modelfs/error.hpp"

namespace modelfs {

namespace {

// What a path that is not a regular file is, for the message.
const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

// A ModelError (format "file") for a failed system call: `what`, then errno's text.
ModelError system_error(const std::string& name, const std::string& what) {
  return ModelError(name, "file", std::nullopt, what + ": " + std::strerror(errno));
}

// The remote mappings, for ensure_at: a few at most (a model's shards).
std::shared_mutex remote_lock;
std::vector<const MappedFile*> remote_files;  // guarded by remote_lock

}  // namespace

void MappedFile::register_remote(const MappedFile* file) {
  std::unique_lock lock(remote_lock);
  remote_files.push_back(file);
  remote_mappings_.fetch_add(1, std::memory_order_release);
}

void MappedFile::unregister_remote(const MappedFile* file) {
  std::unique_lock lock(remote_lock);
  if (auto it = std::ranges::find(remote_files, file); it != remote_files.end()) {
    remote_files.erase(it);
    remote_mappings_.fetch_sub(1, std::memory_order_release);
  }
}

void MappedFile::ensure_at_slow(const std::byte* at, uint64_t length) {
  const MappedFile* owner = nullptr;
  {
    std::shared_lock lock(remote_lock);
    for (const MappedFile* file : remote_files) {
      // Compared as integers: pointers into different objects are unordered.
      const auto begin = reinterpret_cast<uintptr_t>(file->data_);
      const auto p = reinterpret_cast<uintptr_t>(at);
      if (file->data_ != nullptr && p >= begin && p - begin < file->size_) {
        owner = file;
        break;
      }
    }
  }
  // The file outlives the call: whoever holds `at` holds the mapping.
  if (owner != nullptr)
    owner->ensure(reinterpret_cast<uintptr_t>(at) - reinterpret_cast<uintptr_t>(owner->data_), length);
}

std::span<const std::byte> MappedFile::read(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset)
    throw ModelError(display_name(), "file", offset,
                     "a read of " + std::to_string(length) + " bytes passes the end (" +
                         std::to_string(size_) + " bytes)");
  // A local file cut under the mount (a remote one's cache file keeps its
  // size): a served read past its end now fails rather than read zeros.
  if (fetcher_ == nullptr) {
    if (const uint64_t now = served_size(this, fd_, size_); offset + length > now)
      throw ModelError(display_name(), "file", offset,
                       "a read of " + std::to_string(length) + " bytes failed: the file is " +
                           std::to_string(now) + " bytes now, " + std::to_string(size_) +
                           " when it was opened (it shrank under the mount)");
  }
  ensure(offset, length);
  return {data_ + offset, length};
}

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path) {
  // O_NONBLOCK: opening a FIFO (or a terminal) for reading would otherwise
  // wait for a writer, forever. The type is checked on the open descriptor,
  // so nothing can be swapped in between.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw system_error(path.string(), "cannot open");
  return open_descriptor(fd, path);
}

std::shared_ptr<const MappedFile> MappedFile::open_descriptor(int fd, const std::filesystem::path& name) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->fd_ = fd;  // closed by the destructor, whatever is thrown below
  file->path_ = name;
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw system_error(name.string(), "cannot stat");
  if (!S_ISREG(st.st_mode))
    throw ModelError(
        name.string(), "file", std::nullopt,
        std::string("is ") + kind_of(st.st_mode) + ", not a regular file; modelfs reads only regular files");
  // Opened non-blocking for a FIFO's sake; the file reads blocking from here on.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    throw system_error(name.string(), "cannot clear O_NONBLOCK");
  file->size_ = static_cast<uint64_t>(st.st_size);
  file->mtime_ = st.st_mtim;
  file->map();
  return file;
}

std::shared_ptr<const MappedFile> MappedFile::from_bytes(std::string_view bytes, std::string name) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = name;
  // A file descriptor, not plain memory: `--check` reads tensors back with pread.
  file->fd_ = ::memfd_create("modelfs-inflated", MFD_CLOEXEC);
  if (file->fd_ < 0) throw system_error(name, "cannot make a memory file");
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t wrote = ::write(file->fd_, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) throw system_error(name, "cannot fill a memory file");
    done += static_cast<size_t>(wrote);
  }
  file->size_ = bytes.size();
  file->map();
  return file;
}

void MappedFile::map() {
  if (size_ == 0) return;  // mmap of length 0 is invalid; an empty span serves
  void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
  if (mapping == MAP_FAILED) throw system_error(display_name(), "cannot map");
  data_ = static_cast<const std::byte*>(mapping);
}

MappedFile::~MappedFile() {
  if (remote_ != nullptr) unregister_remote(this);
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace modelfs
