// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers for unit tests: temporary files, hand-made safetensors and
// protobuf bytes.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace modelfs::test {

// A catalog tensor's shape or strides as a vector, to compare with one.
template <typename T>
std::vector<T> vec(std::span<const T> items) {
  return {items.begin(), items.end()};
}
template <typename T>
std::vector<T> vec(const std::vector<T>& items) {
  return items;
}

// A fresh folder under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& bytes) const;

 private:
  std::filesystem::path path_;
};

// u64 LE length + header + data, exactly as the format lays them out.
std::string safetensors_bytes(const std::string& header, const std::string& data);

// Hand-made protobuf wire bytes (docs/formats.md, "Protobuf wire format").
std::string pb_varint(uint64_t value);
std::string pb_key(uint32_t number, int wire_type);
std::string pb_uint(uint32_t number, uint64_t value);               // wire type 0
std::string pb_bytes(uint32_t number, const std::string& payload);  // wire type 2
std::string pb_fixed32(uint32_t number, uint32_t value);            // wire type 5

}  // namespace modelfs::test

namespace modelfs::test {

// Hand-made ZIP archives laid out as PyTorch's writer does (docs/formats.md, "PyTorch's writer"):
// local headers with zero CRC and sizes, a data descriptor after each
// member, 'FB' alignment padding, and optionally every ZIP64 record.
struct ZipEntry {
  std::string name;
  std::string data;     // the member's content
  uint16_t method = 0;  // 8: written as a deflate stream of stored blocks
  // When set, written as the member's bytes instead (a real or broken
  // deflate stream), with `data` still giving the sizes and the CRC.
  std::optional<std::string> payload = std::nullopt;
  std::optional<uint32_t> crc = std::nullopt;  // overrides the CRC of `data`
};

struct ZipLayout {
  bool data_descriptors = true;  // zero CRC/sizes in local headers, descriptor after data
  bool zip64 = false;            // ZIP64 end record + locator, and ZIP64 extra fields per member
  uint64_t alignment = 64;       // 0: no padding
};

std::string zip_bytes(const std::vector<ZipEntry>& entries, const ZipLayout& layout = {});
// A deflate stream holding `data` in stored blocks: valid input for any inflater.
std::string deflate_stored_blocks(const std::string& data);

}  // namespace modelfs::test
