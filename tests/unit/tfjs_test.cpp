// SPDX-License-Identifier: Apache-2.0
// The TensorFlow.js reader: a model.json's refusals rule by rule, each a
// ModelError naming "TensorFlow.js"; weights placed in their group's
// stream (one shard: a mapped range; several: run pieces); the catalog's
// quantization; and the .npy of quantized weights dequantized as
// tfjs-core's decodeWeight does (q x scale + min in float64, rounded half
// up for int32; float16 widened), through the tree's read path.
#include <gtest/gtest.h>
#include <sys/uio.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/tfjs.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/tree.hpp"
#include "test_files.hpp"
#include "test_refusal.hpp"

namespace modelfs {
namespace {

using test::TempDir;
using Json = nlohmann::json;

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A model.json of one group over `shards`, written beside them.
std::filesystem::path write_model(const TempDir& dir, const Json& weights,
                                  const std::vector<std::pair<std::string, std::string>>& shards) {
  Json paths = Json::array();
  for (const auto& [name, bytes] : shards) {
    dir.write(name, bytes);
    paths.push_back(name);
  }
  // The group built key by key: clang reads the nested braces of one
  // group inside an array as two arrays, gcc as an object.
  Json group = Json::object();
  group["paths"] = paths;
  group["weights"] = weights;
  Json model = {{"format", "graph-model"},
                {"generatedBy", "test"},
                {"modelTopology", {{"node", Json::array()}}},
                {"weightsManifest", Json::array()}};
  model["weightsManifest"].push_back(group);
  return dir.write("model.json", model.dump());
}

Json weight(const std::string& name, const std::string& dtype, const std::vector<uint64_t>& shape) {
  return {{"name", name}, {"dtype", dtype}, {"shape", shape}};
}

std::string read_file(const Tree& tree, std::string_view path) {
  const auto ino = tree.resolve(path);
  EXPECT_TRUE(ino) << path;
  if (!ino) return {};
  const Node& node = *tree.node(*ino);
  std::string scratch, out;
  for (uint64_t at = 0; at < node.size;) {
    iovec io[8];
    const size_t n = tree.read(node, at, node.size - at, io, scratch);
    uint64_t got = 0;
    for (size_t i = 0; i < n; ++i) {
      out.append(static_cast<const char*>(io[i].iov_base), io[i].iov_len);
      got += io[i].iov_len;
    }
    if (got == 0) break;
    at += got;
  }
  return out;
}

// The values of a .npy of `count` elements of T (the header skipped).
template <typename T>
std::vector<T> npy_values(const std::string& npy, size_t count) {
  EXPECT_GE(npy.size(), count * sizeof(T));
  std::vector<T> out(count);
  if (npy.size() >= count * sizeof(T))
    std::memcpy(out.data(), npy.data() + npy.size() - count * sizeof(T), count * sizeof(T));
  return out;
}

std::string refusal(const std::filesystem::path& model) {
  return test::refusal_reason(model, "TensorFlow.js");
}

TEST(Tfjs, WeightsArePlacedInTheirGroupsStream) {
  TempDir dir;
  const std::vector<float> a{1, 2, 3}, b{4, 5, 6, 7, 8};
  const std::string stream = bytes_of(a) + bytes_of(b);  // 32 bytes
  const auto model = write_model(dir, {weight("x/a", "float32", {3}), weight("x/b", "float32", {5})},
                                 {{"s1.bin", stream.substr(0, 16)}, {"s2.bin", stream.substr(16)}});
  const Catalog catalog = open_model(model);
  EXPECT_EQ(catalog.format, "tfjs");
  ASSERT_EQ(catalog.tensors().size(), 2u);
  const Tensor& ta = catalog.tensors()[0];
  EXPECT_TRUE(ta.pieces.empty());
  EXPECT_EQ(ta.bytes.view(), bytes_of(a));
  const Tensor& tb = catalog.tensors()[1];
  // Bytes 12..32: 4 in s1.bin, 16 in s2.bin.
  ASSERT_EQ(tb.pieces.size(), 2u);
  EXPECT_EQ(tb.pieces[0].size, 4u);
  EXPECT_EQ(tb.pieces[0].source.file, "s1.bin");
  EXPECT_EQ(tb.pieces[0].source.offset, 12u);
  EXPECT_EQ(tb.pieces[1].size, 16u);
  EXPECT_EQ(tb.pieces[1].source.file, "s2.bin");
  EXPECT_EQ(std::string(tb.pieces[0].bytes.view()) + std::string(tb.pieces[1].bytes.view()), bytes_of(b));
  EXPECT_EQ(tb.nbytes(), 20u);
  EXPECT_EQ(catalog.files, (std::vector<std::string>{"model.json", "s1.bin", "s2.bin"}));
  EXPECT_EQ(catalog.metadata["format"], "graph-model");
  EXPECT_FALSE(catalog.metadata.contains("weightsManifest"));
  ASSERT_EQ(catalog.documents.size(), 1u);
  EXPECT_EQ(catalog.documents[0].path, "model_topology.json");
}

TEST(Tfjs, QuantizedWeightsDequantizeAsTfjsCore) {
  TempDir dir;
  const std::vector<uint8_t> q8{0, 1, 2, 127, 255};
  const std::vector<uint16_t> q16{0, 1, 65535, 300};
  // 0x3C00 = 1, 0xC000 = -2, 0x0001 = 2^-24, 0x7C00 = inf, 0x3555 ~ 1/3.
  const std::vector<uint16_t> half{0x3C00, 0xC000, 0x0001, 0x7C00, 0x3555};
  const std::vector<uint8_t> ints{0, 1, 2, 3};
  const double scale = 0.1, min = -1.05;
  Json w8 = weight("q8", "float32", {5});
  w8["quantization"] = {{"dtype", "uint8"}, {"min", min}, {"scale", scale}};
  Json w16 = weight("q16", "float32", {4});
  w16["quantization"] = {{"dtype", "uint16"}, {"min", 2.5}, {"scale", 0.001}};
  Json wh = weight("half", "float32", {5});
  wh["quantization"] = {{"dtype", "float16"}};
  // -1.5 + q: -1.5 rounds to -1 (half up), -0.5 to 0, 0.5 to 1, 1.5 to 2.
  Json wi = weight("ints", "int32", {4});
  wi["quantization"] = {{"dtype", "uint8"}, {"min", -1.5}, {"scale", 1.0}, {"original_dtype", "int32"}};
  const std::string stream = bytes_of(q8) + bytes_of(q16) + bytes_of(half) + bytes_of(ints);
  const auto model = write_model(dir, {w8, w16, wh, wi}, {{"w.bin", stream}});

  Catalog catalog = open_model(model);
  const Tensor& t8 = catalog.tensors()[0];
  EXPECT_EQ(t8.dtype, DType::UInt8);
  ASSERT_NE(t8.quantization, nullptr);
  EXPECT_EQ(t8.quantization->scheme, QScheme::MinScaleAffine);
  EXPECT_EQ(t8.quantization->scale, scale);
  EXPECT_EQ(t8.quantization->min, min);
  EXPECT_EQ(catalog.tensors()[2].quantization->scheme, QScheme::Widened);
  EXPECT_EQ(catalog.tensors()[3].quantization->values, DType::Int32);
  EXPECT_EQ(t8.typed_extras()["quantization"]["qscheme"], "min_scale_affine");

  const auto tree = Tree::build(std::move(catalog), {});
  EXPECT_EQ(read_file(*tree, "q8"), bytes_of(q8));  // the raw file: as stored
  const auto v8 = npy_values<float>(read_file(*tree, "q8.npy"), q8.size());
  for (size_t i = 0; i < q8.size(); ++i) EXPECT_EQ(v8[i], static_cast<float>(q8[i] * scale + min)) << i;
  const auto v16 = npy_values<float>(read_file(*tree, "q16.npy"), q16.size());
  for (size_t i = 0; i < q16.size(); ++i) EXPECT_EQ(v16[i], static_cast<float>(q16[i] * 0.001 + 2.5)) << i;
  const auto vh = npy_values<float>(read_file(*tree, "half.npy"), half.size());
  EXPECT_EQ(vh[0], 1.0f);
  EXPECT_EQ(vh[1], -2.0f);
  EXPECT_EQ(vh[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(vh[3], std::numeric_limits<float>::infinity());
  EXPECT_EQ(vh[4], 0.333251953125f);
  EXPECT_EQ(npy_values<int32_t>(read_file(*tree, "ints.npy"), 4), (std::vector<int32_t>{-1, 0, 1, 2}));
}

TEST(Tfjs, StringWeightsAreJsonLines) {
  TempDir dir;
  std::string stream;
  for (std::string s : {std::string("ab"), std::string(), std::string("\xff")}) {
    const auto n = static_cast<uint32_t>(s.size());
    stream.append(reinterpret_cast<const char*>(&n), 4).append(s);
  }
  const auto model = write_model(dir, Json::array({weight("words", "string", {3})}), {{"w.bin", stream}});
  const Catalog catalog = open_model(model);
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.dtype, DType::String);
  EXPECT_EQ(t.bytes.view(), "\"ab\"\n\"\"\n\"\\udcff\"\n");
}

TEST(Tfjs, RefusalsNameTheFormat) {
  const std::vector<float> two{1, 2};
  struct Case {
    std::string what;
    // A vector, not a Json: `{weight}` is a one-element array to gcc and
    // the weight itself to clang (a braced copy).
    std::vector<Json> weights;
    std::vector<std::pair<std::string, std::string>> shards;
    std::string reason;
  };
  auto with = [](Json w, const std::string& key, Json value) {
    w[key] = std::move(value);
    return w;
  };
  const Json f2 = weight("a", "float32", {2});
  const std::string eight = bytes_of(two);
  const std::vector<Case> cases{
      {"weights need more", {weight("a", "float32", {3})}, {{"w.bin", eight}}, "needs bytes [0, 12)"},
      {"bytes left over", {weight("a", "float32", {1})}, {{"w.bin", eight}}, "4 bytes are left over"},
      {"shard twice", {f2}, {{"w.bin", eight}, {"w.bin", eight}}, "twice"},
      {"unknown dtype", {with(f2, "dtype", "float64")}, {{"w.bin", eight}}, "unknown dtype \"float64\""},
      {"negative dim", {with(f2, "shape", Json::array({-2}))}, {{"w.bin", eight}}, "negative"},
      {"fractional dim", {with(f2, "shape", Json::array({2.0}))}, {{"w.bin", eight}}, "not an integer"},
      {"overflow",
       {with(f2, "shape", Json::array({uint64_t{1} << 40, uint64_t{1} << 40}))},
       {{"w.bin", eight}},
       "overflows"},
      {"no scale",
       {with(f2, "quantization", {{"dtype", "uint8"}, {"min", 0}})},
       {{"w.bin", eight}},
       "\"scale\""},
      {"float16 of int32",
       {with(weight("a", "int32", {2}), "quantization", {{"dtype", "float16"}})},
       {{"w.bin", std::string(4, '\0')}},
       "only float32"},
      {"quantized bool",
       {with(weight("a", "bool", {2}), "quantization", {{"dtype", "uint8"}, {"min", 0}, {"scale", 1}})},
       {{"w.bin", std::string(2, '\0')}},
       "only float32 and int32"},
      {"string past its group",
       {weight("a", "string", {1})},
       {{"w.bin", std::string("\x09\0\0\0ab", 6)}},
       "runs past"},
      {"duplicate name", {f2, f2}, {{"w.bin", eight + eight}}, "another weight"},
      {"missing shard", {f2}, {{"w.bin", eight}}, "\"w.bin\", which cannot be opened"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir;
    auto shards = c.shards;
    const bool missing = c.what == "missing shard";
    auto model = write_model(dir, Json(c.weights), shards);
    if (missing) {
      std::filesystem::rename(dir.path() / "w.bin", dir.path() / "kept.bin");
    }
    EXPECT_NE(refusal(model).find(c.reason), std::string::npos) << refusal(model);
  }
}

TEST(Tfjs, ModelJsonItselfIsChecked) {
  TempDir dir;
  dir.write("w.bin", "");
  for (const auto& [text, reason] : std::vector<std::pair<std::string, std::string>>{
           {"{\"modelTopology\": {", "invalid JSON"},
           {"{\"modelTopology\": {}, \"weightsManifest\": {}}", "no \"weightsManifest\" array"},
           {"{\"weightsManifest\": [], \"weightsManifest\": []}", "duplicate JSON key"},
           {"{\"modelTopology\": " + std::string(500, '[') + std::string(500, ']') +
                ", \"weightsManifest\": []}",
            "nests deeper"},
       }) {
    SCOPED_TRACE(text.substr(0, 40));
    EXPECT_NE(refusal(dir.write("model.json", text)).find(reason), std::string::npos);
  }
  // A model of no weights is a model.
  EXPECT_EQ(open_model(dir.write("model.json", "{\"weightsManifest\": []}")).tensors().size(), 0u);
}

TEST(Tfjs, ProbeSeesTheKeysInTheFirstBytes) {
  auto probe = [](std::string_view text) {
    return tfjs::probe_file(std::as_bytes(std::span(text.data(), text.size())));
  };
  EXPECT_TRUE(probe("  {\"modelTopology\": {\"a\": 1"));
  EXPECT_TRUE(probe("{\"format\": \"graph-model\", \"signature\": "));
  EXPECT_TRUE(probe("{\"weightsManifest\": []}"));
  EXPECT_FALSE(probe("{\"weight_map\": {}}"));
  EXPECT_FALSE(probe("[\"weightsManifest\"]"));
}

}  // namespace
}  // namespace modelfs
