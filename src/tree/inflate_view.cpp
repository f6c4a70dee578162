// SPDX-License-Identifier: Apache-2.0
#include "inflate_view.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "modelfs/error.hpp"
#include "modelfs/mapped_bytes.hpp"

namespace modelfs {
namespace {

// Enough for two sequential readers of one member and a few of others; each
// state is zlib's ~40 KiB.
constexpr size_t kCheckpoints = 4;
// Compressed bytes made present (a remote model's blocks) per step.
constexpr uint64_t kInputStep = uint64_t{1} << 20;

struct Checkpoint {
  z_stream zs{};
  bool started = false;  // inflateInit2 done
  uint64_t owner = 0;    // the view whose stream this is; 0: none (free, or left broken)
  uint64_t in = 0;       // compressed bytes consumed
  uint64_t out = 0;      // decoded bytes produced
  uint64_t used = 0;     // when last used, to replace the least recent
};

struct Checkpoints {
  std::mutex mutex;
  std::array<Checkpoint, kCheckpoints> slots;
  uint64_t clock = 0;
  std::array<Bytef, 64 * 1024> discard{};  // decoded bytes before a read's offset
};

// Never destroyed: FUSE threads may still read while the process exits.
Checkpoints& checkpoints() {
  static Checkpoints* kept = new Checkpoints;
  return *kept;
}

// The last read's bytes of this thread, from prepare() to fill().
struct ReadOut {
  uint64_t view = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<std::byte> bytes;
};
thread_local ReadOut t_read;

std::atomic<uint64_t> g_next_id{1};

}  // namespace

InflateView::InflateView(const Tensor& tensor, std::string file, std::string format)
    : id_(g_next_id.fetch_add(1)),
      stream_(tensor.bytes),
      stream_size_(tensor.bytes.size()),
      decoded_offset_(tensor.encoded->decoded_offset),
      size_(tensor.encoded->size),
      decoded_size_(tensor.encoded->decoded_size),
      file_(std::move(file)),
      format_(std::move(format)) {
  if (decoded_offset_ > decoded_size_ || size_ > decoded_size_ - decoded_offset_)
    throw std::logic_error("an encoded tensor's bytes lie outside what its stream decodes to");
}

InflateView::~InflateView() {
  // Its checkpoints are free for others (a tree built again, a fuzzer).
  auto& c = checkpoints();
  const std::lock_guard lock(c.mutex);
  for (auto& slot : c.slots)
    if (slot.owner == id_) slot.owner = 0;
}

void InflateView::prepare(uint64_t offset, uint64_t length) const {
  t_read.view = 0;
  if (length == 0) return;
  if (offset > size_ || length > size_ - offset) throw std::logic_error("a read outside an inflated part");
  if (t_read.bytes.size() < length) t_read.bytes.resize(length);
  const uint64_t begin = decoded_offset_ + offset;
  const uint64_t end = begin + length;

  auto& c = checkpoints();
  const std::lock_guard lock(c.mutex);
  // The checkpoint of this stream that is furthest on without passing
  // `begin`; else the least recently used one, started again.
  Checkpoint* slot = nullptr;
  for (auto& s : c.slots)
    if (s.owner == id_ && s.out <= begin && (slot == nullptr || s.out > slot->out)) slot = &s;
  if (slot == nullptr) {
    slot = &*std::min_element(c.slots.begin(), c.slots.end(), [](const Checkpoint& a, const Checkpoint& b) {
      return std::pair(a.owner != 0, a.used) < std::pair(b.owner != 0, b.used);
    });
    slot->owner = 0;
    const int rc = slot->started ? inflateReset(&slot->zs) : inflateInit2(&slot->zs, -MAX_WBITS);
    if (rc != Z_OK)
      throw ModelError(file_, format_, std::nullopt, "zlib cannot start inflating (out of memory)");
    slot->started = true;
    slot->zs.next_in = nullptr;
    slot->zs.avail_in = 0;
    slot->in = slot->out = 0;
    slot->owner = id_;
  }
  slot->used = ++c.clock;
  z_stream& zs = slot->zs;

  auto fault = [&](const std::string& reason) {
    slot->owner = 0;  // its state is of no use to a later read
    throw ModelError(file_, format_, std::nullopt, reason);
  };
  // One inflate call into [to, to + room): the bytes it produced.
  auto step = [&](Bytef* to, uint64_t room) -> std::pair<int, uint64_t> {
    if (zs.avail_in == 0 && slot->in < stream_size_) {
      const uint64_t n = std::min(kInputStep, stream_size_ - slot->in);
      // span() makes a remote model's blocks present first.
      const std::span<const std::byte> input = stream_.subspan(slot->in, n).span();
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(input.data()));
      zs.avail_in = static_cast<uInt>(n);
    }
    zs.next_out = to;
    zs.avail_out = static_cast<uInt>(std::min<uint64_t>(room, UINT_MAX));
    const uInt in_before = zs.avail_in;
    const uInt out_before = zs.avail_out;
    int rc = Z_OK;
    try {
      read_mapped([&] { rc = inflate(&zs, Z_NO_FLUSH); });
    } catch (const ModelError&) {
      slot->owner = 0;
      throw;
    }
    slot->in += in_before - zs.avail_in;
    const uint64_t produced = out_before - zs.avail_out;
    slot->out += produced;
    return {rc, produced};
  };
  auto stream_failed = [&](int rc) {
    if (rc == Z_BUF_ERROR && slot->in == stream_size_)
      fault("the deflate stream ends after " + std::to_string(slot->out) + " decoded bytes, without its " +
            "final block (the member declares " + std::to_string(decoded_size_) + ")");
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      fault("corrupt deflate stream at decoded byte " + std::to_string(slot->out) + ": " +
            (zs.msg != nullptr ? zs.msg : "zlib error " + std::to_string(rc)));
  };

  auto* out = reinterpret_cast<Bytef*>(t_read.bytes.data());
  while (slot->out < end) {
    const bool skipping = slot->out < begin;
    Bytef* to = skipping ? c.discard.data() : out + (slot->out - begin);
    const uint64_t room =
        skipping ? std::min<uint64_t>(c.discard.size(), begin - slot->out) : end - slot->out;
    const auto [rc, produced] = step(to, room);
    if (rc == Z_STREAM_END && slot->out < end)
      fault("the deflate stream ends after " + std::to_string(slot->out) + " decoded bytes, but the member " +
            "declares " + std::to_string(decoded_size_));
    if (rc != Z_STREAM_END && produced == 0) stream_failed(rc);
  }
  if (end == decoded_size_) {
    // The read reaches the member's end: the stream must end there too.
    for (;;) {
      Bytef extra = 0;
      const auto [rc, produced] = step(&extra, 1);
      if (produced != 0)
        fault("the deflate stream yields more than the " + std::to_string(decoded_size_) +
              " bytes the member declares");
      if (rc == Z_STREAM_END) break;
      if (rc != Z_OK || zs.avail_in == 0) stream_failed(rc == Z_OK ? Z_BUF_ERROR : rc);
    }
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
