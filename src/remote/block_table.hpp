// SPDX-License-Identifier: Apache-2.0
#pragma once
// The in-memory bookkeeping of a remote object's blocks (blocks.cpp).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

namespace modelfs::remote {

// What a remote object keeps for each block in memory: the readers pinning
// it, its last use, whether a fetch has claimed it, whether its cached
// bytes were checked. Entries live in chunks
// allocated when one of their blocks is first touched, so the table costs
// what the blocks fetched and read need (64 KiB per GiB of the object
// touched), not what the size a server claims would (a pointer per GiB).
class BlockTable {
 public:
  struct Entry {
    std::atomic<uint32_t> pins{0};
    bool in_flight = false;  // guarded by the owner's lock
    std::atomic<uint64_t> used{0};
    // Set once its bytes are known to be the object's: fetched by this
    // daemon, or matched against the checksum of its mark.
    std::atomic<bool> trusted{false};
  };
  static constexpr uint64_t kChunkBlocks = 4096;

  explicit BlockTable(uint64_t blocks);
  ~BlockTable();
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;

  uint64_t blocks() const { return blocks_; }
  // The entry of `block` (< blocks()), its chunk allocated on first touch;
  // safe from any thread.
  Entry& at(uint64_t block);
  // The entry, or nullptr while its chunk was never touched (all zero).
  const Entry* find(uint64_t block) const;
  // Calls f(first_block, count, entries) for each allocated chunk, in order.
  template <class F>
  void for_each_chunk(F&& f) const {
    for (uint64_t c = 0; c < chunk_count_; ++c)
      if (Entry* entries = chunks_[c].load(std::memory_order_acquire))
        f(c * kChunkBlocks, std::min(kChunkBlocks, blocks_ - c * kChunkBlocks), entries);
  }
  // The bytes the table holds: its chunk pointers and its chunks.
  uint64_t allocated_bytes() const;

 private:
  uint64_t blocks_;
  uint64_t chunk_count_;
  std::unique_ptr<std::atomic<Entry*>[]> chunks_;
  std::atomic<uint64_t> allocated_chunks_{0};
};

}  // namespace modelfs::remote
