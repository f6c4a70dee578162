// SPDX-License-Identifier: Apache-2.0
#pragma once
// The budget of one model: how much memory reading it may take, whatever
// its bytes say. A small file must not make modelfs allocate gigabytes (a
// deflated member of zeros, a pickle copying one value into another, a
// metadata array of a billion one-byte items), so every reader charges
// what a file makes it allocate beyond the few bytes each of its own bytes
// costs, and the tree charges what it keeps for the mount.
//
// The limit follows the model's metadata: 64 MiB plus 8 bytes per byte of
// metadata the readers have seen (headers, pickles, directories, key-value
// sections), so a real model's budget grows with what it describes, and a
// crafted one cannot buy memory with a few bytes. -o max_parse_mb=N fixes
// the limit instead. Exceeding it is a ModelError naming the file and the
// limit.
//
// Readers reach the budget of the model being opened on their thread
// (open_model installs one when the caller has not), so no signature in
// between carries it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace modelfs {

class Budget {
 public:
  static constexpr uint64_t kFloorBytes = uint64_t{64} << 20;
  static constexpr uint64_t kBytesPerMetadataByte = 8;

  // `fixed`: a limit in bytes that metadata does not raise.
  explicit Budget(std::optional<uint64_t> fixed = std::nullopt)
      : fixed_(fixed.has_value()), limit_(fixed.value_or(kFloorBytes)) {}

  // Metadata read (a header, a pickle, a directory): raises the limit.
  void add_metadata(uint64_t bytes) noexcept;
  // Charges `bytes` allocated for `what`; ModelError (file, format) when the
  // total would pass the limit.
  void charge(uint64_t bytes, std::string_view file, std::string_view format, std::string_view what);

  uint64_t used() const noexcept { return used_; }
  uint64_t limit() const noexcept { return limit_; }

 private:
  bool fixed_;
  uint64_t limit_;
  uint64_t used_ = 0;
};

// The budget of the model this thread is reading, or null outside one.
Budget* current_budget() noexcept;

// Makes `budget` this thread's current budget for the scope's life.
class BudgetScope {
 public:
  explicit BudgetScope(Budget& budget) noexcept;
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  Budget* previous_;
};

// The current budget's add_metadata and charge; nothing outside a budget.
void add_metadata_bytes(uint64_t bytes) noexcept;
void charge_budget(uint64_t bytes, std::string_view file, std::string_view format, std::string_view what);

}  // namespace modelfs
