// SPDX-License-Identifier: Apache-2.0
#pragma once
// The readers' side of the catalog (catalog.hpp): what they append.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "modelfs/catalog.hpp"

namespace modelfs {

// What a reader knows of a tensor as it appends it to a catalog
// (Catalog::add). Its strings, vectors and JSON live only until then: the
// catalog keeps a compact copy in its own stores.
struct TensorSpec {
  std::string name;  // as the format stores it, unsplit
  DType dtype = DType::Float32;
  // The ggml type (GGUF tensors, plain types too; always when dtype is
  // GgmlBlock, where a type without kernels has no .npy).
  const GgmlType* ggml = nullptr;
  std::vector<uint64_t> shape;   // outermost first; empty for a scalar
  std::vector<int64_t> strides;  // in elements, as torch counts them
  ByteSpan bytes;                // exactly what the raw file serves
  TensorSource source;
  std::optional<BasicQuantization<std::string>> quantization;  // a torch quantized tensor
  // Format extras for the sidecar (null: none), each key one of the
  // reader's own: never one of the sidecar's fixed keys (sidecar_keys.hpp), nor
  // a key the typed fields above print under.
  nlohmann::json extras;
  // Set when the bytes are stored encoded; `bytes` is then the encoded
  // stream (where it lies), and nbytes() the decoded size.
  std::optional<Encoded> encoded;
  // Set when the bytes are not one range (catalog.hpp, Piece); `bytes` is
  // then empty.
  std::vector<BasicPiece<std::string, std::vector<uint64_t>, std::vector<PieceFilter>>> pieces;
};

// Marks `t`, whose `bytes` are its big-endian elements, as served
// little-endian, swapped per read (a complex number's parts each): its
// raw file's bytes then lie nowhere in the file as they are, so it has no
// source offset, and its sidecar says the file's byte order.
inline void serve_byte_swapped(TensorSpec& t) {
  const bool complex = t.dtype == DType::Complex64 || t.dtype == DType::Complex128;
  const uint32_t bits = complex ? dtype_bits(t.dtype) / 2 : dtype_bits(t.dtype);
  const uint64_t size = t.bytes.size();
  t.encoded = Encoded{Encoded::Method::ByteSwap, 0, size, size, static_cast<uint8_t>(bits / 8)};
  t.source.offset.reset();
  t.extras["byte_order_in_file"] = "big";
}

}  // namespace modelfs
