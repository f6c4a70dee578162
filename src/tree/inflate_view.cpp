// SPDX-License-Identifier: Apache-2.0
#include "tree/inflate_view.hpp"

#include <cstring>
#include <stdexcept>

#include "modelfs/error.hpp"
#include "tree/inflate_index.hpp"

namespace modelfs {
InflateView::InflateView(const Tensor& tensor, std::string file, std::string format)
    : id_(new_stream_owner()),
      stream_(tensor.bytes),
      decoded_offset_(tensor.encoded->decoded_offset),
      size_(tensor.encoded->size),
      decoded_size_(tensor.encoded->decoded_size),
      file_(std::move(file)),
      format_(std::move(format)) {
  if (decoded_offset_ > decoded_size_ || size_ > decoded_size_ - decoded_offset_)
    throw std::logic_error("an encoded tensor's bytes lie outside what its stream decodes to");
}

// Its points are free for others (a tree built again, a fuzzer).
InflateView::~InflateView() { forget_deflate_streams(id_); }

void InflateView::read(uint64_t offset, std::span<std::byte> out, ReadScope& scope) const {
  const uint64_t length = out.size();
  if (length == 0) return;
  if (offset > size_ || length > size_ - offset) throw std::logic_error("a read outside an inflated part");
  const uint64_t begin = decoded_offset_ + offset;
  std::byte* const to = out.data();
  const DeflateStream stream{id_, 0, stream_, decoded_size_, false, true};
  try {
    inflate_range(
        stream, begin, begin + length,
        [&](uint64_t at, const std::byte* data, uint64_t n) { std::memcpy(to + (at - begin), data, n); },
        scope);
  } catch (const DeflateError& e) {
    throw ModelError(file_, format_, std::nullopt, e.what());
  }
}

}  // namespace modelfs
