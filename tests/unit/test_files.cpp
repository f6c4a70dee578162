#include "test_files.hpp"

#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace modelfs::test {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "modelfs-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::filesystem::path TempDir::write(const std::string& name, const std::string& bytes) const {
  auto file = path_ / name;
  std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return file;
}

std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string pb_varint(uint64_t value) {
  std::string out;
  do {
    auto byte = static_cast<uint8_t>(value & 0x7F);
    value >>= 7;
    out.push_back(static_cast<char>(byte | (value ? 0x80 : 0)));
  } while (value);
  return out;
}

std::string pb_key(uint32_t number, int wire_type) {
  return pb_varint((uint64_t{number} << 3) | static_cast<uint64_t>(wire_type));
}

std::string pb_uint(uint32_t number, uint64_t value) { return pb_key(number, 0) + pb_varint(value); }

std::string pb_bytes(uint32_t number, const std::string& payload) {
  return pb_key(number, 2) + pb_varint(payload.size()) + payload;
}

std::string pb_fixed32(uint32_t number, uint32_t value) {
  std::string out = pb_key(number, 5);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  return out;
}

}  // namespace modelfs::test
