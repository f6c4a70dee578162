// SPDX-License-Identifier: Apache-2.0
#pragma once
// CRC-32C (Castagnoli): TensorFlow checkpoints' block and tensor checksums,
// and the remote block cache's (src/remote/cache_object.hpp).
#include <cstddef>
#include <cstdint>
#include <span>

namespace modelfs {

// CRC-32C of `bytes`, continuing from `crc` (0 to start).
uint32_t crc32c_extend(uint32_t crc, std::span<const std::byte> bytes) noexcept;
inline uint32_t crc32c(std::span<const std::byte> bytes) noexcept { return crc32c_extend(0, bytes); }

}  // namespace modelfs
