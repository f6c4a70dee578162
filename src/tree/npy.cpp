// SPDX-License-Identifier: Apache-2.0
#include "modelfs/npy.hpp"

#include "ggml_dequant.hpp"
#include "modelfs/checked_math.hpp"

namespace modelfs {

namespace {

// The torch quantized dtype whose values (q - zero_point) x scale the .npy
// holds, under the schemes modelfs reads the parameters of; none for any
// other tensor. The name returned is a literal: NpyContent views it.
std::optional<std::string_view> dequantized_from(const Tensor& tensor) {
  // Only a torch quantized tensor has this extra; the others are not parsed.
  if (tensor.extras_lines.find("\"quantization\"") == std::string_view::npos) return std::nullopt;
  const nlohmann::json extras = tensor.extras();
  const auto quantization = extras.find("quantization");
  const auto torch_dtype = extras.find("torch_dtype");
  if (quantization == extras.end() || !quantization->is_object() || torch_dtype == extras.end() ||
      !torch_dtype->is_string())
    return std::nullopt;
  const auto& name = torch_dtype->get_ref<const std::string&>();
  std::optional<std::string_view> from;
  if (name == "qint8" && tensor.dtype == DType::Int8) from = "qint8";
  if (name == "quint8" && tensor.dtype == DType::UInt8) from = "quint8";
  if (name == "qint32" && tensor.dtype == DType::Int32) from = "qint32";
  const auto scheme = quantization->find("qscheme");
  if (!from || scheme == quantization->end() || !scheme->is_string()) return std::nullopt;
  const auto& s = scheme->get_ref<const std::string&>();
  if (s == "per_tensor_affine" || s == "per_tensor_symmetric" || s == "per_channel_affine" ||
      s == "per_channel_symmetric" || s == "per_channel_affine_float_qparams")
    return from;
  return std::nullopt;
}

}  // namespace

std::optional<NpyContent> npy_content(const Tensor& tensor) {
  if (tensor.dtype == DType::GgmlBlock) {
    if (ggml::block_codec(tensor.block_type) == nullptr) return std::nullopt;
    return NpyContent{DType::Float32, tensor.block_type, false};
  }
  if (auto from = dequantized_from(tensor)) return NpyContent{DType::Float32, *from, false};
  const std::string_view stored = dtype_name(tensor.dtype);
  if (numpy_descr(tensor.dtype)) return NpyContent{tensor.dtype, stored, true};
  switch (tensor.dtype) {
    case DType::BFloat16:
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0FNU:
    case DType::Float4E2M1:
    case DType::Float6E2M3FN:
    case DType::Float6E3M2FN:
      return NpyContent{DType::Float32, stored, true};
    case DType::Int4:
    case DType::Int2:
      return NpyContent{DType::Int8, stored, true};
    case DType::UInt4:
    case DType::UInt2:
      return NpyContent{DType::UInt8, stored, true};
    default:
      return std::nullopt;
  }
}

std::string npy_header(std::string_view descr, std::span<const uint64_t> shape, bool fortran_order) {
  std::string dict = "{'descr': '" + std::string(descr) +
                     "', 'fortran_order': " + (fortran_order ? "True" : "False") + ", 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) dict += ", ";
    dict += std::to_string(shape[i]);
  }
  if (shape.size() == 1) dict += ",";
  dict += "), }";

  // Prefix: 6 magic + 2 version + 2 (v1) or 4 (v2) length bytes. Pad with at
  // least one space, then '\n', to a multiple of 64.
  // (A shape's text is as long as the file's metadata that held it: the
  // sums are checked all the same.)
  auto padded_length = [&](uint64_t prefix) {
    const Size total = Size(prefix) + dict.size() + 2;
    return (Size(dict.size()) + 2 + (64 - total.value() % 64) % 64).value();
  };
  const bool v2 = padded_length(10) > 0xFFFF;
  const uint64_t text_length = padded_length(v2 ? 12 : 10);
  if (text_length > UINT32_MAX) throw SizeOverflow("a .npy header longer than its 4-byte length can say");

  std::string out = "\x93NUMPY";
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  for (int i = 0; i < (v2 ? 4 : 2); ++i) out += static_cast<char>((text_length >> (8 * i)) & 0xFF);
  out += dict;
  out.append(text_length - dict.size() - 1, ' ');
  out += '\n';
  return out;
}

}  // namespace modelfs
