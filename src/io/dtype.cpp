// SPDX-License-Identifier: Apache-2.0
#include "modelfs/dtype.hpp"
#include "io/ggml_table.hpp"
#include "io/safetensors_dtype.hpp"

#include <array>

namespace modelfs {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  uint32_t bits;
  std::string_view numpy;  // empty: numpy has no such type
  // The safetensors dtype string (docs/formats.md, "safetensors dtypes");
  // empty: safetensors has no such type.
  std::string_view safetensors;
};

constexpr std::array kTypes{
    DTypeInfo{DType::Bool, "bool", 8, "|b1", "BOOL"},
    DTypeInfo{DType::Int8, "int8", 8, "|i1", "I8"},
    DTypeInfo{DType::Int16, "int16", 16, "<i2", "I16"},
    DTypeInfo{DType::Int32, "int32", 32, "<i4", "I32"},
    DTypeInfo{DType::Int64, "int64", 64, "<i8", "I64"},
    DTypeInfo{DType::UInt8, "uint8", 8, "|u1", "U8"},
    DTypeInfo{DType::UInt16, "uint16", 16, "<u2", "U16"},
    DTypeInfo{DType::UInt32, "uint32", 32, "<u4", "U32"},
    DTypeInfo{DType::UInt64, "uint64", 64, "<u8", "U64"},
    DTypeInfo{DType::Float16, "float16", 16, "<f2", "F16"},
    DTypeInfo{DType::BFloat16, "bfloat16", 16, "", "BF16"},
    DTypeInfo{DType::Float32, "float32", 32, "<f4", "F32"},
    DTypeInfo{DType::Float64, "float64", 64, "<f8", "F64"},
    DTypeInfo{DType::Complex64, "complex64", 64, "<c8", "C64"},
    DTypeInfo{DType::Complex128, "complex128", 128, "<c16", ""},
    DTypeInfo{DType::Float8E4M3FN, "float8_e4m3fn", 8, "", "F8_E4M3"},
    DTypeInfo{DType::Float8E4M3FNUZ, "float8_e4m3fnuz", 8, "", "F8_E4M3FNUZ"},
    DTypeInfo{DType::Float8E5M2, "float8_e5m2", 8, "", "F8_E5M2"},
    DTypeInfo{DType::Float8E5M2FNUZ, "float8_e5m2fnuz", 8, "", "F8_E5M2FNUZ"},
    DTypeInfo{DType::Float8E8M0FNU, "float8_e8m0fnu", 8, "", "F8_E8M0"},
    DTypeInfo{DType::Int4, "int4", 4, "", ""},
    DTypeInfo{DType::UInt4, "uint4", 4, "", ""},
    DTypeInfo{DType::Float4E2M1, "float4_e2m1", 4, "", "F4"},
    DTypeInfo{DType::Int2, "int2", 2, "", ""},
    DTypeInfo{DType::UInt2, "uint2", 2, "", ""},
    DTypeInfo{DType::Float6E2M3FN, "float6_e2m3fn", 6, "", "F6_E2M3"},
    DTypeInfo{DType::Float6E3M2FN, "float6_e3m2fn", 6, "", "F6_E3M2"},
    DTypeInfo{DType::String, "string", 0, "", ""},
    DTypeInfo{DType::UInt1, "uint1", 1, "", ""},
    DTypeInfo{DType::NF4, "nf4", 4, "", ""},
    DTypeInfo{DType::GgmlBlock, "block", 0, "", ""},  // last: what an unknown value is taken for
};

const DTypeInfo& info(DType dtype) noexcept {
  for (const auto& entry : kTypes)
    if (entry.dtype == dtype) return entry;
  return kTypes.back();
}

struct QSchemeInfo {
  QScheme scheme;
  std::string_view name;
  bool torch;  // a torch.qscheme, which a pickle may name
};

constexpr QSchemeInfo kQSchemes[] = {
    {QScheme::PerTensorAffine, "per_tensor_affine", true},
    {QScheme::PerTensorSymmetric, "per_tensor_symmetric", true},
    {QScheme::PerChannelAffine, "per_channel_affine", true},
    {QScheme::PerChannelSymmetric, "per_channel_symmetric", true},
    {QScheme::PerChannelAffineFloatQParams, "per_channel_affine_float_qparams", true},
    {QScheme::MinScaleAffine, "min_scale_affine", false},
    {QScheme::Widened, "widened", false},
};

}  // namespace

std::string_view dtype_name(DType dtype) noexcept { return info(dtype).name; }

uint32_t dtype_bits(DType dtype) noexcept { return info(dtype).bits; }

std::optional<std::string_view> numpy_descr(DType dtype) noexcept {
  auto descr = info(dtype).numpy;
  if (descr.empty()) return std::nullopt;
  return descr;
}

std::optional<std::string_view> safetensors_dtype(DType dtype) noexcept {
  auto code = info(dtype).safetensors;
  if (code.empty()) return std::nullopt;
  return code;
}

std::optional<DType> dtype_from_safetensors(std::string_view code) noexcept {
  for (const auto& entry : kTypes)
    if (!entry.safetensors.empty() && entry.safetensors == code) return entry.dtype;
  return std::nullopt;
}

std::string_view qscheme_name(QScheme scheme) noexcept {
  for (const auto& entry : kQSchemes)
    if (entry.scheme == scheme) return entry.name;
  return {};
}

std::optional<QScheme> qscheme_from_name(std::string_view name) noexcept {
  for (const auto& entry : kQSchemes)
    if (entry.torch && entry.name == name) return entry.scheme;
  return std::nullopt;
}

bool qscheme_per_tensor(QScheme scheme) noexcept {
  return scheme == QScheme::PerTensorAffine || scheme == QScheme::PerTensorSymmetric ||
         scheme == QScheme::MinScaleAffine || scheme == QScheme::Widened;
}

const GgmlType* ggml_type(uint32_t id) noexcept {
  for (const auto& type : ggml::kTypes)
    if (type.id == id) return &type;
  return nullptr;
}

const GgmlType* ggml_type_named(std::string_view name) noexcept {
  for (const auto& type : ggml::kTypes)
    if (type.name == name) return &type;
  return nullptr;
}

std::span<const GgmlType> ggml_types() noexcept { return ggml::kTypes; }

}  // namespace modelfs
