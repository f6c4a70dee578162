// SPDX-License-Identifier: Apache-2.0
#pragma once
// The tree's insides (tree.hpp is its public face): what files are made of,
// the read path over them, and the tables a Tree holds. Private to the
// library: src/tree, its tests and fuzzers.
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "modelfs/block_store.hpp"
#include "modelfs/catalog.hpp"
#include "modelfs/tree.hpp"

namespace modelfs {

// Bytes a file part computes for each read rather than holds: a strided
// view's elements gathered into C order, for instance. Sizes are fixed at
// build; a read costs in proportion to the range it asks for.
//
// The tree's read path (slice_parts) calls prepare() and then fill() under
// the mapped-bytes guard (src/io/mapped_bytes.hpp), so a model
// file shrunk under the mount fails the read instead of the process: fill()
// must read only what prepare() made present and, while it reads a mapping,
// hold only trivially destructible objects (a fault leaves by longjmp).
class ComputedBytes {
 public:
  virtual ~ComputedBytes() = default;
  // Does what a fill of [offset, offset + length) needs outside the guard:
  // makes present the mapped bytes it reads, taking them through their
  // source (ByteSpan::span(): a remote model's blocks; ModelError when they
  // cannot be had). Nothing for bytes already in memory.
  virtual void prepare(uint64_t /*offset*/, uint64_t /*length*/) const {}
  // Writes bytes [offset, offset + out.size()) of the part into `out`; the
  // range lies within the part.
  virtual void fill(uint64_t offset, std::span<std::byte> out) const = 0;
};

// A part of a file's content: bytes held in memory (a range of a mapping,
// text the tree printed) or bytes computed for each read. Held bytes of a
// mapping keep their file, through which the read path makes them present.
struct Part {
  const std::byte* bytes = nullptr;         // held, or
  const ComputedBytes* computed = nullptr;  // computed (then `bytes` is null)
  uint64_t size = 0;
  uint64_t offset = 0;                 // where it starts in its file (the tree sets it)
  const MappedFile* source = nullptr;  // the mapping `bytes` lie in; null: bytes in memory

  // Bytes the tree made (a header, a printed document).
  static Part held(std::span<const std::byte> span) { return {span.data(), nullptr, span.size()}; }
  // A catalog's bytes (a tensor's range of its mapping), kept with their file.
  static Part held(const ByteSpan& span) {
    return {span.data(), nullptr, span.size(), 0, span.mapped_file()};
  }
};

// What a content is made of: one part, or parts kept elsewhere, in order
// (the raw file of a tensor of pieces: several held parts, zero copy).
// The parts' `offset`s are each one's start in the content.
class PartList {
 public:
  PartList() = default;
  PartList(const Part& one) : one_(one), size_(one.size) {}  // NOLINT(google-explicit-constructor)
  // `many` outlive the list; their offsets laid out from 0.
  explicit PartList(std::span<const Part> many)
      : many_(many.data()),
        count_(many.size()),
        size_(many.empty() ? 0 : many.back().offset + many.back().size) {}
  std::span<const Part> parts() const noexcept {
    return many_ != nullptr ? std::span(many_, count_) : std::span(&one_, 1);
  }
  uint64_t size() const noexcept { return size_; }
  // The one part a list of one is (its computed bytes, for instance); null otherwise.
  const Part* single() const noexcept { return many_ == nullptr ? &one_ : count_ == 1 ? many_ : nullptr; }

 private:
  Part one_{};
  const Part* many_ = nullptr;
  size_t count_ = 0;
  uint64_t size_ = 0;
};

// Bytes [offset, offset + out.size()) of a content made of `parts` (each
// one's `offset` set, in order) copied into `out`, each part as the read
// path copies it: made present first, then read under the mapped-bytes
// guard (ModelError when a mapping faults). For a view that reads another
// content (a converted .npy of a tensor of pieces) in its prepare().
void copy_parts(std::span<const Part> parts, uint64_t offset, std::span<std::byte> out);

// The parts of [offset, offset + length) of a content made of `parts` (each
// one's `offset` set, in order), as iovecs in `out`: into held bytes
// without a copy, into `scratch` for computed bytes. A request always gets
// all its bytes: when the parts it spans outnumber `out`, the last iovec
// holds the rest copied into `scratch` (FUSE takes a short read for the end
// of the file). The copy and the scratch are bounded by `length`; `scratch`
// must outlive the iovecs and `out` must hold at least one. Returns how many
// were written. It is where a read makes mapped bytes present: held bytes
// through their part's file (MappedFile::read), computed ones through the
// part's prepare(), both before any iovec points at them. Every byte it
// computes or copies is read under the mapped-bytes guard: a mapping that
// faults (its file shrank) throws ModelError, and the iovecs into held
// bytes are read only by the caller.
size_t slice_parts(std::span<const Part> parts, uint64_t offset, uint64_t length, std::span<iovec> out,
                   std::string& scratch);

// index.json's text, one line per tensor (tree_read.cpp): the builder
// measures it with these, and read_index prints it with the same ones.
void append_index_head(std::string& out, const Catalog& catalog);
void append_index_line(std::string& out, const Tensor& tensor, std::string_view path, bool last);
void append_index_tail(std::string& out);

// A Tree's tables, built by TreeBuilder (tree.cpp) and read through Tree.
struct Tree::Impl {
  Catalog catalog_;
  std::vector<Node> nodes_;
  std::vector<DirEntry> entries_;               // every folder's children, folder after folder
  std::vector<Part> parts_;                     // every file's parts, file after file
  std::vector<std::optional<NpyContent>> npy_;  // one per catalog tensor
  // What nodes point into beyond the catalog: entry names; the converted
  // .npy views (one arena, numeric_views.hpp).
  TextStore texts_;
  std::shared_ptr<const void> views_;
  // The raw files of encoded tensors, inflated per read (inflate_view.hpp),
  // and the views of tensors of pieces (pieces_view.hpp).
  std::vector<std::unique_ptr<const ComputedBytes>> decoded_views_;
  // The raw files of tensors of pieces, as parts (pieces_view.hpp): the
  // tensor's files, its .npy and the export point at them.
  BlockStore<Part> piece_parts_;
  // Bytes the tree made and files point into: .npy headers (one per dtype
  // and shape) and the documents it printed. Node-based and deque storage:
  // adding one never moves another.
  std::unordered_set<std::string> npy_headers_;
  std::deque<std::string> documents_;
  std::vector<uint64_t> tensor_files_;  // each tensor's raw file
  // Each node's entry in its folder (an index into entries_; the root's is
  // unused): a node's name, and so its path, without a search.
  std::vector<uint32_t> entry_of_;
  // index.json is printed for each read, from the line of the tensor
  // before the range that a mark gives (its size, measured at build, is the
  // file's): the head, then a line per tensor, then the tail. Holding it
  // printed would cost a line per tensor (~140 bytes) for the mount's life.
  static constexpr size_t kIndexStride = 256;
  uint64_t index_head_size_ = 0;
  // Where the line of tensor k * kIndexStride starts, past the head.
  std::vector<uint64_t> index_marks_;
  size_t read_index(const Node& file, uint64_t offset, uint64_t length, std::span<iovec> out,
                    std::string& scratch) const;
  // The path of tensor `i`'s raw file, relative to the root, into `out`.
  void tensor_path(size_t i, std::string& out) const;
  uint64_t total_bytes_ = 0;
};

}  // namespace modelfs
