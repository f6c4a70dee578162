// SPDX-License-Identifier: Apache-2.0
// The block cache on disk: its folder, its files, the records' header and
// checksums, and the removal of objects no daemon mounts (cache_object.hpp).
#include "remote/cache_object.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "io/crc32c.hpp"

namespace modelfs::remote::cache {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'D', 'E', 'L', 'F', 'S', 'b'};

void put32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void put64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t get(std::span<const std::byte> bytes, size_t at, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= static_cast<uint64_t>(bytes[at + i]) << (8 * i);
  return v;
}

bool is_key(std::string_view key) {
  return key.size() == kKeyChars &&
         std::ranges::all_of(key, [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string errno_text() { return std::strerror(errno); }

// Closes a descriptor at the end of a scope.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The key a record of this cache names, when `fd` is one: a regular file of
// this user's whose header this cache wrote.
std::optional<std::string> record_key(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) return std::nullopt;
  std::byte header[kHeaderBytes];
  if (::pread(fd, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) return std::nullopt;
  auto parsed = parse_header(header);
  if (!parsed) return std::nullopt;
  return parsed->key;
}

}  // namespace

std::string make_header(std::string_view key, uint64_t object_size) {
  std::string out(kMagic, sizeof kMagic);
  put32(out, kVersion);
  put32(out, static_cast<uint32_t>(kBlockBytes));
  put64(out, object_size);
  out.append(key.substr(0, kKeyChars));
  out.resize(kHeaderBytes, '\0');
  return out;
}

std::optional<Header> parse_header(std::span<const std::byte> bytes) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return std::nullopt;
  if (get(bytes, 8, 4) != kVersion || get(bytes, 12, 4) != kBlockBytes) return std::nullopt;
  Header header;
  header.object_size = get(bytes, 16, 8);
  header.key.assign(reinterpret_cast<const char*>(bytes.data()) + 24, kKeyChars);
  if (header.object_size > kMaxObjectBytes || !is_key(header.key)) return std::nullopt;
  for (size_t i = 24 + kKeyChars; i < kHeaderBytes; ++i)
    if (bytes[i] != std::byte{0}) return std::nullopt;
  return header;
}

uint32_t checksum(uint32_t crc, std::span<const std::byte> bytes) { return crc32c_extend(crc, bytes); }

int open_folder(const std::filesystem::path& dir) {
  // The missing folders are made one by one, each the user's alone.
  std::filesystem::path made;
  for (const auto& part : dir) {
    made /= part;
    if (::mkdir(made.c_str(), 0700) == 0 || errno == EEXIST) continue;
    // A folder that exists where this user may not create (a read-only
    // mount, a parent of another user's) may say so before EEXIST.
    const std::string why = errno_text();
    struct stat st {};
    if (::stat(made.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw Refused("cannot create " + made.string() + ": " + why);
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Refused("cannot open it: " + errno_text());
  Fd guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Refused("cannot open it: " + errno_text());
  if (st.st_uid != ::geteuid())
    throw Refused("is owned by user " + std::to_string(st.st_uid) + ", not by this one (" +
                  std::to_string(::geteuid()) +
                  "); another user could plant links or change cached bytes there, so modelfs refuses it "
                  "(-o cache_dir= a folder of your own)");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw Refused(std::string("is writable by group or others (mode ") + mode +
                  "); another user could plant links or change cached bytes there, so modelfs refuses it "
                  "(chmod go-w it, or -o cache_dir= a folder of your own)");
  }
  guard.fd = -1;
  return fd;
}

int open_file(int dir_fd, const std::string& name) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    // O_NONBLOCK: a FIFO planted under the name must not wait for a writer.
    int fd = ::openat(dir_fd, name.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
      fd =
          ::openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EEXIST || errno == ENOENT)) continue;  // another daemon made or removed it
    if (fd < 0 && errno == ELOOP)
      throw Refused(name + " is a symbolic link; modelfs follows no link in its cache (remove it)");
    if (fd < 0) throw Refused("cannot open " + name + ": " + errno_text());
    Fd guard{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw Refused("cannot open " + name + ": " + errno_text());
    if (!S_ISREG(st.st_mode)) throw Refused(name + " is not a regular file (remove it)");
    if (st.st_uid != ::geteuid())
      throw Refused(name + " is owned by user " + std::to_string(st.st_uid) +
                    ", not by this one (remove it)");
    if (st.st_nlink != 1)
      throw Refused(name + " has " + std::to_string(st.st_nlink) +
                    " names (a hard link): writing it would change a file outside the cache (remove it)");
    guard.fd = -1;
    return fd;
  }
  throw Refused("cannot open " + name + ": it is created and removed over and over");
}

void prepare_record(int fd, const std::string& key, uint64_t object_size) {
  const uint64_t size = record_bytes(object_size);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Refused("cannot read " + key + ".blocks: " + errno_text());
  if (st.st_size == 0) {
    const std::string header = make_header(key, object_size);
    if (::pwrite(fd, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size()))
      throw Refused("cannot write " + key + ".blocks: " + errno_text());
  } else {
    std::byte header[kHeaderBytes];
    const bool whole = ::pread(fd, header, sizeof header, 0) == static_cast<ssize_t>(sizeof header);
    const auto parsed = whole ? parse_header(header) : std::nullopt;
    if (!parsed || parsed->key != key || parsed->object_size != object_size ||
        static_cast<uint64_t>(st.st_size) > size)
      throw Refused(key + ".blocks is not the block record modelfs wrote for this object (remove it)");
  }
  if (static_cast<uint64_t>(st.st_size) != size && ::ftruncate(fd, static_cast<off_t>(size)) != 0)
    throw Refused("cannot size the cache files: " + errno_text());
}

std::optional<uint64_t> prepare_data(int data_fd, int record_fd, uint64_t object_size) {
  struct stat st {};
  if (::fstat(data_fd, &st) != 0) throw Refused("cannot read the cache file: " + errno_text());
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size == object_size) return std::nullopt;
  if (size < object_size) {
    const Mark absent{0, 0};
    for_each_present(record_fd, block_count(object_size), [&](uint64_t b) {
      if (b * kBlockBytes + block_length(b, object_size) > size)
        (void)::pwrite(record_fd, &absent, sizeof absent,
                       static_cast<off_t>(kHeaderBytes + b * sizeof(Mark)));
    });
  }
  if (::ftruncate(data_fd, static_cast<off_t>(object_size)) != 0) {
    if (errno == EFBIG)
      throw Refused("its file system cannot hold a sparse file of the object's " +
                    std::to_string(object_size) + " bytes (-o cache_dir= on one that can)");
    throw Refused("cannot size the cache files: " + errno_text());
  }
  return size < object_size && size > 0 ? std::optional(size) : std::nullopt;
}

Check check_block(int data_fd, uint64_t block, uint64_t object_size, uint32_t crc) {
  constexpr uint64_t kBuffer = 64 << 10;
  thread_local std::unique_ptr<std::byte[]> buffer;
  if (!buffer) buffer = std::make_unique_for_overwrite<std::byte[]>(kBuffer);
  const uint64_t offset = block * kBlockBytes;
  const uint64_t length = block_length(block, object_size);
  uint32_t got_crc = 0;
  uint64_t done = 0;
  while (done < length) {
    const ssize_t got =
        ::pread(data_fd, buffer.get(), std::min(kBuffer, length - done), static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Check::kMissing;
    got_crc = checksum(got_crc, {buffer.get(), static_cast<size_t>(got)});
    done += static_cast<uint64_t>(got);
  }
  return got_crc == crc ? Check::kMatch : Check::kMismatch;
}

void for_each_present(int fd, uint64_t blocks, const std::function<void(uint64_t)>& f) {
  const uint64_t end_of_marks = kHeaderBytes + blocks * sizeof(Mark);
  std::vector<Mark> buffer(8192);
  for (uint64_t at = kHeaderBytes; at < end_of_marks;) {
    const off_t data = ::lseek(fd, static_cast<off_t>(at), SEEK_DATA);
    if (data < 0) return;  // ENXIO: no data past `at`
    const off_t hole = ::lseek(fd, data, SEEK_HOLE);
    const uint64_t end =
        hole < 0 ? end_of_marks : std::min<uint64_t>(end_of_marks, static_cast<uint64_t>(hole));
    // From the mark the data begins in.
    uint64_t b =
        (std::max<uint64_t>(static_cast<uint64_t>(data), kHeaderBytes) - kHeaderBytes) / sizeof(Mark);
    while (kHeaderBytes + b * sizeof(Mark) < end) {
      const uint64_t want = std::min<uint64_t>(buffer.size(), blocks - b);
      const ssize_t got = ::pread(fd, buffer.data(), want * sizeof(Mark),
                                  static_cast<off_t>(kHeaderBytes + b * sizeof(Mark)));
      if (got < 0 && errno == EINTR) continue;
      if (got < static_cast<ssize_t>(sizeof(Mark))) return;
      const auto marks = static_cast<uint64_t>(got) / sizeof(Mark);
      for (uint64_t i = 0; i < marks; ++i)
        if (buffer[i].state != 0) f(b + i);
      b += marks;
    }
    at = std::max(end, kHeaderBytes + b * sizeof(Mark));
  }
}

int lock_record(int fd, int command, short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_len = 1;
  return ::fcntl(fd, command, &lock);
}

void remove_unmounted_objects(int dir_fd, const std::string& keep, uint64_t limit) {
  if (limit == 0) return;
  struct Object {
    std::string key;
    uint64_t bytes = 0;
    timespec used{};
  };
  std::vector<Object> objects;
  uint64_t total = 0;
  const int list_fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (list_fd < 0) return;
  struct Closedir {
    void operator()(DIR* d) const { ::closedir(d); }
  };
  std::unique_ptr<DIR, Closedir> listing(::fdopendir(list_fd));
  if (!listing) {
    ::close(list_fd);
    return;
  }
  while (const dirent* entry = ::readdir(listing.get())) {
    const std::string_view name = entry->d_name;
    if (name.size() != kKeyChars + 7 || !name.ends_with(".blocks")) continue;
    Object o{std::string(name.substr(0, kKeyChars))};
    Fd record{::openat(dir_fd, entry->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)};
    // Recognised by what it holds, not by its name: a user's report.blocks
    // is no object of the cache's.
    if (record.fd < 0 || record_key(record.fd) != o.key) continue;
    struct stat st {};
    if (::fstat(record.fd, &st) == 0) o.used = st.st_mtim;
    if (::fstatat(dir_fd, (o.key + ".data").c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      o.bytes = static_cast<uint64_t>(st.st_blocks) * 512;
    total += o.bytes;
    if (o.key != keep) objects.push_back(std::move(o));
  }
  std::ranges::sort(objects, {}, [](const Object& o) { return std::pair(o.used.tv_sec, o.used.tv_nsec); });
  for (const auto& o : objects) {
    if (total <= limit) break;
    Fd record{::openat(dir_fd, (o.key + ".blocks").c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
    if (record.fd < 0 || record_key(record.fd) != o.key) continue;
    // Held while both files go. A daemon that opened them just before keeps
    // them, nameless, for its mount (it waits for its read lock until this
    // one is gone); later opens start a new object.
    if (lock_record(record.fd, F_OFD_SETLK, F_WRLCK) == 0) {
      ::unlinkat(dir_fd, (o.key + ".data").c_str(), 0);
      ::unlinkat(dir_fd, (o.key + ".blocks").c_str(), 0);
      total -= std::min(total, o.bytes);
    }
  }
}

}  // namespace modelfs::remote::cache
