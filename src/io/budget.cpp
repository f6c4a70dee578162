// SPDX-License-Identifier: Apache-2.0
#include "modelfs/budget.hpp"

#include <exception>

#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"

namespace modelfs {
namespace {

thread_local Budget* current = nullptr;

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }
std::string mib_down(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// A refusal's message is made outside the budget it reports on, which is
// nearly full: its few allocations must not be refused in turn.
[[noreturn]] void refuse(std::string_view file, std::string_view format, const BudgetExceeded& e,
                         std::string_view what) {
  Budget* const full = current;
  current = nullptr;
  std::exception_ptr error;
  try {
    error = std::make_exception_ptr(
        ModelError(std::string(file), std::string(format), std::nullopt, e.reason(what)));
  } catch (...) {
    error = std::current_exception();
  }
  current = full;
  std::rethrow_exception(error);  // the object made above, not a copy
}

}  // namespace

void Budget::add_metadata(uint64_t bytes) noexcept {
  if (fixed_) return;
  const auto more = checked_mul(bytes, kBytesPerMetadataByte);
  const auto sum = more ? checked_add(limit_, *more) : std::nullopt;
  limit_ = sum ? *sum : UINT64_MAX;
}

void Budget::charge(uint64_t bytes, std::string_view file, std::string_view format, std::string_view what) {
  const auto total = checked_add(used_, bytes);
  if (!total || *total > limit_) refuse(file, format, BudgetExceeded(bytes, used_, limit_, fixed_), what);
  used_ = *total;
  if (used_ > peak_) peak_ = used_;
}

void Budget::allocate(uint64_t bytes) {
  // One request larger than the whole limit is refused before it is made
  // (a length read from a file, reserved at once), unless a destructor may
  // be making it: an exception from one ends the program. That is so while
  // an exception unwinds, and for any request within twice the bytes in
  // use: nlohmann::json's destructor moves the values it destroys into a
  // vector that grows by doubling, so it asks for at most twice what the
  // values and that vector already hold, all of it charged. Such a request
  // is recorded and refused at the next checkpoint.
  if (bytes > limit_ && bytes / 2 > used_ && std::uncaught_exceptions() == 0)
    throw BudgetExceeded(bytes, used_, limit_, fixed_);
  note(bytes);
}

void Budget::note(uint64_t bytes) noexcept {
  const auto total = checked_add(used_, bytes);
  const uint64_t now = total ? *total : UINT64_MAX;
  if (now > limit_ && !passed_) {
    passed_ = true;
    passed_by_ = bytes;
    passed_at_ = used_;
  }
  used_ = now;
  if (used_ > peak_) peak_ = used_;
}

void Budget::refuse_passed() const { throw BudgetExceeded(passed_by_, passed_at_, limit_, fixed_); }

std::string BudgetExceeded::reason(std::string_view what) const {
  return std::string(what) + " needs " + mib(bytes_) + ", past the model's memory budget of " + mib(limit_) +
         (fixed_ ? " (-o max_parse_mb)" : " (64 MiB + 8 bytes per byte of metadata)") + " with " +
         mib_down(used_) + " used; raise it with -o max_parse_mb=N";
}

Budget* current_budget() noexcept { return current; }

BudgetScope::BudgetScope(Budget& budget) noexcept : previous_(current) { current = &budget; }

BudgetScope::~BudgetScope() { current = previous_; }

void add_metadata_bytes(uint64_t bytes) noexcept {
  if (current) current->add_metadata(bytes);
}

void charge_budget(uint64_t bytes, std::string_view file, std::string_view format, std::string_view what) {
  if (current) current->charge(bytes, file, format, what);
}

void release_budget(uint64_t bytes) noexcept {
  if (current) current->release(bytes);
}

void throw_over_budget(const BudgetExceeded& e, std::string_view file, std::string_view format,
                       std::string_view what) {
  refuse(file, format, e, what);
}

}  // namespace modelfs
