// SPDX-License-Identifier: Apache-2.0
// The parts table's reads (slice_parts) and the export file's header.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "modelfs/tree.hpp"

namespace modelfs {
namespace {

// Bytes i of a computed part are its offset's low byte plus one.
class Counting final : public ComputedBytes {
 public:
  void fill(uint64_t offset, std::span<std::byte> out) const override {
    for (size_t i = 0; i < out.size(); ++i) out[i] = std::byte((offset + i + 1) & 0xff);
  }
};

std::string gathered(std::span<const iovec> iov) {
  std::string out;
  for (const auto& v : iov) out.append(static_cast<const char*>(v.iov_base), v.iov_len);
  return out;
}

TEST(Parts, WindowsAcrossManyTinyPartsAreWholeWithFewIovecs) {
  // 3000 parts of 1-3 bytes, every tenth computed: any window comes back
  // whole whatever the iovec array's size, and the held parts before the
  // array fills are not copied.
  std::string held(6000, '\0');
  for (size_t i = 0; i < held.size(); ++i) held[i] = static_cast<char>('a' + i % 26);
  Counting counting;
  std::vector<Part> parts;
  std::string expected;
  uint64_t offset = 0, at = 0;
  for (size_t i = 0; i < 3000; ++i) {
    const uint64_t size = 1 + i % 3;
    Part part = i % 10 == 9 ? Part{nullptr, &counting, size}
                            : Part::held(std::as_bytes(std::span(held.data() + at, size)));
    part.offset = offset;
    parts.push_back(part);
    for (uint64_t k = 0; k < size; ++k)
      expected += i % 10 == 9 ? static_cast<char>((k + 1) & 0xff) : held[at + k];
    offset += size;
    at += size;
  }
  for (size_t slots : {1u, 2u, 7u, 1023u}) {
    std::vector<iovec> iov(slots);
    std::string scratch;
    for (auto [from, length] : {std::pair<uint64_t, uint64_t>{0, offset}, {1, 4097}, {333, 17}, {offset - 3, 100},
                                {offset, 10}}) {
      const size_t n = slice_parts(parts, from, length, iov, scratch);
      ASSERT_LE(n, slots);
      EXPECT_EQ(gathered(std::span(iov.data(), n)), expected.substr(from, length)) << slots << " " << from;
    }
    const size_t n = slice_parts(parts, 0, 5, iov, scratch);
    if (slots >= 7) {
      ASSERT_GE(n, 2u);
      EXPECT_EQ(iov[0].iov_base, held.data());  // zero-copy
    }
  }
}

TEST(Parts, FilesAreRangesOfTheTreesTable) {
  Catalog catalog;
  catalog.format = "safetensors";
  catalog.files = {"m.safetensors"};
  for (int i = 0; i < 3; ++i) {
    TensorSpec t;
    t.name = "w" + std::to_string(i);
    t.shape = {2};
    t.strides = {1};
    t.bytes = ByteSpan::owned(std::string(8, static_cast<char>('0' + i)));
    t.source = {"m.safetensors", 0};
    catalog.add(t);
  }
  auto tree = Tree::build(std::move(catalog), {});
  const Node* raw = tree->node(*tree->resolve("w1"));
  ASSERT_EQ(tree->parts(*raw).size(), 1u);
  EXPECT_EQ(tree->content(*raw), std::string(8, '1'));
  const Node* whole = tree->node(*tree->resolve(".modelfs/model.safetensors"));
  const auto parts = tree->parts(*whole);
  ASSERT_EQ(parts.size(), 4u);  // the header, then the three tensors
  EXPECT_EQ(parts[1].bytes, tree->parts(*tree->node(*tree->resolve("w0")))[0].bytes);
  for (size_t i = 1; i < parts.size(); ++i) EXPECT_EQ(parts[i].offset, parts[i - 1].offset + parts[i - 1].size);
}

// The header as the reference reader takes it: its length, then JSON
// padded with spaces to a multiple of 8.
nlohmann::ordered_json header_of(const std::string& file, uint64_t* data_start) {
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string text = file.substr(8, n);
  const size_t end = text.find_last_not_of(' ');
  EXPECT_EQ(text[end], '}');
  *data_start = 8 + n;
  return nlohmann::ordered_json::parse(text);
}

TEST(ExportHeader, ContiguousOffsetsPaddingDtypesViewsAndWhatIsLeftOut) {
  Catalog catalog;
  catalog.format = "pytorch";
  catalog.files = {"m.pt"};
  auto add = [&](std::string name, DType dtype, std::vector<uint64_t> shape, std::vector<int64_t> strides,
                 std::string bytes) {
    TensorSpec t;
    t.name = std::move(name);
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.strides = std::move(strides);
    t.bytes = ByteSpan::owned(std::move(bytes));
    t.source = {"m.pt", 0};
    catalog.add(t);
  };
  add("a", DType::BFloat16, {3}, {1}, "abcdef");
  add("t", DType::UInt8, {2, 3}, {1, 2}, "ABCDEF");  // a transpose: gathered into C order
  add("s", DType::String, {1}, {1}, "\"x\"\n");
  add("a", DType::UInt8, {1}, {1}, "z");  // a name twice
  add("c", DType::Complex128, {1}, {1}, std::string(16, 'c'));
  add("f4", DType::Float4E2M1, {4}, {1}, "\x12\x34");
  add("e", DType::Float32, {0, 5}, {5, 1}, "");
  auto tree = Tree::build(std::move(catalog), {});
  const std::string file = tree->content(*tree->node(*tree->resolve(".modelfs/model.safetensors")));
  uint64_t start = 0;
  const auto header = header_of(file, &start);
  EXPECT_EQ(header["__metadata__"],
            nlohmann::ordered_json({{"format", "pt"}, {"source", "m.pt"}, {"source_format", "pytorch"}}));
  std::vector<std::string> names;
  uint64_t expect = 0;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    names.push_back(name);
    EXPECT_EQ(entry["data_offsets"][0], expect) << name;
    expect = entry["data_offsets"][1];
  }
  EXPECT_EQ(names, (std::vector<std::string>{"a", "t", "f4", "e"}));
  EXPECT_EQ(start + expect, file.size());
  EXPECT_EQ(header["a"]["dtype"], "BF16");
  EXPECT_EQ(header["f4"]["dtype"], "F4");
  EXPECT_EQ(header["t"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(file.substr(start), "abcdef" "ACEBDF" "\x12\x34");

  const auto report = nlohmann::json::parse(tree->content(*tree->node(*tree->resolve(".modelfs/export.json"))));
  EXPECT_EQ(report["tensors"], 4);
  EXPECT_EQ(report["left_out"].size(), 3u);
  EXPECT_TRUE(report["left_out"].contains("s"));
  EXPECT_TRUE(report["left_out"].contains("c"));
  EXPECT_TRUE(report["left_out"].contains("a"));
}

TEST(ExportHeader, EmptyModelIsAValidFile) {
  Catalog catalog;
  catalog.format = "onnx";
  catalog.files = {"m.onnx"};
  auto tree = Tree::build(std::move(catalog), {});
  const std::string file = tree->content(*tree->node(*tree->resolve(".modelfs/model.safetensors")));
  uint64_t start = 0;
  const auto header = header_of(file, &start);
  EXPECT_EQ(start, file.size());
  // ONNX claims no framework's format.
  EXPECT_EQ(header["__metadata__"], nlohmann::ordered_json({{"source", "m.onnx"}, {"source_format", "onnx"}}));
}

}  // namespace
}  // namespace modelfs
