// SPDX-License-Identifier: Apache-2.0
#include "tree/inflate_view.hpp"

#include <cstring>
#include <stdexcept>
#include <vector>

#include "modelfs/error.hpp"
#include "tree/inflate_index.hpp"

namespace modelfs {
namespace {

// The last read's bytes of this thread, from prepare() to fill().
struct ReadOut {
  uint64_t view = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<std::byte> bytes;
};
thread_local ReadOut t_read;

}  // namespace

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

void InflateView::prepare(uint64_t offset, uint64_t length) const {
  t_read.view = 0;
  if (length == 0) return;
  if (offset > size_ || length > size_ - offset) throw std::logic_error("a read outside an inflated part");
  if (t_read.bytes.size() < length) t_read.bytes.resize(length);
  const uint64_t begin = decoded_offset_ + offset;
  std::byte* const out = t_read.bytes.data();
  const DeflateStream stream{id_, 0, stream_, decoded_size_, false, true};
  try {
    inflate_range(stream, begin, begin + length, [&](uint64_t at, const std::byte* data, uint64_t n) {
      std::memcpy(out + (at - begin), data, n);
    });
  } catch (const DeflateError& e) {
    throw ModelError(file_, format_, std::nullopt, e.what());
  }
  t_read.view = id_;
  t_read.offset = offset;
  t_read.length = length;
}

void InflateView::fill(uint64_t offset, std::span<std::byte> out) const {
  if (out.empty()) return;
  if (t_read.view != id_ || offset < t_read.offset || offset - t_read.offset > t_read.length ||
      out.size() > t_read.length - (offset - t_read.offset))
    throw std::logic_error("an inflated part filled without prepare() first");
  std::memcpy(out.data(), t_read.bytes.data() + (offset - t_read.offset), out.size());
}

}  // namespace modelfs
