// SPDX-License-Identifier: Apache-2.0
#pragma once
// What readers and the tree charge to the current budget (budget.hpp)
// beyond the allocations budget_new.cpp counts.
#include <cstdint>
#include <string_view>

#include "modelfs/budget.hpp"

namespace modelfs {

// The current budget's add_metadata and charge; nothing outside a budget.
void add_metadata_bytes(uint64_t bytes) noexcept;
void charge_budget(uint64_t bytes, std::string_view file, std::string_view format, std::string_view what);

}  // namespace modelfs
