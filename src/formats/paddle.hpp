// SPDX-License-Identifier: Apache-2.0
#pragma once
// PaddlePaddle (docs/formats.md, "PaddlePaddle"): inference models and
// paddle.save state dicts.
//
// An inference model is a program, a protobuf ProgramDesc (`NAME.pdmodel`,
// fluid's `__model__`): blocks { idx, parent_idx, vars { name, type
// { type, lod_tensor { tensor { data_type, dims } } }, persistable },
// ops }. Its persistable LOD_TENSOR vars (feed, fetch and RAW vars left
// out) are the tensors, named as the vars. Their values are tensor
// streams:
//
//   u32 version (0) | u64 lod_level | per level: u64 bytes, that many bytes
//   | u32 tensor version (0) | i32 n | TensorDesc { data_type, dims } (n
//   bytes) | the elements, little-endian, numel x element size
//
// either back to back in one file in sorted name order (`NAME.pdiparams`
// beside `NAME.pdmodel`, `__params__` beside `__model__`), or one file
// per var named as the var beside the program when there is no such file.
// Data is served in place. Refused: a program that does not parse, a
// persistable var of a type whose stream has another layout (combined
// files), a stream whose versions are not 0, whose LoD or TensorDesc runs
// past its file, whose data type is unknown, whose dims are negative or
// overflow, whose data runs past its file, or whose dtype or dims differ
// from those its var declares; a combined file with bytes after its last
// stream (more streams than vars) or that ends before its last; a
// per-var file missing, outside the model's folder, or with bytes after
// its stream. Files beside the program that no var names are not read.
//
// A state dict (`.pdparams`, paddle.save / fluid.save_dygraph) is a pickle
// of a dict name -> numpy array, read by our unpickler (nothing is called):
// each array is numpy's reduce (numpy.core.multiarray._reconstruct, then a
// state of version, shape, dtype, Fortran order and the bytes). Protocol 2
// writes the bytes as _codecs.encode(text, "latin1"), the text in UTF-8,
// so they lie in the file encoded and are decoded per read
// (Encoded::Method::Latin1Utf8); protocol 3 and later write them as they
// are, served in place. Values that are not arrays are listed in
// metadata.json as not tensors. Refused: a pickle that does not unpickle,
// a root that is not a dict, an array whose dtype or shape is malformed,
// or whose bytes are not exactly what its shape and dtype need.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"
#include "modelfs/dtype.hpp"

namespace modelfs::paddle {

inline constexpr std::string_view kFormat = "PaddlePaddle";
inline constexpr uint64_t kMaxRank = 64;
// LoD levels a stream may carry (parameters carry none).
inline constexpr uint64_t kMaxLodLevels = 64;
inline constexpr uint64_t kMaxTensorDescBytes = 64 << 10;

// A ProgramDesc: field 1 (a block) first, whose idx is 0 and parent_idx
// -1, as every writer puts them.
bool probe_program(std::span<const std::byte> head);
Catalog open_program(const ModelFile& model);
// A folder holding `__model__`, or one `*.pdmodel`, that is such a program.
bool probe_folder(const std::filesystem::path& folder);
Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks);

// A pickle of protocol 2 or later whose first value is a dict and whose
// head names numpy's array reconstruction.
bool probe_pdparams(std::span<const std::byte> head);
Catalog open_pdparams(const ModelFile& model);

// The dtype of a Paddle VarType data type code (framework.proto), or none.
std::optional<DType> dtype_of(uint64_t code);

}  // namespace modelfs::paddle
