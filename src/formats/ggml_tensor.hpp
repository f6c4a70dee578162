// SPDX-License-Identifier: Apache-2.0
#pragma once
// A tensor as ggml's files describe it, by a ggml type and ne[] (fastest
// dimension first): what GGUF (gguf.cpp) and the legacy GGML family
// (ggml_legacy.cpp) share, so both describe a tensor the same way.
//
// shape = ne reversed (outermost first); dtype = the type's plain dtype, or
// GgmlBlock for a block type; every tensor points at its entry of the one
// ggml type table (io/ggml_table.hpp). `strides` are C-order element
// strides for every type: since ne[0] is a whole number of blocks, row r
// starts at byte r x ne[0] / block_size x type_size. The byte size is
// ne[0] / block_size x type_size x ne[1] x ..., overflow-checked.
#include <cstdint>
#include <span>
#include <string>

#include "io/checked_math.hpp"
#include "io/tensor_spec.hpp"
#include "modelfs/dtype.hpp"

namespace modelfs::ggml {

// The byte size of a described tensor, or (`refusal` not empty) why the
// dimensions do not describe one.
struct Described {
  uint64_t nbytes = 0;
  std::string refusal;
};

inline Described describe(TensorSpec& t, const GgmlType& type, std::span<const uint64_t> ne) {
  const uint64_t ne0 = ne.empty() ? 1 : ne[0];
  if (ne0 % type.block_size != 0)
    return {0, "ne[0] = " + std::to_string(ne0) + " is not a multiple of " + std::string(type.name) +
                   "'s block size " + std::to_string(type.block_size)};
  std::optional<uint64_t> nbytes = checked_mul(ne0 / type.block_size, type.type_size);
  for (size_t d = 1; d < ne.size() && nbytes; ++d) nbytes = checked_mul(*nbytes, ne[d]);
  t.shape.assign(ne.rbegin(), ne.rend());
  if (!nbytes || !checked_numel(t.shape)) return {0, "byte size of the dimensions overflows"};
  t.dtype = type.plain.value_or(DType::GgmlBlock);
  t.ggml = &type;
  auto strides = contiguous_strides(t.shape);
  if (!strides) return {0, "the strides of the shape pass 2^63 (numpy and torch refuse such a shape)"};
  t.strides = std::move(*strides);
  return {*nbytes, {}};
}

}  // namespace modelfs::ggml
