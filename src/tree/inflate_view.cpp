// SPDX-License-Identifier: Apache-2.0
#include "tree/inflate_view.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

#include "modelfs/error.hpp"
#include "tree/inflate_index.hpp"

namespace modelfs {

// The index's key for one stream's points, dropped with its last view (a
// tree built again, a fuzzer).
struct StreamOwner {
  uint64_t id = new_stream_owner();
  StreamOwner() = default;
  StreamOwner(const StreamOwner&) = delete;
  StreamOwner& operator=(const StreamOwner&) = delete;
  ~StreamOwner() { forget_deflate_streams(id); }
};

namespace {

// The owner of the stream at `bytes`, shared by the views that read it.
std::shared_ptr<const StreamOwner> owner_of(const ByteSpan& bytes) {
  static std::mutex mutex;
  static std::map<std::pair<const std::byte*, uint64_t>, std::weak_ptr<const StreamOwner>> owners;
  static size_t swept = 0;  // entries after the last sweep of the expired
  const std::lock_guard lock(mutex);
  if (owners.size() > 2 * swept + 64) {
    std::erase_if(owners, [](const auto& entry) { return entry.second.expired(); });
    swept = owners.size();
  }
  auto& slot = owners[{bytes.data(), bytes.size()}];
  auto owner = slot.lock();
  if (!owner) {
    owner = std::make_shared<const StreamOwner>();
    slot = owner;
  }
  return owner;
}

}  // namespace

InflateView::InflateView(const Tensor& tensor, std::string file, std::string format)
    : owner_(owner_of(tensor.bytes)),
      stream_(tensor.bytes),
      decoded_offset_(tensor.encoded->decoded_offset),
      size_(tensor.encoded->size),
      decoded_size_(tensor.encoded->decoded_size),
      file_(std::move(file)),
      format_(std::move(format)) {
  if (decoded_offset_ > decoded_size_ || size_ > decoded_size_ - decoded_offset_)
    throw std::logic_error("an encoded tensor's bytes lie outside what its stream decodes to");
}

InflateView::~InflateView() = default;

void InflateView::read(uint64_t offset, std::span<std::byte> out, ReadScope& scope) const {
  const uint64_t length = out.size();
  if (length == 0) return;
  if (offset > size_ || length > size_ - offset) throw std::logic_error("a read outside an inflated part");
  const uint64_t begin = decoded_offset_ + offset;
  std::byte* const to = out.data();
  const DeflateStream stream{owner_->id, 0, stream_, decoded_size_, false, true};
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
