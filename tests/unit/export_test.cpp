// SPDX-License-Identifier: Apache-2.0
// The parts table's reads (slice_parts), the export file's header, and the
// export's bounds: a view past kViewBound left out, a size past 2^64 not made.
#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/tensor_spec.hpp"
#include "modelfs/tree.hpp"
#include "tree/npy.hpp"
#include "tree/tree_parts.hpp"

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
    for (auto [from, length] :
         {std::pair<uint64_t, uint64_t>{0, offset}, {1, 4097}, {333, 17}, {offset - 3, 100}, {offset, 10}}) {
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
  for (size_t i = 1; i < parts.size(); ++i)
    EXPECT_EQ(parts[i].offset, parts[i - 1].offset + parts[i - 1].size);
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
  catalog.export_hints.checkpoint_format = "pt";  // as the torch reader says
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
  EXPECT_EQ(header["t"]["shape"], nlohmann::ordered_json({2, 3}));
  EXPECT_EQ(file.substr(start),
            "abcdef"
            "ACEBDF"
            "\x12\x34");

  const auto report =
      nlohmann::json::parse(tree->content(*tree->node(*tree->resolve(".modelfs/export.json"))));
  EXPECT_EQ(report["tensors"], 4);
  EXPECT_EQ(report["left_out"].size(), 3u);
  EXPECT_TRUE(report["left_out"].contains("s"));
  EXPECT_TRUE(report["left_out"].contains("c"));
  EXPECT_TRUE(report["left_out"].contains("a"));
}

// A catalog of stride-0 views of one stored float32 element each (as
// torch.save keeps an expand()), of `numel` elements.
Catalog expanded_views(std::vector<std::pair<std::string, uint64_t>> views) {
  Catalog catalog;
  catalog.format = "pytorch";
  catalog.files = {"m.pt"};
  catalog.tensors_may_share_bytes = true;
  for (auto& [name, numel] : views) {
    TensorSpec t;
    t.name = name;
    t.shape = {numel};
    t.strides = {0};
    const float one = 1.5f;
    t.bytes = ByteSpan::owned(std::string(reinterpret_cast<const char*>(&one), 4));
    t.source = {"m.pt", 0};
    catalog.add(t);
  }
  return catalog;
}

TEST(ExportBound, AViewPastTheBoundIsLeftOutWithWhyAndHasNoNpy) {
  // 2^40 float32 from 4 bytes: 4 TiB in C order, past the floor and past
  // 1024 times what it stores. One at the floor is made (its .npy too),
  // with the small one the export as a whole just at the floor too.
  constexpr uint64_t kAtFloor = kViewBound.floor / 4 - 3;
  auto tree =
      Tree::build(expanded_views({{"big", uint64_t{1} << 40}, {"floor", kAtFloor}, {"small", 3}}), {});
  const auto report =
      nlohmann::json::parse(tree->content(*tree->node(*tree->resolve(".modelfs/export.json"))));
  ASSERT_TRUE(report["left_out"].contains("big"));
  const std::string why = report["left_out"]["big"];
  EXPECT_NE(why.find("past the bound"), std::string::npos) << why;
  EXPECT_NE(why.find("4398046511104 bytes"), std::string::npos) << why;
  EXPECT_EQ(report["left_out"].size(), 1u);
  EXPECT_FALSE(tree->resolve("big.npy"));  // the .npy follows the same bound
  ASSERT_TRUE(tree->resolve("floor.npy"));
  EXPECT_GT(tree->node(*tree->resolve("floor.npy"))->size, kViewBound.floor - 12);

  const Node* file = tree->node(*tree->resolve(".modelfs/model.safetensors"));
  std::array<iovec, 4> iov{};
  std::string scratch;
  std::string head;
  for (size_t i = 0, n = tree->read(*file, 0, 4096, iov, scratch); i < n; ++i)
    head.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  uint64_t start = 0;
  const auto header = header_of(head, &start);
  EXPECT_FALSE(header.contains("big"));
  EXPECT_EQ(header["floor"]["data_offsets"], nlohmann::ordered_json({0, kViewBound.floor - 12}));
  EXPECT_EQ(header["small"]["data_offsets"],
            nlohmann::ordered_json({kViewBound.floor - 12, kViewBound.floor}));
  EXPECT_EQ(file->size, start + kViewBound.floor);
  // The last tensor's values, read at the end of the file.
  const size_t n = tree->read(*file, file->size - 12, 12, iov, scratch);
  std::string tail;
  for (size_t i = 0; i < n; ++i) tail.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  const float one = 1.5f;
  const std::string value(reinterpret_cast<const char*>(&one), 4);
  EXPECT_EQ(tail, value + value + value);
}

TEST(ExportBound, TheWholeExportKeepsTheBoundAgainstWhatTheModelStores) {
  // Views each within the bound on one view, together past the bound on
  // the export: those past it are left out, named, in catalog order.
  constexpr uint64_t kQuarter = kViewBound.floor / 16;  // float32: a quarter of the floor each
  auto tree = Tree::build(
      expanded_views(
          {{"a", kQuarter}, {"b", kQuarter}, {"c", kQuarter}, {"d", kQuarter}, {"e", kQuarter}, {"f", 3}}),
      {});
  const auto report =
      nlohmann::json::parse(tree->content(*tree->node(*tree->resolve(".modelfs/export.json"))));
  ASSERT_TRUE(report["left_out"].contains("e"));
  ASSERT_TRUE(report["left_out"].contains("f"));
  EXPECT_EQ(report["left_out"].size(), 2u);
  const std::string why = report["left_out"]["e"];
  EXPECT_NE(why.find("the bound on the whole export"), std::string::npos) << why;
  EXPECT_NE(why.find("24 bytes the model stores"), std::string::npos) << why;
  EXPECT_EQ(report["tensors"], 4);
  ASSERT_TRUE(tree->resolve("e.npy"));  // each view keeps its .npy
}

TEST(ExportBound, TheBoundIsAFloorOrAGrowthOfTheStoredBytes) {
  EXPECT_TRUE(kViewBound.allows(kViewBound.floor, 1));
  EXPECT_FALSE(kViewBound.allows(kViewBound.floor + 1, 1));
  EXPECT_TRUE(kViewBound.allows(kViewBound.growth << 40, uint64_t{1} << 40));
  EXPECT_FALSE(kViewBound.allows((kViewBound.growth << 40) + 1, uint64_t{1} << 40));
  // A stored size whose growth passes 2^64 allows any view.
  EXPECT_TRUE(kViewBound.allows(UINT64_MAX, uint64_t{1} << 60));
}

TEST(ExportBound, AnExportWhoseSizeWouldPass2To64IsNotMadeAndSaysWhy) {
  // 2048 views of an 8 TiB (sparse) mapped file, each within the bound
  // (2^53 bytes, 1024 times 2^43) and summing to 2^64: the offsets would
  // wrap. The .npy views are made; the export file is not, and export.json
  // says why.
  const auto path = std::filesystem::temp_directory_path() / ("modelfs-sparse-" + std::to_string(::getpid()));
  { std::ofstream(path).put('\0'); }
  std::filesystem::resize_file(path, uint64_t{1} << 43);
  std::shared_ptr<const MappedFile> mapped;
  try {
    mapped = MappedFile::open(path);
  } catch (const std::exception& e) {
    std::filesystem::remove(path);
    GTEST_SKIP() << "an 8 TiB mapping: " << e.what();
  }
  std::filesystem::remove(path);  // the mapping stays
  Catalog catalog;
  catalog.format = "pytorch";
  catalog.files = {"m.pt"};
  catalog.tensors_may_share_bytes = true;
  for (int i = 0; i < 2048; ++i) {
    TensorSpec t;
    t.name = "v" + std::to_string(i);
    t.shape = {uint64_t{1} << 51};
    t.strides = {0};
    t.bytes = ByteSpan::mapped(mapped, 0, mapped->size());
    t.source = {"m.pt", 0};
    catalog.add(t);
  }
  auto tree = Tree::build(std::move(catalog), {});
  EXPECT_FALSE(tree->resolve(".modelfs/model.safetensors"));
  const uint64_t npy = tree->node(*tree->resolve("v7.npy"))->size;  // a header, then 2^53 bytes
  EXPECT_GT(npy, uint64_t{1} << 53);
  EXPECT_LT(npy, (uint64_t{1} << 53) + 4096);
  const auto report =
      nlohmann::json::parse(tree->content(*tree->node(*tree->resolve(".modelfs/export.json"))));
  EXPECT_NE(report["note"].get<std::string>().find("model.safetensors: not made, its size would pass 2^64"),
            std::string::npos)
      << report["note"];
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
  EXPECT_EQ(header["__metadata__"],
            nlohmann::ordered_json({{"source", "m.onnx"}, {"source_format", "onnx"}}));
}

}  // namespace
}  // namespace modelfs
