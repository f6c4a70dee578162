// SPDX-License-Identifier: Apache-2.0
#pragma once
// A cursor over untrusted bytes. Every read is bounds-checked first; a read
// past the end throws ModelError naming the file, format and offset, so a
// binary parser reads like the format's spec and cannot overrun. Every
// take makes its bytes present first (a remote model's blocks are fetched
// then): through the mapped file it reads, or, over a span, the mapping the
// span lies in.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"

namespace modelfs {

// The little-endian number at `at` of `bytes`: the one loader of the
// readers' fixed-width fields (ByteReader's reads come through it too).
// The range is the caller's to have checked, with its own message; one
// that does not fit is a bug of the caller's, thrown as std::out_of_range.
template <typename T>
T load_le(std::span<const std::byte> bytes, uint64_t at = 0) {
  static_assert(std::is_integral_v<T> || std::is_floating_point_v<T>);
  if (!range_fits(at, sizeof(T), bytes.size()))
    throw std::out_of_range("a little-endian load past its bytes");
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));  // hosts are little-endian (checked below)
  return value;
}

class ByteReader {
 public:
  // `base` is the offset of bytes[0] in the file, for messages.
  ByteReader(std::span<const std::byte> bytes, std::string file, std::string format, uint64_t base = 0)
      : bytes_(bytes), file_(std::move(file)), format_(std::move(format)), base_(base) {}
  // The whole of `mapped`, which must outlive the reader.
  ByteReader(const MappedFile& mapped, std::string format)
      : bytes_(mapped.unchecked_bytes()),
        mapped_(&mapped),
        file_(mapped.display_name()),
        format_(std::move(format)),
        base_(0) {}

  uint64_t position() const noexcept { return pos_; }
  uint64_t file_offset() const noexcept { return base_ + pos_; }
  uint64_t remaining() const noexcept { return bytes_.size() - pos_; }
  void seek(uint64_t position) {
    if (position > bytes_.size()) fail("offset " + std::to_string(position) + " is past the end");
    pos_ = position;
  }

  std::span<const std::byte> take(uint64_t length, std::string_view what) {
    if (length > remaining())
      fail(std::string(what) + " needs " + std::to_string(length) + " bytes but only " +
           std::to_string(remaining()) + " remain");
    check_budget();
    std::span<const std::byte> out;
    if (mapped_ != nullptr) {
      out = mapped_->read(pos_, length);
    } else {
      out = bytes_.subspan(pos_, length);
      MappedFile::ensure_at(out.data(), out.size());
    }
    pos_ += length;
    return out;
  }
  std::string_view take_string(uint64_t length, std::string_view what) {
    auto raw = take(length, what);
    return {reinterpret_cast<const char*>(raw.data()), raw.size()};
  }
  void skip(uint64_t length, std::string_view what) { take(length, what); }

  template <typename T>
  T read_le(std::string_view what) {
    static_assert(std::is_integral_v<T> || std::is_floating_point_v<T>);
    return load_le<T>(take(sizeof(T), what));
  }
  uint8_t u8(std::string_view what) { return read_le<uint8_t>(what); }
  uint16_t u16(std::string_view what) { return read_le<uint16_t>(what); }
  uint32_t u32(std::string_view what) { return read_le<uint32_t>(what); }
  uint64_t u64(std::string_view what) { return read_le<uint64_t>(what); }

  [[noreturn]] void fail(const std::string& reason) const {
    throw ModelError(file_, format_, file_offset(), reason);
  }

 private:
  std::span<const std::byte> bytes_;
  const MappedFile* mapped_ = nullptr;  // bytes_ is all of it
  std::string file_;
  std::string format_;
  uint64_t base_;
  uint64_t pos_ = 0;
};

static_assert(std::endian::native == std::endian::little,
              "modelfs serves little-endian tensor bytes from the mapping as they are");

}  // namespace modelfs
