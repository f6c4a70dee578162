// SPDX-License-Identifier: Apache-2.0
#pragma once
// SHA-1, for the one place a model format names it: the "checksum" key of
// ONNX external data, verified by `modelfs --check`. Not for security; the
// format chose it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace modelfs {

class Sha1 {
 public:
  Sha1();
  void update(std::span<const std::byte> bytes);
  // Lowercase hex of the 20-byte digest; the object is spent afterwards.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 5> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace modelfs
