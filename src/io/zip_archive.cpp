#include "modelfs/zip_archive.hpp"

#include <zlib.h>

#include <algorithm>

#include "modelfs/budget.hpp"
#include "modelfs/byte_reader.hpp"
#include "modelfs/checked_math.hpp"
#include "modelfs/error.hpp"

namespace modelfs {
namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint64_t kEndRecordBytes = 22;
constexpr uint64_t kZip64LocatorBytes = 20;
constexpr uint64_t kCentralHeaderBytes = 46;
constexpr uint64_t kLocalHeaderBytes = 30;
constexpr uint64_t kMaxCommentBytes = 0xFFFF;
constexpr uint32_t kSaturated32 = 0xFFFFFFFF;
constexpr uint16_t kSaturated16 = 0xFFFF;
constexpr uint16_t kEncryptedFlag = 0x0001;
constexpr uint64_t kMaxDeflateRatio = 1032;

uint32_t le32(std::span<const std::byte> bytes, uint64_t at) {
  uint32_t value = 0;
  std::memcpy(&value, bytes.data() + at, 4);
  return value;
}

// zlib's crc32 takes 32-bit lengths.
uLong crc32_update(uLong crc, const std::byte* data, uint64_t size) {
  constexpr uint64_t kPiece = uint64_t{1} << 30;
  for (uint64_t at = 0; at < size; at += kPiece) {
    const uint64_t n = std::min(kPiece, size - at);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(data + at), static_cast<uInt>(n));
  }
  return crc;
}

std::string crc_mismatch(uLong computed, uint32_t recorded) {
  char message[80];
  std::snprintf(message, sizeof message, "CRC-32 is %08lx, the directory says %08x",
                static_cast<unsigned long>(computed), recorded);
  return message;
}

}  // namespace

ZipArchive ZipArchive::open(std::shared_ptr<const MappedFile> file, std::string format) {
  const uint64_t size = file->size();
  return open(std::move(file), 0, size, std::move(format));
}

ZipArchive ZipArchive::open(std::shared_ptr<const MappedFile> file, uint64_t offset,
                            uint64_t length, std::string format) {
  ZipArchive archive;
  archive.file_ = std::move(file);
  archive.format_ = std::move(format);
  archive.base_ = offset;
  archive.length_ = length;
  if (!range_fits(offset, length, archive.file_->size()))
    archive.fail(0, "archive range runs past the end of the file");
  archive.read_directory();
  return archive;
}

ZipArchive ZipArchive::nested(const ZipMember& member) const {
  if (!member.stored())
    fail(member.local_header_offset,
         "member " + member.name + " is compressed, so it cannot hold an archive read in place");
  return open(file_, base_ + member.data_offset, member.compressed_size, format_);
}

const ZipMember* ZipArchive::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &members_[it->second];
}

void ZipArchive::fail(uint64_t archive_offset, const std::string& reason) const {
  throw ModelError(file_->display_name(), format_, base_ + archive_offset, "ZIP: " + reason);
}

void ZipArchive::read_directory() {
  const auto bytes = file_->bytes().subspan(base_, length_);
  if (length_ < kEndRecordBytes) fail(0, "too short for an end-of-central-directory record");

  // The end record is the last 22 bytes plus a comment of up to 64 KiB:
  // scan backwards for its signature, nearest the end first.
  uint64_t end_at = length_ - kEndRecordBytes;
  const uint64_t lowest = end_at > kMaxCommentBytes ? end_at - kMaxCommentBytes : 0;
  for (;; --end_at) {
    if (le32(bytes, end_at) == kEndSignature) break;
    if (end_at == lowest) fail(0, "no end-of-central-directory record (not a ZIP archive, or truncated)");
  }

  ByteReader end(bytes, file_->display_name(), format_, base_);
  end.seek(end_at + 4);
  const uint16_t disk = end.u16("disk number");
  const uint16_t directory_disk = end.u16("directory disk");
  end.skip(2, "entries on disk");
  uint64_t entries = end.u16("entry count");
  uint64_t directory_size = end.u32("directory size");
  uint64_t directory_offset = end.u32("directory offset");

  // ZIP64: torch's writer always adds the locator; the 32-bit fields of the
  // end record may then be saturated.
  bool zip64 = false;
  if (end_at >= kZip64LocatorBytes && le32(bytes, end_at - kZip64LocatorBytes) == kZip64LocatorSignature) {
    zip64 = true;
    ByteReader locator(bytes, file_->display_name(), format_, base_);
    locator.seek(end_at - kZip64LocatorBytes + 8);
    const uint64_t record_at = locator.u64("ZIP64 end record offset");
    if (record_at > end_at - kZip64LocatorBytes)
      fail(end_at - kZip64LocatorBytes, "ZIP64 end record offset " + std::to_string(record_at) +
                                            " lies outside the archive");
    ByteReader record(bytes, file_->display_name(), format_, base_);
    record.seek(record_at);
    if (record.u32("ZIP64 end record signature") != kZip64EndSignature)
      fail(record_at, "bad ZIP64 end-of-central-directory signature");
    record.skip(8 + 2 + 2, "ZIP64 end record sizes and versions");
    const uint32_t disk64 = record.u32("ZIP64 disk number");
    const uint32_t directory_disk64 = record.u32("ZIP64 directory disk");
    record.skip(8, "ZIP64 entries on disk");
    entries = record.u64("ZIP64 entry count");
    directory_size = record.u64("ZIP64 directory size");
    directory_offset = record.u64("ZIP64 directory offset");
    if (disk64 != 0 || directory_disk64 != 0) fail(record_at, "multi-disk archives are not supported");
  } else if (disk != 0 || directory_disk != 0) {
    fail(end_at, "multi-disk archives are not supported");
  }

  const uint64_t directory_limit = zip64 ? end_at - kZip64LocatorBytes : end_at;
  if (!range_fits(directory_offset, directory_size, directory_limit))
    fail(end_at, "central directory [" + std::to_string(directory_offset) + ", +" +
                     std::to_string(directory_size) + ") lies outside the archive");
  if (entries > kMaxZipMembers)
    fail(end_at, std::to_string(entries) + " entries exceed the limit of " +
                     std::to_string(kMaxZipMembers));
  if (entries > directory_size / kCentralHeaderBytes)
    fail(end_at, std::to_string(entries) + " entries cannot fit in a central directory of " +
                     std::to_string(directory_size) + " bytes");

  ByteReader directory(bytes.first(directory_offset + directory_size), file_->display_name(),
                       format_, base_);
  directory.seek(directory_offset);
  members_.reserve(entries);
  for (uint64_t i = 0; i < entries; ++i) read_member(directory, directory_offset);
}

void ZipArchive::read_member(ByteReader& directory, uint64_t directory_offset) {
  const uint64_t header_at = directory.position();
  if (directory.u32("central header signature") != kCentralHeaderSignature)
    fail(header_at, "bad central directory header signature");
  ZipMember member;
  directory.skip(4, "versions");
  member.flags = directory.u16("flags");
  member.method = directory.u16("method");
  directory.skip(4, "time and date");
  member.crc32 = directory.u32("CRC-32");
  const uint32_t compressed32 = directory.u32("compressed size");
  const uint32_t uncompressed32 = directory.u32("uncompressed size");
  const uint16_t name_length = directory.u16("name length");
  const uint16_t extra_length = directory.u16("extra length");
  const uint16_t comment_length = directory.u16("comment length");
  const uint16_t disk_start = directory.u16("disk number start");
  directory.skip(6, "attributes");
  const uint32_t local32 = directory.u32("local header offset");
  member.name = std::string(directory.take_string(name_length, "member name"));
  auto extra = directory.take(extra_length, "extra field");
  directory.skip(comment_length, "member comment");

  member.compressed_size = compressed32;
  member.uncompressed_size = uncompressed32;
  member.local_header_offset = local32;
  // ZIP64 extended information: only the saturated fields, in this order.
  ByteReader fields(extra, file_->display_name(), format_, base_ + header_at + kCentralHeaderBytes + name_length);
  while (fields.remaining() >= 4) {
    const uint16_t id = fields.u16("extra field id");
    const uint16_t size = fields.u16("extra field size");
    auto body = fields.take(size, "extra field");
    if (id != kZip64ExtraId) continue;
    ByteReader zip64(body, file_->display_name(), format_, base_);
    if (uncompressed32 == kSaturated32) member.uncompressed_size = zip64.u64("ZIP64 uncompressed size");
    if (compressed32 == kSaturated32) member.compressed_size = zip64.u64("ZIP64 compressed size");
    if (local32 == kSaturated32) member.local_header_offset = zip64.u64("ZIP64 local header offset");
    if (disk_start == kSaturated16) zip64.skip(4, "ZIP64 disk number");
  }

  auto quote = [&] { return "member " + member.name + ": "; };
  if (disk_start != 0 && disk_start != kSaturated16)
    fail(header_at, quote() + "lies on another disk of a multi-disk archive");
  // The local header gives the data offset (its name and extra lengths, with
  // PyTorch's alignment padding, differ from the central copy); its CRC and
  // sizes may be zeros with the real values in a data descriptor, so they
  // are not read.
  const auto bytes = file_->bytes().subspan(base_, length_);
  ByteReader local(bytes, file_->display_name(), format_, base_);
  if (member.local_header_offset > length_ || length_ - member.local_header_offset < kLocalHeaderBytes)
    fail(header_at, quote() + "local header offset " + std::to_string(member.local_header_offset) +
                        " lies outside the archive");
  local.seek(member.local_header_offset);
  if (local.u32("local header signature") != kLocalHeaderSignature)
    fail(member.local_header_offset, quote() + "bad local header signature");
  local.skip(22, "local header fields");
  const uint16_t local_name_length = local.u16("local name length");
  const uint16_t local_extra_length = local.u16("local extra length");
  member.data_offset = member.local_header_offset + kLocalHeaderBytes + local_name_length +
                       local_extra_length;
  // Member data precedes the central directory.
  if (!range_fits(member.data_offset, member.compressed_size, directory_offset))
    fail(member.local_header_offset,
         quote() + std::to_string(member.compressed_size) + " bytes of data at offset " +
             std::to_string(member.data_offset) + " run into the central directory or past the archive");
  if (member.stored() && member.compressed_size != member.uncompressed_size)
    fail(header_at, quote() + "stored, but its compressed size " +
                        std::to_string(member.compressed_size) + " differs from its size " +
                        std::to_string(member.uncompressed_size));

  if (!by_name_.emplace(member.name, members_.size()).second)
    fail(header_at, "member name " + member.name + " appears twice");
  members_.push_back(std::move(member));
}

std::vector<IntegrityCheck> ZipArchive::crc_checks() const {
  auto archive = std::make_shared<const ZipArchive>(*this);
  std::vector<IntegrityCheck> checks;
  checks.reserve(members_.size());
  for (size_t index = 0; index < members_.size(); ++index) {
    checks.push_back({"CRC-32 of " + members_[index].name, members_[index].uncompressed_size,
                      [archive, index](const std::function<void(uint64_t)>& progress) {
                        const ZipMember& member = archive->members_[index];
                        const ByteSpan bytes = archive->contents(member);
                        // Inflating has checked a compressed member's CRC.
                        if (!member.stored()) {
                          progress(bytes.size());
                          return;
                        }
                        uLong crc = ::crc32(0L, Z_NULL, 0);
                        constexpr uint64_t kChunk = 1 << 20;
                        for (uint64_t at = 0; at < bytes.size(); at += kChunk) {
                          const uint64_t n = std::min(kChunk, bytes.size() - at);
                          crc = crc32_update(crc, bytes.data() + at, n);
                          progress(n);
                        }
                        if (crc != member.crc32)
                          archive->fail(member.local_header_offset,
                                        "member " + member.name + ": " + crc_mismatch(crc, member.crc32));
                      }});
  }
  return checks;
}

ByteSpan ZipArchive::contents(const ZipMember& member) const {
  auto quote = "member " + member.name + ": ";
  if (member.flags & kEncryptedFlag) fail(member.local_header_offset, quote + "is encrypted");
  if (member.stored()) return ByteSpan::mapped(file_, base_ + member.data_offset, member.compressed_size);
  if (member.method != kDeflated)
    fail(member.local_header_offset,
         quote + "compression method " + std::to_string(member.method) + " is not supported (only stored and deflate)");
  if (member.uncompressed_size > kMaxInflatedBytes)
    fail(member.local_header_offset, quote + "inflates to " + std::to_string(member.uncompressed_size) +
                                         " bytes, over the limit of " + std::to_string(kMaxInflatedBytes));

  // Deflate expands at most 1032 to 1: a directory claiming more is lying,
  // and is refused before anything is allocated for it.
  if (member.uncompressed_size / kMaxDeflateRatio > member.compressed_size)
    fail(member.local_header_offset,
         quote + "cannot inflate: " + std::to_string(member.compressed_size) +
             " compressed bytes cannot make " + std::to_string(member.uncompressed_size) +
             " (deflate expands at most " + std::to_string(kMaxDeflateRatio) + "×)");
  charge_budget(member.uncompressed_size, file_->display_name(), format_, "inflating " + member.name);
  return ByteSpan::owned(inflate(member));
}

std::string ZipArchive::inflate(const ZipMember& member) const {
  const auto quote = "member " + member.name + ": cannot inflate: ";
  // A raw deflate stream (no zlib or gzip wrapper), inflated straight into
  // bytes of the size the directory gives: a stream that wants more room,
  // ends early or fails its CRC is refused, never trusted.
  std::string out(member.uncompressed_size, '\0');
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK)
    fail(member.local_header_offset, quote + "zlib could not start");
  const auto* in = reinterpret_cast<const Bytef*>(file_->data() + base_ + member.data_offset);
  uint64_t in_left = member.compressed_size;
  // zlib counts in 32 bits; the output fits (kMaxInflatedBytes), the input
  // is fed in pieces.
  constexpr uint64_t kPiece = uint64_t{1} << 30;
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  int status = Z_OK;
  std::string why;
  while (status == Z_OK) {
    if (stream.avail_in == 0) {
      if (in_left == 0) {
        why = "the data ends before the deflate stream does";
        break;
      }
      const uint64_t piece = std::min(in_left, kPiece);
      stream.next_in = const_cast<Bytef*>(in);
      stream.avail_in = static_cast<uInt>(piece);
      in += piece;
      in_left -= piece;
    }
    status = ::inflate(&stream, Z_NO_FLUSH);
    if (status == Z_BUF_ERROR && stream.avail_out == 0) why = "inflates to more bytes than its size";
  }
  if (why.empty() && status != Z_STREAM_END)
    why = stream.msg != nullptr ? stream.msg : "zlib error " + std::to_string(status);
  const uint64_t produced = out.size() - stream.avail_out;
  inflateEnd(&stream);
  if (why.empty() && produced != out.size())
    why = "inflates to " + std::to_string(produced) + " bytes, fewer than its size " +
          std::to_string(out.size());
  if (why.empty()) {
    const uLong crc = crc32_update(::crc32(0L, Z_NULL, 0),
                                   reinterpret_cast<const std::byte*>(out.data()), out.size());
    if (crc != member.crc32) why = crc_mismatch(crc, member.crc32);
  }
  if (!why.empty()) fail(member.local_header_offset, quote + why);
  return out;
}

}  // namespace modelfs
