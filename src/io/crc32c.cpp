// SPDX-License-Identifier: Apache-2.0
// CRC-32C (Castagnoli): SSE4.2's instruction where the CPU has it, else
// slicing by eight (crc32c.hpp).
#include "io/crc32c.hpp"

#include <array>
#include <cstring>

namespace modelfs {
namespace {

constexpr uint32_t kCastagnoli = 0x82f63b78U;  // reflected polynomial

constexpr std::array<std::array<uint32_t, 256>, 8> make_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCastagnoli : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  return t;
}
constexpr auto kTables = make_tables();

// Slicing by eight: --check reads every byte of a checkpoint through this.
uint32_t crc32c_table(uint32_t crc, const unsigned char* p, size_t n) noexcept {
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian host (byte_reader.hpp)
    word ^= crc;
    crc = kTables[7][word & 0xff] ^ kTables[6][(word >> 8) & 0xff] ^ kTables[5][(word >> 16) & 0xff] ^
          kTables[4][(word >> 24) & 0xff] ^ kTables[3][(word >> 32) & 0xff] ^
          kTables[2][(word >> 40) & 0xff] ^ kTables[1][(word >> 48) & 0xff] ^ kTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ kTables[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const unsigned char* p,
                                                        size_t n) noexcept {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
#endif

}  // namespace

uint32_t crc32c_extend(uint32_t crc, std::span<const std::byte> bytes) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  crc = ~crc;
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  crc = sse42 ? crc32c_sse42(crc, p, bytes.size()) : crc32c_table(crc, p, bytes.size());
#else
  crc = crc32c_table(crc, p, bytes.size());
#endif
  return ~crc;
}

}  // namespace modelfs
