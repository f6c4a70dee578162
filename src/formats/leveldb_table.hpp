// SPDX-License-Identifier: Apache-2.0
#pragma once
// The LevelDB-format table of a TensorFlow bundle's .index (tfckpt.hpp
// draws its layout): footer, blocks with their trailers, and the entries
// of a block. Separate from the bundle reader (tfckpt.cpp) because it
// knows nothing of tensors: it checks the table's own structure, and the
// bundle reader interprets the keys and values it hands over. Errors name
// the bundle's format, the one format that reads such a table.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "io/crc32c.hpp"

namespace modelfs::tfckpt {

inline constexpr uint64_t kFooterBytes = 48;
inline constexpr uint64_t kTableMagic = 0xdb4775248b80fb57ULL;
inline constexpr uint64_t kTrailerBytes = 5;
// TensorFlow flushes blocks at 256 KiB; a block far larger is no writer's.
inline constexpr uint64_t kMaxBlockBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxKeyBytes = uint64_t{64} << 10;

// CRC-32C (modelfs/crc32c.hpp), as the bundle's checksums use it.
using modelfs::crc32c;
using modelfs::crc32c_extend;
// LevelDB's masking of a stored CRC (a CRC of bytes holding CRCs is weak).
constexpr uint32_t mask_crc(uint32_t crc) noexcept { return ((crc >> 15) | (crc << 17)) + 0xa282ead8U; }
constexpr uint32_t unmask_crc(uint32_t masked) noexcept {
  const uint32_t rot = masked - 0xa282ead8U;
  return (rot >> 17) | (rot << 15);
}

struct BlockHandle {
  uint64_t offset = 0;
  uint64_t size = 0;  // the contents, without the 5-byte trailer
};
struct Footer {
  BlockHandle metaindex;
  BlockHandle index;
};

// Errors name `file` and the format; offsets are the file's.
// The footer: the last 48 bytes of a file of `file_size` bytes. Both
// handles (with their trailers) must end before the footer.
Footer parse_footer(std::span<const std::byte> footer, uint64_t file_size, const std::string& file);

// A block's contents once its trailer is checked (and snappy undone):
// a range of the mapping, or bytes of our own.
struct Block {
  std::span<const std::byte> bytes;
  std::string owned;
  bool compressed = false;
};
// `contents_and_trailer` are the handle's size + 5 bytes at `offset`.
Block read_block(std::span<const std::byte> contents_and_trailer, uint64_t offset, const std::string& file);

// Calls `visit(key, value)` for each entry of a block's contents in order,
// after checking the restart array; `offset` is where the block lies in
// the file (for messages).
void for_each_entry(std::span<const std::byte> contents, uint64_t offset, const std::string& file,
                    const std::function<void(std::string_view key, std::span<const std::byte> value)>& visit);

// The table's encodings, which the bundle's values share.
// A varint of at most `max_bytes` bytes at bytes[pos] before `end`; nullopt
// when it runs past `end`, is longer, or does not fit 64 bits.
inline std::optional<uint64_t> varint_at(std::span<const std::byte> bytes, uint64_t& pos, uint64_t end,
                                         int max_bytes) {
  uint64_t value = 0;
  for (int i = 0; i < max_bytes; ++i) {
    if (pos >= end) return std::nullopt;
    const auto b = static_cast<uint8_t>(bytes[pos++]);
    if (i == 9 && b > 1) return std::nullopt;
    value |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) {
      if (max_bytes == 5 && value > UINT32_MAX) return std::nullopt;
      return value;
    }
  }
  return std::nullopt;
}

}  // namespace modelfs::tfckpt
