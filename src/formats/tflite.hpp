// SPDX-License-Identifier: Apache-2.0
#pragma once
// TensorFlow Lite / LiteRT models (docs/formats.md, "TensorFlow Lite"): one
// flatbuffer, file identifier "TFL3" at bytes 4..8.
//
//   Model     version, operator_codes, subgraphs, description, buffers,
//             metadata_buffer, metadata, signature_defs
//   SubGraph  tensors, inputs, outputs, operators, name
//   Tensor    shape, type, buffer, name, quantization, is_variable, ...
//   Buffer    data:[ubyte] (in the flatbuffer), or offset/size (absolute
//             file offsets past the flatbuffer, for models over 2 GB)
//
// Each tensor whose buffer holds bytes is a tensor file, served in place
// from the mapping; buffer 0 is the empty sentinel. The flatbuffer is read
// by a strict walker of the fields modelfs needs: every offset, vtable and
// vector length is checked against the file (at most its first 2^31 - 1
// bytes, a flatbuffer's limit) before use, and the walk follows the fixed
// schema, so a cyclic or deep offset graph cannot make it recurse; at most
// flatbuffer::kMaxTables tables are visited, as the flatbuffers verifier's
// default (the walker is src/formats/flatbuffer.hpp, shared with ExecuTorch).
//
// Refused: a root, table, vtable, vector or string that does not lie in
// the flatbuffer; a tensor's buffer index past Model.buffers; a buffer's
// offset/size range past the file; a negative dimension or a shape whose
// size overflows; an unknown tensor type, or RESOURCE/VARIANT with bytes;
// bytes that are not the shape's size; a constant that is also a variable
// or names an external buffer; a malformed STRING buffer.
#include <cstdint>
#include <span>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::tflite {

// "TFL3" at bytes 4..8.
bool probe_file(std::span<const std::byte> head);

Catalog open_file(const ModelFile& model);

}  // namespace modelfs::tflite
