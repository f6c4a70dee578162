// SPDX-License-Identifier: Apache-2.0
// A strided view's C-order elements (ElementView through copy_conversion),
// computed for any range: every range
// of every view below equals the same range of a plain element-by-element
// gather (the oracle), whatever its alignment to elements.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tree/numeric_views.hpp"

namespace modelfs {
namespace {

// Bytes in memory as the catalog holds them (a ByteSpan, which the views take).
ByteSpan in_memory(std::span<const std::byte> bytes) {
  return ByteSpan::owned(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

struct View {
  std::vector<uint64_t> shape;
  std::vector<int64_t> strides;
  uint32_t element_size;
};

// The elements in C order, one at a time, by their multi-index.
std::string oracle(const std::string& storage, const View& v) {
  uint64_t numel = 1;
  for (auto d : v.shape) numel *= d;
  std::string out;
  for (uint64_t n = 0; n < numel; ++n) {
    uint64_t rest = n, at = 0;
    for (size_t d = v.shape.size(); d-- > 0;) {
      at += (rest % v.shape[d]) * static_cast<uint64_t>(v.strides[d]);
      rest /= v.shape[d];
    }
    out.append(storage, at * v.element_size, v.element_size);
  }
  return out;
}

std::string storage_of(size_t bytes) {
  std::string s(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) s[i] = static_cast<char>(i * 131 + 7);
  return s;
}

TEST(StridedView, EveryRangeEqualsTheElementByElementGather) {
  const std::vector<View> views = {
      {{3, 4}, {1, 3}, 4},          // a transpose
      {{2, 3}, {8, 2}, 2},          // every other column of some rows
      {{5, 7}, {0, 1}, 4},          // expand() of one row
      {{1000}, {0}, 8},             // expand() of one element
      {{2, 3, 4}, {40, 1, 7}, 1},   // permuted
      {{4, 1, 3}, {3, 99, 12}, 4},  // a dimension of one with any stride
  };
  for (const auto& v : views) {
    uint64_t last = 0;
    for (size_t d = 0; d < v.shape.size(); ++d) last += (v.shape[d] - 1) * v.strides[d];
    const std::string storage = storage_of((last + 1) * v.element_size);
    auto gather = ElementView::make(in_memory(std::as_bytes(std::span(storage))), v.shape, v.strides,
                                    copy_conversion(v.element_size));
    ASSERT_TRUE(gather);
    const std::string want = oracle(storage, v);
    ASSERT_EQ(gather->size(), want.size());
    for (size_t offset = 0; offset < want.size(); offset += 3) {
      for (size_t length : {size_t{1}, size_t{5}, size_t{17}, want.size()}) {
        const size_t take = std::min(length, want.size() - offset);
        std::string got(take, '\0');
        gather->fill(offset, std::as_writable_bytes(std::span(got)));
        ASSERT_EQ(got, want.substr(offset, take)) << "offset " << offset << " length " << take;
      }
    }
  }
}

TEST(StridedView, AViewReachingPastItsBytesOrBackwardsIsRefused) {
  const std::string storage = storage_of(20);  // five float32 elements
  const auto bytes = std::as_bytes(std::span(storage));
  const std::vector<uint64_t> shape = {2, 2};
  EXPECT_TRUE(ElementView::make(in_memory(bytes), shape, std::vector<int64_t>{3, 1},
                                copy_conversion(4)));  // last element 4
  EXPECT_FALSE(ElementView::make(in_memory(bytes), shape, std::vector<int64_t>{4, 1},
                                 copy_conversion(4)));  // last element 5
  EXPECT_FALSE(ElementView::make(in_memory(bytes), shape, std::vector<int64_t>{-1, 1}, copy_conversion(4)));
  const std::vector<uint64_t> huge = {uint64_t{1} << 62, 8};
  EXPECT_FALSE(ElementView::make(in_memory(bytes), huge, std::vector<int64_t>{0, 0},
                                 copy_conversion(4)));  // size overflows
}

TEST(StridedView, AnEmptyViewIsEmpty) {
  const std::vector<uint64_t> shape = {0, 5};
  auto gather = ElementView::make(in_memory({}), shape, std::vector<int64_t>{9, 1}, copy_conversion(4));
  ASSERT_TRUE(gather);
  EXPECT_EQ(gather->size(), 0u);
}

}  // namespace
}  // namespace modelfs
