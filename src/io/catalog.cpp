// SPDX-License-Identifier: Apache-2.0
#include "modelfs/catalog.hpp"

#include <stdexcept>

#include "modelfs/checked_math.hpp"

namespace modelfs {

ByteSpan ByteSpan::mapped(std::shared_ptr<const MappedFile> file, uint64_t offset,
                          uint64_t length) {
  if (!file || !range_fits(offset, length, file->size()))
    throw std::out_of_range("ByteSpan::mapped: range outside the mapped file");
  ByteSpan span;
  span.file_ = file.get();
  span.data_ = file->data() == nullptr ? nullptr : file->data() + offset;
  span.size_ = length;
  span.owner_ = std::move(file);
  return span;
}

ByteSpan ByteSpan::owned(std::string bytes) {
  auto buffer = std::make_shared<const std::string>(std::move(bytes));
  ByteSpan span;
  span.data_ = reinterpret_cast<const std::byte*>(buffer->data());
  span.size_ = buffer->size();
  span.owner_ = std::move(buffer);
  return span;
}

ByteSpan ByteSpan::subspan(uint64_t offset, uint64_t length) const {
  if (!range_fits(offset, length, size_))
    throw std::out_of_range("ByteSpan::subspan: range outside the span");
  ByteSpan span = *this;
  span.data_ = data_ == nullptr ? nullptr : data_ + offset;
  span.size_ = length;
  return span;
}

std::string_view Tensor::dtype_name() const {
  if (dtype == DType::GgmlBlock) return block_type;
  return modelfs::dtype_name(dtype);
}

uint64_t Tensor::numel() const { return checked_numel(shape).value_or(0); }

std::vector<int64_t> contiguous_strides(std::span<const uint64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= static_cast<int64_t>(shape[i] == 0 ? 1 : shape[i]);
  }
  return strides;
}

namespace {
// Dimensions of size 0 or 1 place no constraint on their stride (as torch's
// is_contiguous); an empty tensor is contiguous in any order.
bool strides_match(const Tensor& t, bool c_order) {
  if (t.strides.size() != t.shape.size()) return false;
  if (t.numel() == 0) return true;
  int64_t expected = 1;
  const size_t rank = t.shape.size();
  for (size_t k = 0; k < rank; ++k) {
    size_t i = c_order ? rank - 1 - k : k;
    if (t.shape[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= static_cast<int64_t>(t.shape[i]);
  }
  return true;
}
}  // namespace

bool Tensor::is_c_contiguous() const { return strides_match(*this, true); }
bool Tensor::is_f_contiguous() const { return strides_match(*this, false); }

}  // namespace modelfs
