// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "tree/naming.hpp"

namespace modelfs {
namespace {

using Parts = std::vector<std::string>;

TEST(Naming, SplitsAtDotsAndSlashes) {
  EXPECT_EQ(tensor_path_components("model.layers.0.weight", false),
            (Parts{"model", "layers", "0", "weight"}));
  EXPECT_EQ(tensor_path_components("/conv1/Conv.weight", false), (Parts{"%", "conv1", "Conv", "weight"}));
  EXPECT_EQ(tensor_path_components("w", false), (Parts{"w"}));
}

TEST(Naming, EmptyComponentsAreEscaped) {
  EXPECT_EQ(tensor_path_components("a..b", false), (Parts{"a", "%", "b"}));
  EXPECT_EQ(tensor_path_components(".hidden", false), (Parts{"%", "hidden"}));
  EXPECT_EQ(tensor_path_components("trailing.", false), (Parts{"trailing", "%"}));
  EXPECT_EQ(tensor_path_components("", false), (Parts{"%"}));
  EXPECT_EQ(tensor_path_components("a/../b", false), (Parts{"a", "%", "%", "%", "b"}));
}

TEST(Naming, PercentAndNulAreEscapedSoEscapesAreUnambiguous) {
  EXPECT_EQ(escape_component("50%"), "50%25");
  EXPECT_EQ(escape_component("%"), "%25");
  EXPECT_EQ(escape_component(std::string("a\0b", 3)), "a%00b");
  EXPECT_NE(escape_component("%"), escape_component(""));
}

TEST(Naming, FlatModeKeepsNamesWholeButEscapesWhatNoFileNameCanHold) {
  EXPECT_EQ(tensor_path_components("model.layers.0.weight", true), (Parts{"model.layers.0.weight"}));
  EXPECT_EQ(tensor_path_components("a/b", true), (Parts{"a%2Fb"}));
  EXPECT_EQ(tensor_path_components("..", true), (Parts{"%2E%2E"}));
  EXPECT_EQ(tensor_path_components(".", true), (Parts{"%2E"}));
}

TEST(Naming, NonAsciiNamesAreKeptAsUtf8) {
  EXPECT_EQ(tensor_path_components("编码器.权重", false), (Parts{"编码器", "权重"}));
  EXPECT_EQ(tensor_path_components("ñ.é", false), (Parts{"ñ", "é"}));
}

TEST(Naming, OverlongComponentsAreShortenedDistinctlyAndOnUtf8Boundaries) {
  std::string a(300, 'x');
  std::string b = a;
  b.back() = 'y';
  auto ea = escape_component(a);
  auto eb = escape_component(b);
  EXPECT_LE(ea.size(), kMaxComponentBytes);
  EXPECT_NE(ea, eb);
  EXPECT_EQ(ea.substr(0, 200), a.substr(0, 200));
  std::string wide;
  for (int i = 0; i < 150; ++i) wide += "é";  // 2 bytes each
  auto ew = escape_component(wide);
  EXPECT_LE(ew.size(), kMaxComponentBytes);
  const auto cut = ew.find("%%");
  ASSERT_NE(cut, std::string::npos);
  EXPECT_EQ(cut % 2, 0u);  // never splits a 2-byte character
}

}  // namespace
}  // namespace modelfs
