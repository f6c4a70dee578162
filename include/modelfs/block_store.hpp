// SPDX-License-Identifier: Apache-2.0
#pragma once
// Append-only stores for what a tree keeps of many small things (names,
// shapes, printed extras): items laid end to end in 64 KiB blocks that never
// move once written, so views into them stay valid for the store's life:
// thousands of items a block, not a heap block each among the reader's
// freed memory.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace modelfs {

template <typename T>
class BlockStore {
 public:
  std::span<const T> add(std::span<const T> items) { return {copy(items, 0), items.size()}; }

 protected:
  // Copies `items` followed by `spare` value-initialised items; returns the copy.
  T* copy(std::span<const T> items, size_t spare) {
    const size_t need = items.size() + spare;
    if (need == 0) return nullptr;
    T* at;
    if (need > kBlockItems) {
      // An item list longer than a block gets a block of its own, kept
      // before the current one: the current block's free space stays the
      // one items are appended to.
      auto own = std::make_unique_for_overwrite<T[]>(need);
      at = own.get();
      blocks_.insert(blocks_.end() - (blocks_.empty() ? 0 : 1), std::move(own));
    } else {
      if (need > kBlockItems - used_) {
        // Blocks are not zeroed: a small tree touches only the pages its
        // items fill.
        blocks_.push_back(std::make_unique_for_overwrite<T[]>(kBlockItems));
        used_ = 0;
      }
      at = blocks_.back().get() + used_;
      used_ += need;
    }
    std::copy(items.begin(), items.end(), at);
    std::fill(at + items.size(), at + need, T{});
    return at;
  }

 private:
  static constexpr size_t kBlockItems = (64 << 10) / sizeof(T);
  std::vector<std::unique_ptr<T[]>> blocks_;
  size_t used_ = kBlockItems;  // of the last block; full before the first
};

// Text, each followed by a NUL, so a name's data() is also a C string (what
// FUSE's directory replies take).
class TextStore : private BlockStore<char> {
 public:
  std::string_view add(std::string_view text) {
    return {copy(std::span(text.data(), text.size()), 1), text.size()};
  }
};

}  // namespace modelfs
