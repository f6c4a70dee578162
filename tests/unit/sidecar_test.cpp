#include <gtest/gtest.h>

#include "modelfs/json_text.hpp"
#include "modelfs/sidecar.hpp"

namespace modelfs {
namespace {

Tensor sample_tensor() {
  Tensor t;
  t.name = "model.layers.0.q_proj.weight";
  t.dtype = DType::BFloat16;
  t.shape = {4, 8};
  t.strides = contiguous_strides(t.shape);
  t.bytes = ByteSpan::owned(std::string(64, '\0'));
  t.source = {"model-00001-of-00002.safetensors", 1234};
  t.extras["kind"] = "parameter";
  return t;
}

TEST(Sidecar, CarriesTheContractFieldsInOrder) {
  auto text = sidecar_text(sample_tensor(), "safetensors");
  auto json = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(json["name"], "model.layers.0.q_proj.weight");
  EXPECT_EQ(json["dtype"], "bfloat16");
  EXPECT_EQ(json["shape"], nlohmann::json({4, 8}));
  EXPECT_EQ(json["strides"], nlohmann::json({8, 1}));
  EXPECT_EQ(json["nbytes"], 64);
  EXPECT_EQ(json["byte_order"], "little");
  EXPECT_FALSE(json.contains("numpy"));  // numpy has no bfloat16
  EXPECT_EQ(json["format"], "safetensors");
  EXPECT_EQ(json["source"]["file"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(json["source"]["offset"], 1234);
  EXPECT_EQ(json["kind"], "parameter");
  std::vector<std::string> keys;
  for (auto& [key, value] : json.items()) keys.push_back(key);
  EXPECT_EQ(keys.front(), "name");
  EXPECT_EQ(text.back(), '\n');
}

TEST(Sidecar, NumpyDescrWhereNumpyHasTheType) {
  auto t = sample_tensor();
  t.dtype = DType::Float32;
  EXPECT_EQ(sidecar_json(t, "safetensors")["numpy"], "<f4");
}

TEST(Sidecar, ScalarHasEmptyShapeAndStrides) {
  auto t = sample_tensor();
  t.shape = {};
  t.strides = contiguous_strides(t.shape);
  auto json = sidecar_json(t, "safetensors");
  EXPECT_TRUE(json["shape"].is_array() && json["shape"].empty());
  EXPECT_TRUE(json["strides"].is_array() && json["strides"].empty());
}

TEST(Strides, ContiguousStridesCountZeroDimensionsAsOne) {
  const std::vector<uint64_t> shape{2, 0, 3};
  EXPECT_EQ(contiguous_strides(shape), (std::vector<int64_t>{3, 3, 1}));
  Tensor t;
  t.shape = {2, 3};
  t.strides = {1, 2};
  EXPECT_FALSE(t.is_c_contiguous());
  EXPECT_TRUE(t.is_f_contiguous());
}

}  // namespace
}  // namespace modelfs

namespace modelfs {
namespace {

// The direct printer must say exactly what the JSON object says.
TEST(Sidecar, DirectTextEqualsTheJsonObjectPrinted) {
  std::vector<Tensor> cases;
  cases.push_back(sample_tensor());
  auto quoted = sample_tensor();
  quoted.name = "a \"quoted\" \\ name\twith\ncontrols";
  cases.push_back(quoted);
  auto unicode = sample_tensor();
  unicode.name = "模型.层.0.权重 ñ";
  unicode.source = {"file with spaces.pt", std::nullopt};
  cases.push_back(unicode);
  auto invalid = sample_tensor();
  invalid.name = std::string("bad\xff\xfe utf8\x01");
  cases.push_back(invalid);
  auto extras = sample_tensor();
  extras.dtype = DType::Float32;
  extras.extras = {{"requires_grad", true}, {"quantization", {{"scale", 0.5}, {"zero_point", 3}}},
                   {"ggml_type", 12}, {"note", "ü\xff"}};
  cases.push_back(extras);
  auto clash = sample_tensor();
  clash.extras["byte_order"] = "big";
  cases.push_back(clash);
  for (const auto& t : cases) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(sidecar_text(t, "pytorch"), readable_json(sidecar_json(t, "pytorch")));
  }
  EXPECT_FALSE(sidecar_extras_lines(clash.extras).has_value());
  EXPECT_EQ(sidecar_extras_lines(nlohmann::json()), "");
}

}  // namespace
}  // namespace modelfs
