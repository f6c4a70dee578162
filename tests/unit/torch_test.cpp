// SPDX-License-Identifier: Apache-2.0
// The PyTorch readers on hand-made files: a minimal torch.save archive and
// legacy file, then every way their storages and views can lie.
#include <gtest/gtest.h>

#include <cstring>

#include "io/budget_charge.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using namespace std::string_literals;
using test::TempDir;
using test::zip_bytes;

std::string u32le(uint32_t v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}
std::string u(const std::string& s) { return "X" + u32le(static_cast<uint32_t>(s.size())) + s; }

// {'w': _rebuild_tensor_v2(storage(key, FloatStorage, numel), offset, size, stride)}
std::string state_pickle(const std::string& key, int numel, int offset, std::vector<int> size,
                         std::vector<int> stride, const std::string& storage = "FloatStorage",
                         bool legacy_view_slot = false) {
  auto ints = [](const std::vector<int>& v) {
    std::string out = "(";
    for (int x : v) out += x < 0 ? "J"s + u32le(static_cast<uint32_t>(x)) : "K"s + static_cast<char>(x);
    return out + "t";
  };
  return "\x80\x02}("s + u("w") + "ctorch._utils\n_rebuild_tensor_v2\n((" + u("storage") + "ctorch\n" +
         storage + "\n" + u(key) + u("cpu") + "K"s + static_cast<char>(numel) +
         (legacy_view_slot ? "N" : "") + "tQK"s + static_cast<char>(offset) + ints(size) + ints(stride) +
         "\x89"
         "ccollections\nOrderedDict\n)RtRu."s;
}

const std::string kFloats = "\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40"s;  // 1 2 3 4

std::string archive(const std::string& pickle, const std::string& storage = kFloats,
                    std::vector<test::ZipEntry> extra = {}, uint16_t method = 0) {
  std::vector<test::ZipEntry> entries = {
      {"model/data.pkl", pickle, method}, {"model/data/0", storage, method}, {"model/version", "3\n", 0}};
  for (auto& e : extra) entries.push_back(e);
  return zip_bytes(entries);
}

Catalog open_bytes(const TempDir& dir, const std::string& bytes) {
  return open_model(dir.write("model.pt", bytes));
}

std::string refusal(const std::string& bytes) {
  TempDir dir;
  try {
    open_bytes(dir, bytes);
  } catch (const ModelError& e) {
    return e.format() + ": " + e.reason();
  }
  return "<accepted>";
}

// {'': t}: the empty key names t "", never the lone tensor's "tensor".
TEST(TorchSave, EmptyKeyAtTheTopIsTheEmptyName) {
  std::string pickle = state_pickle("0", 4, 0, {2, 2}, {2, 1});
  const std::string key_w = u("w");
  pickle.replace(pickle.find(key_w), key_w.size(), u(""));
  TempDir dir;
  auto catalog = open_bytes(dir, archive(pickle));
  ASSERT_EQ(catalog.tensors().size(), 1u);
  EXPECT_EQ(catalog.tensors()[0].name, "");
  EXPECT_EQ(catalog.tensors()[0].bytes.view(), kFloats);
}

// torch 1.0-1.3's TorchScript layout: model.json and tensors/, no data.pkl.
TEST(TorchScript, ArchivesFromBeforeTorch14AreRefusedAsSuch) {
  const std::string bytes = zip_bytes({{"old/version", "1\n", 0},
                                       {"old/model.json", R"({"protoVersion": "6", "mainModule": {}})", 0},
                                       {"old/tensors/0", kFloats, 0}});
  EXPECT_EQ(refusal(bytes),
            "torchscript: a TorchScript archive from before torch 1.4 (old/model.json and tensors/, no "
            "old/data.pkl): that old layout is not supported, and torch itself no longer loads it");
}

TEST(TorchSave, MinimalArchiveServesStorageInPlace) {
  TempDir dir;
  const std::string bytes = archive(state_pickle("0", 4, 0, {2, 2}, {2, 1}));
  auto catalog = open_bytes(dir, bytes);
  EXPECT_EQ(catalog.format, "pytorch");
  ASSERT_EQ(catalog.tensors().size(), 1u);
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.name, "w");
  EXPECT_EQ(test::vec(t.shape), (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(t.bytes.view(), kFloats);
  EXPECT_NE(t.bytes.mapped_file(), nullptr);
  ASSERT_TRUE(t.source.offset);
  EXPECT_EQ(bytes.substr(*t.source.offset, 16), kFloats);
  EXPECT_EQ(*t.source.offset % 64, 0u);
  EXPECT_EQ(catalog.metadata["torch"]["archive"], "model");
}

TEST(TorchSave, StridedViewCoversItsSpan) {
  TempDir dir;
  // Column 1 of a 2x2 row-major storage: offset 1, stride 2 -> elements 2 and 4;
  // the raw file is the span from the first to the last (elements 2, 3, 4).
  auto catalog = open_bytes(dir, archive(state_pickle("0", 4, 1, {2}, {2})));
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.bytes.view(), kFloats.substr(4, 12));
  EXPECT_EQ(test::vec(t.strides), (std::vector<int64_t>{2}));
  auto transposed = open_bytes(dir, archive(state_pickle("0", 4, 0, {2, 2}, {1, 2})));
  EXPECT_TRUE(transposed.tensors()[0].is_f_contiguous());
  auto stepped = open_bytes(dir, archive(state_pickle("0", 4, 0, {2}, {3})));
  const Tensor& s = stepped.tensors()[0];
  EXPECT_EQ(s.bytes.size(), 16u);
  // An expand() keeps its one row: nothing is copied for the .npy (the
  // tree gathers it when read).
  auto expanded = open_bytes(dir, archive(state_pickle("0", 4, 2, {3, 2}, {0, 1})));
  EXPECT_EQ(expanded.tensors()[0].bytes.view(), kFloats.substr(8, 8));
}

TEST(TorchSave, ViewsOutsideTheirStorageAreRefused) {
  EXPECT_NE(refusal(archive(state_pickle("0", 4, 0, {5}, {1}))).find("run past"), std::string::npos);
  EXPECT_NE(refusal(archive(state_pickle("0", 4, 3, {2}, {1}))).find("run past"), std::string::npos);
  EXPECT_NE(refusal(archive(state_pickle("0", 4, 0, {2, 2}, {3, 1}))).find("run past"), std::string::npos);
  EXPECT_NE(refusal(archive(state_pickle("0", 4, 0, {2}, {-1}))).find("negative stride"), std::string::npos);
  EXPECT_NE(refusal(archive(state_pickle("0", 5, 0, {2}, {1}))).find("fewer than"), std::string::npos);
  EXPECT_NE(refusal(archive(state_pickle("7", 4, 0, {2}, {1}))).find("missing"), std::string::npos);
}

TEST(TorchSave, ArchiveLevelRefusals) {
  const std::string pickle = state_pickle("0", 4, 0, {4}, {1});
  // An archive_format record makes it a PT2 archive, which this one is not.
  EXPECT_NE(refusal(archive(pickle, kFloats, {{"model/archive_format", "pt2", 0}})).find("pt2: "),
            std::string::npos);
  EXPECT_NE(refusal(zip_bytes({{"x/readme.txt", "hi", 0}})).find("no x/data.pkl"), std::string::npos);
  EXPECT_NE(
      refusal(zip_bytes({{"x/data.pkl", pickle, 0}, {"x/data/0", kFloats, 0}, {"x/version", "11\n", 0}}))
          .find("archive version"),
      std::string::npos);
  EXPECT_NE(refusal(archive(pickle, kFloats, {{"model/byteorder", "middle", 0}})).find("byteorder"),
            std::string::npos);
}

TEST(TorchSave, BigEndianStoragesAreSwappedIntoOwnedBytes) {
  TempDir dir;
  std::string big = kFloats;
  for (size_t i = 0; i < big.size(); i += 4) std::reverse(big.begin() + i, big.begin() + i + 4);
  auto catalog =
      open_bytes(dir, archive(state_pickle("0", 4, 0, {4}, {1}), big, {{"model/byteorder", "big", 0}}));
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.bytes.view(), kFloats);
  EXPECT_EQ(t.bytes.mapped_file(), nullptr);
  EXPECT_FALSE(t.source.offset);
}

TEST(TorchSave, DeflatedRecordsAreInflated) {
  TempDir dir;
  auto catalog = open_bytes(dir, archive(state_pickle("0", 4, 0, {4}, {1}), kFloats, {}, 8));
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.bytes.view(), kFloats);
  EXPECT_EQ(t.bytes.mapped_file(), nullptr);
}

TEST(TorchScript, ConstantsArchiveIsTorchScript) {
  TempDir dir;
  auto catalog = open_bytes(
      dir, archive(state_pickle("0", 4, 0, {4}, {1}), kFloats, {{"model/constants.pkl", "\x80\x02)."s, 0}}));
  EXPECT_EQ(catalog.format, "torchscript");
  EXPECT_EQ(catalog.tensors().size(), 1u);
}

// Five pickles then the storages, as docs/formats.md, "Legacy torch.save", lays them out.
std::string legacy_file(int64_t numel_in_file, const std::string& data) {
  std::string out = "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."s;
  out += "\x80\x02M\xe9\x03."s;
  out += "\x80\x02}(" + u("little_endian") + "\x88u."s;
  out += state_pickle("140", 4, 0, {4}, {1}, "FloatStorage", true);
  out += "\x80\x02](" + u("140") + "e."s;
  std::string count(8, '\0');
  std::memcpy(count.data(), &numel_in_file, 8);
  return out + count + data;
}

TEST(LegacyTorchSave, StoragesFollowThePicklesInPlace) {
  TempDir dir;
  const std::string bytes = legacy_file(4, kFloats);
  auto catalog = open_bytes(dir, bytes);
  ASSERT_EQ(catalog.tensors().size(), 1u);
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.bytes.view(), kFloats);
  EXPECT_NE(t.bytes.mapped_file(), nullptr);
  EXPECT_EQ(*t.source.offset, bytes.size() - 16);
  EXPECT_EQ(catalog.metadata["torch"]["serialization"], "legacy");
}

TEST(LegacyTorchSave, InconsistentStoragesAreRefused) {
  EXPECT_NE(refusal(legacy_file(3, kFloats)).find("elements"), std::string::npos);
  EXPECT_NE(refusal(legacy_file(4, kFloats.substr(0, 12))).find("past the end"), std::string::npos);
  std::string bad_magic = legacy_file(4, kFloats);
  bad_magic[4] = 0;  // still starts like a pickle, no longer the magic number
  EXPECT_NE(refusal(bad_magic), "<accepted>");
  EXPECT_NE(refusal(legacy_file(4, kFloats).substr(0, 40)), "<accepted>");
}

}  // namespace
}  // namespace modelfs

namespace modelfs {
namespace {

TEST(TorchSave, CyclicObjectsEndTheWalkInsteadOfRecursing) {
  TempDir dir;
  // A list holding itself.
  auto selfish = open_bytes(dir, archive("\x80\x02]q\x00h\x00"
                                         "a."s));
  EXPECT_TRUE(selfish.tensors().empty());
  // A subclass rebuild whose argument list later receives the rebuild itself.
  auto loop = open_bytes(dir, archive("\x80\x02]q\x00"
                                      "ctorch._tensor\n_rebuild_from_type_v2\n(NNh\x00Nt"
                                      "Rq\x01h\x00h\x01"
                                      "a0."s));
  EXPECT_TRUE(loop.tensors().empty());
}

// A storage saved on its own is a tensor too, and costs the budget what it
// allocates: one persistent id repeated through the memo, two bytes a
// tensor, is refused while the walker builds them.
TEST(TorchSave, StoragesRepeatedThroughTheMemoAreCharged) {
  const std::string id = "(" + u("storage") + "ctorch\nFloatStorage\n" + u("0") + u("cpu") + "K\x04tQ";
  std::string repeats;
  for (int i = 0; i < 20000; ++i) repeats += "h\x00"s;
  const std::string bytes = archive("\x80\x02]("s + id + "q\x00"s + repeats + "e."s);
  Budget budget(uint64_t{1} << 20);
  BudgetScope scope(budget);
  const std::string why = refusal(bytes);
  // Refused before the walker's table of tensors doubles past the budget.
  EXPECT_NE(why.find("pytorch: the table of tensors needs "), std::string::npos) << why;
  EXPECT_NE(why.find("past the model's memory budget"), std::string::npos) << why;
}

TEST(TorchSave, DeeplyNestedParametersAreBounded) {
  std::string pickle = "\x80\x02"s;
  // Parameter(Parameter(...(None)...)) two thousand deep, built inside out.
  for (int i = 0; i < 2000; ++i) pickle += "ctorch._utils\n_rebuild_parameter\n"s;
  pickle += "N"s;
  for (int i = 0; i < 2000; ++i)
    pickle +=
        "\x89"
        "ccollections\nOrderedDict\n)R\x87R"s;
  pickle += "."s;
  EXPECT_NE(refusal(archive(pickle)), "<accepted>");
}

}  // namespace
}  // namespace modelfs

namespace modelfs {
namespace {

// _rebuild_tensor_v3(UntypedStorage, offset, size, stride, requires_grad, hooks, dtype):
// the storage counts bytes, offset/size/stride count elements of `dtype`.
std::string v3_pickle(const std::string& dtype, int nbytes, int offset, int numel) {
  return "\x80\x02}("s + u("w") + "ctorch._utils\n_rebuild_tensor_v3\n((" + u("storage") +
         "ctorch.storage\nUntypedStorage\n" + u("0") + u("cpu") + "K"s + static_cast<char>(nbytes) + "tQK"s +
         static_cast<char>(offset) + "K"s + static_cast<char>(numel) + "\x85K\x01\x85\x89" +
         "ccollections\nOrderedDict\n)Rctorch\n" + dtype + "\ntRu."s;
}

TEST(TorchSave, RebuildV3TypesUntypedStorages) {
  TempDir dir;
  auto f8 = open_bytes(dir, archive(v3_pickle("float8_e4m3fn", 16, 2, 14)));
  ASSERT_EQ(f8.tensors().size(), 1u);
  EXPECT_EQ(f8.tensors()[0].dtype, DType::Float8E4M3FN);
  EXPECT_EQ(f8.tensors()[0].bytes.view(), kFloats.substr(2));
  auto u16 = open_bytes(dir, archive(v3_pickle("uint16", 16, 1, 7)));
  EXPECT_EQ(u16.tensors()[0].dtype, DType::UInt16);
  EXPECT_EQ(u16.tensors()[0].bytes.view(), kFloats.substr(2));
  EXPECT_NE(refusal(archive(v3_pickle("uint16", 16, 1, 8))).find("run past"), std::string::npos);
  EXPECT_NE(refusal(archive(v3_pickle("uint64", 17, 0, 2))).find("fewer than"), std::string::npos);
}

}  // namespace
}  // namespace modelfs
