// SPDX-License-Identifier: Apache-2.0
// The --list table and --json (src/cli/list.*) with hostile names: the name
// column is capped, --json keeps names whole.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <utility>

#include "cli/list.hpp"
#include "io/tensor_spec.hpp"

namespace modelfs {
namespace {

TensorSpec small_tensor(std::string name) {
  TensorSpec t;
  t.name = std::move(name);
  t.dtype = DType::Float32;
  t.shape = {1};
  t.strides = {1};
  t.bytes = ByteSpan::owned(std::string(4, '\0'));
  return t;
}

TEST(ListTable, CapsTheNameColumn) {
  Catalog catalog;
  catalog.format = "safetensors";
  for (int i = 0; i < 1000; ++i) catalog.add(small_tensor("layer." + std::to_string(i)));
  catalog.add(small_tensor(std::string(100000, 'x')));
  std::ostringstream table;
  cli::print_table(catalog, table);
  const std::string text = table.str();
  // 1 002 lines of about a hundred columns, not 1 002 lines of 100 000.
  EXPECT_LT(text.size(), 200000u);
  EXPECT_NE(text.find(std::string(79, 'x') + "\xe2\x80\xa6  float32"), std::string::npos);
  EXPECT_EQ(text.find(std::string(80, 'x')), std::string::npos);
  // Short names are padded to the capped column, so the table stays aligned.
  EXPECT_NE(text.find("layer.999" + std::string(80 - 9 + 2, ' ') + "float32"), std::string::npos);
  // --json keeps the name whole.
  std::ostringstream json;
  cli::print_json(catalog, json);
  EXPECT_NE(json.str().find("\"" + std::string(100000, 'x') + "\""), std::string::npos);
}

}  // namespace
}  // namespace modelfs
