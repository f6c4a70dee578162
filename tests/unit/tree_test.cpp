// SPDX-License-Identifier: Apache-2.0
// The tree builder: paths, clashes, sidecars, .npy views and documents.
#include <gtest/gtest.h>

#include <set>

#include "io/json_text.hpp"
#include "io/tensor_spec.hpp"
#include "modelfs/tree.hpp"
#include "tree/sidecar.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs {
namespace {

TensorSpec tensor(const std::string& name, DType dtype = DType::Float32, std::vector<uint64_t> shape = {2}) {
  TensorSpec t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.strides = contiguous_strides(t.shape).value();
  uint64_t numel = 1;
  for (auto d : t.shape) numel *= d;
  t.bytes = ByteSpan::owned(std::string(numel * dtype_bits(dtype) / 8, 'x'));
  t.source = {"m.safetensors", 0};
  return t;
}

std::unique_ptr<const Tree> build(const std::vector<TensorSpec>& tensors, bool flat = false) {
  Catalog catalog;
  catalog.format = "safetensors";
  catalog.files = {"m.safetensors"};
  for (const auto& t : tensors) catalog.add(t);
  return Tree::build(std::move(catalog), {.flat = flat});
}

std::string content(const Tree& tree, const std::string& path) {
  auto ino = tree.resolve(path);
  if (!ino) return "<missing " + path + ">";
  return tree.content(*tree.node(*ino));
}

// index.json is measured at build and printed when first read: its size is
// the printed text's, and every path in it leads to that tensor's bytes.
void expect_index_matches_tree(const Tree& tree) {
  const Node* file = tree.node(*tree.resolve(".modelfs/index.json"));
  const std::string text = tree.content(*file);
  EXPECT_EQ(file->size, text.size());
  const auto index = nlohmann::json::parse(text);
  const auto paths = tree.tensor_paths();
  ASSERT_EQ(index["tensors"].size(), tree.tensors().size());
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string quoted;  // as JSON carries it: bytes that are not UTF-8 become U+FFFD
    append_json_string(quoted, paths[i]);
    EXPECT_EQ(index["tensors"][i]["path"], nlohmann::json::parse(quoted));
    const auto ino = tree.resolve(paths[i]);
    ASSERT_TRUE(ino) << paths[i];
    EXPECT_EQ(tree.node(*ino)->tensor, &tree.tensors()[i]) << paths[i];
    EXPECT_EQ(tree.node(*ino)->role, FileRole::TensorData) << paths[i];
  }
}

// Every node's path, made from the inode up, resolves back to that inode.
TEST(Tree, PathOfEveryNodeResolvesToIt) {
  auto tree = build({tensor("model.layers.0.weight"), tensor("model.layers.10.bias"), tensor("head")});
  std::string path = "stale";
  tree->path(Tree::kRootIno, path);
  EXPECT_EQ(path, "");
  for (uint64_t ino = 1; ino <= tree->node_count(); ++ino) {
    tree->path(ino, path);
    EXPECT_EQ(tree->resolve(path), ino) << path;
  }
  tree->path(*tree->resolve("model/layers/10/bias.npy"), path);
  EXPECT_EQ(path, "model/layers/10/bias.npy");
  tree->path(tree->node_count() + 1, path);  // no such inode
  EXPECT_EQ(path, "");
}

TEST(Tree, SplitsNamesIntoFoldersWithSidecarsAndNpyViews) {
  auto tree = build({tensor("model.layers.0.weight"), tensor("model.layers.0.bias")});
  EXPECT_EQ(tree->tensor_paths(), (std::vector<std::string>{"model/layers/0/weight", "model/layers/0/bias"}));
  for (const char* path : {"model/layers/0/weight", "model/layers/0/weight.json", "model/layers/0/weight.npy",
                           ".modelfs/index.json", ".modelfs/metadata.json"})
    EXPECT_TRUE(tree->resolve(path)) << path;
  auto folder = tree->node(*tree->resolve("model/layers/0"));
  EXPECT_EQ(folder->kind, NodeKind::Directory);
  EXPECT_EQ(folder->children.size(), 6u);
  EXPECT_EQ(tree->node(*tree->resolve("model/layers/0/weight"))->size, 8u);
  const Node* npy = tree->node(*tree->resolve("model/layers/0/weight.npy"));
  EXPECT_EQ(npy->size, tree->parts(*npy)[0].size + 8u);
  EXPECT_EQ(tree->parts(*npy)[0].size % 64, 0u);
}

TEST(Tree, NoNpyWhereModelfsCannotConvertTheType) {
  TensorSpec w = tensor("w", DType::GgmlBlock, {64});
  // A block type modelfs has no dequantization for.
  static constexpr GgmlType kNoKernels{99, "q9_9", 32, 18, std::nullopt};
  w.ggml = &kNoKernels;
  w.bytes = ByteSpan::owned(std::string(36, 'x'));
  auto tree = build({w, tensor("b", DType::BFloat16)});
  EXPECT_TRUE(tree->resolve("w"));
  EXPECT_TRUE(tree->resolve("w.json"));
  EXPECT_FALSE(tree->resolve("w.npy"));
  EXPECT_TRUE(tree->resolve("b.npy"));  // float32 values
}

TEST(Tree, StringTensorsHaveTheirTextAndNoNpy) {
  TensorSpec t = tensor("labels", DType::String, {2});
  t.bytes = ByteSpan::owned("\"a\"\n\"b\"\n");
  t.source = {"m.onnx", std::nullopt};
  auto tree = build({std::move(t)});
  EXPECT_EQ(content(*tree, "labels"), "\"a\"\n\"b\"\n");
  EXPECT_FALSE(tree->resolve("labels.npy"));
  const auto sidecar = nlohmann::json::parse(content(*tree, "labels.json"));
  EXPECT_EQ(sidecar["dtype"], "string");
  EXPECT_EQ(sidecar["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(sidecar["strides"], nlohmann::json::array({1}));
  EXPECT_EQ(sidecar["nbytes"], 8);
  EXPECT_FALSE(sidecar.contains("numpy"));
  expect_index_matches_tree(*tree);
}

TEST(Tree, StridedViewsGetANpyGatheredWhenRead) {
  // A 2x2 transpose of [[a, b], [c, d]]: raw bytes stay as stored.
  TensorSpec t = tensor("t", DType::UInt8, {2, 2});
  t.strides = {1, 2};
  t.bytes = ByteSpan::owned("abcd");
  TensorSpec strided = t;
  strided.name = "s";
  strided.shape = {2, 2};
  strided.strides = {3, 1};  // rows [a, b] and [d, e]: neither C nor F order
  strided.bytes = ByteSpan::owned("abcde");
  TensorSpec outside = strided;
  outside.name = "o";
  outside.bytes = ByteSpan::owned("abcd");  // its last element would be past the end
  auto tree = build({t, strided, outside});
  EXPECT_EQ(content(*tree, "t"), "abcd");
  EXPECT_TRUE(content(*tree, "t.npy").ends_with("abcd"));  // F order, served as is
  EXPECT_EQ(content(*tree, "s"), "abcde");
  const std::string npy = content(*tree, "s.npy");
  EXPECT_TRUE(npy.ends_with("abde"));
  EXPECT_NE(npy.find("'fortran_order': False"), std::string::npos);
  EXPECT_EQ(tree->node(*tree->resolve("s.npy"))->size, npy.size());
  EXPECT_FALSE(tree->resolve("o.npy"));
}

TEST(Tree, ABigSidecarIsKeptAsPrintedAndReadByRange) {
  // A million dimensions of 1: the sidecar is megabytes, read in pieces.
  TensorSpec t = tensor("w", DType::Float32, {});
  t.shape.assign(1'000'000, 1);
  t.strides.assign(1'000'000, 1);
  t.bytes = ByteSpan::owned("abcd");
  auto tree = build({t});
  const Node* file = tree->node(*tree->resolve("w.json"));
  ASSERT_EQ(tree->parts(*file).size(), 1u);  // held, not printed per read
  const std::string whole = content(*tree, "w.json");
  EXPECT_EQ(whole.size(), file->size);
  EXPECT_TRUE(whole == sidecar_text(tree->tensors()[0], "safetensors", tree->npy_of(tree->tensors()[0])));
  std::array<iovec, 2> iov{};
  std::string scratch;
  ASSERT_EQ(tree->read(*file, 4096, 4096, iov, scratch), 1u);
  EXPECT_EQ(std::string_view(static_cast<const char*>(iov[0].iov_base), iov[0].iov_len),
            std::string_view(whole).substr(4096, 4096));
}

TEST(Tree, ANameThatIsBothFileAndFolderKeepsBothReachable) {
  auto tree = build({tensor("a.b"), tensor("a.b.c"), tensor("a.b~1")});
  // The folder keeps "a/b"; the tensor a.b is a/b~1 unless that is taken.
  const auto& paths = tree->tensor_paths();
  EXPECT_EQ(paths[1], "a/b/c");
  EXPECT_EQ(tree->node(*tree->resolve("a/b"))->kind, NodeKind::Directory);
  std::set<std::string> unique(paths.begin(), paths.end());
  EXPECT_EQ(unique.size(), 3u);
  for (const auto& p : paths) {
    auto ino = tree->resolve(p);
    ASSERT_TRUE(ino) << p;
    EXPECT_EQ(tree->node(*ino)->kind, NodeKind::File) << p;
    EXPECT_TRUE(tree->resolve(p + ".json")) << p;
  }
}

TEST(Tree, FlatModeSidecarClashesGetSuffixes) {
  auto tree = build({tensor("x.json"), tensor("x"), tensor(".modelfs")}, true);
  EXPECT_EQ(tree->tensor_paths(), (std::vector<std::string>{"x.json", "x~1", ".modelfs~1"}));
  EXPECT_EQ(tree->node(*tree->resolve(".modelfs"))->kind, NodeKind::Directory);
  expect_index_matches_tree(*tree);
}

// Big folders check names through a set, small ones by a scan: clashes
// resolve alike on both sides of that line.
TEST(Tree, ClashesResolveAlikeInSmallAndBigFolders) {
  for (size_t fillers : {0u, 40u}) {
    SCOPED_TRACE(fillers);
    std::vector<TensorSpec> nested, flat;
    for (size_t i = 0; i < fillers; ++i) {
      nested.push_back(tensor("d.f" + std::to_string(i)));
      flat.push_back(tensor("f" + std::to_string(i)));
    }
    for (const char* name : {"d.x.json", "d.x", "d.x~1.npy", "d.y.z", "d.y"}) nested.push_back(tensor(name));
    for (const char* name : {"x.json", "x", "x~1.npy", "y"}) flat.push_back(tensor(name));
    auto nested_tree = build(std::move(nested));
    auto flat_tree = build(std::move(flat), true);
    const auto& paths = nested_tree->tensor_paths();
    // d/x and d/x~1 are folders, so the file d.x takes the next free name.
    EXPECT_EQ(std::vector<std::string>(paths.end() - 5, paths.end()),
              (std::vector<std::string>{"d/x/json", "d/x~2", "d/x~1/npy", "d/y/z", "d/y~1"}));
    const auto& flat_paths = flat_tree->tensor_paths();
    // x's sidecar would be x.json, a tensor's file: x becomes x~1, and then
    // x~1.npy is the view of x~1, so that tensor becomes x~1.npy~1.
    EXPECT_EQ(std::vector<std::string>(flat_paths.end() - 4, flat_paths.end()),
              (std::vector<std::string>{"x.json", "x~1", "x~1.npy~1", "y"}));
    expect_index_matches_tree(*nested_tree);
    expect_index_matches_tree(*flat_tree);
  }
}

// "a.b" and "a/b" are one path: each further name on it takes the first
// free suffix, in order, skipping those that real names hold.
TEST(Tree, NamesOnOnePathTakeSuffixesInOrder) {
  auto tree = build({tensor("x.a.b"), tensor("x/a.b"), tensor("x.a.b~2"), tensor("x.a/b"), tensor("x/a/b"),
                     tensor("x.a.b~1"), tensor("x/a/b~3")});
  EXPECT_EQ(tree->tensor_paths(), (std::vector<std::string>{"x/a/b", "x/a/b~1", "x/a/b~2", "x/a/b~3",
                                                            "x/a/b~4", "x/a/b~1~1", "x/a/b~3~1"}));
  expect_index_matches_tree(*tree);
}

// 2^14 names on one path (every choice of "." or "/" between 15
// components): the n-th clash is "~n", and finding each costs no scan of
// the suffixes before it (a search from ~1 each time was n^2 / 2 lookups).
TEST(Tree, ThousandsOfNamesOnOnePathGetSuffixesInOrder) {
  constexpr size_t kSeparators = 14;
  std::vector<TensorSpec> tensors;
  for (size_t bits = 0; bits < (size_t{1} << kSeparators); ++bits) {
    std::string name = "c";
    for (size_t i = 0; i < kSeparators; ++i) name += std::string(bits >> i & 1 ? "/" : ".") + "c";
    tensors.push_back(tensor(name));
  }
  auto tree = build(tensors);
  std::string path = "c";
  for (size_t i = 0; i < kSeparators; ++i) path += "/c";
  const auto& paths = tree->tensor_paths();
  ASSERT_EQ(paths.size(), tensors.size());
  EXPECT_EQ(paths[0], path);
  for (size_t i = 1; i < paths.size(); ++i) ASSERT_EQ(paths[i], path + "~" + std::to_string(i));
  expect_index_matches_tree(*tree);
}

// Tensors out of name order revisit folders made long before.
TEST(Tree, FoldersAreSharedByTensorsFarApart) {
  auto tree = build({tensor("a.p.w"), tensor("b.p.w"), tensor("a.p.b"), tensor("a.q.w"), tensor("b.p.b")});
  EXPECT_EQ(tree->tensor_paths(), (std::vector<std::string>{"a/p/w", "b/p/w", "a/p/b", "a/q/w", "b/p/b"}));
  EXPECT_EQ(tree->node(*tree->resolve("a/p"))->children.size(), 6u);  // w, b and their sidecars, .npy
  EXPECT_EQ(tree->node(*tree->resolve("a"))->children.size(), 2u);
}

TEST(Tree, DotDotEmptyAndNonAsciiNamesAreReachable) {
  auto tree = build({tensor(".."), tensor("a..b"), tensor("ñ.权重"), tensor("")});
  for (const auto& p : tree->tensor_paths()) EXPECT_TRUE(tree->resolve(p)) << p;
  EXPECT_EQ(tree->tensor_paths()[0], "%/%/%");
  EXPECT_EQ(tree->tensor_paths()[1], "a/%/b");
  EXPECT_EQ(tree->tensor_paths()[2], "ñ/权重");
  EXPECT_EQ(tree->tensor_paths()[3], "%~1");  // "%" is already the folder of ".."
  expect_index_matches_tree(*tree);
}

TEST(Tree, IndexListsEveryTensorWithItsPath) {
  auto tree = build({tensor("b.w"), tensor("a.w", DType::Int64, {})});
  auto index = nlohmann::json::parse(content(*tree, ".modelfs/index.json"));
  EXPECT_EQ(index["format"], "safetensors");
  ASSERT_EQ(index["tensors"].size(), 2u);
  EXPECT_EQ(index["tensors"][0]["name"], "b.w");  // catalog (file) order
  EXPECT_EQ(index["tensors"][0]["path"], "b/w");
  EXPECT_EQ(index["tensors"][1]["shape"], nlohmann::json::array());
  EXPECT_EQ(index["tensors"][1]["nbytes"], 8);
}

TEST(Tree, IndexIsTheJsonObjectPrintedReadably) {
  auto tree = build({tensor("b.w"), tensor("q\"uote\\d"), tensor("ñ\xff"), tensor("s", DType::Int64, {})});
  nlohmann::ordered_json expected;
  expected["format"] = "safetensors";
  expected["files"] = {"m.safetensors"};
  expected["tensors"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < tree->tensors().size(); ++i) {
    const auto& t = tree->tensors()[i];
    expected["tensors"].push_back({{"name", t.name},
                                   {"path", tree->tensor_paths()[i]},
                                   {"dtype", t.dtype_name()},
                                   {"shape", std::vector<uint64_t>(t.shape.begin(), t.shape.end())},
                                   {"nbytes", t.bytes.size()}});
  }
  EXPECT_EQ(content(*tree, ".modelfs/index.json"), readable_json(expected));
  expect_index_matches_tree(*tree);
  auto empty = build({});
  nlohmann::ordered_json none = {
      {"format", "safetensors"}, {"files", {"m.safetensors"}}, {"tensors", nlohmann::ordered_json::array()}};
  EXPECT_EQ(content(*empty, ".modelfs/index.json"), readable_json(none));
  expect_index_matches_tree(*empty);
}

TEST(Tree, SlicesSpanTheNpyHeaderAndTheData) {
  auto tree = build({tensor("w", DType::Float32, {4})});
  const Node* npy = tree->node(*tree->resolve("w.npy"));
  ASSERT_EQ(tree->parts(*npy).size(), 2u);
  const uint64_t header = tree->parts(*npy)[0].size;
  std::array<iovec, 2> iov{};
  std::string scratch;
  auto n = tree->read(*npy, header - 4, 10, iov, scratch);
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(iov[0].iov_len, 4u);
  EXPECT_EQ(iov[1].iov_len, 6u);
  EXPECT_EQ(iov[1].iov_base, tree->parts(*npy)[1].bytes);
  EXPECT_EQ(tree->read(*npy, header + 16, 10, iov, scratch), 0u);
  EXPECT_EQ(tree->read(*npy, header + 6, 100, iov, scratch), 1u);
  EXPECT_EQ(iov[0].iov_len, 10u);
}

// Each sidecar says what its tensor is, the format's extras after the fixed
// keys, at the size its file reports; the tensors the tree points at are
// the catalog's, whose bytes it serves.
TEST(Tree, SidecarsSayTheTensorAndItsExtras) {
  std::vector<TensorSpec> tensors = {tensor("plain"), tensor("extra")};
  tensors[1].extras = {
      {"requires_grad", true}, {"storage", {{"key", "3"}, {"offset", 0}}}, {"note", "é \"q\""}};
  auto tree = build(tensors);
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].name);
    const Node* sidecar = tree->node(*tree->resolve(tensors[i].name + ".json"));
    const std::string text = tree->content(*sidecar);
    EXPECT_EQ(sidecar->size, text.size());
    const auto json = nlohmann::ordered_json::parse(text);
    EXPECT_EQ(json["name"], tensors[i].name);
    EXPECT_EQ(json["dtype"], "float32");
    EXPECT_EQ(json["shape"], nlohmann::ordered_json({2}));
    EXPECT_EQ(json["nbytes"], 8);
    EXPECT_EQ(json["numpy"], "<f4");
    EXPECT_EQ(nlohmann::json(json["npy"]),
              nlohmann::json({{"dtype", "float32"}, {"from", "float32"}, {"exact", true}}));
    EXPECT_EQ(nlohmann::json(json["source"]), nlohmann::json({{"file", "m.safetensors"}, {"offset", 0}}));
    std::vector<std::string> keys;
    for (const auto& [key, value] : json.items()) keys.push_back(key);
    const size_t fixed = 10;  // name ... source
    ASSERT_EQ(keys.size(), fixed + tensors[i].extras.size());
    EXPECT_EQ(keys[fixed - 1], "source");
    for (const auto& [key, value] : tensors[i].extras.items())
      EXPECT_EQ(nlohmann::json(json[key]), value) << key;
  }
  ASSERT_EQ(tree->tensors().size(), 2u);
  EXPECT_EQ(tree->tensors().data(), tree->catalog().tensors().data());
  EXPECT_TRUE(tree->tensors()[0].extras_lines.empty());
  EXPECT_EQ(content(*tree, "extra"), std::string(8, 'x'));
}

TEST(Tree, DocumentsLiveUnderModelfs) {
  Catalog catalog;
  catalog.format = "test";
  catalog.documents.push_back({"graph.json", "{}"});
  catalog.documents.push_back({"models/a/model.json", "{\"a\":1}"});
  catalog.metadata["epoch"] = 3;
  auto tree = Tree::build(std::move(catalog), {});
  EXPECT_EQ(content(*tree, ".modelfs/graph.json"), "{}");
  EXPECT_EQ(content(*tree, ".modelfs/models/a/model.json"), "{\"a\":1}");
  auto meta = nlohmann::json::parse(content(*tree, ".modelfs/metadata.json"));
  EXPECT_EQ(meta["epoch"], 3);
  EXPECT_EQ(meta["format"], "test");
}

}  // namespace
}  // namespace modelfs
