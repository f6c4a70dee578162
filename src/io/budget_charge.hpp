// SPDX-License-Identifier: Apache-2.0
#pragma once
// What readers and the tree charge to the current budget (budget.hpp) by
// hand: memory that does not come from operator new (so that no program's
// allocator counts it), and what the tree will hold.
#include <cstdint>
#include <string_view>

#include "modelfs/budget.hpp"

namespace modelfs {

// The current budget's add_metadata and charge; nothing outside a budget.
void add_metadata_bytes(uint64_t bytes) noexcept;
void charge_budget(uint64_t bytes, std::string_view file, std::string_view format, std::string_view what);
// Gives back `bytes` charged by hand, once the memory is freed.
void release_budget(uint64_t bytes) noexcept;

// `bytes` charged (charge_budget) for the scope's life: memory a library
// takes with malloc while the scope lives.
class ScopedCharge {
 public:
  ScopedCharge(uint64_t bytes, std::string_view file, std::string_view format, std::string_view what)
      : bytes_(bytes) {
    charge_budget(bytes, file, format, what);
  }
  ~ScopedCharge() { release_budget(bytes_); }
  ScopedCharge(const ScopedCharge&) = delete;
  ScopedCharge& operator=(const ScopedCharge&) = delete;

 private:
  uint64_t bytes_;
};

}  // namespace modelfs
