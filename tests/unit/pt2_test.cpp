// SPDX-License-Identifier: Apache-2.0
// The PT2 reader on hand-made layered archives: a minimal one served in
// place, then each way a payload config can be wrong.
#include <gtest/gtest.h>

#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using namespace std::string_literals;
using test::TempDir;
using test::zip_bytes;

const std::string kFloats = "\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40"s;  // 1 2 3 4

std::string entry(const std::string& dtype = "7",
                  const std::string& sizes = R"([{"as_int": 2}, {"as_int": 2}])",
                  const std::string& strides = R"([{"as_int": 2}, {"as_int": 1}])",
                  const std::string& offset = R"({"as_int": 0})", const std::string& path = "weight_0") {
  return R"({"config": {"w": {"path_name": ")" + path + R"(", "is_param": true, "use_pickle": false,
      "tensor_meta": {"dtype": )" +
         dtype + R"(, "sizes": )" + sizes + R"(, "requires_grad": false,
      "device": {"type": "cpu", "index": null}, "strides": )" +
         strides + R"(, "storage_offset": )" + offset + R"(, "layout": 7}}}})";
}

std::string layered(const std::string& config, const std::string& payload = kFloats) {
  return zip_bytes({{"m/data/weights/weight_0", payload, 0},
                    {"m/data/weights/model_weights_config.json", config, 0},
                    {"m/models/model.json", R"({"schema_version": {"major": 8, "minor": 12}})", 0},
                    {"m/archive_format", "pt2", 0},
                    {"m/archive_version", "0", 0}});
}

std::string refusal(const std::string& bytes) {
  TempDir dir;
  try {
    open_model(dir.write("model.pt2", bytes));
  } catch (const ModelError& e) {
    return e.format() + ": " + e.reason();
  }
  return "<accepted>";
}

TEST(Pt2, RawPayloadIsServedInPlace) {
  TempDir dir;
  const std::string bytes = layered(entry());
  IntegrityChecks checks;
  auto catalog = open_model(dir.write("model.pt2", bytes), &checks);
  EXPECT_EQ(catalog.format, "pt2");
  ASSERT_EQ(catalog.tensors().size(), 1u);
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.name, "w");
  EXPECT_EQ(test::vec(t.shape), (std::vector<uint64_t>{2, 2}));
  EXPECT_NE(t.bytes.mapped_file(), nullptr);
  ASSERT_TRUE(t.source.offset);
  EXPECT_EQ(bytes.substr(*t.source.offset, 16), kFloats);
  EXPECT_EQ(t.extras()["kind"], "parameter");
  EXPECT_EQ(catalog.metadata["models"]["model"]["schema_version"], "8.12");
  EXPECT_TRUE(catalog.tensors_may_share_bytes);
  EXPECT_FALSE(checks.empty());  // asked for; a mount asks for none
}

TEST(Pt2, ViewWithOffsetAndStridesCoversItsSpan) {
  TempDir dir;
  auto catalog = open_model(dir.write(
      "model.pt2", layered(entry("7", R"([{"as_int": 2}])", R"([{"as_int": 2}])", R"({"as_int": 1})"))));
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.bytes.view(), kFloats.substr(4, 12));
  EXPECT_EQ(test::vec(t.strides), (std::vector<int64_t>{2}));
}

TEST(Pt2, EveryDtypeCodeHasItsCanonicalName) {
  const std::vector<std::pair<int, std::string>> codes = {{1, "uint8"},
                                                          {2, "int8"},
                                                          {3, "int16"},
                                                          {4, "int32"},
                                                          {5, "int64"},
                                                          {6, "float16"},
                                                          {7, "float32"},
                                                          {8, "float64"},
                                                          {9, "uint32"},
                                                          {10, "complex64"},
                                                          {11, "complex128"},
                                                          {12, "bool"},
                                                          {13, "bfloat16"},
                                                          {28, "uint16"},
                                                          {29, "float8_e4m3fn"},
                                                          {30, "float8_e5m2"},
                                                          {31, "float8_e4m3fnuz"},
                                                          {32, "float8_e5m2fnuz"},
                                                          {33, "float8_e8m0fnu"},
                                                          {34, "uint32"},
                                                          {35, "uint64"}};
  TempDir dir;
  for (const auto& [code, name] : codes) {
    auto catalog = open_model(dir.write(
        "model.pt2", layered(entry(std::to_string(code), R"([{"as_int": 1}])", R"([{"as_int": 1}])"),
                             std::string(16, '\0'))));
    EXPECT_EQ(catalog.tensors()[0].dtype_name(), name) << code;
  }
  auto complex32 = open_model(dir.write("model.pt2", layered(entry("9", "[]", "[]"))));
  EXPECT_EQ(complex32.tensors()[0].extras()["torch_dtype"], "complex32");
}

TEST(Pt2, BadPayloadConfigsAreRefusedWithTheirReason) {
  auto expect = [](const std::string& bytes, const std::string& reason) {
    const std::string got = refusal(bytes);
    EXPECT_EQ(got.rfind("pt2: ", 0), 0u) << got;
    EXPECT_NE(got.find(reason), std::string::npos) << got;
  };
  expect(layered(entry("21")), "dtype code 21 is not a ScalarType");
  expect(layered(entry("0")), "dtype code 0");
  expect(layered(
             entry("7", R"([{"as_expr": {"expr_str": "s0", "hint": {"as_int": 4}}}])", R"([{"as_int": 1}])")),
         "symbolic (as_expr \"s0\")");
  expect(layered(entry("7", R"([{"as_int": 2}])", R"([{"as_expr": {"expr_str": "s1"}}])")), "symbolic");
  expect(layered(entry("7", R"([{"as_int": 4}])", R"([{"as_int": 1}])", R"({"as_int": 1})")),
         "runs past its payload");
  expect(layered(entry("7", R"([{"as_int": 2}])", R"([{"as_int": 4}])")), "runs past its payload");
  expect(
      layered(entry("7", R"([{"as_int": 2}])", R"([{"as_int": 1}])", R"({"as_int": 4611686018427387904})")),
      "runs past its payload");
  expect(layered(entry("7", R"([{"as_int": 2}])", R"([{"as_int": -1}])")), "not a non-negative integer");
  expect(layered(entry("7", R"([{"as_int": 2}])", "[]")), "one rank");
  expect(layered(entry("7", R"([{"as_int": 1}])", R"([{"as_int": 1}])", R"({"as_int": 0})", "weight_7")),
         "names payload data/weights/weight_7, which the archive lacks");
  expect(layered(R"({"config": {"w": )"), "invalid JSON");
  expect(layered(R"({"config": [1]})"), "no \"config\" object");
  expect(layered(R"({"config": {"w": {"path_name": "weight_0"}, "w": {}}})"), "duplicate JSON key");
}

// A torch.save archive of {'w': a 2x2 float32 tensor holding kFloats}.
std::string nested_save() {
  auto u = [](const std::string& text) { return "X"s + static_cast<char>(text.size()) + "\0\0\0"s + text; };
  const std::string pickle = "\x80\x02}("s + u("w") + "ctorch._utils\n_rebuild_tensor_v2\n((" + u("storage") +
                             "ctorch\nFloatStorage\n" + u("0") + u("cpu") +
                             "K\x04tQK\x00(K\x02K\x02t(K\x02K\x01t"
                             "\x89"
                             "ccollections\nOrderedDict\n)RtRu."s;
  return zip_bytes(
      {{"archive/data.pkl", pickle, 0}, {"archive/data/0", kFloats, 0}, {"archive/version", "3\n", 0}});
}

// torch 2.1-2.2's torch._export.save: every member named serialized_<field>.json,
// the state dict a torch.save archive all the same; unions with every variant,
// the unused ones null.
TEST(Pt2, FlatJsonNamedTorchSaveAndNullUnionsOfTorch21) {
  const std::string program = R"({"graph_module": {"signature": {
      "input_specs": [
        {"user_input": null, "parameter": {"arg": {"name": "arg0"}, "parameter_name": "w"}, "buffer": null,
         "tensor_constant": null, "custom_obj": null},
        {"user_input": {"arg": {"as_none": null, "as_tensor": {"name": "x"}, "as_int": null}}, "parameter": null,
         "buffer": null, "tensor_constant": null, "custom_obj": null}],
      "output_specs": [
        {"user_output": {"arg": {"as_none": null, "as_tensor": {"name": "y"}}}, "loss_output": null,
         "buffer_mutation": null}]}}, "schema_version": 1})";
  TempDir dir;
  const std::string bytes = zip_bytes({{"serialized_exported_program.json", program, 0},
                                       {"serialized_state_dict.json", nested_save(), 0},
                                       {"serialized_constants.json", R"({"a": "document"})", 0},
                                       {"version", "1", 0}},
                                      {false, false, 0});
  auto catalog = open_model(dir.write("model.pt2", bytes));
  ASSERT_EQ(catalog.tensors().size(), 1u);
  const Tensor& t = catalog.tensors()[0];
  EXPECT_EQ(t.name, "w");
  EXPECT_EQ(t.bytes.view(), kFloats);
  ASSERT_TRUE(t.source.offset);
  EXPECT_EQ(bytes.substr(*t.source.offset, 16), kFloats);
  EXPECT_EQ(t.extras()["kind"], "parameter");
  const auto& signature = catalog.metadata["models"]["model"]["signature"];
  EXPECT_EQ(signature["parameters"], nlohmann::json::array({"w"}));
  EXPECT_EQ(signature["user_inputs"], nlohmann::json::array({"x"}));
  EXPECT_EQ(signature["user_outputs"], nlohmann::json::array({"y"}));
  // A member that holds JSON after all stays a document; the archive is none.
  std::vector<std::string> documents;
  for (const auto& d : catalog.documents) documents.push_back(d.path);
  EXPECT_EQ(documents,
            (std::vector<std::string>{"serialized_exported_program.json", "serialized_constants.json"}));
  EXPECT_EQ(catalog.metadata["models"]["model"]["not_mounted"],
            nlohmann::json::array({"serialized_constants.json"}));
}

TEST(Pt2, UnionsWithTwoVariantsSetAreNotReadAsOne) {
  const std::string program = R"({"graph_module": {"signature": {"input_specs": [
      {"user_input": {"arg": {"name": "x"}}, "parameter": {"arg": {"name": "p"}, "parameter_name": "w"}}]}}})";
  TempDir dir;
  auto catalog = open_model(dir.write(
      "model.pt2", zip_bytes({{"serialized_exported_program.json", program, 0}}, {false, false, 0})));
  EXPECT_EQ(catalog.metadata["models"]["model"]["signature"]["inputs"], nlohmann::json::array());
}

TEST(Pt2, ArchiveLevelRefusals) {
  const std::string config = entry();
  EXPECT_NE(refusal(zip_bytes({{"m/archive_format", "onnx", 0}, {"m/models/model.json", "{}", 0}}))
                .find("not a PT2 archive"),
            std::string::npos);
  EXPECT_NE(refusal(zip_bytes({{"m/archive_format", "pt2", 0},
                               {"m/archive_version", "3", 0},
                               {"m/models/model.json", "{}", 0}}))
                .find("archive_version"),
            std::string::npos);
  EXPECT_NE(refusal(zip_bytes({{"m/archive_format", "pt2", 0}, {"m/extra/x", "y", 0}})).find("no model"),
            std::string::npos);
  EXPECT_NE(refusal(zip_bytes({{"m/archive_format", "pt2", 0},
                               {"m/byteorder", "big", 0},
                               {"m/models/model.json", "{}", 0}}))
                .find("little-endian"),
            std::string::npos);
}

}  // namespace
}  // namespace modelfs
