#include "modelfs/npy.hpp"

namespace modelfs {

std::string npy_header(std::string_view descr, std::span<const uint64_t> shape,
                       bool fortran_order) {
  std::string dict = "{'descr': '" + std::string(descr) + "', 'fortran_order': " +
                     (fortran_order ? "True" : "False") + ", 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) dict += ", ";
    dict += std::to_string(shape[i]);
  }
  if (shape.size() == 1) dict += ",";
  dict += "), }";

  // Prefix: 6 magic + 2 version + 2 (v1) or 4 (v2) length bytes. Pad with at
  // least one space, then '\n', to a multiple of 64.
  auto padded_length = [&](size_t prefix) {
    size_t total = prefix + dict.size() + 2;
    return dict.size() + 2 + (64 - total % 64) % 64;
  };
  size_t prefix = 10;
  size_t text_length = padded_length(prefix);
  const bool v2 = text_length > 0xFFFF;
  if (v2) {
    prefix = 12;
    text_length = padded_length(prefix);
  }

  std::string out = "\x93NUMPY";
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  const int length_bytes = v2 ? 4 : 2;
  for (int i = 0; i < length_bytes; ++i) out += static_cast<char>((text_length >> (8 * i)) & 0xFF);
  out += dict;
  out.append(text_length - dict.size() - 1, ' ');
  out += '\n';
  return out;
}

}  // namespace modelfs
