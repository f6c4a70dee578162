// SPDX-License-Identifier: Apache-2.0
// The Core ML reader: the probe told from ONNX by field numbers, neural
// network weights shaped by their layers and served in place, ML-program
// consts from immediates and weight.bin blobs, and the refusals (no
// specificationVersion, an unread model type, a count that does not fill
// the shape, a blob record that lies, a Manifest.json without its root).
#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <string>

#include "formats/coreml.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"
#include "test_refusal.hpp"

namespace modelfs {
namespace {

using test::TempDir;

std::string varint(uint64_t n) {
  std::string out;
  do {
    const auto c = static_cast<char>(n & 0x7F);
    n >>= 7;
    out += static_cast<char>(c | (n ? 0x80 : 0));
  } while (n);
  return out;
}
std::string vfield(uint32_t number, uint64_t value) { return varint(uint64_t{number} << 3) + varint(value); }
std::string lfield(uint32_t number, const std::string& payload) {
  return varint(uint64_t{number} << 3 | 2) + varint(payload.size()) + payload;
}
std::string floats(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), 4);
  return out;
}

std::string description() { return lfield(1, lfield(1, "x")) + lfield(10, lfield(1, "y")); }

// One innerProduct layer "fc" [c_out, c_in] with floatValue `weights`.
std::string nn_model(uint64_t c_out, uint64_t c_in, const std::string& weights, uint32_t model_field = 500) {
  const std::string params = vfield(1, c_in) + vfield(2, c_out) + lfield(20, lfield(1, weights));
  const std::string layer = lfield(1, "fc") + lfield(140, params);
  return vfield(1, 4) + lfield(2, description()) + lfield(model_field, lfield(1, layer));
}

std::string tensor_type(uint64_t code, std::initializer_list<uint64_t> shape) {
  std::string dims;
  for (uint64_t d : shape) dims += lfield(3, lfield(1, vfield(1, d)));
  return lfield(1, vfield(1, code) + vfield(2, shape.size()) + dims);
}

// A program with one float32 const "w" of shape [2] in a blob at `offset`.
std::string program_model(uint64_t offset) {
  const std::string val = lfield(2, tensor_type(11, {2})) +
                          lfield(5, lfield(1, "@model_path/weights/weight.bin") + vfield(2, offset));
  const std::string op =
      lfield(1, "const") + lfield(3, lfield(1, "w")) + lfield(5, lfield(1, "val") + lfield(2, val));
  const std::string block = lfield(3, op);
  const std::string function = lfield(2, "CoreML5") + lfield(3, lfield(1, "CoreML5") + lfield(2, block));
  return vfield(1, 6) + lfield(2, description()) +
         lfield(502, lfield(2, lfield(1, "main") + lfield(2, function)));
}

std::string weight_bin(uint32_t sentinel, uint32_t dtype, uint64_t size) {
  std::string out(64, '\0');
  out[4] = 2;
  std::string record(64, '\0');
  std::memcpy(record.data(), &sentinel, 4);
  std::memcpy(record.data() + 4, &dtype, 4);
  std::memcpy(record.data() + 8, &size, 8);
  const uint64_t data = 128;
  std::memcpy(record.data() + 16, &data, 8);
  return out + record + floats({1.5f, -2.0f});
}

std::span<const std::byte> bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::string refusal(const std::filesystem::path& model) { return test::refusal_message(model); }

TEST(CoreMl, ProbeTellsCoreMlFromOnnx) {
  EXPECT_TRUE(coreml::probe_file(bytes(nn_model(1, 2, floats({1, 2})))));
  // ONNX: ir_version, producer_name (text), graph (field 7).
  const std::string onnx = vfield(1, 8) + lfield(2, "pytorch") + lfield(7, lfield(1, "n"));
  EXPECT_FALSE(coreml::probe_file(bytes(onnx)));
  EXPECT_FALSE(coreml::probe_file(bytes(vfield(1, 8) + lfield(2, "\nx") + lfield(7, "g"))));
  EXPECT_FALSE(coreml::probe_file(bytes(vfield(1, 8))));
}

TEST(CoreMl, InnerProductWeightsAreServedInPlaceShapedByTheLayer) {
  TempDir dir;
  const std::string weights = floats({1, 2, 3, 4, 5, 6});
  const std::string file = nn_model(2, 3, weights);
  const Catalog catalog = open_model(dir.write("m.mlmodel", file));
  EXPECT_EQ(catalog.format, "coreml");
  ASSERT_EQ(catalog.tensors().size(), 1u);
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.name, "fc.weights");
  EXPECT_EQ(std::vector<uint64_t>(t.shape.begin(), t.shape.end()), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(t.bytes.view(), weights);
  EXPECT_EQ(t.source.offset, file.find(weights));
}

TEST(CoreMl, RefusesWhatItCannotReadExactly) {
  TempDir dir;
  EXPECT_NE(refusal(dir.write("short.mlmodel", nn_model(2, 3, floats({1, 2})))).find("fc.weights"),
            std::string::npos);
  EXPECT_NE(refusal(dir.write("tree.mlmodel", nn_model(2, 3, floats({1}), 300))).find("field 300"),
            std::string::npos);
  const std::string no_version = lfield(2, description()) + lfield(502, "");
  EXPECT_NE(refusal(dir.write("v2.mlmodel", no_version)).find("specificationVersion"), std::string::npos);
}

TEST(CoreMl, BlobConstsAreCheckedAgainstTheirRecords) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "weights");
  dir.write("weights/weight.bin", weight_bin(0xDEADBEEF, 2, 8));
  const Catalog catalog = open_model(dir.write("model.mlmodel", program_model(64)));
  ASSERT_EQ(catalog.tensors().size(), 1u);
  EXPECT_EQ(catalog.tensors()[0].bytes.view(), floats({1.5f, -2.0f}));
  EXPECT_EQ(catalog.tensors()[0].source.offset, 128u);

  dir.write("weights/weight.bin", weight_bin(0xFEEDBEEF, 2, 8));
  EXPECT_NE(refusal(dir.path() / "model.mlmodel").find("sentinel"), std::string::npos);
  dir.write("weights/weight.bin", weight_bin(0xDEADBEEF, 1, 8));
  EXPECT_NE(refusal(dir.path() / "model.mlmodel").find("data type"), std::string::npos);
  dir.write("weights/weight.bin", weight_bin(0xDEADBEEF, 2, 16));
  EXPECT_NE(refusal(dir.path() / "model.mlmodel").find("16 bytes"), std::string::npos);
  dir.write("model.mlmodel", program_model(4096));
  dir.write("weights/weight.bin", weight_bin(0xDEADBEEF, 2, 8));
  EXPECT_NE(refusal(dir.path() / "model.mlmodel").find("past the end"), std::string::npos);
}

TEST(CoreMl, PackageManifestMustNameItsRootModel) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "Data");
  dir.write("Manifest.json", R"({"rootModelIdentifier": "A", "itemInfoEntries": {}})");
  EXPECT_NE(refusal(dir.path()).find("root model"), std::string::npos);
  dir.write("Manifest.json", R"({"rootModelIdentifier": "A", "itemInfoEntries": {"A": {"path": "../x"}}})");
  EXPECT_NE(refusal(dir.path()).find("Data/"), std::string::npos);
}

}  // namespace
}  // namespace modelfs
