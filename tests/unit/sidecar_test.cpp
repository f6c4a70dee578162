// SPDX-License-Identifier: Apache-2.0
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

// Text of any bytes, losslessly: UTF-8 as it is, other bytes as \udcXX.
TEST(JsonBytes, WellFormedUtf8KeptOtherBytesAsLoneSurrogates) {
  auto text = [](std::string_view bytes) {
    std::string out;
    append_json_bytes(out, bytes);
    EXPECT_EQ(out.size(), json_bytes_length(bytes)) << out;
    return out;
  };
  EXPECT_EQ(text(""), "\"\"");
  EXPECT_EQ(text("plain ascii ~"), "\"plain ascii ~\"");
  EXPECT_EQ(text("\"\\\b\f\n\r\t\x01\x1f\x7f"), "\"\\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\"");
  EXPECT_EQ(text(std::string("a\0b", 3)), "\"a\\u0000b\"");
  EXPECT_EQ(text("caf\xc3\xa9 \xe6\xa8\xa1 \xf0\x9f\x98\x80"), "\"caf\xc3\xa9 \xe6\xa8\xa1 \xf0\x9f\x98\x80\"");
  // Not UTF-8: a lone byte, a cut sequence, an overlong form, a surrogate,
  // past U+10FFFF; each byte that is no part of a character escaped alone.
  EXPECT_EQ(text("\xff"), "\"\\udcff\"");
  EXPECT_EQ(text("\xe2\x82" "A"), "\"\\udce2\\udc82A\"");
  EXPECT_EQ(text("\xc0\xaf"), "\"\\udcc0\\udcaf\"");
  EXPECT_EQ(text("\xed\xa0\x80"), "\"\\udced\\udca0\\udc80\"");
  EXPECT_EQ(text("\xf4\x90\x80\x80"), "\"\\udcf4\\udc90\\udc80\\udc80\"");
  EXPECT_EQ(text("\xc3\xa9\xc3"), "\"\xc3\xa9\\udcc3\"");
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
