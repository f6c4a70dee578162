// SPDX-License-Identifier: Apache-2.0
#pragma once
// The rules a tensor of pieces (catalog.hpp, Piece) must keep, checked in
// one place (Catalog::add calls check_pieces), and the grid its box pieces
// form, which the tree's gathering view (src/tree/pieces_view.hpp) reads
// through.
//
// Box pieces must form a grid: along each dimension the pieces' starts cut
// [0, shape) into intervals, and every piece is exactly one cell of the
// product of those cuts (its extent, clipped at the shape, reaching the
// next cut). That is what HDF5 chunks (one chunk shape), TensorFlow
// partitioned variables (uneven slices along one dimension) and
// distributed torch checkpoints (row, column or row-and-column shards)
// are. A tiling that is not such a grid (bricks offset from one row to the
// next) is refused: with a grid, coverage is checked in O(n log n) and a
// read finds its pieces by a binary search per dimension.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelfs/catalog.hpp"

namespace modelfs {

// What one filtered piece may decode to (an HDF5 chunk is at most 4 GiB by
// its format, but the library's own writers keep them at about 1 MiB).
inline constexpr uint64_t kMaxDecodedPiece = uint64_t{256} << 20;
// Serving's decode memory: filtered pieces decoded whole are kept in one
// pool for the process, at most this many bytes in all whatever the
// threads; a piece decodes whole only up to kDecodedWhole, so several fit.
// A larger one is read as a stream for the bytes a read wants.
inline constexpr uint64_t kServingDecodedBytes = uint64_t{64} << 20;
inline constexpr uint64_t kDecodedWhole = kServingDecodedBytes / 4;

// "deflate", "shuffle", "fletcher32": the sidecar's names.
std::string_view piece_filter_name(PieceFilter filter) noexcept;

// HDF5's Fletcher-32 checksum of `bytes` (16-bit big-endian words, an odd
// last byte as the high byte of one).
uint32_t fletcher32(std::span<const std::byte> bytes) noexcept;

// Whether `stored` (bytes, then their 4-byte checksum) holds its bytes'
// Fletcher-32: stored little-endian, or byte-swapped as HDF5 1.6.0-1.6.2
// wrote it, which libhdf5 accepts too.
bool fletcher32_holds(std::span<const std::byte> stored) noexcept;

// The checksum bytes a piece stores after what its other filters made:
// Fletcher-32's 4 when it is the last filter applied (the only place
// check_pieces lets it be), else none.
inline constexpr uint64_t kFletcher32Bytes = 4;
inline uint64_t checksum_bytes(std::span<const PieceFilter> filters) noexcept {
  return !filters.empty() && filters.back() == PieceFilter::Fletcher32 ? kFletcher32Bytes : 0;
}

// The sidecar's "pieces" value, appended to `out` on one line: per piece,
// its file, offset and stored size; for box pieces its start, extent and
// filters; "zeros" for a piece never written.
void append_pieces_json(std::string& out, const Tensor& tensor);
// One piece of it: the object, on one line.
void append_piece_json(std::string& out, const Piece& piece);

// Box pieces (start and extent of the tensor's rank), or run pieces.
inline bool box_pieces(const Tensor& tensor) noexcept {
  return !tensor.pieces.empty() && !tensor.pieces.front().start.empty();
}

// The cells box pieces form: along dimension d, cuts[d] are the distinct
// starts, sorted (the first is 0), and cell (c0, c1, ...) spans
// [cuts[d][c_d], next cut or shape[d]) of each; piece[cell] is the index
// of the piece that is it, cells in C order.
struct PieceGrid {
  std::vector<std::vector<uint64_t>> cuts;
  std::vector<uint32_t> piece;
};

// Throws ModelError (naming `file`, `format` and the tensor) when the
// tensor's pieces break a rule (docs/design.md, "Views and shared bytes"):
// mixed kinds, a box of the wrong rank, a zero extent, a start outside the
// shape, a type whose elements are not whole bytes (box pieces), sizes
// that disagree with the bytes or the shape, a filtered piece decoding
// past kMaxDecodedPiece, a filter twice, filtered run pieces, strides not
// in C order, bytes beside the pieces, overlaps and holes. Nothing for a
// tensor without pieces.
void check_pieces(const Tensor& tensor, std::string_view file, std::string_view format);

// The grid of a tensor's box pieces (throws ModelError as check_pieces for
// pieces that do not form one, overlap or leave a hole).
PieceGrid piece_grid(const Tensor& tensor, std::string_view file, std::string_view format);

}  // namespace modelfs
