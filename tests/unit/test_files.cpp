// SPDX-License-Identifier: Apache-2.0
#include "test_files.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "cli/sigbus_guard.hpp"

namespace modelfs::test {

namespace {
// The unit tests stand for the program: they install its SIGBUS guard at
// start, as main() does (the library installs none).
const bool sigbus_guard_installed = [] {
  cli::install_sigbus_guard();
  return true;
}();
}  // namespace

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

namespace modelfs::test {
namespace {

void put(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint32_t crc32_of(const std::string& data) {
  uint32_t crc = 0xFFFFFFFF;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

}  // namespace

std::string zip_bytes(const std::vector<ZipEntry>& entries, const ZipLayout& layout) {
  std::string out;
  std::string directory;
  for (const auto& e : entries) {
    const uint64_t size = e.data.size();
    const std::string stored = e.payload       ? *e.payload
                               : e.method == 8 ? deflate_stored_blocks(e.data)
                                               : e.data;
    const uint64_t offset = out.size();
    const uint32_t crc = e.crc ? *e.crc : crc32_of(e.data);
    const uint16_t flags = layout.data_descriptors ? 0x0808 : 0x0800;
    std::string local;
    put(local, 0x04034b50, 4);
    put(local, 20, 2);
    put(local, flags, 2);
    put(local, e.method, 2);
    put(local, 0, 4);
    put(local, layout.data_descriptors ? 0 : crc, 4);
    put(local, layout.data_descriptors ? 0 : stored.size(), 4);
    put(local, layout.data_descriptors ? 0 : size, 4);
    put(local, e.name.size(), 2);
    std::string extra;
    if (layout.alignment) {
      uint64_t start = offset + 30 + e.name.size() + 4;
      uint64_t pad = (layout.alignment - start % layout.alignment) % layout.alignment;
      put(extra, 0x4246, 2);
      put(extra, pad, 2);
      extra.append(pad, 'Z');
    }
    put(local, extra.size(), 2);
    out += local + e.name + extra + stored;
    if (layout.data_descriptors) {
      put(out, 0x08074b50, 4);
      put(out, crc, 4);
      put(out, stored.size(), layout.zip64 ? 8 : 4);
      put(out, size, layout.zip64 ? 8 : 4);
    }
    std::string zip64_extra;
    if (layout.zip64) {
      put(zip64_extra, 0x0001, 2);
      put(zip64_extra, 24, 2);
      put(zip64_extra, size, 8);
      put(zip64_extra, stored.size(), 8);
      put(zip64_extra, offset, 8);
    }
    put(directory, 0x02014b50, 4);
    put(directory, 45, 2);
    put(directory, 45, 2);
    put(directory, flags, 2);
    put(directory, e.method, 2);
    put(directory, 0, 4);
    put(directory, crc, 4);
    put(directory, layout.zip64 ? 0xFFFFFFFF : stored.size(), 4);
    put(directory, layout.zip64 ? 0xFFFFFFFF : size, 4);
    put(directory, e.name.size(), 2);
    put(directory, zip64_extra.size(), 2);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 2);
    put(directory, 0, 4);
    put(directory, layout.zip64 ? 0xFFFFFFFF : offset, 4);
    directory += e.name + zip64_extra;
  }
  const uint64_t directory_offset = out.size();
  out += directory;
  if (layout.zip64) {
    const uint64_t record_offset = out.size();
    put(out, 0x06064b50, 4);
    put(out, 44, 8);
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, entries.size(), 8);
    put(out, entries.size(), 8);
    put(out, directory.size(), 8);
    put(out, directory_offset, 8);
    put(out, 0x07064b50, 4);
    put(out, 0, 4);
    put(out, record_offset, 8);
    put(out, 1, 4);
  }
  put(out, 0x06054b50, 4);
  put(out, 0, 2);
  put(out, 0, 2);
  put(out, layout.zip64 ? 0xFFFF : entries.size(), 2);
  put(out, layout.zip64 ? 0xFFFF : entries.size(), 2);
  put(out, layout.zip64 ? 0xFFFFFFFF : directory.size(), 4);
  put(out, layout.zip64 ? 0xFFFFFFFF : directory_offset, 4);
  put(out, 0, 2);
  return out;
}

std::string deflate_stored_blocks(const std::string& data) {
  std::string out;
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(data.size() - pos, 0xFFFF);
    const bool last = pos + n == data.size();
    out.push_back(last ? 1 : 0);
    put(out, n, 2);
    put(out, ~n & 0xFFFF, 2);
    out.append(data, pos, n);
    pos += n;
  } while (pos < data.size());
  return out;
}

}  // namespace modelfs::test
