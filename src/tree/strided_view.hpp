// SPDX-License-Identifier: Apache-2.0
#pragma once
// A strided view's elements in C order, computed for each read of its .npy
// (a transpose of a slice, an expand(), a column of a matrix). The view is
// never copied whole: an expand() of one element to 2^26 elements is a
// 4-byte storage and a 256 MiB .npy, and a read costs what it asks for.
#include <cstdint>
#include <memory>
#include <span>

#include "modelfs/tree.hpp"

namespace modelfs {

class StridedGather final : public ComputedBytes {
 public:
  // The gather of the view over `bytes` (which start at the view's first
  // element), or null when an element would lie outside `bytes` or a stride
  // is negative. Shape and strides must outlive the gather.
  static std::unique_ptr<StridedGather> make(std::span<const std::byte> bytes,
                                             std::span<const uint64_t> shape,
                                             std::span<const int64_t> strides, uint32_t element_size);

  uint64_t size() const noexcept { return size_; }
  void fill(uint64_t offset, std::span<std::byte> out) const override;

 private:
  StridedGather() = default;
  const std::byte* base_ = nullptr;
  uint64_t reach_ = 0;  // bytes from base_ the elements lie in (ensured before a fill)
  std::span<const uint64_t> shape_;
  std::span<const int64_t> strides_;
  uint32_t element_size_ = 1;
  uint64_t size_ = 0;
};

}  // namespace modelfs
