// SPDX-License-Identifier: Apache-2.0
// The JSON Lines writer every reader of string tensors shares
// (src/formats/string_lines.hpp): the text of each element, the one cap on
// a model's text, and lists of no elements.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "formats/string_lines.hpp"

namespace modelfs {
namespace {

StringLines::Text write(StringLines& lines, const std::vector<std::string_view>& elements) {
  return lines.write(elements.size(), [&](uint64_t i) { return elements[i]; });
}

TEST(StringLines, EachElementIsOneJsonStringLine) {
  StringLines lines;
  using namespace std::string_view_literals;
  const auto text = write(lines, {"plain", "say \"hi\"\\", "tab\tnew\nline\x01", "caf\xc3\xa9",
                                  "bad \xff\xc3 byte", "nul\0in"sv});
  ASSERT_TRUE(text.lines);
  EXPECT_EQ(*text.lines,
            "\"plain\"\n"
            "\"say \\\"hi\\\"\\\\\"\n"
            "\"tab\\tnew\\nline\\u0001\"\n"
            "\"caf\xc3\xa9\"\n"
            "\"bad \\udcff\\udcc3 byte\"\n"
            "\"nul\\u0000in\"\n");
  EXPECT_EQ(text.length, text.lines->size());
  EXPECT_EQ(lines.used(), text.lines->size());
}

TEST(StringLines, AnEmptyListIsNoTextAndAnEmptyStringAQuotedLine) {
  StringLines lines;
  const auto none = write(lines, {});
  ASSERT_TRUE(none.lines);
  EXPECT_EQ(*none.lines, "");
  EXPECT_EQ(none.length, 0u);
  const auto empty = write(lines, {""});
  ASSERT_TRUE(empty.lines);
  EXPECT_EQ(*empty.lines, "\"\"\n");
  EXPECT_EQ(lines.used(), 3u);
}

TEST(StringLines, TheCapHoldsForAllOfAModelsTensors) {
  StringLines lines(12);  // "abc"\n is 6 bytes
  auto first = write(lines, {"abc"});
  ASSERT_TRUE(first.lines);
  auto second = write(lines, {"abc"});  // exactly at the cap: kept
  ASSERT_TRUE(second.lines);
  EXPECT_EQ(lines.used(), 12u);
  auto third = write(lines, {""});
  EXPECT_FALSE(third.lines);
  EXPECT_EQ(third.length, 3u);
  EXPECT_EQ(lines.used(), 12u);  // a refused tensor takes nothing
  EXPECT_NE(lines.over_cap(third.length).find("take 3 bytes, over the 0 left of the 12-byte limit"),
            std::string::npos)
      << lines.over_cap(third.length);
}

TEST(StringLines, OverTheCapEveryElementIsStillAskedForAndCounted) {
  StringLines lines(10);
  uint64_t asked = 0;
  const auto text = lines.write(4, [&](uint64_t i) {
    EXPECT_EQ(i, asked);
    ++asked;
    return std::string_view("abcd");  // 7 bytes a line
  });
  EXPECT_FALSE(text.lines);
  EXPECT_EQ(asked, 4u);
  EXPECT_EQ(text.length, 28u);
  EXPECT_EQ(lines.used(), 0u);
  // What is left is still there for a smaller tensor.
  const auto small = write(lines, {"ab"});
  ASSERT_TRUE(small.lines);
  EXPECT_EQ(*small.lines, "\"ab\"\n");
}

TEST(StringLines, AFaultOfTheLayoutIsTheElementsToThrow) {
  StringLines lines;
  EXPECT_THROW(lines.write(2,
                           [](uint64_t i) -> std::string_view {
                             if (i == 1) throw std::runtime_error("offset out of order");
                             return "a";
                           }),
               std::runtime_error);
  EXPECT_EQ(lines.used(), 0u);
}

}  // namespace
}  // namespace modelfs
