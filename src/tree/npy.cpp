// SPDX-License-Identifier: Apache-2.0
#include "tree/npy.hpp"

#include "io/checked_math.hpp"
#include "tree/ggml_dequant.hpp"
#include "tree/numeric_views.hpp"

namespace modelfs {

namespace {

// The torch quantized dtype whose integers a quantized tensor of `stored`
// holds, and whose values (q - zero_point) x scale its .npy holds; none for
// a storage torch does not quantize into. A literal: NpyContent views it.
std::optional<std::string_view> dequantized_from(DType stored) {
  switch (stored) {
    case DType::Int8:
      return "qint8";
    case DType::UInt8:
      return "quint8";
    case DType::Int32:
      return "qint32";
    default:
      return std::nullopt;
  }
}

}  // namespace

std::optional<NpyContent> npy_content(const Tensor& tensor) {
  if (tensor.dtype == DType::GgmlBlock) {
    if (tensor.ggml == nullptr || ggml::kernels(*tensor.ggml) == nullptr) return std::nullopt;
    return NpyContent{DType::Float32, tensor.ggml->name, false};
  }
  if (const Quantization* q = tensor.quantization) {
    if (q->scheme == QScheme::MinScaleAffine || q->scheme == QScheme::Widened) {
      // Stored as they are where the scheme does not fit the storage.
      if (dequantizes(*q, tensor.dtype)) return NpyContent{q->values, dtype_name(tensor.dtype), false};
    } else if (auto from = dequantized_from(tensor.dtype)) {
      return NpyContent{DType::Float32, *from, false};
    }
  }
  const std::string_view stored = dtype_name(tensor.dtype);
  if (numpy_descr(tensor.dtype)) return NpyContent{tensor.dtype, stored, true};
  if (auto widened = widened_type(tensor.dtype)) return NpyContent{*widened, stored, true};
  return std::nullopt;
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
