// SPDX-License-Identifier: Apache-2.0
#include "tree/inflate_index.hpp"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>
#include <mutex>
#include <vector>

#include "io/mapped_bytes.hpp"

namespace modelfs {
namespace {

// Compressed bytes made present (a remote model's blocks) per step, and
// decoded bytes per step (what the sink is given at a time).
constexpr uint64_t kInputStep = uint64_t{1} << 20;
constexpr uint64_t kOutputStep = uint64_t{64} << 10;
std::atomic<uint64_t> g_inflated{0};  // deflate_index_counts()

struct ZDelete {
  void operator()(z_stream* zs) const {
    inflateEnd(zs);  // harmless on a stream never started (zalloc still null)
    delete zs;
  }
};
using ZState = std::unique_ptr<z_stream, ZDelete>;

ZState fresh_state(bool zlib_wrapper) {
  ZState zs(new z_stream{});
  if (inflateInit2(zs.get(), zlib_wrapper ? MAX_WBITS : -MAX_WBITS) != Z_OK)
    throw DeflateError("zlib cannot start inflating (out of memory)");
  return zs;
}

ZState copy_state(z_stream& from) {
  ZState zs(new z_stream{});
  if (inflateCopy(zs.get(), &from) != Z_OK) throw DeflateError("zlib cannot copy its state (out of memory)");
  return zs;
}

struct Point {
  uint64_t owner = 0;
  uint64_t part = 0;
  uint64_t out = 0;  // decoded bytes before it
  bool moving = false;
  uint64_t used = 0;  // when last used, to replace the least recent
  ZState zs;
};

struct Index {
  std::mutex mutex;
  std::vector<Point> points;
  uint64_t clock = 0;
  size_t fixed = 0;
  size_t moving = 0;

  // Makes room for one more point of its kind (the lock held).
  void make_room(bool moving_point) {
    if ((moving_point ? moving : fixed) < (moving_point ? kDeflateMovingPoints : kDeflateFixedPoints)) return;
    auto oldest = points.end();
    for (auto it = points.begin(); it != points.end(); ++it)
      if (it->moving == moving_point && (oldest == points.end() || it->used < oldest->used)) oldest = it;
    if (oldest != points.end()) erase(oldest);
  }
  void erase(std::vector<Point>::iterator it) {
    --(it->moving ? moving : fixed);
    std::swap(*it, points.back());
    points.pop_back();
  }
  void add(Point point) {
    ++(point.moving ? moving : fixed);
    point.used = ++clock;
    points.push_back(std::move(point));
  }
};

// Never destroyed: FUSE threads may still read while the process exits.
Index& the_index() {
  static Index* kept = new Index;
  return *kept;
}

// The state to start a read at `begin` from: the index's nearest point at
// or before it (a moving point taken, a fixed one copied), else the
// stream's start.
ZState start_state(const DeflateStream& stream, uint64_t begin) {
  if (stream.indexed) {
    Index& index = the_index();
    const std::lock_guard lock(index.mutex);
    auto best = index.points.end();
    for (auto it = index.points.begin(); it != index.points.end(); ++it)
      if (it->owner == stream.owner && it->part == stream.part && it->out <= begin &&
          (best == index.points.end() || it->out > best->out))
        best = it;
    if (best != index.points.end()) {
      if (!best->moving) {
        best->used = ++index.clock;
        return copy_state(*best->zs);
      }
      ZState zs = std::move(best->zs);
      index.erase(best);
      return zs;
    }
  }
  return fresh_state(stream.zlib_wrapper);
}

// A fixed point at `out` of the stream, unless one is there.
void keep_fixed(const DeflateStream& stream, uint64_t out, z_stream& zs) {
  Index& index = the_index();
  const std::lock_guard lock(index.mutex);
  for (const Point& p : index.points)
    if (!p.moving && p.owner == stream.owner && p.part == stream.part && p.out == out) return;
  index.make_room(false);
  index.add(Point{stream.owner, stream.part, out, false, 0, copy_state(zs)});
}

void keep_moving(const DeflateStream& stream, uint64_t out, ZState zs) {
  Index& index = the_index();
  const std::lock_guard lock(index.mutex);
  index.make_room(true);
  index.add(Point{stream.owner, stream.part, out, true, 0, std::move(zs)});
}

// One stream being inflated by one read.
class Inflater {
 public:
  Inflater(const DeflateStream& stream, ZState zs) : stream_(stream), zs_(std::move(zs)) {
    zs_->next_in = nullptr;
    zs_->avail_in = 0;
    fed_ = zs_->total_in;
    out_ = zs_->total_out;
  }
  uint64_t out() const { return out_; }
  z_stream& state() { return *zs_; }
  ZState release() { return std::move(zs_); }

  // One inflate call into [to, to + room): zlib's answer and the bytes made.
  std::pair<int, uint64_t> step(std::byte* to, uint64_t room) {
    z_stream& zs = *zs_;
    if (zs.avail_in == 0 && fed_ < stream_.bytes.size()) {
      const uint64_t n = std::min(kInputStep, stream_.bytes.size() - fed_);
      const std::span<const std::byte> input = stream_.bytes.subspan(fed_, n).span();
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(input.data()));
      zs.avail_in = static_cast<uInt>(n);
      fed_ += n;
    }
    zs.next_out = reinterpret_cast<Bytef*>(to);
    zs.avail_out = static_cast<uInt>(std::min<uint64_t>(room, UINT_MAX));
    const uInt before = zs.avail_out;
    int rc = Z_OK;
    read_mapped([&] { rc = inflate(&zs, Z_NO_FLUSH); });
    const uint64_t made = before - zs.avail_out;
    out_ += made;
    g_inflated.fetch_add(made, std::memory_order_relaxed);
    if (rc == Z_OK || rc == Z_STREAM_END) return {rc, made};
    if (rc == Z_BUF_ERROR) {
      if (zs.avail_in == 0 && fed_ == stream_.bytes.size())
        throw DeflateError("the deflate stream ends after " + std::to_string(out_) +
                           " decoded bytes, without its final block (it should make " +
                           std::to_string(stream_.decoded_size) + ")");
      return {rc, made};
    }
    throw DeflateError("corrupt deflate stream at decoded byte " + std::to_string(out_) + ": " +
                       (zs.msg != nullptr ? zs.msg : "zlib error " + std::to_string(rc)));
  }

  // At the stream's decoded size: it must end there, making nothing more.
  void expect_end() {
    for (;;) {
      std::byte extra{};
      const auto [rc, made] = step(&extra, 1);
      if (made != 0)
        throw DeflateError("the deflate stream makes more than the " + std::to_string(stream_.decoded_size) +
                           " bytes it should");
      if (rc == Z_STREAM_END) return;
    }
  }

 private:
  const DeflateStream& stream_;
  ZState zs_;
  uint64_t fed_ = 0;  // compressed bytes given to zlib
  uint64_t out_ = 0;  // decoded bytes made
};

thread_local std::vector<std::byte> t_out;

}  // namespace

void inflate_range(const DeflateStream& stream, uint64_t begin, uint64_t end, const DeflateSink& sink) {
  if (begin > end || end > stream.decoded_size) throw std::logic_error("a range outside a deflate stream");
  if (begin == end) return;
  Inflater inflater(stream, start_state(stream, begin));
  if (t_out.size() < kOutputStep) t_out.resize(kOutputStep);
  std::byte* const buffer = t_out.data();
  while (inflater.out() < end) {
    const uint64_t at = inflater.out();
    const uint64_t next_fixed = stream.indexed ? (at / kDeflateSpan + 1) * kDeflateSpan : UINT64_MAX;
    const uint64_t stop = std::min({at < begin ? begin : end, next_fixed, at + kOutputStep});
    const auto [rc, made] = inflater.step(buffer, stop - at);
    if (made != 0 && at >= begin) sink(at, buffer, made);
    const uint64_t now = inflater.out();
    if (rc == Z_STREAM_END && now < stream.decoded_size)
      throw DeflateError("the deflate stream ends after " + std::to_string(now) + " decoded bytes, but " +
                         "should make " + std::to_string(stream.decoded_size));
    if (stream.indexed && now % kDeflateSpan == 0 && now != at && now < stream.decoded_size)
      keep_fixed(stream, now, inflater.state());
  }
  if (end == stream.decoded_size) {
    inflater.expect_end();
  } else if (stream.indexed && end % kDeflateSpan != 0) {
    keep_moving(stream, end, inflater.release());
  }
}

uint64_t new_stream_owner() noexcept {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

void forget_deflate_streams(uint64_t owner) {
  Index& index = the_index();
  const std::lock_guard lock(index.mutex);
  for (size_t k = index.points.size(); k-- > 0;)
    if (index.points[k].owner == owner) index.erase(index.points.begin() + static_cast<std::ptrdiff_t>(k));
}

DeflateIndexCounts deflate_index_counts() {
  Index& index = the_index();
  const std::lock_guard lock(index.mutex);
  return {index.fixed, index.moving, g_inflated.load(std::memory_order_relaxed)};
}

}  // namespace modelfs
