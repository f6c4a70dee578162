// SPDX-License-Identifier: Apache-2.0
#include "strided_view.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "modelfs/checked_math.hpp"
#include "modelfs/mapped_file.hpp"

namespace modelfs {

std::unique_ptr<StridedGather> StridedGather::make(std::span<const std::byte> bytes,
                                                   std::span<const uint64_t> shape,
                                                   std::span<const int64_t> strides,
                                                   uint32_t element_size) {
  if (shape.size() != strides.size() || element_size == 0) return nullptr;
  // The last element's offset (the largest, strides being non-negative)
  // must lie inside the bytes; an empty view reads nothing.
  uint64_t numel = 1;
  uint64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (strides[d] < 0) return nullptr;
    auto n = checked_mul(numel, shape[d]);
    if (!n) return nullptr;
    numel = *n;
    if (shape[d] == 0) continue;
    auto reach = checked_mul(shape[d] - 1, static_cast<uint64_t>(strides[d]));
    auto sum = reach ? checked_add(last, *reach) : std::nullopt;
    if (!sum) return nullptr;
    last = *sum;
  }
  auto size = checked_mul(numel, uint64_t{element_size});
  if (!size) return nullptr;
  uint64_t reach = 0;
  if (numel > 0) {
    auto end = checked_mul(last + 1, uint64_t{element_size});
    if (!end || *end > bytes.size()) return nullptr;
    reach = *end;
  }
  std::unique_ptr<StridedGather> gather(new StridedGather());
  gather->base_ = bytes.data();
  gather->reach_ = reach;
  gather->shape_ = shape;
  gather->strides_ = strides;
  gather->element_size_ = element_size;
  gather->size_ = *size;
  return gather;
}

void StridedGather::fill(uint64_t offset, std::span<std::byte> out) const {
  if (out.empty()) return;
  // Any element may be asked for: a remote model's tensor is made present whole.
  MappedFile::ensure_at(base_, reach_);
  const uint64_t e = element_size_;
  const size_t rank = shape_.size();
  // The C-order index of the first element asked for, and its offset (in
  // elements) in the storage.
  uint64_t element = offset / e;
  size_t skip = offset % e;  // bytes of the first element before the range
  std::vector<uint64_t> index(rank, 0);
  uint64_t at = 0;
  for (size_t d = rank; d-- > 0;) {
    index[d] = element % shape_[d];
    element /= shape_[d];
    at += index[d] * static_cast<uint64_t>(strides_[d]);
  }
  std::byte* to = out.data();
  size_t left = out.size();
  const uint64_t inner_size = rank ? shape_[rank - 1] : 1;
  const uint64_t inner_stride = rank ? static_cast<uint64_t>(strides_[rank - 1]) : 0;
  while (left > 0) {
    // Along the innermost dimension, then one step of the outer ones.
    for (uint64_t i = rank ? index[rank - 1] : 0; i < inner_size && left > 0; ++i) {
      const size_t take = std::min<size_t>(e - skip, left);
      std::memcpy(to, base_ + at * e + skip, take);
      to += take;
      left -= take;
      skip = 0;
      at += inner_stride;
    }
    if (rank == 0 || left == 0) break;
    at -= inner_stride * inner_size;
    index[rank - 1] = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      const auto stride = static_cast<uint64_t>(strides_[d]);
      if (++index[d] < shape_[d]) {
        at += stride;
        break;
      }
      at -= stride * (shape_[d] - 1);
      index[d] = 0;
    }
  }
}

}  // namespace modelfs
