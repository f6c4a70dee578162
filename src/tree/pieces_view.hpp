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
//                  the pieces it touches. A filtered piece is decoded whole
//                  (at most kMaxDecodedPiece) and kept in a small per-thread
//                  cache, so a sequential reader decodes each about once
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
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "modelfs/catalog.hpp"
#include "modelfs/pieces.hpp"
#include "numeric_views.hpp"
#include "tree_parts.hpp"

namespace modelfs {

// The raw file of `tensor` (which has pieces, checked by Catalog::add) as
// parts laid out from 0. Views it makes go to `views`, which must outlive
// the parts; `file` and `format` name the model in a failed read's message.
std::vector<Part> pieces_parts(const Tensor& tensor, const std::string& file, const std::string& format,
                               std::vector<std::unique_ptr<const ComputedBytes>>& views);

class PiecesView final : public ComputedBytes {
 public:
  PiecesView(const Tensor& tensor, PieceGrid grid, std::string file, std::string format);
  uint64_t size() const noexcept { return size_; }
  void prepare(uint64_t offset, uint64_t length) const override;
  void fill(uint64_t offset, std::span<std::byte> out) const override;

 private:
  // Piece `index`'s stored bytes with its filters undone, into `out`.
  void decode(uint32_t index, std::vector<std::byte>& out) const;
  // The decoded bytes of filtered piece `index`, from the thread's cache.
  const std::byte* decoded(uint32_t index) const;
  [[noreturn]] void fault(uint32_t index, const std::string& reason) const;

  uint64_t id_;  // which cached pieces are this view's (addresses are reused)
  const Tensor* tensor_;
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
