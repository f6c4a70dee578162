// SPDX-License-Identifier: Apache-2.0
#pragma once
// The central directory of a ZIP archive (docs/formats.md, "ZIP records") lying in a byte range
// of a mapped file: the whole file, or a stored member of another archive (a
// torch.save nested inside a PT2 archive is read through this same code).
//
// The directory parsing is ours because libzip exposes no data offsets: to
// serve a stored member straight from the mapping we need the offset of its
// first byte, which only the local header (name and extra lengths, PyTorch's
// alignment padding) gives. A compressed member (deflate, or bzip2 and the
// other methods the system's libzip reads) is decompressed by libzip, once,
// into bytes modelfs then owns, after our own checks of its sizes. For
// `--check`, libzip also reads the archive on its own (ZIP_CHECKCONS) and
// every member's CRC-32: an independent second reading of the directory.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "modelfs/catalog.hpp"
#include "modelfs/mapped_file.hpp"

namespace modelfs {

class ByteReader;

// A directory with more entries than this is refused before anything is
// allocated for it (PyTorch archives hold one entry per storage).
inline constexpr uint64_t kMaxZipMembers = 10'000'000;
// A compressed member is inflated into memory; beyond this it is refused.
inline constexpr uint64_t kMaxInflatedBytes = uint64_t{1} << 30;

struct ZipMember {
  std::string name;
  uint16_t flags = 0;
  uint16_t method = 0;  // 0 stored, 8 deflate, 12 bzip2 (ZIP's method numbers)
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;  // relative to the archive's first byte
  uint64_t data_offset = 0;          // relative to the archive's first byte

  bool stored() const noexcept { return method == 0; }
};

class ZipArchive {
 public:
  static constexpr uint16_t kDeflated = 8;
  static constexpr uint16_t kBzip2 = 12;

  // Reads the archive occupying [offset, offset + length) of `file`. Throws
  // ModelError (format `format`) on anything inconsistent: a directory or
  // member that runs outside the range, a bad signature, a duplicate name.
  static ZipArchive open(std::shared_ptr<const MappedFile> file, uint64_t offset, uint64_t length,
                         std::string format);
  static ZipArchive open(std::shared_ptr<const MappedFile> file, std::string format);

  // The archive stored as `member` of this one (stored members only).
  ZipArchive nested(const ZipMember& member) const;

  const std::vector<ZipMember>& members() const noexcept { return members_; }
  const ZipMember* find(std::string_view name) const;
  // Offset of the archive's first byte in the mapped file.
  uint64_t base() const noexcept { return base_; }
  const std::shared_ptr<const MappedFile>& file() const noexcept { return file_; }

  // A member's uncompressed bytes: a range of the mapping when stored,
  // decompressed bytes (owned, at most kMaxInflatedBytes, charged to the
  // thread's budget) when compressed.
  ByteSpan contents(const ZipMember& member) const;
  // For `modelfs --check`, through libzip: first the archive opened with
  // ZIP_CHECKCONS (local headers agree with the directory) and its member
  // list compared with ours (names, sizes, methods, CRCs), then one check
  // per member reading it whole and comparing its CRC-32 with the
  // directory's. Mounting never pays for this: stored members are served as
  // they are (compressed ones are verified when decompressed).
  std::vector<IntegrityCheck> crc_checks() const;

  // Offset of a stored member's data in the mapped file.
  uint64_t file_offset(const ZipMember& member) const noexcept { return base_ + member.data_offset; }

 private:
  ZipArchive() = default;
  [[noreturn]] void fail(uint64_t archive_offset, const std::string& reason) const;
  // "member NAME: reason", at the member's local header.
  [[noreturn]] void fail(const ZipMember& member, const std::string& reason) const;
  void refuse_unreadable(const ZipMember& member) const;
  // crc_checks(): libzip's directory against ours, and one member's CRC-32.
  void compare_with_libzip() const;
  void check_crc(size_t index, const std::function<void(uint64_t)>& progress) const;
  void read_directory();
  void read_member(ByteReader& directory, uint64_t directory_offset);
  std::string decompress(const ZipMember& member) const;

  // libzip's reading of the same bytes (zip_archive.cpp), opened when first
  // needed and shared by copies of this archive.
  struct Libzip;
  std::shared_ptr<Libzip> libzip_;

  std::shared_ptr<const MappedFile> file_;
  std::string format_;
  uint64_t base_ = 0;
  uint64_t length_ = 0;
  std::vector<ZipMember> members_;
  std::unordered_map<std::string, size_t> by_name_;
};

}  // namespace modelfs
