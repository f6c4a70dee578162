// SPDX-License-Identifier: Apache-2.0
#pragma once
// ONNX (onnx/onnx.proto; docs/formats.md, "ONNX"): one serialized ModelProto, no
// magic, read with the lazy wire scanner (protobuf_wire.hpp) so that weight
// bytes stay in the mapping.
//
// Tensors and their names (docs/design.md, "Tensor names"):
//   graph initializers                  their stored name
//   sparse initializers                 <name>.values and <name>.indices,
//                                       the dense shape in the sidecar
//   Constant node `value`               the node's first output
//   Constant node `sparse_value`        <first output>.values / .indices
//   Constant node value_float(s),       the node's first output: float32,
//     value_int(s), value_string(s)     int64, string; 0-D for the one-value
//                                       forms, 1-D for the lists (graph.json
//                                       then names the tensor)
//   any other node attribute tensor     <node>/<attribute>, and for a list
//                                       attribute <node>/<attribute>/<i>;
//                                       <node> is the node's name, else its
//                                       first output, else <op_type>_<index>
//   function attribute defaults         <function>/<attribute>
// Subgraphs (If/Loop/Scan bodies, any GRAPH/GRAPHS attribute), functions
// and training_info graphs are read the same way, recursively (bounded by
// protobuf::kMaxMessageDepth). Names are kept as stored, so two subgraphs
// may hold one name: both tensors stay in the catalog (the tree gives the
// later one a ~N suffix) and each sidecar's "graph" says where it lives.
//
// Bytes: raw_data and a single packed float_data/double_data blob are served
// in place; external data from its own mapping (each file mapped once);
// varint fields (int32_data, int64_data, uint64_data) and unpacked fixed
// fields are decoded once into owned bytes. STRING tensors are served as
// text (dtype "string"): JSON Lines, one JSON string per element in C order,
// bytes that are not UTF-8 as \udcXX (json_text.hpp, append_json_bytes).
//
// Documents: .modelfs/graph.json (graphs nested in the attributes that hold
// them) and metadata.json (ir_version, opsets, producer, ...).
#include <cstdint>
#include <filesystem>
#include <span>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::onnx {

// protobuf's own limit on one message, which onnx's checker enforces too;
// larger models must keep their weights in external data.
inline constexpr uint64_t kMaxModelBytes = 2147483647;
// A Constant node's value_ints become eight bytes each, from as little as
// one byte of the file: a list beyond this is refused.
inline constexpr uint64_t kMaxConstantListBytes = uint64_t{1} << 30;

// A bounded trial parse of the head: the first field is ir_version, and the
// fields after it are ModelProto fields with their declared wire types.
bool probe_file(std::span<const std::byte> head);

Catalog open_file(const ModelFile& model);

}  // namespace modelfs::onnx
