// SPDX-License-Identifier: Apache-2.0
#pragma once
// ExecuTorch programs `.pte` (flatbuffer, identifier "ET12" at bytes 4..8,
// optionally the extended header "eh00" at byte 8 giving program_size,
// segment_base_offset and segment_data_size) and their external tensor
// data `.ptd` (FlatTensor, identifier "FT01", header "FH01"); see
// docs/formats.md, "ExecuTorch".
//
// A mount shows every constant tensor of the program: a Tensor EValue of
// any execution plan with data_buffer_idx > 0 and no allocation_info, its
// bytes served in place from Program.constant_segment (offsets relative to
// the segment, the segment relative to segment_base_offset) or from the
// deprecated inline Program.constant_buffer[i].storage; tensors of several
// methods naming one buffer are one file. A tensor whose
// extra_tensor_info.location is EXTERNAL is looked up by its fully
// qualified name in the .ptd beside the program (`STEM.ptd`, else
// `_default_external_constant.ptd`, opened inside the model's folder).
// Names: the fully qualified name where the program gives one, else
// `constant.N` (N the buffer index). named_data blobs and delegate payloads
// are not tensors: listed in metadata.json. A .ptd mounted alone shows its
// named_data entries that carry a TensorLayout, by key.
//
// The flatbuffer is walked by the shared strict walker (flatbuffer.hpp).
// Refused (ModelError naming "ExecuTorch"): flatbuffer violations; a
// header whose program_size, segment_base_offset or segment_data_size
// lie past the file; a segment past the file; a buffer or segment index
// out of range; a shape of negative size, of rank over 16 (the runtime's
// kTensorDimensionLimit), or whose byte count overflows or exceeds the
// bytes stored; an unknown or unsupported ScalarType; a dim_order that is
// not a permutation; storage_offset != 0; both constant_buffer and
// constant_segment used; an EXTERNAL tensor without a name, without a
// .ptd, or absent from it or of another layout there; the older FlatTensor
// layout (v0.6.0's `tensors`).
#include <cstdint>
#include <span>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::executorch {

// "ET12" or "FT01" at bytes 4..8.
bool probe_file(std::span<const std::byte> head);

Catalog open_file(const ModelFile& model);

}  // namespace modelfs::executorch
