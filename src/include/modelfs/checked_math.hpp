// SPDX-License-Identifier: Apache-2.0
#pragma once
// Overflow-checked arithmetic for sizes read from hostile files. Every
// product or sum of file-provided numbers goes through these.
#include <cstdint>
#include <optional>
#include <span>

namespace modelfs {

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) noexcept {
  uint64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) return std::nullopt;
  return result;
}

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) noexcept {
  uint64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}

// Number of elements of a shape (1 for a scalar), or nullopt on overflow.
inline std::optional<uint64_t> checked_numel(std::span<const uint64_t> shape) noexcept {
  uint64_t numel = 1;
  for (uint64_t dim : shape)
    if (__builtin_mul_overflow(numel, dim, &numel)) return std::nullopt;
  return numel;
}

// Elements a strided view with non-negative strides reaches from its first
// element: 1 + sum of stride[i] x (shape[i] - 1); 0 for an empty view.
// nullopt on overflow. The torch readers bound a view's storage span by it.
inline std::optional<uint64_t> checked_strided_span(std::span<const uint64_t> shape,
                                                    std::span<const int64_t> strides) noexcept {
  for (uint64_t dim : shape)
    if (dim == 0) return 0;
  uint64_t last = 0;
  for (size_t i = 0; i < shape.size() && i < strides.size(); ++i) {
    auto step = checked_mul(static_cast<uint64_t>(strides[i]), shape[i] - 1);
    auto sum = step ? checked_add(last, *step) : std::nullopt;
    if (!sum) return std::nullopt;
    last = *sum;
  }
  return last + 1;
}

// True when [offset, offset + length) lies inside [0, size).
inline bool range_fits(uint64_t offset, uint64_t length, uint64_t size) noexcept {
  return offset <= size && length <= size - offset;
}

}  // namespace modelfs
