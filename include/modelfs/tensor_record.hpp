// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a tree keeps of each catalog tensor once built: everything its
// sidecar, its index.json line and its extended attributes print, as views.
// The tree's records point into the tree's own block stores; the catalog's
// tensors (a string and two vectors each, allocated among the reader's
// short-lived objects) are dropped after the build, which also frees the
// pages they pinned. A record can also view a Tensor itself (record_of).
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "modelfs/catalog.hpp"
#include "modelfs/dtype.hpp"

namespace modelfs {

struct TensorRecord {
  std::string_view name;        // as the format stores it, unsplit
  std::string_view dtype_name;  // "float32", ..., or the ggml block type name
  DType dtype = DType::Float32;
  // An extra reused a fixed sidecar key (it then replaces that key in
  // place): `extras_lines` holds the whole sidecar, printed at build.
  bool sidecar_printed_whole = false;
  std::span<const uint64_t> shape;  // outermost first; empty for a scalar
  std::span<const int64_t> strides;
  uint64_t nbytes = 0;              // of the raw file
  std::string_view source_file;
  std::optional<uint64_t> source_offset;
  // The sidecar's lines after "source", one per format extra (see
  // sidecar_extras_lines); empty for none.
  std::string_view extras_lines;
  // What the .npy holds: numpy's dtype of its values, the stored type they
  // come from, whether they are exact (the sidecar's "npy"); no npy_dtype:
  // there is no .npy.
  std::optional<DType> npy_dtype;
  std::string_view npy_from;
  bool npy_exact = true;
};

// A record viewing `tensor` (valid while it lives); extras_lines and what the
// .npy holds left empty.
inline TensorRecord record_of(const Tensor& tensor) {
  TensorRecord r;
  r.name = tensor.name;
  r.dtype = tensor.dtype;
  r.dtype_name = tensor.dtype_name();
  r.shape = tensor.shape;
  r.strides = tensor.strides;
  r.nbytes = tensor.bytes.size();
  r.source_file = tensor.source.file;
  r.source_offset = tensor.source.offset;
  return r;
}

}  // namespace modelfs
