// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "modelfs/dtype.hpp"
#include "tree/npy.hpp"

namespace modelfs {
namespace {

uint64_t header_length(const std::string& h) {
  if (h[6] == 1) return static_cast<uint8_t>(h[8]) | (static_cast<uint8_t>(h[9]) << 8);
  uint64_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint64_t{static_cast<uint8_t>(h[8 + i])} << (8 * i);
  return n;
}

TEST(Npy, HeaderLayoutMatchesNumpy) {
  const std::vector<uint64_t> shape{3, 4};
  auto h = npy_header("<f4", shape, false);
  EXPECT_EQ(h.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(h[6], 1);
  EXPECT_EQ(h[7], 0);
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(header_length(h) + 10, h.size());
  EXPECT_EQ(h.back(), '\n');
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
  EXPECT_EQ(h.substr(10, dict.size()), dict);
  EXPECT_EQ(h.find_first_not_of(' ', 10 + dict.size()), h.size() - 1);
}

TEST(Npy, ScalarOneDimensionalAndFortranShapes) {
  const std::vector<uint64_t> none;
  const std::vector<uint64_t> one{7};
  const std::vector<uint64_t> two{3, 2};
  EXPECT_NE(npy_header("<i8", none, false).find("'shape': (), }"), std::string::npos);
  EXPECT_NE(npy_header("<i8", one, false).find("'shape': (7,), }"), std::string::npos);
  EXPECT_NE(npy_header("<f2", two, true).find("'fortran_order': True, 'shape': (3, 2), }"),
            std::string::npos);
}

TEST(Npy, EveryNumpyDtypeHasItsDescr) {
  const std::pair<DType, const char*> expected[] = {
      {DType::Bool, "|b1"},      {DType::Int8, "|i1"},        {DType::Int16, "<i2"},
      {DType::Int32, "<i4"},     {DType::Int64, "<i8"},       {DType::UInt8, "|u1"},
      {DType::UInt16, "<u2"},    {DType::UInt32, "<u4"},      {DType::UInt64, "<u8"},
      {DType::Float16, "<f2"},   {DType::Float32, "<f4"},     {DType::Float64, "<f8"},
      {DType::Complex64, "<c8"}, {DType::Complex128, "<c16"},
  };
  for (auto [dtype, descr] : expected) {
    ASSERT_TRUE(numpy_descr(dtype)) << dtype_name(dtype);
    EXPECT_EQ(*numpy_descr(dtype), descr);
    const std::vector<uint64_t> shape{2};
    auto h = npy_header(*numpy_descr(dtype), shape, false);
    EXPECT_NE(h.find(std::string("'descr': '") + descr + "'"), std::string::npos);
    EXPECT_EQ(h.size() % 64, 0u);
  }
  for (DType none : {DType::BFloat16, DType::Float8E4M3FN, DType::Float8E5M2, DType::Float4E2M1, DType::Int4,
                     DType::String, DType::GgmlBlock})
    EXPECT_FALSE(numpy_descr(none)) << dtype_name(none);
}

TEST(Npy, HugeRankSwitchesToVersionTwo) {
  std::vector<uint64_t> shape(30000, 1);
  auto h = npy_header("<f4", shape, false);
  EXPECT_EQ(h[6], 2);
  EXPECT_EQ(header_length(h) + 12, h.size());
  EXPECT_EQ(h.size() % 64, 0u);
}

}  // namespace
}  // namespace modelfs
