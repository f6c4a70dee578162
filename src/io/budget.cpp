// SPDX-License-Identifier: Apache-2.0
#include "modelfs/budget.hpp"

#include "modelfs/checked_math.hpp"
#include "modelfs/error.hpp"

namespace modelfs {
namespace {

thread_local Budget* current = nullptr;

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

}  // namespace

void Budget::add_metadata(uint64_t bytes) noexcept {
  if (fixed_) return;
  const auto more = checked_mul(bytes, kBytesPerMetadataByte);
  const auto sum = more ? checked_add(limit_, *more) : std::nullopt;
  limit_ = sum ? *sum : UINT64_MAX;
}

void Budget::charge(uint64_t bytes, std::string_view file, std::string_view format, std::string_view what) {
  const auto total = checked_add(used_, bytes);
  if (!total || *total > limit_)
    throw ModelError(std::string(file), std::string(format), std::nullopt,
                     std::string(what) + " needs " + mib(bytes) + ", past the model's memory budget of " +
                         mib(limit_) + (fixed_ ? " (-o max_parse_mb)" : " (64 MiB + 8 bytes per byte of metadata)") +
                         " with " + mib(used_) + " used; raise it with -o max_parse_mb=N");
  used_ = *total;
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

}  // namespace modelfs
