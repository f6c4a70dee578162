// SPDX-License-Identifier: Apache-2.0
// The per-model budget: a floor, raised by metadata unless fixed, and a
// one-line ModelError naming the file and the limit when passed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <new>
#include <string>
#include <vector>

#include "io/budget_charge.hpp"
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

// Every operator new made while a budget is current is charged, and every
// delete gives it back (budget_new.cpp): one request larger than the limit
// is refused at once, one that passes the limit at the next checkpoint.
TEST(Budget, HeapAllocationsAreChargedAsTheyAreMade) {
  Budget budget(uint64_t{1} << 20);
  {
    BudgetScope scope(budget);
    auto half = std::make_unique<char[]>(512 << 10);
    EXPECT_GE(budget.used(), uint64_t{512} << 10);
    EXPECT_THROW(std::vector<char>(uint64_t{2} << 20), BudgetExceeded);
    EXPECT_EQ(::operator new (uint64_t{2} << 20, std::nothrow), nullptr);
    EXPECT_FALSE(budget.passed());
    check_budget();  // nothing passed yet
    half.reset();
    EXPECT_LT(budget.used(), uint64_t{4} << 10);
    {
      std::vector<char> most(768 << 10), more(512 << 10);  // together past the limit
      EXPECT_TRUE(budget.passed());
    }
    EXPECT_THROW(check_budget(), BudgetExceeded);  // even once they are freed
  }
  EXPECT_GE(budget.peak(), uint64_t{512} << 10);
  // Outside the scope nothing is charged.
  std::vector<char> big(uint64_t{4} << 20);
  EXPECT_LT(budget.used(), uint64_t{4} << 10);
}

// nlohmann::json's destructor moves what it destroys into a vector grown by
// doubling: destroying an array of 40 000 values (640 KB, within a 1 MB
// budget) asks for 1 MiB at once. A destructor's request is never refused
// where it is made (that ends the program: issue 42's abort of --list on
// an ONNX attribute of millions of ints); it is recorded, and refused at
// the next checkpoint.
TEST(Budget, ADestructorsScratchIsNeverRefusedAtOnce) {
  Budget budget(1'000'000);
  BudgetScope scope(budget);
  {
    nlohmann::json::array_t values;
    values.reserve(40'000);
    for (int i = 0; i < 40'000; ++i) values.emplace_back(i);
    nlohmann::json doc;
    doc["k"] = nlohmann::json(std::move(values));
    EXPECT_FALSE(budget.passed());
  }  // destroyed here: its scratch passes the limit
  EXPECT_TRUE(budget.passed());
  EXPECT_THROW(check_budget(), BudgetExceeded);
  // A request no destructor makes (past the limit and twice the bytes in
  // use) is still refused at once.
  EXPECT_THROW(std::vector<char>(uint64_t{4} << 20), BudgetExceeded);
}

TEST(Budget, ARefusedAllocationBecomesAModelErrorNamingTheFile) {
  Budget budget(uint64_t{1} << 20);
  BudgetScope scope(budget);
  try {
    within_budget("model.pt", "pytorch", "reading the model",
                  [] { return std::string(2 << 20, 'x').size(); });
    FAIL() << "allocated past the budget";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.file(), "model.pt");
    EXPECT_EQ(e.format(), "pytorch");
    EXPECT_NE(e.reason().find("reading the model needs 3 MiB, past the model's memory budget of 1 MiB"),
              std::string::npos)
        << e.reason();  // 2 MiB and the string's NUL, rounded up
  }
}

}  // namespace
}  // namespace modelfs
