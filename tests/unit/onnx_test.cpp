// SPDX-License-Identifier: Apache-2.0
// The ONNX reader on hand-made models: storage forms served in place or
// decoded, detection, and hostile inputs (external locations escaping the
// model's folder, bad lengths, bad types, deep nesting), each refused with
// a ModelError of format "onnx".
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "formats/onnx.hpp"
#include "io/protobuf_wire.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using test::pb_bytes;
using test::pb_fixed32;
using test::pb_key;
using test::pb_uint;
using test::pb_varint;
using test::TempDir;

std::string dims_of(std::initializer_list<uint64_t> dims) {
  std::string out;
  for (uint64_t d : dims) out += pb_uint(1, d);
  return out;
}

// TensorProto: dims, data_type, name, then whatever data fields follow.
std::string tensor(const std::string& name, uint64_t data_type, std::initializer_list<uint64_t> dims,
                   const std::string& data) {
  return dims_of(dims) + pb_uint(2, data_type) + pb_bytes(8, name) + data;
}

std::string entry(const std::string& key, const std::string& value) {
  return pb_bytes(1, key) + pb_bytes(2, value);
}

std::string external_tensor(const std::string& name, const std::string& location, const std::string& offset,
                            const std::string& length) {
  std::string data = pb_bytes(13, entry("location", location));
  if (!offset.empty()) data += pb_bytes(13, entry("offset", offset));
  if (!length.empty()) data += pb_bytes(13, entry("length", length));
  return tensor(name, 1, {4}, data + pb_uint(14, 1));
}

// ModelProto with ir_version 8, one opset, and a graph of these fields.
std::string model(const std::string& graph_fields) {
  return pb_uint(1, 8) + pb_bytes(2, "unit-test") + pb_bytes(7, pb_bytes(2, "g") + graph_fields) +
         pb_bytes(8, pb_bytes(1, "") + pb_uint(2, 13));
}

std::string initializer(const std::string& tensor_bytes) { return pb_bytes(5, tensor_bytes); }

std::string floats(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), 4);
  return out;
}

Catalog open_bytes(const TempDir& dir, const std::string& bytes, const std::string& name = "model.onnx") {
  return open_model(dir.write(name, bytes));
}

ModelError refusal(const TempDir& dir, const std::string& bytes, const std::string& name = "model.onnx") {
  try {
    open_bytes(dir, bytes, name);
  } catch (const ModelError& e) {
    return e;
  }
  ADD_FAILURE() << "model was accepted";
  return ModelError("", "", std::nullopt, "");
}

void expect_refused(const TempDir& dir, const std::string& bytes, const std::string& reason) {
  auto e = refusal(dir, bytes);
  EXPECT_EQ(e.format(), "onnx") << e.what();
  EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
}

TEST(Onnx, RawDataServedInPlace) {
  TempDir dir;
  const std::string raw = floats({1, 2, 3, 4});
  const std::string bytes = model(initializer(tensor("layer.w", 1, {2, 2}, pb_bytes(9, raw))));
  auto catalog = open_bytes(dir, bytes);
  ASSERT_EQ(catalog.format, "onnx");
  ASSERT_EQ(catalog.tensors().size(), 1u);
  const auto& t = catalog.tensors()[0];
  EXPECT_EQ(t.name, "layer.w");
  EXPECT_EQ(t.dtype, DType::Float32);
  EXPECT_EQ(test::vec(t.shape), (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(t.bytes.view(), raw);
  ASSERT_NE(t.bytes.mapped_file(), nullptr);
  ASSERT_TRUE(t.source.offset);
  EXPECT_EQ(bytes.substr(*t.source.offset, 16), raw);
  EXPECT_EQ(t.extras()["storage"], "raw_data");
  ASSERT_EQ(catalog.documents.size(), 1u);
  EXPECT_EQ(catalog.documents[0].path, "graph.json");
  EXPECT_EQ(catalog.metadata["ir_version"], 8);
  EXPECT_EQ(catalog.metadata["producer_name"], "unit-test");
}

TEST(Onnx, PackedFloatDataInPlaceVarintsDecoded) {
  TempDir dir;
  const std::string int8s = pb_varint(UINT64_MAX) + pb_varint(5) + pb_varint(0x80);  // -1, 5, -128
  const std::string bytes =
      model(initializer(tensor("f", 1, {2}, pb_bytes(4, floats({1.5f, -2.0f})))) +
            initializer(tensor("i8", 3, {3}, pb_bytes(5, int8s))) +
            initializer(tensor("i64", 7, {2}, pb_uint(7, UINT64_MAX) + pb_uint(7, 2))) +
            initializer(tensor("u32", 12, {1}, pb_bytes(11, pb_varint(0xFFFFFFFF)))) +
            initializer(tensor("unpacked", 1, {2}, pb_fixed32(4, 0x3F800000) + pb_fixed32(4, 0x40000000))));
  auto catalog = open_bytes(dir, bytes);
  ASSERT_EQ(catalog.tensors().size(), 5u);
  EXPECT_NE(catalog.tensors()[0].bytes.mapped_file(), nullptr);
  EXPECT_EQ(catalog.tensors()[0].bytes.view(), floats({1.5f, -2.0f}));
  EXPECT_EQ(catalog.tensors()[1].bytes.mapped_file(), nullptr);
  EXPECT_EQ(catalog.tensors()[1].bytes.view(), std::string("\xff\x05\x80", 3));
  EXPECT_FALSE(catalog.tensors()[1].source.offset);
  EXPECT_EQ(catalog.tensors()[2].bytes.view(),
            std::string("\xff\xff\xff\xff\xff\xff\xff\xff\x02\0\0\0\0\0\0\0", 16));
  EXPECT_EQ(catalog.tensors()[3].bytes.view(), std::string("\xff\xff\xff\xff", 4));
  EXPECT_EQ(catalog.tensors()[4].bytes.view(), floats({1.0f, 2.0f}));
}

TEST(Onnx, ExternalFilesMappedOnceAndShared) {
  TempDir dir;
  dir.write("weights.bin", std::string(64, 'w'));
  const std::string bytes = model(initializer(external_tensor("a", "weights.bin", "0", "16")) +
                                  initializer(external_tensor("b", "weights.bin", "48", "")) +
                                  initializer(external_tensor("c", "./weights.bin", "32", "16")));
  auto catalog = open_bytes(dir, bytes);
  ASSERT_EQ(catalog.tensors().size(), 3u);
  EXPECT_EQ(catalog.tensors()[0].bytes.mapped_file(), catalog.tensors()[1].bytes.mapped_file());
  EXPECT_EQ(catalog.tensors()[0].bytes.mapped_file(), catalog.tensors()[2].bytes.mapped_file());
  EXPECT_EQ(catalog.tensors()[1].source.file, "weights.bin");
  EXPECT_EQ(catalog.tensors()[1].source.offset, 48u);
  EXPECT_EQ(catalog.files, (std::vector<std::string>{"model.onnx", "weights.bin"}));
}

TEST(Onnx, HostileExternalLocationsRefused) {
  TempDir dir;
  dir.write("outside/secret.bin", std::string(64, 's'));
  dir.write("model/short.bin", std::string(8, 's'));
  dir.write("model/ok.bin", std::string(16, 's'));
  std::filesystem::create_symlink(dir.path() / "outside" / "secret.bin", dir.path() / "model" / "link.bin");
  std::filesystem::create_symlink(dir.path() / "outside", dir.path() / "model" / "linkdir");
  std::filesystem::create_directory(dir.path() / "model" / "folder.bin");
  const std::string secret = (dir.path() / "outside" / "secret.bin").string();
  struct Case {
    std::string location, offset, length, reason;
  };
  const std::vector<Case> cases = {
      {secret, "0", "16", "is absolute"},
      {"../outside/secret.bin", "0", "16", "contains \"..\""},
      {"sub/../../outside/secret.bin", "0", "16", "contains \"..\""},
      {"link.bin", "0", "16", "outside the model's folder"},
      {"linkdir/secret.bin", "0", "16", "outside the model's folder"},
      {"missing.bin", "0", "16", "cannot be opened"},
      {"folder.bin", "0", "16", "not a regular file"},
      {"", "0", "16", "is empty"},
      {"#in-memory", "0", "16", "placeholder"},
      {"short.bin", "0", "16", "runs past the end"},
      {"short.bin", "9", "", "past the end"},
      {"ok.bin", "8", "16", "runs past the end"},
      {"ok.bin", "0", "18446744073709551615", "runs past the end"},
      {"ok.bin", "-1", "16", "not a non-negative integer"},
      {"ok.bin", "0x10", "16", "not a non-negative integer"},
      {"ok.bin", "0", "99999999999999999999999", "not a non-negative integer"},
      {"ok.bin", "4", "", "holds 12 bytes"},
  };
  for (const auto& c : cases) {
    const std::string bytes = model(initializer(external_tensor("w", c.location, c.offset, c.length)));
    auto e = refusal(dir, bytes, "model/hostile.onnx");
    EXPECT_EQ(e.format(), "onnx") << c.location;
    EXPECT_NE(e.reason().find(c.reason), std::string::npos) << c.location << ": " << e.what();
  }
  // The good case beside them, so the refusals are not for another reason.
  EXPECT_EQ(open_bytes(dir, model(initializer(external_tensor("w", "ok.bin", "0", "16"))), "model/good.onnx")
                .tensors()
                .size(),
            1u);
}

TEST(Onnx, BadTensorsRefused) {
  TempDir dir;
  expect_refused(dir, model(initializer(tensor("w", 1, {3}, pb_bytes(9, floats({1, 2}))))),
                 "raw_data holds 8 bytes but shape and data_type need 12");
  expect_refused(dir, model(initializer(tensor("w", 99, {1}, pb_bytes(9, "x")))), "unknown data_type 99");
  expect_refused(dir, model(initializer(tensor("w", 0, {1}, pb_bytes(9, "x")))), "unknown data_type 0");
  expect_refused(dir, model(initializer(dims_of({1}) + pb_bytes(9, "x"))), "no data_type");
  expect_refused(dir, model(initializer(tensor("w", 1, {UINT64_MAX}, ""))), "negative dimension");
  expect_refused(dir, model(initializer(tensor("w", 1, {1ull << 40, 1ull << 40}, ""))), "overflows");
  expect_refused(dir, model(initializer(tensor("w", 3, {3}, pb_bytes(5, pb_varint(1) + pb_varint(2))))),
                 "int32_data holds 2 entries");
  expect_refused(dir, model(initializer(tensor("w", 3, {1 << 20}, pb_bytes(5, pb_varint(1))))),
                 "int32_data holds 1 entries");
  expect_refused(dir, model(initializer(tensor("w", 7, {1}, pb_bytes(4, floats({1}))))),
                 "cannot store its data in float_data");
  expect_refused(dir,
                 model(initializer(tensor("w", 1, {1}, pb_bytes(9, floats({1})) + pb_bytes(4, floats({1}))))),
                 "data is stored in both");
  expect_refused(dir, model(initializer(tensor("w", 1, {2}, ""))), "has 2 elements but no data");
  expect_refused(dir,
                 model(initializer(tensor("w", 1, {1}, pb_bytes(3, pb_uint(1, 0)) + pb_bytes(9, "abcd")))),
                 "segment");
  expect_refused(dir, model(initializer(tensor("w", 1, {1}, pb_uint(9, 4)))), "should hold a string");
  expect_refused(dir, model(initializer(tensor("w", 1, {3}, pb_bytes(4, floats({1})) + pb_fixed32(4, 0)))),
                 "float_data holds 2 entries but shape and data_type need 3");
  expect_refused(dir, model(initializer(tensor("w", 1, {1}, pb_bytes(4, "abc")))), "is not whole elements");
  expect_refused(dir, model(initializer(tensor("w", 8, {1}, pb_bytes(9, "abc")))), "STRING");
  expect_refused(dir, pb_uint(1, 8) + pb_bytes(8, pb_uint(2, 13)), "no graph");
}

// STRING tensors are served as JSON Lines text, one JSON string per element
// in C order, bytes that are not UTF-8 as \udcXX.
TEST(Onnx, StringTensorsAreJsonLines) {
  TempDir dir;
  const std::string strings = pb_bytes(6, "cat") + pb_bytes(6, "") + pb_bytes(6, "caf\xc3\xa9") +
                              pb_bytes(6, "q\"\\\n\x01") + pb_bytes(6, "\xff\xc3") +
                              pb_bytes(6, "\xed\xb2\x80");
  auto catalog =
      open_bytes(dir, model(initializer(tensor("labels", 8, {2, 3}, strings)) +
                            initializer(tensor("empty", 8, {0}, "")) +
                            initializer(tensor("blanks", 8, {2}, pb_bytes(6, "") + pb_bytes(6, "")))));
  ASSERT_EQ(catalog.tensors().size(), 3u);
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.name, "labels");
  EXPECT_EQ(t.dtype, DType::String);
  EXPECT_EQ(t.dtype_name(), "string");
  EXPECT_EQ(test::vec(t.shape), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(test::vec(t.strides), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(t.bytes.view(),
            "\"cat\"\n\"\"\n\"caf\xc3\xa9\"\n\"q\\\"\\\\\\n\\u0001\"\n\"\\udcff\\udcc3\"\n"
            "\"\\udced\\udcb2\\udc80\"\n");
  EXPECT_FALSE(t.source.offset);
  EXPECT_EQ(t.extras()["onnx_data_type"], "STRING");
  EXPECT_EQ(t.extras()["storage"], "string_data");
  EXPECT_EQ(catalog.tensors()[1].bytes.size(), 0u);
  EXPECT_EQ(catalog.tensors()[2].bytes.view(), "\"\"\n\"\"\n");
  EXPECT_FALSE(catalog.metadata.contains("string_tensors"));

  expect_refused(dir, model(initializer(tensor("s", 8, {3}, pb_bytes(6, "a") + pb_bytes(6, "b")))),
                 "string_data holds 2 entries but the shape needs 3");
  expect_refused(dir, model(initializer(tensor("s", 8, {1}, pb_bytes(6, "a") + pb_bytes(6, "b")))),
                 "string_data holds 2 or more entries");
  expect_refused(dir, model(initializer(tensor("s", 8, {2}, ""))), "string_data holds 0 entries");
  expect_refused(dir, model(initializer(tensor("s", 8, {1}, pb_uint(6, 1)))), "string_data has wire type 0");
  expect_refused(dir, model(initializer(tensor("s", 8, {1}, pb_bytes(6, "a") + pb_bytes(4, floats({1}))))),
                 "data is stored in both");
}

TEST(Onnx, TruncatedModelsRefused) {
  TempDir dir;
  const std::string good = model(initializer(tensor("w", 1, {4}, pb_bytes(9, floats({1, 2, 3, 4})))));
  // Every cut that still looks like ONNX to detection is refused as ONNX.
  for (size_t cut = 4; cut < good.size(); ++cut) {
    const std::string bytes = good.substr(0, cut);
    try {
      open_bytes(dir, bytes);
    } catch (const ModelError& e) {
      EXPECT_TRUE(e.format() == "onnx" || e.format() == "unknown") << cut << ": " << e.what();
      continue;
    }
    // A cut exactly between top-level fields is a smaller valid model.
  }
}

// Graph whose only node is an If whose then_branch holds the next level.
std::string nested_if(int depth) {
  std::string graph = initializer(tensor("leaf", 1, {1}, pb_bytes(9, floats({7}))));
  for (int i = 0; i < depth; ++i) {
    const std::string attribute = pb_bytes(1, "then_branch") + pb_uint(20, 5) + pb_bytes(6, graph);
    graph = pb_bytes(1, pb_bytes(1, "c") + pb_bytes(2, "o") + pb_bytes(4, "If") + pb_bytes(5, attribute));
  }
  return graph;
}

TEST(Onnx, SubgraphsReadAndDepthBounded) {
  TempDir dir;
  auto catalog = open_bytes(dir, model(nested_if(10)));
  ASSERT_EQ(catalog.tensors().size(), 1u);
  EXPECT_EQ(catalog.tensors()[0].name, "leaf");
  EXPECT_EQ(catalog.tensors()[0].extras()["graph"].get<std::string>().substr(0, 21), "main/o/then_branch/o/");
  expect_refused(dir, model(nested_if(protobuf::kMaxMessageDepth)), "nest deeper than");
}

TEST(Onnx, AttributeTensorsNamedByNodeAndAttribute) {
  TempDir dir;
  const std::string value = tensor("stored", 6, {1}, pb_bytes(9, std::string("\x07\0\0\0", 4)));
  const std::string constant = pb_bytes(2, "c_out") + pb_bytes(4, "Constant") +
                               pb_bytes(5, pb_bytes(1, "value") + pb_uint(20, 4) + pb_bytes(5, value));
  const std::string fill = pb_bytes(1, "shape") + pb_bytes(2, "filled") + pb_bytes(4, "ConstantOfShape") +
                           pb_bytes(5, pb_bytes(1, "value") + pb_bytes(5, value));  // type left UNDEFINED
  const std::string list =
      pb_bytes(3, "n") + pb_bytes(4, "Custom") +
      pb_bytes(5, pb_bytes(1, "ts") + pb_uint(20, 9) + pb_bytes(10, value) + pb_bytes(10, value));
  auto catalog = open_bytes(dir, model(pb_bytes(1, constant) + pb_bytes(1, fill) + pb_bytes(1, list)));
  std::vector<std::string> names;
  for (const auto& t : catalog.tensors()) names.emplace_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"c_out", "filled/value", "n/ts/0", "n/ts/1"}));
  EXPECT_EQ(catalog.tensors()[0].extras()["kind"], "constant");
  EXPECT_EQ(catalog.tensors()[1].extras()["kind"], "attribute");
  EXPECT_EQ(catalog.tensors()[0].extras()["onnx_name"], "stored");
}

// Constant's value_float(s), value_int(s), value_string(s): float32, int64,
// string tensors named by the first output, 0-D or 1-D; packed and unpacked.
TEST(Onnx, ConstantValueFormsAreTensors) {
  auto constant = [](const std::string& output, const std::string& attribute) {
    return pb_bytes(1, pb_bytes(2, output) + pb_bytes(4, "Constant") + pb_bytes(5, attribute));
  };
  auto attr = [](const std::string& name, uint64_t type, const std::string& fields) {
    return pb_bytes(1, name) + pb_uint(20, type) + fields;
  };
  auto le64 = [](int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
  TempDir dir;
  const std::string graph =
      constant("f", attr("value_float", 1, pb_fixed32(2, 0x3fc00000))) +  // 1.5
      constant("fs", attr("value_floats", 6, pb_bytes(7, floats({1, 2})) + pb_fixed32(7, 0x40400000))) +
      constant("i", attr("value_int", 2, pb_uint(3, UINT64_MAX))) +  // -1
      constant("is",
               attr("value_ints", 7, pb_bytes(8, pb_varint(5) + pb_varint(UINT64_MAX - 1)) + pb_uint(8, 9))) +
      constant("s", attr("value_string", 3, pb_bytes(4, "caf\xc3\xa9"))) +
      constant("ss", attr("value_strings", 8, pb_bytes(9, "a") + pb_bytes(9, "\xff"))) +
      constant("empty", attr("value_floats", 7, "")) +  // onnx's helper marks an empty list INTS
      constant("i0", attr("value_int", 2, ""));         // absent: proto's default, 0
  auto catalog = open_bytes(dir, model(graph));
  ASSERT_EQ(catalog.tensors().size(), 8u);
  auto expect = [&](size_t i, const std::string& name, DType dtype, std::vector<uint64_t> shape,
                    const std::string& bytes) {
    ASSERT_LT(i, catalog.tensors().size());
    const Tensor& t = catalog.tensors()[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(t.name, name);
    EXPECT_EQ(t.dtype, dtype);
    EXPECT_EQ(test::vec(t.shape), shape);
    EXPECT_EQ(t.strides.size(), shape.size());
    EXPECT_EQ(t.bytes.view(), bytes);
    EXPECT_EQ(t.extras()["kind"], "constant");
    EXPECT_EQ(t.extras()["graph"], "main");
  };
  expect(0, "f", DType::Float32, {}, floats({1.5}));
  expect(1, "fs", DType::Float32, {3}, floats({1, 2, 3}));
  expect(2, "i", DType::Int64, {}, le64(-1));
  expect(3, "is", DType::Int64, {3}, le64(5) + le64(-2) + le64(9));
  expect(4, "s", DType::String, {}, "\"caf\xc3\xa9\"\n");
  expect(5, "ss", DType::String, {2}, "\"a\"\n\"\\udcff\"\n");
  expect(6, "empty", DType::Float32, {0}, "");
  expect(7, "i0", DType::Int64, {}, le64(0));
  EXPECT_EQ(catalog.tensors()[1].extras()["storage"], "value_floats");
  EXPECT_EQ(catalog.tensors()[1].extras()["onnx_data_type"], "FLOAT");

  expect_refused(dir, model(constant("x", attr("value_floats", 6, pb_bytes(7, "abc")))),
                 "packed floats of odd length");
  expect_refused(dir, model(constant("x", attr("value_float", 1, pb_uint(2, 1)))), "f is not a float");
  expect_refused(dir, model(constant("x", attr("value_ints", 7, pb_fixed32(8, 1)))), "ints has wire type 5");
  expect_refused(dir, model(constant("x", attr("value_ints", 7, pb_bytes(8, "\x80")))), "");
  expect_refused(dir, model(constant("x", attr("value_strings", 8, pb_uint(9, 1)))), "should hold a string");
}

TEST(Onnx, Detection) {
  auto probe = [](const std::string& bytes) {
    return onnx::probe_file({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()});
  };
  const std::string good = model(initializer(tensor("w", 1, {1}, pb_bytes(9, floats({1})))));
  EXPECT_TRUE(probe(good));
  EXPECT_TRUE(probe(good.substr(0, 6)));  // the head of a larger file
  EXPECT_FALSE(probe(pb_uint(1, 8)));     // ir_version alone
  EXPECT_FALSE(probe(pb_uint(1, 5000) + pb_bytes(7, "")));
  EXPECT_FALSE(probe(pb_bytes(7, "") + pb_uint(1, 8)));  // ir_version not first
  EXPECT_FALSE(probe(pb_uint(1, 8) + pb_uint(7, 1)));    // graph with the wrong wire type
  EXPECT_FALSE(probe(pb_uint(1, 8) + pb_uint(99, 1)));   // not a ModelProto field
  EXPECT_FALSE(probe("\x08\x01hello, world"));
  EXPECT_FALSE(probe(test::safetensors_bytes(std::string(256, ' ') + "{}", "")));
  // Other formats still reach their readers or their "not supported" message.
  TempDir dir;
  auto text = dir.write("notes.onnx", "\x08\x01 just some text\n");
  try {
    open_model(text);
    ADD_FAILURE() << "text accepted";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.format(), "unknown");
  }
  auto gguf = dir.write("m.onnx", std::string("GGUF\x03\0\0\0", 8));
  try {
    open_model(gguf);
    ADD_FAILURE() << "GGUF accepted";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.format(), "gguf");  // the GGUF reader's own refusal of a truncated file
  }
}

}  // namespace
}  // namespace modelfs
