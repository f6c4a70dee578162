#pragma once
// Helpers for unit tests: temporary files, hand-made safetensors and
// protobuf bytes.
#include <cstdint>
#include <filesystem>
#include <string>

namespace modelfs::test {

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

// Hand-made protobuf wire bytes (formats.md §6.1).
std::string pb_varint(uint64_t value);
std::string pb_key(uint32_t number, int wire_type);
std::string pb_uint(uint32_t number, uint64_t value);                 // wire type 0
std::string pb_bytes(uint32_t number, const std::string& payload);   // wire type 2
std::string pb_fixed32(uint32_t number, uint32_t value);             // wire type 5

}  // namespace modelfs::test
