// SPDX-License-Identifier: Apache-2.0
// The append-only stores the tree keeps names, shapes and strides in: every
// view handed out must keep its bytes whatever is added after it, items
// longer than a block included.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "modelfs/block_store.hpp"

namespace modelfs {
namespace {

// Lengths around the block size (64 KiB of chars), in an order that puts a
// long item between short ones, as a safetensors header with one long name
// does.
const std::vector<size_t> kLengths = {1, 70000, 1,     100,   1,      65535, 65536, 65537,
                                      3, 0,     40000, 40000, 131072, 7,     65534, 2};

std::string text_of(size_t length, size_t seed) {
  std::string s(length, '\0');
  for (size_t i = 0; i < length; ++i) s[i] = static_cast<char>('a' + (seed * 7 + i) % 26);
  return s;
}

TEST(TextStore, ViewsKeepTheirTextWhateverIsAddedAfter) {
  TextStore store;
  std::vector<std::string> originals;
  std::vector<std::string_view> views;
  for (size_t round = 0; round < 3; ++round) {
    for (size_t i = 0; i < kLengths.size(); ++i) {
      originals.push_back(text_of(kLengths[i], round * 100 + i));
      views.push_back(store.add(originals.back()));
    }
  }
  for (size_t i = 0; i < views.size(); ++i) {
    ASSERT_EQ(views[i], originals[i]) << "item " << i;
    if (!views[i].empty()) {
      EXPECT_EQ(views[i].data()[views[i].size()], '\0') << "item " << i << " is not NUL-terminated";
    }
  }
}

TEST(TextStore, ALongItemLeavesTheCurrentBlockInUse) {
  // Short items on both sides of a long one share a block: the long item
  // must not take the current block's place.
  TextStore store;
  const auto a = store.add("a");
  const auto big = store.add(std::string(200000, 'x'));
  const auto b = store.add("b");
  EXPECT_EQ(b.data(), a.data() + 2);
  EXPECT_EQ(big, std::string(200000, 'x'));
  EXPECT_EQ(a, "a");
  EXPECT_EQ(b, "b");
}

TEST(BlockStore, NumbersKeepTheirValuesAcrossBlocks) {
  BlockStore<uint64_t> store;
  std::vector<std::vector<uint64_t>> originals;
  std::vector<std::span<const uint64_t>> views;
  for (size_t i = 0; i < 200; ++i) {
    // Every 17th list is longer than a block (8192 items of 8 bytes).
    const size_t length = i % 17 == 0 ? 10000 + i : i % 50;
    std::vector<uint64_t> values(length);
    for (size_t k = 0; k < length; ++k) values[k] = i * 1000003 + k;
    originals.push_back(values);
    views.push_back(store.add(originals.back()));
  }
  for (size_t i = 0; i < views.size(); ++i)
    ASSERT_TRUE(std::equal(views[i].begin(), views[i].end(), originals[i].begin(), originals[i].end()))
        << "list " << i;
}

TEST(BlockStore, AnEmptyListIsEmpty) {
  BlockStore<int64_t> store;
  EXPECT_TRUE(store.add({}).empty());
}

}  // namespace
}  // namespace modelfs
