// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>

#include "io/json_text.hpp"
#include "io/tensor_spec.hpp"
#include "tree/sidecar.hpp"

namespace modelfs {
namespace {

TensorSpec sample_tensor() {
  TensorSpec t;
  t.name = "model.layers.0.q_proj.weight";
  t.dtype = DType::BFloat16;
  t.shape = {4, 8};
  t.strides = contiguous_strides(t.shape).value();
  t.bytes = ByteSpan::owned(std::string(64, '\0'));
  t.source = {"model-00001-of-00002.safetensors", 1234};
  t.extras["kind"] = "parameter";
  return t;
}

// The sidecar of `spec` once a catalog holds it; `npy` as the tree decides.
std::string sidecar_of(const TensorSpec& spec, std::string_view format = "safetensors",
                       std::optional<NpyContent> npy = std::nullopt) {
  Catalog catalog;
  return sidecar_text(catalog.add(spec), format, npy);
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
  EXPECT_EQ(text("caf\xc3\xa9 \xe6\xa8\xa1 \xf0\x9f\x98\x80"),
            "\"caf\xc3\xa9 \xe6\xa8\xa1 \xf0\x9f\x98\x80\"");
  // Not UTF-8: a lone byte, a cut sequence, an overlong form, a surrogate,
  // past U+10FFFF; each byte that is no part of a character escaped alone.
  EXPECT_EQ(text("\xff"), "\"\\udcff\"");
  EXPECT_EQ(text("\xe2\x82"
                 "A"),
            "\"\\udce2\\udc82A\"");
  EXPECT_EQ(text("\xc0\xaf"), "\"\\udcc0\\udcaf\"");
  EXPECT_EQ(text("\xed\xa0\x80"), "\"\\udced\\udca0\\udc80\"");
  EXPECT_EQ(text("\xf4\x90\x80\x80"), "\"\\udcf4\\udc90\\udc80\\udc80\"");
  EXPECT_EQ(text("\xc3\xa9\xc3"), "\"\xc3\xa9\\udcc3\"");
}

TEST(Sidecar, CarriesTheContractFieldsInOrder) {
  auto text = sidecar_of(sample_tensor(), "safetensors", NpyContent{DType::Float32, "bfloat16", true});
  auto json = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(json["name"], "model.layers.0.q_proj.weight");
  EXPECT_EQ(json["dtype"], "bfloat16");
  EXPECT_EQ(json["shape"], nlohmann::ordered_json({4, 8}));
  EXPECT_EQ(json["strides"], nlohmann::ordered_json({8, 1}));
  EXPECT_EQ(json["nbytes"], 64);
  EXPECT_EQ(json["byte_order"], "little");
  EXPECT_FALSE(json.contains("numpy"));  // numpy has no bfloat16
  EXPECT_EQ(json["format"], "safetensors");
  EXPECT_EQ(json["source"]["file"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(json["source"]["offset"], 1234);
  EXPECT_EQ(nlohmann::json(json["npy"]),
            nlohmann::json({{"dtype", "float32"}, {"from", "bfloat16"}, {"exact", true}}));
  EXPECT_EQ(json["kind"], "parameter");
  std::vector<std::string> keys;
  for (auto& [key, value] : json.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"name", "dtype", "shape", "strides", "nbytes", "byte_order",
                                            "npy", "format", "source", "kind"}));
  EXPECT_EQ(text.back(), '\n');
  // One key a line between the braces, as readable_json prints an object.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), static_cast<long>(keys.size() + 2));
}

TEST(Sidecar, NumpyDescrWhereNumpyHasTheType) {
  auto t = sample_tensor();
  t.dtype = DType::Float32;
  EXPECT_EQ(nlohmann::json::parse(sidecar_of(t))["numpy"], "<f4");
}

TEST(Sidecar, ScalarHasEmptyShapeAndStrides) {
  auto t = sample_tensor();
  t.shape = {};
  t.strides = contiguous_strides(t.shape).value();
  auto json = nlohmann::json::parse(sidecar_of(t));
  EXPECT_TRUE(json["shape"].is_array() && json["shape"].empty());
  EXPECT_TRUE(json["strides"].is_array() && json["strides"].empty());
}

TEST(Strides, ContiguousStridesCountZeroDimensionsAsOne) {
  const std::vector<uint64_t> shape{2, 0, 3};
  EXPECT_EQ(contiguous_strides(shape), (std::vector<int64_t>{3, 3, 1}));
  TensorSpec spec;
  spec.shape = {2, 3};
  spec.strides = {1, 2};
  Catalog catalog;
  const Tensor& t = catalog.add(spec);
  EXPECT_FALSE(t.is_c_contiguous());
  EXPECT_TRUE(t.is_f_contiguous());
}

}  // namespace
}  // namespace modelfs

namespace modelfs {
namespace {

// Whatever a name or an extra holds, the sidecar is JSON that says it.
TEST(Sidecar, AnyNameAndExtrasPrintAsTheJsonTheySay) {
  std::vector<TensorSpec> cases;
  cases.push_back(sample_tensor());
  auto quoted = sample_tensor();
  quoted.name = "a \"quoted\" \\ name\twith\ncontrols";
  cases.push_back(quoted);
  auto unicode = sample_tensor();
  unicode.name = "模型.层.0.权重 ñ";
  unicode.source = {"file with spaces.pt", std::nullopt};
  cases.push_back(unicode);
  auto extras = sample_tensor();
  extras.dtype = DType::Float32;
  extras.extras = {{"requires_grad", true},
                   {"quantization", {{"scale", 0.5}, {"zero_point", 3}}},
                   {"ggml_type", 12},
                   {"note", "ü"}};
  cases.push_back(extras);
  for (const auto& spec : cases) {
    SCOPED_TRACE(spec.name);
    const auto json = nlohmann::json::parse(sidecar_of(spec, "pytorch"));
    EXPECT_EQ(json["name"], spec.name);
    EXPECT_EQ(json["format"], "pytorch");
    EXPECT_EQ(json["source"]["file"], spec.source.file);
    EXPECT_EQ(json.contains("/source/offset"_json_pointer), spec.source.offset.has_value());
    for (const auto& [key, value] : spec.extras.items()) EXPECT_EQ(json[key], value) << key;
  }
  // Bytes that are not UTF-8 still make JSON.
  auto invalid = sample_tensor();
  invalid.name = std::string("bad\xff\xfe utf8\x01");
  EXPECT_TRUE(nlohmann::json::accept(sidecar_of(invalid)));
}

// The extras are read back as the reader gave them (a quantized tensor's
// parameters are).
TEST(Sidecar, ExtrasParseBackAsGiven) {
  auto spec = sample_tensor();
  spec.extras = {{"quantization", {{"qscheme", "per_tensor_affine"}, {"scale", 0.25}}},
                 {"torch_dtype", "qint8"}};
  Catalog catalog;
  EXPECT_EQ(catalog.add(spec).extras(), spec.extras);
  spec.extras = nullptr;
  EXPECT_TRUE(catalog.add(spec).extras().is_null());
  EXPECT_TRUE(catalog.add(spec).extras_lines.empty());
}

// An extra is one of the reader's own keys; one that would replace a fixed
// key of the sidecar is a reader's bug, refused where it is added.
TEST(Sidecar, AnExtraReusingAFixedKeyIsRefused) {
  auto clash = sample_tensor();
  clash.extras["byte_order"] = "big";
  Catalog catalog;
  EXPECT_THROW(catalog.add(clash), std::logic_error);
}

// Torch's qscheme names and the enum are one table: each name comes back
// as its scheme, and nothing else is a scheme.
TEST(QSchemes, NamesRoundTrip) {
  const std::pair<QScheme, std::string_view> torch_names[] = {
      {QScheme::PerTensorAffine, "per_tensor_affine"},
      {QScheme::PerTensorSymmetric, "per_tensor_symmetric"},
      {QScheme::PerChannelAffine, "per_channel_affine"},
      {QScheme::PerChannelSymmetric, "per_channel_symmetric"},
      {QScheme::PerChannelAffineFloatQParams, "per_channel_affine_float_qparams"},
  };
  for (const auto& [scheme, name] : torch_names) {
    EXPECT_EQ(qscheme_name(scheme), name);
    EXPECT_EQ(qscheme_from_name(name), scheme);
    EXPECT_EQ(qscheme_per_tensor(scheme), name.starts_with("per_tensor"));
  }
  EXPECT_FALSE(qscheme_from_name("per_tensor"));
  EXPECT_FALSE(qscheme_from_name(""));
  EXPECT_FALSE(qscheme_from_name("PER_TENSOR_AFFINE"));
}

// The typed fields print what the same values given as JSON extras print,
// byte for byte, each among the reader's extras at its key's place.
TEST(Sidecar, TypedFieldsPrintAsTheirJsonWould) {
  auto typed = sample_tensor();
  typed.extras["requires_grad"] = true;
  typed.extras["device"] = "cuda:0";
  typed.extras["torch_dtype"] = "qint8";
  auto untyped = typed;
  typed.quantization = BasicQuantization<std::string>{};
  typed.quantization->scheme = QScheme::PerChannelAffineFloatQParams;
  typed.quantization->axis = 1;
  typed.quantization->scales = "w.q_per_channel_scales";
  typed.quantization->zero_points = "w.q_per_channel_zero_points";
  untyped.extras["quantization"] = {{"qscheme", "per_channel_affine_float_qparams"},
                                    {"axis", 1},
                                    {"scales", "w.q_per_channel_scales"},
                                    {"zero_points", "w.q_per_channel_zero_points"}};
  EXPECT_EQ(sidecar_of(typed, "pytorch"), sidecar_of(untyped, "pytorch"));

  typed.quantization = BasicQuantization<std::string>{};
  typed.quantization->scheme = QScheme::PerTensorAffine;
  typed.quantization->scale = 0.05;
  typed.quantization->zero_point = -3;
  untyped.extras["quantization"] = {{"qscheme", "per_tensor_affine"}, {"scale", 0.05}, {"zero_point", -3}};
  EXPECT_EQ(sidecar_of(typed, "pytorch"), sidecar_of(untyped, "pytorch"));
  Catalog catalog;
  EXPECT_EQ(catalog.add(typed).extras(), untyped.extras);

  // A ggml type: its id, name and sizes, before and after other keys.
  for (const char* other : {"a", "c", "h", "z"}) {
    auto gguf = sample_tensor();
    gguf.extras = {{other, 1}};
    auto plain = gguf;
    gguf.dtype = DType::GgmlBlock;
    gguf.ggml = ggml_type(12);
    plain.dtype = DType::GgmlBlock;
    plain.extras.update(
        {{"ggml_type", 12}, {"ggml_type_name", "q4_k"}, {"block_size", 256}, {"type_size", 144}});
    const std::string text = sidecar_of(gguf, "gguf");
    // The untyped tensor has no type to name: its dtype line differs.
    std::string expected = sidecar_of(plain, "gguf");
    const std::string block = "\"dtype\": \"block\"";
    ASSERT_NE(expected.find(block), std::string::npos);
    expected.replace(expected.find(block), block.size(), "\"dtype\": \"q4_k\"");
    EXPECT_EQ(text, expected) << other;
  }

  // A reader's extra may not take a typed field's key.
  auto clash = typed;
  clash.extras["quantization"] = 1;
  EXPECT_THROW(catalog.add(clash), std::logic_error);
}

}  // namespace
}  // namespace modelfs
