// SPDX-License-Identifier: Apache-2.0
#include "formats/nemo_gzip.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"

namespace modelfs::nemo {
namespace {

constexpr uint8_t kFlagHcrc = 0x02, kFlagExtra = 0x04, kFlagName = 0x08, kFlagComment = 0x10;
constexpr uint64_t kInputPiece = uint64_t{1} << 20;     // compressed bytes made present at a time
constexpr uint64_t kOutputPiece = uint64_t{256} << 10;  // decoded bytes handed on at a time
constexpr uint64_t kPage = 4096;

}  // namespace

struct GzipStream::Zlib {
  z_stream z{};
  bool ready = false;
  std::vector<std::byte> out = std::vector<std::byte>(kOutputPiece);
  ~Zlib() {
    if (ready) inflateEnd(&z);
  }
};

GzipStream::GzipStream(std::shared_ptr<const MappedFile> file, std::string format)
    : zlib_(std::make_unique<Zlib>()), file_(std::move(file)), format_(std::move(format)) {
  // RFC 1952: magic, method 8, flags, mtime, extra flags, OS, then the
  // optional fields the flags name.
  ByteReader head(file_->unchecked_bytes(), file_->display_name(), format_);
  if (head.u8("gzip magic") != 0x1f || head.u8("gzip magic") != 0x8b) fail(0, "not a gzip file");
  if (head.u8("gzip method") != 8) fail(2, "gzip method is not deflate");
  const uint8_t flags = head.u8("gzip flags");
  if (flags & 0xE0) fail(3, "gzip flags set reserved bits");
  head.skip(6, "gzip mtime, extra flags and OS");
  if (flags & kFlagExtra) head.skip(head.u16("gzip extra length"), "gzip extra field");
  for (const uint8_t text : {kFlagName, kFlagComment}) {
    if (!(flags & text)) continue;
    while (head.u8("gzip name or comment") != 0) {
    }
  }
  if (flags & kFlagHcrc) head.skip(2, "gzip header CRC");
  deflate_at_ = head.position();
  if (inflateInit2(&zlib_->z, -MAX_WBITS) != Z_OK) fail(0, "zlib cannot start inflating");
  zlib_->ready = true;
  crc_ = static_cast<uint32_t>(::crc32(0L, Z_NULL, 0));
}

GzipStream::~GzipStream() = default;

void GzipStream::fail(uint64_t at, const std::string& reason) const {
  throw ModelError(file_->display_name(), format_, at, "gzip: " + reason);
}

void GzipStream::restart() {
  if (inflateReset(&zlib_->z) != Z_OK) fail(deflate_at_, "zlib cannot restart inflating");
  zlib_->z.avail_in = 0;
  consumed_ = 0;
  produced_ = 0;
  crc_ = static_cast<uint32_t>(::crc32(0L, Z_NULL, 0));
  ended_ = false;
}

uint64_t GzipStream::advance(uint64_t until, const InflateSink& sink) {
  z_stream& z = zlib_->z;
  while (!ended_ && produced_ < until) {
    check_budget();
    if (z.avail_in == 0) {
      const uint64_t at = deflate_at_ + consumed_;
      if (at >= file_->size())
        fail(at, "the deflate stream ends before its last block (the file is cut short)");
      const auto input = file_->read(at, std::min(kInputPiece, file_->size() - at));
      z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(input.data()));
      z.avail_in = static_cast<uInt>(input.size());
    }
    const uint64_t want = std::min<uint64_t>(kOutputPiece, until - produced_);
    z.next_out = reinterpret_cast<Bytef*>(zlib_->out.data());
    z.avail_out = static_cast<uInt>(want);
    const uInt before_in = z.avail_in;
    const int status = inflate(&z, Z_NO_FLUSH);
    consumed_ += before_in - z.avail_in;
    if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR)
      fail(deflate_at_ + consumed_,
           std::string("corrupt deflate stream (") + (z.msg ? z.msg : "zlib error") + ")");
    const uint64_t out = want - z.avail_out;
    const std::span<const std::byte> piece(zlib_->out.data(), out);
    crc_ = static_cast<uint32_t>(
        ::crc32(crc_, reinterpret_cast<const Bytef*>(piece.data()), static_cast<uInt>(out)));
    if (out > 0) sink(produced_, piece);
    produced_ += out;
    if (status == Z_STREAM_END) {
      ended_ = true;
      check_trailer();
      deflate_size_ = consumed_;
      decoded_size_ = produced_;
    }
  }
  return produced_;
}

void GzipStream::check_trailer() {
  const uint64_t at = deflate_at_ + consumed_;
  if (file_->size() - at < 8) fail(at, "the gzip trailer (CRC-32 and size) is cut short");
  const auto trailer = file_->read(at, 8);
  const uint32_t crc = load_le<uint32_t>(trailer, 0), size = load_le<uint32_t>(trailer, 4);
  if (crc != crc_) fail(at, "CRC-32 of the inflated bytes does not match the gzip trailer's");
  if (size != static_cast<uint32_t>(produced_))
    fail(at + 4, "the gzip trailer's size does not match the inflated bytes");
  const auto rest = file_->read(at + 8, file_->size() - at - 8);
  if (std::any_of(rest.begin(), rest.end(), [](std::byte b) { return b != std::byte{0}; }))
    fail(at + 8, "bytes follow the gzip stream (several gzip members are not read)");
}

ByteSpan GzipStream::deflate_bytes() const { return ByteSpan::mapped(file_, deflate_at_, deflate_size_); }

SparseImage::SparseImage(std::string name, std::string format)
    : name_(std::move(name)), format_(std::move(format)) {
  fd_ = ::memfd_create("modelfs-nemo-image", MFD_CLOEXEC);
  if (fd_ < 0)
    throw ModelError(name_, format_, std::nullopt, "cannot make a memory file for the inflated tar");
}

SparseImage::~SparseImage() {
  if (fd_ >= 0) ::close(fd_);
}

void SparseImage::write(uint64_t at, std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  // The memory file is not the heap: charged by hand, a page a write at least.
  add_metadata_bytes(bytes.size());
  charge_budget(bytes.size() + kPage, name_, format_, "the inflated tar's headers and records");
  for (uint64_t done = 0; done < bytes.size();) {
    const ssize_t wrote =
        ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(at + done));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0)
      throw ModelError(name_, format_, std::nullopt, "cannot fill a memory file for the inflated tar");
    done += static_cast<uint64_t>(wrote);
  }
}

std::shared_ptr<const MappedFile> SparseImage::map(uint64_t size) {
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
    throw ModelError(name_, format_, std::nullopt, "cannot size a memory file for the inflated tar");
  const int mapped = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (mapped < 0)
    throw ModelError(name_, format_, std::nullopt, "cannot map the memory file of the inflated tar");
  return MappedFile::open_descriptor(mapped, name_ + " (inflated)");
}

}  // namespace modelfs::nemo
