// SPDX-License-Identifier: Apache-2.0
#pragma once
// HDF5 files (.h5, .weights.h5, h5py's) and Keras 3 .keras archives
// (docs/formats.md §10):
//
//   HDF5: superblock (\x89HDF\r\n\x1a\n at 0, or at 512, 1024, ... after a
//   user block), object headers, B-trees and heaps: groups of links to
//   groups and datasets; a dataset's bytes contiguous (one extent),
//   chunked (a chunk index, each chunk filtered: deflate, shuffle, ...) or
//   compact (inside its object header).
//   .keras: a ZIP of metadata.json, config.json and model.weights.h5,
//   stored, so the HDF5 file is a range of the archive.
//
// The format is read by libhdf5, but only in a sandboxed child process
// (hdf5_sandbox.hpp); the child sends records, which this side validates
// as it would a file: every offset and size inside the HDF5 bytes, sizes
// equal to shape x element size, chunk coordinates on the chunk grid and
// inside the shape, filters only Deflate and Shuffle, names and counts
// bounded, and a type served in place only when every property of its
// bits equals its dtype's. Tensors are then served from the mapping: contiguous datasets
// as ranges, chunked ones as box pieces (catalog.hpp, Piece), compact ones
// as owned bytes. Datasets of other types (strings, compound, references,
// variable length) and layouts (virtual, external) are left out and
// listed in metadata.json with why.
//
// The record stream (child -> parent, little-endian; str = u32 length +
// bytes):
//   'B' u64 base address                     where the superblock is (after a user
//                                            block); at most once, before any 'D'.
//                                            Every data address below counts from it
//   'A' str name, str value                  a root attribute (Keras metadata)
//   'S' str path, str reason                 an object left out by the child
//   'D' str path, u8 class, u64 size, u8 order, u8 sign,
//       u64 x 5 float fields (sign pos, exp pos, exp size, mant pos, mant size), u64 exp bias,
//       u64 precision, u64 bit offset, u8 lsb pad, u8 msb pad, u8 norm, u8 internal pad
//       (libhdf5's enum values; 255 where the class has no such property),
//       u8 is_bool, str opaque tag, str dtype attribute,
//       u8 rank, u64 dims[rank], u8 layout, u8 external, then by layout:
//         contiguous: u64 offset (kUndefined: none), u64 storage size
//         chunked:    u64 chunk[rank], u8 n, u32 filter[n], u8 fill is zero,
//                     u64 count (kUndefined: too many cells), count x
//                     (u64 coords[rank], u32 filter mask, u64 address, u64 size)
//         compact:    u64 n (kUndefined: too large), n bytes
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "formats/format_reader.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::hdf5 {

inline constexpr uint8_t kRecordAttribute = 'A';
inline constexpr uint8_t kRecordSkipped = 'S';
inline constexpr uint8_t kRecordDataset = 'D';
inline constexpr uint8_t kRecordBase = 'B';
inline constexpr uint8_t kLayoutCompact = 0, kLayoutContiguous = 1, kLayoutChunked = 2, kLayoutVirtual = 3,
                         kLayoutOther = 255;
inline constexpr uint64_t kUndefined = ~uint64_t{0};

inline constexpr size_t kMaxRank = 32;  // HDF5's H5S_MAX_RANK
inline constexpr unsigned kMaxDepth = 64;
inline constexpr uint64_t kMaxObjects = 1'000'000;
inline constexpr uint64_t kMaxPathBytes = 4096;
inline constexpr uint64_t kMaxAttributeBytes = uint64_t{16} << 20;
inline constexpr uint64_t kMaxCompactBytes = 64 * 1024;  // HDF5's own bound on a compact dataset
inline constexpr uint64_t kMaxChunkCells = 1'000'000;    // per dataset
inline constexpr uint64_t kMaxFileChunkCells = 4'000'000;
// libhdf5 1.10 finds a chunk by walking the dataset's chunk index from its
// start (there is no chunk iterator before 1.14), so looking up every cell
// of a grid costs cells x stored chunks steps: a file may take this many
// (about a second), a dataset past what is left is left out. Its chunk
// count is then sent as kTooManyLookups.
inline constexpr uint64_t kMaxChunkLookupSteps = uint64_t{1} << 25;
inline constexpr uint64_t kTooManyLookups = kUndefined - 1;

// The HDF5 signature at 0, 512, 1024, ... of the probed head.
bool probe_file(std::span<const std::byte> head);
// The signature further on, at 2^n bytes past the head (a user block of
// any size before it), where libhdf5 looks for it too.
bool probe_past_head(const MappedFile& file, uint64_t head_bytes);
Catalog open_file(const ModelFile& model);
// A Keras 3 archive: config.json, metadata.json and model.weights.h5.
bool is_keras_archive(const ZipArchive& zip);
Catalog open_keras(const ModelFile& model, const ZipArchive& zip);

// Where the HDF5 bytes lie: [base, base + length) of the mapped file.
struct Source {
  std::shared_ptr<const MappedFile> file;
  uint64_t base = 0;
  uint64_t length = 0;
  std::string name;     // as Catalog::files names it
  std::string display;  // for messages
};
// The parent's side: a child's record stream turned into `catalog`'s
// tensors and metadata, every record checked against `source` (also what
// the unit tests and the fuzzer drive, without a child).
void add_records(Catalog& catalog, std::string_view records, const Source& source);

}  // namespace modelfs::hdf5
