// SPDX-License-Identifier: Apache-2.0
#include "io/sha1.hpp"

#include <bit>
#include <cstdio>
#include <cstring>

namespace modelfs {

Sha1::Sha1() : state_{0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0} {}

void Sha1::compress(const uint8_t* block) {
  uint32_t w[80];
  for (int i = 0; i < 16; ++i)
    w[i] = (uint32_t{block[4 * i]} << 24) | (uint32_t{block[4 * i + 1]} << 16) |
           (uint32_t{block[4 * i + 2]} << 8) | uint32_t{block[4 * i + 3]};
  for (int i = 16; i < 80; ++i) w[i] = std::rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  constexpr uint32_t kRoundConstants[4] = {0x5A827999, 0x6ED9EBA1, 0x8F1BBCDC, 0xCA62C1D6};
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3], e = state_[4];
  for (int i = 0; i < 80; ++i) {
    uint32_t f = b ^ c ^ d;  // rounds 20-39 and 60-79
    if (i < 20)
      f = (b & c) | (~b & d);
    else if (i >= 40 && i < 60)
      f = (b & c) | (b & d) | (c & d);
    const uint32_t next = std::rotl(a, 5) + f + e + kRoundConstants[i / 20] + w[i];
    e = d;
    d = c;
    c = std::rotl(b, 30);
    b = a;
    a = next;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
}

void Sha1::update(std::span<const std::byte> bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t size = bytes.size();
  total_bytes_ += size;
  if (buffered_ > 0) {
    const size_t take = std::min(size, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, data, take);
    buffered_ += take;
    data += take;
    size -= take;
    if (buffered_ < buffer_.size()) return;
    compress(buffer_.data());
    buffered_ = 0;
  }
  for (; size >= 64; data += 64, size -= 64) compress(data);
  std::memcpy(buffer_.data(), data, size);
  buffered_ = size;
}

std::string Sha1::hex_digest() {
  const uint64_t bits = total_bytes_ * 8;
  const uint8_t one = 0x80;
  update(std::as_bytes(std::span(&one, 1)));
  const uint8_t zero = 0;
  while (buffered_ != 56) update(std::as_bytes(std::span(&zero, 1)));
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(std::as_bytes(std::span(length)));
  std::string hex;
  for (uint32_t word : state_) {
    char part[9];
    std::snprintf(part, sizeof part, "%08x", word);
    hex += part;
  }
  return hex;
}

}  // namespace modelfs
