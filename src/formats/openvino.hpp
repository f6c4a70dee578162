// SPDX-License-Identifier: Apache-2.0
#pragma once
// OpenVINO IR v10 / v11 (docs/formats.md, "OpenVINO IR"): an .xml graph
// and the .bin of the same stem beside it.
//
//   <net name="..." version="10|11">
//     <layers>
//       <layer id="1" name="w" type="Const" version="opset1">
//         <data element_type="f32" shape="8, 8" offset="1000" size="256"/>
//         <output><port id="0"><dim>8</dim><dim>8</dim></port></output>
//       </layer> ...
//     </layers>
//     <edges> ... </edges>
//     <rt_info> ... </rt_info>
//   </net>
//
// Every Const layer is a tensor named by its layer's name: bytes
// [offset, offset + size) of the .bin, headerless and unpadded, served in
// place. Several Consts may share bytes (the writer stores identical blobs
// once). Sub-byte elements that modelfs has a dtype for (i4, u4, f4e2m1)
// are packed low nibble first, as modelfs packs them; the IR's bit-packed
// types whose order modelfs has no dtype for (u1, u2, u3, u6, nf4) are left
// out of the tree and listed in metadata.json. String Consts (a count, end
// offsets, then the characters) are served as JSON Lines.
//
// Refused: an .xml over kMaxXmlBytes, that does not parse, holds a DOCTYPE,
// nests past kMaxDepth or has an attribute over kMaxAttributeBytes; a root
// that is not <net>, a version other than 10 or 11, no <layers>; a Const
// with no <data>, an unknown element_type, a shape that is not
// comma-separated non-negative integers (or past kMaxRank), an offset or
// size that is not a non-negative integer, a size other than its shape and
// element_type need, output port dims that differ from its shape, a range
// that overflows or runs past the .bin; strings whose header or offsets
// disagree with their size or shape; the .bin missing, not a regular file,
// or not inside the model's folder (model_folder.hpp).
#include <cstdint>
#include <span>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::openvino {

inline constexpr uint64_t kMaxXmlBytes = uint64_t{256} << 20;
// A graph is <net><layers><layer><output><port><dim>, rt_info a few more.
inline constexpr uint64_t kMaxDepth = 64;
inline constexpr uint64_t kMaxAttributeBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMaxRank = 64;

// The text starts (after a byte order mark, blanks, an XML declaration and
// comments) with a <net> start tag that has a version attribute.
bool probe_file(std::span<const std::byte> head);

Catalog open_file(const ModelFile& model);

}  // namespace modelfs::openvino
