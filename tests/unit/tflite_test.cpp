// SPDX-License-Identifier: Apache-2.0
// The TensorFlow Lite reader: models written here with flatbuffers'
// FlatBufferBuilder by field slot (docs/formats.md, "TensorFlow Lite"),
// what a mount holds of them, and the refusals rule by rule, each a
// ModelError naming "TensorFlow Lite".
#include <flatbuffers/flatbuffers.h>
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "formats/tflite.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using test::TempDir;

constexpr flatbuffers::voffset_t slot(int id) { return static_cast<flatbuffers::voffset_t>(4 + 2 * id); }

struct TensorDef {
  std::vector<int32_t> shape;
  int8_t type = 0;
  uint32_t buffer = 0;
  std::string name;
  bool variable = false;
  uint32_t external = 0;
  std::vector<float> scale;
  std::vector<int64_t> zero_point;
};

struct BufferDef {
  std::optional<std::string> data;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// A Model of one subgraph (and `second` as a second one, named "second").
std::string build(const std::vector<TensorDef>& tensors, const std::vector<BufferDef>& buffers,
                  const std::vector<TensorDef>& second = {}) {
  flatbuffers::FlatBufferBuilder fbb;
  auto make_tensors = [&](const std::vector<TensorDef>& defs) {
    std::vector<flatbuffers::Offset<void>> out;
    for (const TensorDef& t : defs) {
      const auto shape = fbb.CreateVector(t.shape);
      const auto name = fbb.CreateString(t.name);
      flatbuffers::Offset<void> quant;
      if (!t.scale.empty()) {
        const auto s = fbb.CreateVector(t.scale);
        const auto z = fbb.CreateVector(t.zero_point);
        const auto start = fbb.StartTable();
        fbb.AddOffset(slot(2), s);
        fbb.AddOffset(slot(3), z);
        quant = flatbuffers::Offset<void>(fbb.EndTable(start));
      }
      const auto start = fbb.StartTable();
      fbb.AddOffset(slot(0), shape);
      fbb.AddElement<int8_t>(slot(1), t.type, 0);
      fbb.AddElement<uint32_t>(slot(2), t.buffer, 0);
      fbb.AddOffset(slot(3), name);
      if (!quant.IsNull()) fbb.AddOffset(slot(4), quant);
      fbb.AddElement<uint8_t>(slot(5), t.variable ? 1 : 0, 0);
      fbb.AddElement<uint32_t>(slot(10), t.external, 0);
      out.push_back(flatbuffers::Offset<void>(fbb.EndTable(start)));
    }
    return fbb.CreateVector(out);
  };
  auto make_graph = [&](const std::vector<TensorDef>& defs, const char* name) {
    const auto ts = make_tensors(defs);
    const auto n = name ? fbb.CreateString(name) : flatbuffers::Offset<flatbuffers::String>();
    const auto start = fbb.StartTable();
    fbb.AddOffset(slot(0), ts);
    if (name) fbb.AddOffset(slot(4), n);
    return flatbuffers::Offset<void>(fbb.EndTable(start));
  };
  std::vector<flatbuffers::Offset<void>> graphs{make_graph(tensors, nullptr)};
  if (!second.empty()) graphs.push_back(make_graph(second, "second"));
  const auto graph_vector = fbb.CreateVector(graphs);
  std::vector<flatbuffers::Offset<void>> bufs;
  for (const BufferDef& b : buffers) {
    flatbuffers::Offset<flatbuffers::Vector<uint8_t>> data;
    if (b.data) {
      fbb.ForceVectorAlignment(b.data->size(), 1, 16);
      data = fbb.CreateVector(reinterpret_cast<const uint8_t*>(b.data->data()), b.data->size());
    }
    const auto start = fbb.StartTable();
    if (b.data) fbb.AddOffset(slot(0), data);
    fbb.AddElement<uint64_t>(slot(1), b.offset, 0);
    fbb.AddElement<uint64_t>(slot(2), b.size, 0);
    bufs.push_back(flatbuffers::Offset<void>(fbb.EndTable(start)));
  }
  const auto buffer_vector = fbb.CreateVector(bufs);
  const auto start = fbb.StartTable();
  fbb.AddElement<uint32_t>(slot(0), 3, 0);
  fbb.AddOffset(slot(2), graph_vector);
  fbb.AddOffset(slot(4), buffer_vector);
  fbb.Finish(flatbuffers::Offset<void>(fbb.EndTable(start)), "TFL3");
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

std::string f32(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string refusal(const std::string& bytes) {
  TempDir dir;
  const auto path = dir.write("model.tflite", bytes);
  try {
    IntegrityChecks checks;
    open_model(path, &checks);
    for (const auto& c : checks) c.run([](uint64_t) {});
  } catch (const ModelError& e) {
    EXPECT_EQ(e.format(), "TensorFlow Lite") << e.what();
    return e.reason();
  }
  ADD_FAILURE() << "accepted";
  return {};
}

const BufferDef kEmpty{};

TEST(Tflite, TensorsWithBytesAreServedInPlace) {
  TempDir dir;
  const std::string a = f32({1, 2, 3, 4, 5, 6});
  const auto path = dir.write("model.tflite", build({{{2, 3}, 0, 1, "a"},
                                                     {{2, 3}, 0, 1, "a_again"},
                                                     {{4}, 0, 0, "activation"},
                                                     {{4}, 0, 2, "runtime"},
                                                     {{}, 9, 3, "q", false, 0, {0.5F}, {-2}}},
                                                    {kEmpty, {a}, {std::string()}, {std::string("\x07", 1)}},
                                                    {{{6}, 0, 1, "shared"}}));
  const Catalog catalog = open_model(path);
  EXPECT_EQ(catalog.format, "tflite");
  ASSERT_EQ(catalog.tensors().size(), 4U);
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.name, "a");
  EXPECT_EQ(t.dtype, DType::Float32);
  EXPECT_EQ(std::vector<uint64_t>(t.shape.begin(), t.shape.end()), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(t.bytes.view(), a);
  EXPECT_EQ(catalog.tensors()[1].bytes.data(), t.bytes.data());  // one buffer, one range
  EXPECT_EQ(catalog.tensors()[2].name, "q");
  ASSERT_NE(catalog.tensors()[2].quantization, nullptr);
  EXPECT_EQ(catalog.tensors()[2].quantization->scheme, QScheme::PerTensorAffine);
  EXPECT_EQ(*catalog.tensors()[2].quantization->zero_point, -2);
  EXPECT_EQ(catalog.tensors()[3].name, "second/shared");
  EXPECT_EQ(catalog.metadata["subgraph_count"], 2);
}

TEST(Tflite, OffsetBuffersPastTheFlatbuffer) {
  // The > 2 GB layout: the buffer names an absolute range after the flatbuffer.
  std::string model = build({{{2}, 0, 1, "w"}}, {kEmpty, {std::nullopt, 1, 1}});
  // Patch the placeholder: rebuild with the real offset once the size is known.
  const uint64_t at = (model.size() + 15) / 16 * 16 + 64;  // room for the bigger numbers
  model = build({{{2}, 0, 1, "w"}}, {kEmpty, {std::nullopt, at, 8}});
  ASSERT_LE(model.size(), at);
  model.resize(at, '\0');
  model += f32({7, 8});
  TempDir dir;
  const Catalog catalog = open_model(dir.write("big.tflite", model));
  ASSERT_EQ(catalog.tensors().size(), 1U);
  EXPECT_EQ(catalog.tensors()[0].bytes.view(), f32({7, 8}));
  EXPECT_EQ(catalog.tensors()[0].source.offset, at);
}

TEST(Tflite, RefusesABufferIndexOutOfRange) {
  EXPECT_NE(refusal(build({{{1}, 0, 5, "w"}}, {kEmpty, {f32({1})}})).find("out of range"), std::string::npos);
}

TEST(Tflite, RefusesAnOffsetBufferPastTheFile) {
  EXPECT_NE(refusal(build({{{1}, 0, 1, "w"}}, {kEmpty, {std::nullopt, 1 << 20, 4}}))
                .find("past the end of the file"),
            std::string::npos);
}

TEST(Tflite, RefusesBytesThatAreNotTheShapesSize) {
  const std::string reason = refusal(build({{{3}, 0, 1, "w"}}, {kEmpty, {f32({1, 2})}}));
  EXPECT_NE(reason.find("\"w\""), std::string::npos) << reason;
  EXPECT_NE(reason.find("needs 12"), std::string::npos) << reason;
}

TEST(Tflite, RefusesAnUnknownType) {
  EXPECT_NE(refusal(build({{{1}, 99, 1, "w"}}, {kEmpty, {f32({1})}})).find("unknown tensor type 99"),
            std::string::npos);
  EXPECT_NE(refusal(build({{{1}, 13, 1, "w"}}, {kEmpty, {f32({1})}})).find("RESOURCE"), std::string::npos);
}

TEST(Tflite, RefusesNegativeAndOverflowingDimensions) {
  EXPECT_NE(refusal(build({{{-1}, 0, 1, "w"}}, {kEmpty, {f32({1})}})).find("negative dimension"),
            std::string::npos);
  EXPECT_NE(
      refusal(build({{{1 << 30, 1 << 30, 1 << 30}, 0, 1, "w"}}, {kEmpty, {f32({1})}})).find("overflows"),
      std::string::npos);
}

TEST(Tflite, RefusesAConstantThatIsAVariableOrExternal) {
  EXPECT_NE(refusal(build({{{1}, 0, 1, "w", true}}, {kEmpty, {f32({1})}})).find("variable"),
            std::string::npos);
  EXPECT_NE(refusal(build({{{1}, 0, 1, "w", false, 1}}, {kEmpty, {f32({1})}})).find("external"),
            std::string::npos);
}

TEST(Tflite, RefusesABadVtableAndTruncation) {
  std::string model = build({{{1}, 0, 1, "w"}}, {kEmpty, {f32({1})}});
  uint32_t root = 0;
  std::memcpy(&root, model.data(), 4);
  std::string bad = model;
  const int32_t far = 0x7fffffff;
  std::memcpy(bad.data() + root, &far, 4);
  EXPECT_NE(refusal(bad).find("vtable"), std::string::npos);
  EXPECT_FALSE(refusal(model.substr(0, root + 2)).empty());
  std::string past = model;
  const uint32_t huge = 0x7ffffff0;
  std::memcpy(past.data(), &huge, 4);
  EXPECT_NE(refusal(past).find("past the flatbuffer"), std::string::npos);
}

TEST(Tflite, RefusesAVectorLengthPastTheFile) {
  const std::string marker = "\xAB\xCD\xEF\x12";
  std::string model = build({{{1}, 3, 1, "w"}}, {kEmpty, {marker}});
  const size_t at = model.find(marker);
  ASSERT_NE(at, std::string::npos);
  const uint32_t length = 0x80000000U;
  std::memcpy(model.data() + at - 4, &length, 4);
  EXPECT_NE(refusal(model).find("runs past the flatbuffer"), std::string::npos);
}

TEST(Tflite, StringTensorsAreJsonLines) {
  // Two strings "ab", "c": N, N+1 offsets, bytes.
  std::string buffer;
  for (const uint32_t v : {2U, 16U, 18U, 19U}) buffer.append(reinterpret_cast<const char*>(&v), 4);
  buffer += "abc";
  TempDir dir;
  const Catalog catalog = open_model(dir.write("s.tflite", build({{{2}, 5, 1, "s"}}, {kEmpty, {buffer}})));
  ASSERT_EQ(catalog.tensors().size(), 1U);
  EXPECT_EQ(catalog.tensors()[0].dtype, DType::String);
  EXPECT_EQ(catalog.tensors()[0].bytes.view(), "\"ab\"\n\"c\"\n");
  std::string broken = buffer;
  broken[8] = 30;  // offset 1 past the buffer
  EXPECT_NE(refusal(build({{{2}, 5, 1, "s"}}, {kEmpty, {broken}})).find("string offset"), std::string::npos);
}

TEST(Tflite, PackedInt4TakesHalfAByteAnElement) {
  TempDir dir;
  const Catalog catalog =
      open_model(dir.write("i4.tflite", build({{{3}, 17, 1, "w"}}, {kEmpty, {std::string("\x21\x03", 2)}})));
  ASSERT_EQ(catalog.tensors().size(), 1U);
  EXPECT_EQ(catalog.tensors()[0].dtype, DType::Int4);
  EXPECT_EQ(catalog.tensors()[0].bytes.size(), 2U);
  EXPECT_NE(refusal(build({{{3}, 17, 1, "w"}}, {kEmpty, {std::string("\x21\x03\x00", 3)}})).find("needs 2"),
            std::string::npos);
}

TEST(Tflite, ProbeNeedsTheIdentifier) {
  const std::string model = build({}, {kEmpty});
  EXPECT_TRUE(tflite::probe_file(std::as_bytes(std::span(model.data(), model.size()))));
  std::string other = model;
  other[4] = 'X';
  EXPECT_FALSE(tflite::probe_file(std::as_bytes(std::span(other.data(), other.size()))));
}

}  // namespace
}  // namespace modelfs
