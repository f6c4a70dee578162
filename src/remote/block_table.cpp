// SPDX-License-Identifier: Apache-2.0
// The in-memory bookkeeping of a remote object's blocks (block_table.hpp).
#include "remote/block_table.hpp"

namespace modelfs::remote {

BlockTable::BlockTable(uint64_t blocks)
    : blocks_(blocks),
      chunk_count_((blocks + kChunkBlocks - 1) / kChunkBlocks),
      chunks_(std::make_unique<std::atomic<Entry*>[]>(chunk_count_)) {}

BlockTable::~BlockTable() {
  for (uint64_t c = 0; c < chunk_count_; ++c) delete[] chunks_[c].load(std::memory_order_relaxed);
}

BlockTable::Entry& BlockTable::at(uint64_t block) {
  std::atomic<Entry*>& slot = chunks_[block / kChunkBlocks];
  Entry* chunk = slot.load(std::memory_order_acquire);
  if (chunk == nullptr) {
    // Two threads may touch a new chunk at once: one allocation wins.
    auto* made = new Entry[kChunkBlocks];
    if (slot.compare_exchange_strong(chunk, made, std::memory_order_acq_rel)) {
      chunk = made;
      allocated_chunks_.fetch_add(1, std::memory_order_relaxed);
    } else {
      delete[] made;
    }
  }
  return chunk[block % kChunkBlocks];
}

const BlockTable::Entry* BlockTable::find(uint64_t block) const {
  const Entry* chunk = chunks_[block / kChunkBlocks].load(std::memory_order_acquire);
  return chunk == nullptr ? nullptr : chunk + block % kChunkBlocks;
}

uint64_t BlockTable::allocated_bytes() const {
  return chunk_count_ * sizeof(std::atomic<Entry*>) +
         allocated_chunks_.load(std::memory_order_relaxed) * kChunkBlocks * sizeof(Entry);
}

}  // namespace modelfs::remote
