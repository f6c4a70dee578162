// SPDX-License-Identifier: Apache-2.0
#pragma once
// How far ahead of a sequential reader a remote object is fetched
// (blocks.cpp): a window that starts small once a read continues the one
// before, doubles each time the reader has consumed half of what was asked
// for ahead of it, and stops at a bound. A read that continues no stream
// starts one (and fetches nothing ahead), so random readers fetch what they
// read.
#include <algorithm>
#include <array>
#include <cstdint>

namespace modelfs::remote {

// One reader's stream through an object.
class ReadWindow {
 public:
  // Bytes to fetch ahead now: [from, to), empty when from >= to.
  struct Ahead {
    uint64_t from = 0, to = 0;
    bool empty() const { return from >= to; }
  };

  ReadWindow(uint64_t initial, uint64_t bound) : initial_(std::max<uint64_t>(initial, 1)), bound_(bound) {}

  // Whether a read of [offset, end) continues this stream: it starts inside
  // what the stream has read or had fetched ahead (the reads of one kernel
  // readahead reach the daemon in any order, a page-fault reader may skip).
  bool continues(uint64_t offset) const {
    return active_ && offset >= start_ && offset <= std::max(reader_end_, ahead_end_);
  }

  // A read of [offset, end) of an object of `size` bytes.
  Ahead on_read(uint64_t offset, uint64_t end, uint64_t size) {
    end = std::min(end, size);
    if (!continues(offset)) {
      active_ = true;
      start_ = offset;
      reader_end_ = ahead_end_ = end;
      window_ = 0;
      return {};
    }
    reader_end_ = std::max(reader_end_, end);
    ahead_end_ = std::max(ahead_end_, reader_end_);
    if (bound_ == 0) return {};
    if (window_ == 0) {
      window_ = std::min(initial_, bound_);
    } else {
      // Still more than half of the window ahead of the reader: wait.
      if (ahead_end_ - reader_end_ > window_ / 2) return {};
      window_ = std::min(window_ * 2, bound_);
    }
    const uint64_t target = std::min(size, reader_end_ + window_);
    if (target <= ahead_end_) return {};
    Ahead ahead{ahead_end_, target};
    ahead_end_ = target;
    return ahead;
  }

  uint64_t window() const { return window_; }
  uint64_t ahead_end() const { return ahead_end_; }

 private:
  uint64_t initial_, bound_;
  bool active_ = false;
  uint64_t start_ = 0, reader_end_ = 0, ahead_end_ = 0, window_ = 0;
};

// The streams of one object followed at once (readers of several tensors):
// a read goes to the stream it continues, else replaces the one least
// recently read.
class ReadStreams {
 public:
  static constexpr size_t kStreams = 8;

  ReadStreams(uint64_t initial, uint64_t bound) {
    for (auto& s : streams_) s = Slot{ReadWindow(initial, bound), 0};
  }

  ReadWindow::Ahead on_read(uint64_t offset, uint64_t end, uint64_t size) {
    ++clock_;
    Slot* chosen = nullptr;
    for (auto& s : streams_)
      if (s.window.continues(offset)) {
        chosen = &s;
        break;
      }
    if (chosen == nullptr)
      chosen = &*std::min_element(streams_.begin(), streams_.end(),
                                  [](const Slot& a, const Slot& b) { return a.used < b.used; });
    chosen->used = clock_;
    return chosen->window.on_read(offset, end, size);
  }

 private:
  struct Slot {
    ReadWindow window{1, 0};
    uint64_t used = 0;
  };
  std::array<Slot, kStreams> streams_{};
  uint64_t clock_ = 0;
};

}  // namespace modelfs::remote
