// SPDX-License-Identifier: Apache-2.0
#include "io/zip_archive.hpp"

#include <zip.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <tuple>

#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "modelfs/budget.hpp"
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

// `crc` continued over `size` bytes (zlib's crc32 takes 32-bit lengths).
uLong crc32_of(const char* data, uint64_t size, uLong crc = ::crc32(0L, Z_NULL, 0)) {
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

// The methods named in messages, in the order "libzip here reads" lists them.
constexpr std::pair<uint16_t, const char*> kMethodNames[] = {
    {ZIP_CM_STORE, "stored"}, {ZIP_CM_DEFLATE, "deflate"}, {ZIP_CM_DEFLATE64, "deflate64"},
    {ZIP_CM_BZIP2, "bzip2"},  {ZIP_CM_LZMA, "LZMA"},       {93, "zstd"},
    {ZIP_CM_XZ, "xz"}};

std::string method_name(uint16_t method) {
  for (const auto& [number, name] : kMethodNames)
    if (number == method) return name;
  return "method " + std::to_string(method);
}

// What this libzip decompresses (stored always), for the message refusing anything else.
std::string methods_libzip_reads() {
  std::string names;
  for (const auto& [number, name] : kMethodNames)
    if (zip_compression_method_supported(number, 0)) names += std::string(", ") + name;
  return names.substr(2);
}

// libzip's archives and members, closed however the reading ends.
struct CloseZip {
  void operator()(zip_t* archive) const { zip_discard(archive); }
  void operator()(zip_file_t* file) const { zip_fclose(file); }
};
using ZipHandle = std::unique_ptr<zip_t, CloseZip>;
using ZipFile = std::unique_ptr<zip_file_t, CloseZip>;

std::string libzip_error(zip_error_t* error) { return std::string("libzip: ") + zip_error_strerror(error); }

}  // namespace

// libzip over the archive's bytes in the mapping (a buffer source: nothing
// is copied). `reader` decompresses members for contents(); `checked`,
// opened with ZIP_CHECKCONS, is --check's independent reading.
struct ZipArchive::Libzip {
  std::mutex mutex;
  ZipHandle reader;
  ZipHandle checked;

  // What libzip allocates for its own copy of the directory (malloc, which
  // the budget's allocator does not see): its entry and directory records
  // and each name, charged by hand.
  static constexpr uint64_t kLibzipBytesPerEntry = 256;

  // Opens (once) the handle asked for over the archive's bytes; an error
  // message when libzip refuses.
  zip_t* open(ZipHandle& handle, int flags, const ZipArchive& archive, std::string& error) {
    if (handle != nullptr) return handle.get();
    uint64_t names = 0;
    for (const auto& member : archive.members_) names += member.name.size();
    charge_budget(archive.members_.size() * kLibzipBytesPerEntry + names, archive.file_->display_name(),
                  archive.format_, "libzip's reading of the directory");
    const std::byte* data = archive.file_->unchecked_data() + archive.base_;
    const uint64_t size = archive.length_;
    zip_error_t why;
    zip_error_init(&why);
    zip_source_t* source = zip_source_buffer_create(data, size, 0, &why);
    if (source != nullptr) {
      handle.reset(zip_open_from_source(source, flags | ZIP_RDONLY, &why));
      if (handle == nullptr) zip_source_free(source);
    }
    if (handle == nullptr) error = libzip_error(&why);
    zip_error_fini(&why);
    return handle.get();
  }

  // --check's own reading, opened once with ZIP_CHECKCONS for every check.
  zip_t* checked_reading(const ZipArchive& archive) {
    std::string error;
    // libzip reads the archive's bytes from the mapping itself: all of them
    // are made present first.
    archive.file_->ensure(archive.base_, archive.length_);
    zip_t* za = open(checked, ZIP_CHECKCONS, archive, error);
    if (za == nullptr) archive.fail(0, "libzip finds the archive inconsistent (" + error + ")");
    return za;
  }
};

ZipArchive ZipArchive::open(std::shared_ptr<const MappedFile> file, std::string format) {
  const uint64_t size = file->size();
  return open(std::move(file), 0, size, std::move(format));
}

ZipArchive ZipArchive::open(std::shared_ptr<const MappedFile> file, uint64_t offset, uint64_t length,
                            std::string format) {
  ZipArchive archive;
  archive.file_ = std::move(file);
  archive.format_ = std::move(format);
  archive.base_ = offset;
  archive.length_ = length;
  archive.libzip_ = std::make_shared<Libzip>();
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
  const auto bytes = file_->unchecked_bytes().subspan(base_, length_);
  if (length_ < kEndRecordBytes) fail(0, "too short for an end-of-central-directory record");

  // The end record is the last 22 bytes plus a comment of up to 64 KiB:
  // scan backwards for its signature, nearest the end first.
  uint64_t end_at = length_ - kEndRecordBytes;
  const uint64_t lowest = end_at > kMaxCommentBytes ? end_at - kMaxCommentBytes : 0;
  file_->ensure(base_ + lowest, length_ - lowest);  // the scanned tail (a remote model's)
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
  if (end_at >= kZip64LocatorBytes && (file_->ensure(base_ + end_at - kZip64LocatorBytes, 4), true) &&
      le32(bytes, end_at - kZip64LocatorBytes) == kZip64LocatorSignature) {
    zip64 = true;
    ByteReader locator(bytes, file_->display_name(), format_, base_);
    locator.seek(end_at - kZip64LocatorBytes + 8);
    const uint64_t record_at = locator.u64("ZIP64 end record offset");
    if (record_at > end_at - kZip64LocatorBytes)
      fail(end_at - kZip64LocatorBytes,
           "ZIP64 end record offset " + std::to_string(record_at) + " lies outside the archive");
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
    fail(end_at, std::to_string(entries) + " entries exceed the limit of " + std::to_string(kMaxZipMembers));
  if (entries > directory_size / kCentralHeaderBytes)
    fail(end_at, std::to_string(entries) + " entries cannot fit in a central directory of " +
                     std::to_string(directory_size) + " bytes");

  ByteReader directory(bytes.first(directory_offset + directory_size), file_->display_name(), format_, base_);
  directory.seek(directory_offset);
  add_metadata_bytes(directory_size);
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
  ByteReader fields(extra, file_->display_name(), format_,
                    base_ + header_at + kCentralHeaderBytes + name_length);
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
  const auto bytes = file_->unchecked_bytes().subspan(base_, length_);
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
  member.data_offset =
      member.local_header_offset + kLocalHeaderBytes + local_name_length + local_extra_length;
  // Member data precedes the central directory.
  if (!range_fits(member.data_offset, member.compressed_size, directory_offset))
    fail(member.local_header_offset, quote() + std::to_string(member.compressed_size) +
                                         " bytes of data at offset " + std::to_string(member.data_offset) +
                                         " run into the central directory or past the archive");
  if (member.stored() && member.compressed_size != member.uncompressed_size)
    fail(header_at, quote() + "stored, but its compressed size " + std::to_string(member.compressed_size) +
                        " differs from its size " + std::to_string(member.uncompressed_size));

  if (!by_name_.emplace(member.name, members_.size()).second)
    fail(header_at, "member name " + member.name + " appears twice");
  members_.push_back(std::move(member));
}

void ZipArchive::fail(const ZipMember& member, const std::string& reason) const {
  fail(member.local_header_offset, "member " + member.name + ": " + reason);
}

// What neither contents() nor --check can read.
void ZipArchive::refuse_unreadable(const ZipMember& member) const {
  if (member.flags & kEncryptedFlag) fail(member, "is encrypted");
  if (!zip_compression_method_supported(member.method, 0))
    fail(member, "compression method " + method_name(member.method) +
                     " is not supported (libzip here reads " + methods_libzip_reads() + ")");
}

std::vector<IntegrityCheck> ZipArchive::crc_checks() const {
  auto archive = std::make_shared<const ZipArchive>(*this);
  std::vector<IntegrityCheck> checks;
  checks.reserve(members_.size() + 1);
  checks.push_back(
      {"ZIP directory read again by libzip", 0, [archive](const auto&) { archive->compare_with_libzip(); }});
  for (size_t index = 0; index < members_.size(); ++index)
    checks.push_back({"CRC-32 of " + members_[index].name, members_[index].uncompressed_size,
                      [archive, index](const auto& progress) { archive->check_crc(index, progress); }});
  return checks;
}

void ZipArchive::compare_with_libzip() const {
  std::lock_guard lock(libzip_->mutex);
  zip_t* za = libzip_->checked_reading(*this);
  const zip_int64_t count = zip_get_num_entries(za, 0);
  if (count < 0 || uint64_t(count) != members_.size())
    fail(0, "libzip reads " + std::to_string(count) + " members, modelfs " + std::to_string(members_.size()));
  for (size_t index = 0; index < members_.size(); ++index) {
    const ZipMember& ours = members_[index];
    zip_stat_t theirs;
    zip_stat_init(&theirs);
    if (zip_stat_index(za, index, ZIP_FL_ENC_RAW, &theirs) != 0) fail(ours, libzip_error(zip_get_error(za)));
    const auto differs = [&](const std::string& what) {
      fail(ours, "libzip and modelfs read " + what + " differently");
    };
    if (theirs.name == nullptr || ours.name != theirs.name)
      differs(std::string("its name (libzip: ") + (theirs.name ? theirs.name : "none") + ")");
    const std::tuple<const char*, uint64_t, uint64_t> fields[] = {
        {"size", theirs.size, ours.uncompressed_size},
        {"compressed size", theirs.comp_size, ours.compressed_size},
        {"method", theirs.comp_method, ours.method},
        {"CRC-32", theirs.crc, ours.crc32}};
    for (const auto& [field, their, our] : fields)
      if (their != our) differs("its " + std::string(field) + " (libzip: " + std::to_string(their) + ")");
  }
}

void ZipArchive::check_crc(size_t index, const std::function<void(uint64_t)>& progress) const {
  const ZipMember& member = members_[index];
  refuse_unreadable(member);
  std::lock_guard lock(libzip_->mutex);
  zip_t* za = libzip_->checked_reading(*this);
  const ZipFile file(zip_fopen_index(za, index, 0));
  if (file == nullptr) fail(member, libzip_error(zip_get_error(za)));
  // libzip compares size and CRC-32 when the member's end is read.
  // Sized to the member (one byte more shows a member longer than declared):
  // an archive of 100 000 small members must not clear 1 MiB for each.
  std::vector<char> buffer(std::min<uint64_t>(uint64_t{1} << 20, member.uncompressed_size + 1));
  uLong crc = ::crc32(0L, Z_NULL, 0);
  uint64_t total = 0;
  zip_int64_t n = 0;
  while ((n = zip_fread(file.get(), buffer.data(), buffer.size())) > 0) {
    crc = crc32_of(buffer.data(), uint64_t(n), crc);
    total += uint64_t(n);
    progress(std::min<uint64_t>(uint64_t(n), member.uncompressed_size));
    if (total > member.uncompressed_size) break;
  }
  const std::string sizes = "holds " + std::to_string(total) + " bytes, the directory says " +
                            std::to_string(member.uncompressed_size);
  if (n < 0) {
    zip_error_t* error = zip_file_get_error(file.get());
    if (total != member.uncompressed_size) fail(member, sizes + " (" + libzip_error(error) + ")");
    if (zip_error_code_zip(error) == ZIP_ER_CRC)
      fail(member, crc_mismatch(crc, member.crc32) + " (" + libzip_error(error) + ")");
    fail(member, libzip_error(error));
  }
  if (total != member.uncompressed_size) fail(member, sizes);
}

ByteSpan ZipArchive::contents(const ZipMember& member) const {
  refuse_unreadable(member);
  if (member.stored()) return ByteSpan::mapped(file_, base_ + member.data_offset, member.compressed_size);
  if (member.uncompressed_size > kMaxInflatedBytes)
    fail(member, "inflates to " + std::to_string(member.uncompressed_size) + " bytes, over the limit of " +
                     std::to_string(kMaxInflatedBytes));

  // Deflate expands at most 1032 to 1: a directory claiming more is lying,
  // and is refused before anything is allocated for it. Other methods have
  // no useful bound (bzip2 makes 45 MB of zeros from 50 bytes): their
  // output is allocated as the stream really produces it (decompress()).
  if (member.method == kDeflated && member.uncompressed_size / kMaxDeflateRatio > member.compressed_size)
    fail(member, "cannot inflate: " + std::to_string(member.compressed_size) +
                     " compressed bytes cannot make " + std::to_string(member.uncompressed_size) +
                     " (deflate expands at most " + std::to_string(kMaxDeflateRatio) + "×)");
  return within_budget(file_->display_name(), format_, "inflating " + member.name,
                       [&] { return ByteSpan::owned(decompress(member)); });
}

// libzip decompresses (and at the member's end compares the CRC-32 and
// size with the directory's); we read exactly the directory's size and one
// byte more, so a stream that wants more room, ends early or fails its CRC
// is refused, never trusted.
std::string ZipArchive::decompress(const ZipMember& member) const {
  const auto refuse = [&](const std::string& why) { fail(member, "cannot inflate: " + why); };
  const uint64_t size = member.uncompressed_size;
  const size_t index = by_name_.at(member.name);
  std::lock_guard lock(libzip_->mutex);
  std::string error;
  // libzip reads the mapping itself: the member's local header and data
  // are made present first (the directory was, when it was read).
  file_->ensure(base_ + member.local_header_offset,
                member.data_offset + member.compressed_size - member.local_header_offset);
  zip_t* za = libzip_->open(libzip_->reader, 0, *this, error);
  if (za == nullptr) refuse(error);
  const char* name = zip_get_name(za, index, ZIP_FL_ENC_RAW);
  if (name == nullptr || member.name != name)
    refuse("libzip reads another member at its place in the directory");
  const ZipFile file(zip_fopen_index(za, index, 0));
  if (file == nullptr) refuse(libzip_error(zip_get_error(za)));

  // Deflate's output was bounded by the ratio check: allocated whole.
  // Other methods grow with what the stream gives, up to the size.
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  std::string out;
  out.resize(member.method == kDeflated ? size : std::min(size, kChunk));
  uint64_t produced = 0;
  zip_int64_t n = 0;
  while (produced < size) {
    if (produced == out.size()) out.resize(std::min(size, out.size() * 2));
    n = zip_fread(file.get(), out.data() + produced, out.size() - produced);
    if (n <= 0) break;
    produced += uint64_t(n);
  }
  if (produced == size) {
    // One more read: the end of the stream, where libzip checks the CRC.
    char extra = 0;
    n = zip_fread(file.get(), &extra, 1);
    if (n > 0) refuse("inflates to more bytes than its size");
  }
  // libzip does not say whether a short stream was cut or ended early.
  const std::string short_stream =
      "inflates to " + std::to_string(produced) + " bytes, fewer than its size " + std::to_string(size) +
      " (the data ends before the " + method_name(member.method) + " stream does, or the stream ends early)";
  if (n < 0) {
    zip_error_t* failure = zip_file_get_error(file.get());
    const int code = zip_error_code_zip(failure);
    if (produced < size && (code == ZIP_ER_CRC || code == ZIP_ER_INCONS)) refuse(short_stream);
    if (code == ZIP_ER_CRC) refuse(crc_mismatch(crc32_of(out.data(), out.size()), member.crc32));
    refuse(libzip_error(failure));
  }
  if (produced < size) refuse(short_stream);
  return out;
}

}  // namespace modelfs
