// SPDX-License-Identifier: Apache-2.0
#pragma once
// NumPy .npy files and .npz archives (docs/formats.md §10):
//
//   \x93NUMPY | major | minor | header length (u16 in 1.0, u32 in 2.0/3.0) |
//   header text: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//   padded with spaces and a final \n | numel x itemsize bytes of data
//
// The header is a Python dict literal, read by a parser of exactly that
// grammar (no evaluation): three keys, each once, a descr string of the
// allow-list below, a bool and a tuple of non-negative integers. Object
// arrays are pickles and are refused, never loaded. An .npz is a ZIP of
// such files, one per array: stored members are served from the mapping,
// deflated ones (np.savez_compressed) decoded per read (catalog.hpp,
// Encoded), their headers inflated alone at mount.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "formats/format_reader.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::numpy {

// numpy's writer never needs more than a few hundred bytes for an array of
// a type modelfs serves; a 2.0 header may be longer (written by hand, or
// padded), up to this.
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 20;
inline constexpr size_t kMaxRank = 64;  // numpy 2's NPY_MAXDIMS

// The fixed start of an .npy: magic, version, header length.
struct Preamble {
  uint8_t major = 0;
  uint8_t minor = 0;
  uint64_t header_length = 0;
  uint64_t header_start = 0;  // 10 for 1.0, 12 for 2.0 and 3.0

  uint64_t data_start() const noexcept { return header_start + header_length; }
  std::string version() const { return std::to_string(major) + "." + std::to_string(minor); }
};

// What the header dict says.
struct Header {
  std::string descr;  // as written; a structured dtype's list is refused
  bool fortran_order = false;
  std::vector<uint64_t> shape;
};

// What a descr is for modelfs: a tensor dtype, or why it is not one.
struct DescrKind {
  std::optional<DType> dtype;
  bool object = false;      // '|O': a pickle
  bool text = false;        // 'S', 'U', 'a': strings, left out of an .npz
  bool big_endian = false;  // '>' and more than a byte: served byte-swapped
  std::string refusal;      // when no dtype: what the array is, for a message
};

// Every error is a ModelError naming `file`, `format` and the offset in the
// file (`base` is the offset of the .npy's first byte), its reason after
// `prefix` (an .npz's "member \"x.npy\": ").
struct Where {
  std::string file;
  std::string format;
  uint64_t base = 0;
  std::string prefix;
};

// The first 10 or 12 bytes of `bytes` (at least 12 unless the file is
// shorter); refuses a bad magic, a version numpy does not write, a header
// length past kMaxHeaderBytes.
Preamble parse_preamble(std::span<const std::byte> bytes, const Where& where);
// The header text (header_length bytes after the preamble).
Header parse_header(std::string_view text, const Preamble& preamble, const Where& where);
DescrKind descr_kind(std::string_view descr);

bool probe_file(std::span<const std::byte> head);
Catalog open_file(const ModelFile& model);

// True when `zip` is an .npz: every member named *.npy and the first one
// starting with the .npy magic. open_npz then reads it or says why not.
bool is_npz_archive(const ZipArchive& zip);
Catalog open_npz(const ModelFile& model, const ZipArchive& zip);

}  // namespace modelfs::numpy
