// SPDX-License-Identifier: Apache-2.0
#pragma once
// The raw file of a tensor of pieces (catalog.hpp, Piece), and the views
// that read it.
//
//   pieces_parts   the raw file as parts: run pieces, and box pieces that
//                  tile the tensor in whole rows along dimension 0 (none
//                  filtered, none reaching past the shape), are held parts
//                  straight from their mappings (zero copy, several files
//                  in one raw file); zeros run pieces read as zeros;
//                  any other box pieces are one PiecesView
//   PiecesView     gathers each read's range from the pieces it touches,
//                  found on their grid (modelfs/pieces.hpp) by a binary
//                  search per dimension, so a read costs what it asks plus
//                  the pieces it touches. A filtered piece of at most
//                  kDecodedWhole is decoded whole into a pool shared by the
//                  process (kServingDecodedBytes in all), so a sequential
//                  reader decodes each about once; a larger one, or one
//                  that finds no room, is read as a stream for just the
//                  bytes a read wants (through the deflate index)
//   ConvertedView  a C-order array read from another content's parts and
//                  converted element by element (ElementConversion,
//                  numeric_views.hpp): the .npy of a tensor of pieces whose
//                  type numpy lacks (bfloat16 -> float32, a quantized type)
//
// The mapped-bytes rule (ARCHITECTURE.md): all the work is done in
// prepare(), outside the read path's guard: it allocates, makes the
// pieces' bytes present through their files, decodes and copies under its
// own guard (read_mapped) into the calling thread's buffer; fill() only
// copies from that buffer. A decoded stream must give exactly the bytes
// its box says, or the read fails (ModelError: EIO), never short or padded.
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/pieces.hpp"
#include "modelfs/catalog.hpp"
#include "tree/numeric_views.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs {

// The raw file of `tensor` (which has pieces, checked by Catalog::add) as
// parts laid out from 0. Views it makes go to `views`, which must outlive
// the parts; `file` and `format` name the model in a failed read's message.
std::vector<Part> pieces_parts(const Tensor& tensor, const std::string& file, const std::string& format,
                               std::vector<std::unique_ptr<const ComputedBytes>>& views);

// Where one read's bytes come from: `length` bytes at `from` of a piece's
// decoded bytes, to `to` of the read's output.
struct PieceSegment {
  uint32_t piece;
  uint64_t from;
  uint64_t to;
  uint64_t length;
};

class PiecesView final : public ComputedBytes {
 public:
  PiecesView(const Tensor& tensor, PieceGrid grid, std::string file, std::string format);
  ~PiecesView() override;
  PiecesView(const PiecesView&) = delete;
  PiecesView& operator=(const PiecesView&) = delete;
  uint64_t size() const noexcept { return size_; }
  void prepare(uint64_t offset, uint64_t length) const override;
  void fill(uint64_t offset, std::span<std::byte> out) const override;

 private:
  // What `segments` (of filtered piece `index`, sorted by `from`) want of
  // its decoded bytes, into `out`, read as a stream: inflated from the
  // nearest point of the deflate index (inflate_index.hpp; `indexed`: kept
  // there too), unshuffled on the way, nothing held but the bytes wanted.
  void stream(uint32_t index, std::span<const PieceSegment> segments, std::byte* out, bool indexed) const;
  // Filtered piece `index` decoded whole, from the process's pool; null
  // when it is too large to keep whole or the pool has no room for it.
  std::shared_ptr<const std::vector<std::byte>> decoded(uint32_t index) const;
  [[noreturn]] void fault(uint32_t index, const std::string& reason) const;

  uint64_t id_;  // which cached pieces are this view's (addresses are reused)
  const Tensor* tensor_;
  std::unique_ptr<std::atomic<bool>[]> checked_;  // a piece's Fletcher-32 seen to hold
  PieceGrid grid_;
  uint64_t element_;  // bytes of an element
  uint64_t size_;
  std::string file_;
  std::string format_;
};

class ConvertedView final : public ComputedBytes {
 public:
  // The `numel` elements stored in C order in `stored` (parts laid out
  // from 0, outliving the view) through `conversion`; null when they do
  // not fit `stored` or the view would pass kViewBound (npy.hpp).
  static std::unique_ptr<ConvertedView> make(std::span<const Part> stored, uint64_t numel,
                                             std::shared_ptr<const ElementConversion> conversion);
  uint64_t size() const noexcept { return size_; }
  void prepare(uint64_t offset, uint64_t length) const override;
  void fill(uint64_t offset, std::span<std::byte> out) const override;

 private:
  ConvertedView(std::span<const Part> stored, uint64_t numel, uint64_t stored_size,
                std::shared_ptr<const ElementConversion> conversion);
  uint64_t id_;
  std::span<const Part> stored_;
  uint64_t numel_;
  uint64_t stored_size_;
  uint64_t size_;
  std::shared_ptr<const ElementConversion> conversion_;
};

}  // namespace modelfs
