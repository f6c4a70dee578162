// SPDX-License-Identifier: Apache-2.0
// The per-model budget: a floor, raised by metadata unless fixed, and a
// one-line ModelError naming the file and the limit when passed.
#include <gtest/gtest.h>

#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"

namespace modelfs {
namespace {

TEST(Budget, TheFloorIsRaisedByMetadata) {
  Budget budget;
  EXPECT_EQ(budget.limit(), Budget::kFloorBytes);
  budget.add_metadata(1000);
  EXPECT_EQ(budget.limit(), Budget::kFloorBytes + 8000);
  budget.charge(Budget::kFloorBytes + 8000, "m", "f", "all of it");
  EXPECT_THROW(budget.charge(1, "m", "f", "one more byte"), ModelError);
}

TEST(Budget, AFixedLimitIgnoresMetadata) {
  Budget budget(100);
  budget.add_metadata(1 << 20);
  EXPECT_EQ(budget.limit(), 100u);
  budget.charge(60, "m", "f", "some");
  try {
    budget.charge(41, "model.pt", "pytorch", "inflating archive/data/0");
    FAIL() << "charged past a fixed limit";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.file(), "model.pt");
    EXPECT_NE(e.reason().find("inflating archive/data/0"), std::string::npos);
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  EXPECT_EQ(budget.used(), 60u);  // a refused charge takes nothing
}

TEST(Budget, HugeNumbersSaturateRatherThanWrap) {
  Budget budget;
  budget.add_metadata(UINT64_MAX / 4);
  EXPECT_EQ(budget.limit(), UINT64_MAX);
  budget.charge(UINT64_MAX - 1, "m", "f", "nearly all");
  EXPECT_THROW(budget.charge(2, "m", "f", "wrap"), ModelError);
}

TEST(Budget, ChargesReachTheScopesBudgetOnly) {
  charge_budget(UINT64_MAX, "m", "f", "outside any budget");  // nothing to charge
  Budget outer(1000);
  BudgetScope a(outer);
  {
    Budget inner(10);
    BudgetScope b(inner);
    EXPECT_THROW(charge_budget(11, "m", "f", "x"), ModelError);
  }
  charge_budget(11, "m", "f", "x");
  EXPECT_EQ(outer.used(), 11u);
  EXPECT_EQ(current_budget(), &outer);
}

}  // namespace
}  // namespace modelfs
