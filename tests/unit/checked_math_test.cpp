// SPDX-License-Identifier: Apache-2.0
// Checked<T> (checked_math.hpp): sums, differences, products and quotients
// that would wrap leave the value overflowed, which value() reports by
// throwing and get() by nullopt; and contiguous_strides, which counts with
// it, refuses strides past int64.
#include <gtest/gtest.h>

#include <limits>

#include "io/checked_math.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(Checked, ExactResultsComeOut) {
  const Size a = Size(40) + 2;
  EXPECT_EQ(a.value(), 42u);
  EXPECT_EQ((a * 3 - 6).value(), 120u);
  EXPECT_EQ((Size(kMax) / 1).value(), kMax);
  EXPECT_EQ((Size(uint64_t{1} << 32) * (uint64_t{1} << 31)).value(), uint64_t{1} << 63);
  EXPECT_EQ((Size(kMax - 1) + 1).value(), kMax);
  Size sum = 0;
  for (int i = 0; i < 3; ++i) sum += uint64_t{1} << 62;
  EXPECT_EQ(sum.get(), uint64_t{3} << 62);
}

TEST(Checked, WhatWouldWrapIsOverflowedAndStaysSo) {
  const Size big = Size(kMax) + 1;
  EXPECT_FALSE(big.ok());
  EXPECT_EQ(big.get(), std::nullopt);
  EXPECT_THROW((void)big.value(), SizeOverflow);
  // Every result made from an overflowed value is overflowed, even one whose
  // digits would be small again (a wrapped sum minus what it passed by).
  EXPECT_FALSE((big - 1).ok());
  EXPECT_FALSE((big * 0).ok());
  EXPECT_FALSE((Size(uint64_t{1} << 32) * (uint64_t{1} << 32)).ok());
  EXPECT_FALSE((Size(0) - 1).ok());
  EXPECT_FALSE((Size(7) / 0).ok());
  Size sum = 0;
  for (int i = 0; i < 4; ++i) sum += uint64_t{1} << 62;
  EXPECT_FALSE(sum.ok());  // 2^64: one past the largest
  Size offset = kMax - 2;
  offset += 3;
  offset -= 3;
  EXPECT_FALSE(offset.ok());
}

TEST(Checked, NumbersOutsideTheTypeAreOverflowedFromTheStart) {
  EXPECT_FALSE(Size(int64_t{-1}).ok());  // a negative stride taken as a size
  EXPECT_TRUE(Size(int64_t{5}).ok());
  EXPECT_FALSE(Checked<int64_t>(uint64_t{1} << 63).ok());
  EXPECT_EQ(Checked<int64_t>(uint64_t{1} << 62).value(), int64_t{1} << 62);
  EXPECT_FALSE((Checked<int64_t>(std::numeric_limits<int64_t>::min()) / -1).ok());
  EXPECT_FALSE((Checked<int64_t>(std::numeric_limits<int64_t>::max()) + 1).ok());
  EXPECT_EQ((Checked<int64_t>(-3) * 4).value(), -12);
}

TEST(Checked, UsableInConstantExpressions) {
  static_assert((Size(6) * 7).value() == 42);
  static_assert(!(Size(kMax) * 2).ok());
}

TEST(ContiguousStrides, CountsZerosAsOneAndRefusesStridesPastInt64) {
  EXPECT_EQ(contiguous_strides(std::vector<uint64_t>{2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(contiguous_strides(std::vector<uint64_t>{2, 0, 4}), (std::vector<int64_t>{4, 4, 1}));
  EXPECT_EQ(contiguous_strides(std::vector<uint64_t>{}), (std::vector<int64_t>{}));
  // An empty tensor whose other dimensions multiply past int64: its first
  // stride would be 2^80 (numpy and torch refuse the shape).
  const uint64_t big = uint64_t{1} << 40;
  EXPECT_EQ(contiguous_strides(std::vector<uint64_t>{0, big, big, big}), std::nullopt);
  EXPECT_EQ(contiguous_strides(std::vector<uint64_t>{uint64_t{1} << 63, 0}), std::nullopt);
  EXPECT_EQ(contiguous_strides(std::vector<uint64_t>{3, uint64_t{1} << 62}), std::nullopt);
  EXPECT_EQ(contiguous_strides(std::vector<uint64_t>{1, uint64_t{1} << 62}),
            (std::vector<int64_t>{int64_t{1} << 62, 1}));
}

}  // namespace
}  // namespace modelfs
