// SPDX-License-Identifier: Apache-2.0
#pragma once
// The budget of the model a call is reading, bound to the thread for the
// call's life (open_model, Tree::build and the CLI's printing bind the one
// they are given): the modelfs program's operator new (budget_new.cpp)
// charges it, readers check it at their checkpoints, and what they charge
// by hand (memory that does not come from operator new, so that no
// program's allocator counts it, and what the tree will hold) goes to it.
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "modelfs/budget.hpp"

namespace modelfs {

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

// Turns an allocation the budget refused into a ModelError for `file`:
// runs `work`, and rethrows BudgetExceeded as ModelError(file, format, the
// refusal of `what`). The places a model is read from (open_model,
// Tree::build, the CLI's printing) wrap their work in it.
template <typename Work>
decltype(auto) within_budget(std::string_view file, std::string_view format, std::string_view what,
                             Work&& work);

// A checkpoint: BudgetExceeded when an allocation on this thread has taken
// the current budget past its limit. Costs a thread-local load and a test.
inline void check_budget() {
  if (const Budget* budget = current_budget(); budget != nullptr && budget->passed()) budget->refuse_passed();
}

[[noreturn]] void throw_over_budget(const BudgetExceeded& e, std::string_view file, std::string_view format,
                                    std::string_view what);

template <typename Work>
decltype(auto) within_budget(std::string_view file, std::string_view format, std::string_view what,
                             Work&& work) {
  try {
    if constexpr (std::is_void_v<decltype(work())>) {
      work();
      check_budget();
    } else {
      decltype(auto) result = work();
      check_budget();
      return result;
    }
  } catch (const BudgetExceeded& e) {
    throw_over_budget(e, file, format, what);
  }
}

// within_budget, with `budget` bound for the work's duration.
template <typename Work>
decltype(auto) within_budget(Budget& budget, std::string_view file, std::string_view format,
                             std::string_view what, Work&& work) {
  BudgetScope scope(budget);
  return within_budget(file, format, what, std::forward<Work>(work));
}

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
