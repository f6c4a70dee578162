// SPDX-License-Identifier: Apache-2.0
#pragma once
// The block cache on disk (blocks.cpp serves from it): its folder, its
// files, and the record of each object's blocks. What is on disk is input:
// the folder may be shared or writable by others, a file may be a link
// planted there, cut or overwritten between two mounts, or a user's file
// that only looks like an object. So the folder must be the user's own and
// closed to others, no link is followed, and a block is served from the
// cache only when its bytes match the checksum stored when it was fetched.
//
// An object is CACHE/KEY.data (the object's bytes, sparse, at their
// offsets) and CACHE/KEY.blocks, its record:
//
//   header (64 bytes, little-endian):
//     magic "MODELFSb", uint32 version (2), uint32 block size,
//     uint64 object size, the KEY (40 hex digits: the SHA-1 naming the files)
//   then per block: uint32 state (1: its bytes are written whole),
//                   uint32 CRC-32C of its bytes, set before the state
//
// Version 1 (before checksums) had no header, a byte per block, and keys
// made without the version: its objects are never opened again (their
// blocks are fetched anew under the new key) and, not recognised as the
// cache's, never deleted by eviction either.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace modelfs::remote::cache {

// Small enough that a mount fetches little past a small header, large
// enough that a record of them stays small (32 KiB per GiB).
inline constexpr uint64_t kBlockBytes = uint64_t{256} << 10;
inline constexpr uint32_t kVersion = 2;
inline constexpr uint64_t kHeaderBytes = 64;
inline constexpr uint64_t kKeyChars = 40;
// Objects past this size are refused (a server's claim, not a file).
inline constexpr uint64_t kMaxObjectBytes = uint64_t{1} << 44;

// A block's mark in the record, shared by every daemon mapping it.
struct Mark {
  uint32_t state;
  uint32_t crc;
};
static_assert(sizeof(Mark) == 8);

// Why the cache cannot be used: one line, without the folder's name.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Header {
  uint64_t object_size = 0;
  std::string key;
};

inline uint64_t block_count(uint64_t object_size) { return (object_size + kBlockBytes - 1) / kBlockBytes; }
// The size of a record of an object of `object_size` bytes.
inline uint64_t record_bytes(uint64_t object_size) {
  return kHeaderBytes + std::max<uint64_t>(block_count(object_size), 1) * sizeof(Mark);
}
// The bytes of block `b` of an object of `object_size` bytes.
inline uint64_t block_length(uint64_t b, uint64_t object_size) {
  return std::min(kBlockBytes, object_size - b * kBlockBytes);
}

// The header of a new record.
std::string make_header(std::string_view key, uint64_t object_size);
// The header `bytes` (a record's first bytes) hold; nullopt when they are
// not one this cache wrote (another magic, version or block size, a key
// that is not 40 lowercase hex digits, a size past kMaxObjectBytes).
std::optional<Header> parse_header(std::span<const std::byte> bytes);

// CRC-32C of a block's bytes, continuing from `crc` (0 to start).
uint32_t checksum(uint32_t crc, std::span<const std::byte> bytes);

// The cache folder opened (O_DIRECTORY), created 0700 with any missing
// parent when absent; Refused when it is not a folder owned by this user,
// or group or others may write to it (as ssh treats ~/.ssh): another user
// could plant links or files there, or change the cached bytes.
int open_folder(const std::filesystem::path& dir);

// A file of the cache folder `dir_fd`, read-write: opened without following
// a link, created (O_EXCL) when absent. Refused when the name is a link, or
// not a regular file of this user's with one name (a hard link to a file
// elsewhere would be overwritten through it).
int open_file(int dir_fd, const std::string& name);

// Under the record's flock: a new record's header written, an existing
// one's checked (Refused when it is not the record of `key` for an object
// of `object_size` bytes), the record sized.
void prepare_record(int fd, const std::string& key, uint64_t object_size);
// Under the record's flock: the data file sized to the object. When it was
// shorter (cut between two mounts), the blocks it lost, whole or in part,
// are dropped from the record first, and its size is returned.
std::optional<uint64_t> prepare_data(int data_fd, int record_fd, uint64_t object_size);

enum class Check { kMatch, kMismatch, kMissing };
// Whether the bytes of `block` in `data_fd` are there and match `crc`. Read,
// not through a mapping: a file cut meanwhile gives a short read, not SIGBUS.
Check check_block(int data_fd, uint64_t block, uint64_t object_size, uint32_t crc);

// Calls f(block) for each block the record `fd` marks present. Only the
// record's data is read (SEEK_DATA skips its holes): the time and memory
// grow with what was fetched, never with the size a server claims.
void for_each_present(int fd, uint64_t blocks, const std::function<void(uint64_t)>& f);

// With a bound, the objects of the folder that no daemon has mounted (no
// read lock on their record: a write lock can be had) and that are not
// `keep` are removed, least recently written first, while the folder's
// objects' allocated bytes exceed `limit`. Only files whose record has a
// header this cache wrote, naming the file's own key, are its objects.
void remove_unmounted_objects(int dir_fd, const std::string& keep, uint64_t limit);

// An OFD lock on the first byte of a record: each daemon mapping the object
// holds a read lock; eviction and removal need a write lock.
int lock_record(int fd, int command, short type);

}  // namespace modelfs::remote::cache
