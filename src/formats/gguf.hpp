// SPDX-License-Identifier: Apache-2.0
#pragma once
// GGUF (ggml's model format; docs/formats.md, "GGUF"). All integers little-endian:
//
//   "GGUF" | u32 version | count tensor_count | count kv_count
//   kv_count x   { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | dim ne[n_dims] | u32 ggml_type
//                    | u64 offset }
//   padding to `alignment` | data section (tensor i at data_start + offset_i)
//
//   v2, v3: count, dim and string/array lengths are u64; v1: all three u32
//   (the tensor offset stays u64). v3 differs from v2 only in allowing
//   big-endian files, which modelfs refuses: it serves tensor bytes from the
//   mapping as they are, and sidecars promise little-endian bytes. A file
//   beginning "FUGG" with a little-endian version is a pre-release draft of
//   the format (its development branch wrote the magic as an integer,
//   little-endian), not GGUF: refused as such.
//   string = length + bytes (no terminator); array value = u32 elem_type |
//   length | elements (arrays of arrays allowed, up to kMaxArrayDepth).
//   alignment = the UINT32 key general.alignment, a power of two, else 32;
//   the padding before the data exists only when tensor_count > 0.
//
// Checks: every count and length against the bytes that remain before
// anything is allocated; keys and tensor names unique; each tensor's ggml
// type known (removed ids refused), ne[0] a multiple of the block size,
// byte size = ne[0] / block_size x type_size x ne[1] x ... overflow-checked,
// offset aligned, bytes inside the file, no two tensors' bytes overlapping
// (gaps and any order are allowed, unlike ggml's stricter reader).
//
// What a tensor becomes: shape = ne reversed (outermost first). Plain types
// (f32 f16 bf16 f64 i8 i16 i32 i64) get their canonical dtype; block types
// get DType::GgmlBlock; every tensor points at its ggml type (GgmlType in
// dtype.hpp, the one table of ggml types).
// `strides` are C-order element strides for every type: for a block type
// they locate an element logically, and since every row (ne[0] elements) is
// a whole number of blocks, row r starts at byte r x ne[0] / block_size x
// type_size. The sidecar prints the type's ggml_type (id), ggml_type_name,
// block_size, type_size.
//
// Metadata (.modelfs/metadata.json): "gguf" {version, alignment,
// tensor_count, kv_count, data_offset}; "kv" {key: value} with numbers as
// numbers (float32 values written in their shortest round-trip form, NaN and
// infinities as null, which JSON lacks), bools as bools, strings as strings
// (invalid UTF-8 replaced on output), arrays as arrays; "kv_types" {key:
// "uint32" | "string" | "array[float32]" | "array[array]" ...}.
//
// Split models (<name>-00001-of-00003.gguf with keys split.no, split.count,
// split.tensors.count): any member of the set, or a folder holding one set,
// mounts the whole set as one tree. The top-level "gguf", "kv", "kv_types"
// are the first file's; "split_files" lists the others' as {file, gguf, kv,
// kv_types}.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::gguf {

inline constexpr uint32_t kMinVersion = 1;
inline constexpr uint32_t kMaxVersion = 3;
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;           // GGML_MAX_DIMS
inline constexpr uint64_t kMaxNameBytes = 65535;  // keys and tensor names
inline constexpr int kMaxArrayDepth = 8;          // arrays of arrays of ...

// What one .gguf file holds.
struct File {
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;         // where the data section starts in the file
  std::vector<TensorSpec> tensors;  // in tensor-info order
  nlohmann::json kv = nlohmann::json::object();
  nlohmann::json kv_types = nlohmann::json::object();

  // The "gguf" metadata object: version, alignment, counts, data_offset.
  nlohmann::json header_json() const;
};

// Parses and validates a mapped .gguf file. `name` is what tensors'
// sources call it; messages use the mapped file's path.
File parse(std::shared_ptr<const MappedFile> file, const std::string& name);
// The GGUF lying in [base, base + length) of `file` (a stored member of a
// llamafile's ZIP): offsets inside it count from `base`, as its writer
// counted them; tensors' bytes and sources are file offsets. `data_offset`
// stays relative to `base`.
File parse(std::shared_ptr<const MappedFile> file, const std::string& name, uint64_t base, uint64_t length);

bool probe_file(std::span<const std::byte> head);
// A folder holding the files of exactly one split set (or several, which
// open() then refuses by name).
bool probe_folder(const std::filesystem::path& folder);

// A single file, any member of a split set, or a folder holding a set.
Catalog open_file(const ModelFile& model);
Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks);

}  // namespace modelfs::gguf
