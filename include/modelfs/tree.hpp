// SPDX-License-Identifier: Apache-2.0
#pragma once
// The tree: a Catalog turned into an immutable table of inodes, built once
// before mounting and only read afterwards, so FUSE threads share it with no
// locks. The inode number is the index in the table plus one (1 = root, as
// FUSE wants), so the hot path does no map lookup.
//
//   P          tensor bytes: one part, a range of the mapping
//   P.json     sidecar: printed when read (its size is fixed at build time;
//              keeping one per tensor would hold memory for files seldom read),
//              or, when big, printed at build and kept
//   P.npy      .npy header (made) + the same mapped range, or, for a strided
//              view, its elements gathered into C order on each read, or,
//              for a type numpy lacks, its values converted on each read
//   .modelfs/  index.json (printed when first read, then kept: a line per
//              tensor that most mounts never read), metadata.json
//              and the format's documents; model.safetensors (export.hpp:
//              a printed header, then one part per tensor) and export.json
#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "modelfs/block_store.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs {

// What a tensor's .npy holds: its values as numpy's `dtype` (the stored
// type where numpy has it; else the nearest numpy type that holds them
// exactly or as the format defines them: float32 for bfloat16, the float8,
// float6 and float4 types and every dequantized type; int8/uint8 for the
// 2- and 4-bit integers), converted from `from` (the stored type's name:
// "bfloat16", "q4_k", torch's "qint8"). `exact`: every value is the stored
// one (the stored type itself, or a widening); false for dequantized types.
struct NpyContent {
  DType dtype = DType::Float32;
  std::string_view from;
  bool exact = true;
};

struct TreeOptions {
  bool flat = false;  // keep every tensor name whole, as a file at the root
  // model.safetensors also holds the tensors safetensors has no type for,
  // as their .npy's converted values (export.hpp).
  bool export_float32 = false;
};

enum class NodeKind : uint8_t { Directory, File };
enum class FileRole : uint8_t { None, TensorData, Sidecar, NpyView, Document, Index };

struct DirEntry {
  // Lives in the tree's name store and is followed by a NUL there, so
  // name.data() is also a C string (what FUSE's directory replies take).
  std::string_view name;
  uint64_t ino;
};

// Bytes a file part computes for each read rather than holds: a strided
// view's elements gathered into C order, for instance. Sizes are fixed at
// build; a read costs in proportion to the range it asks for.
//
// The tree's read path (slice_parts) calls prepare() and then fill() under
// the mapped-bytes guard (src/include/modelfs/mapped_bytes.hpp), so a model
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

// Every field is inline, no heap block per node: a model with 100 000
// tensors has 400 000 nodes.
struct Node {
  NodeKind kind = NodeKind::File;
  FileRole role = FileRole::None;
  uint32_t nlink = 1;
  // Files: the content is the concatenation of parts [first_part,
  // first_part + part_count) of the tree's parts table (Tree::parts; small
  // sidecars have none: they are printed when read). The bytes belong to
  // the tree.
  uint32_t first_part = 0;
  uint32_t part_count = 0;
  uint64_t parent = 1;                 // the folder holding it; the root's is itself
  uint64_t size = 0;                   // files: bytes; folders: 0
  const Tensor* tensor = nullptr;      // tensor files, sidecars and .npy views (the catalog's)
  std::span<const DirEntry> children;  // folders: sorted by name (a range of the tree's entries)
};

class Tree {
 public:
  static constexpr uint64_t kRootIno = 1;

  static std::unique_ptr<const Tree> build(Catalog catalog, const TreeOptions& options);

  const Node* node(uint64_t ino) const noexcept {
    return ino >= 1 && ino <= nodes_.size() ? &nodes_[ino - 1] : nullptr;
  }
  std::optional<uint64_t> lookup(uint64_t parent, std::string_view name) const;
  // A '/'-separated path relative to the root ("" is the root).
  std::optional<uint64_t> resolve(std::string_view path) const;

  // The parts of [offset, offset + length) of a file's content, as iovecs
  // (slice_parts: no held byte is copied while `out` has room). A small
  // sidecar is printed, and computed bytes are computed, into `scratch`,
  // which must outlive the iovecs. Returns how many were written.
  size_t read(const Node& file, uint64_t offset, uint64_t length, std::span<iovec> out,
              std::string& scratch) const;
  // A front end's read: read(), then `reply` given the iovecs, which it
  // must have copied or sent by the time it returns. A remote model's blocks
  // the read made present stay in the cache until then (none evicted under
  // the reply). Returns what `reply` returns.
  int serve(const Node& file, uint64_t offset, uint64_t length, std::span<iovec> out, std::string& scratch,
            const std::function<int(std::span<const iovec>)>& reply) const;
  // A file's parts, in order.
  std::span<const Part> parts(const Node& file) const noexcept {
    return std::span(parts_).subspan(file.first_part, file.part_count);
  }
  // A file's whole content (tests, small documents).
  std::string content(const Node& file) const;

  // Nodes point into the tree's own tables: a copy would point into the
  // original, so there is none (a Tree lives behind its unique_ptr).
  Tree(const Tree&) = delete;
  Tree& operator=(const Tree&) = delete;

  // The catalog the tree was built from (its parsed metadata dropped:
  // served as metadata.json). Nodes point at its tensors.
  const Catalog& catalog() const noexcept { return catalog_; }
  std::span<const Tensor> tensors() const noexcept { return catalog_.tensors(); }
  // What a tensor's .npy holds (its sidecar's "npy"); none: no .npy.
  const std::optional<NpyContent>& npy_of(const Tensor& tensor) const {
    return npy_[static_cast<size_t>(&tensor - catalog_.tensors().data())];
  }
  // The path of each catalog tensor's raw file, relative to the root (made
  // from the tree when asked: index.json and tests are the only users).
  std::vector<std::string> tensor_paths() const;
  // One node's path relative to the root, '/'-separated ("" for the root),
  // into `out`; each level's name is found among its folder's entries.
  void path(uint64_t ino, std::string& out) const;
  size_t node_count() const noexcept { return nodes_.size(); }
  uint64_t total_bytes() const noexcept { return total_bytes_; }
  timespec mtime() const noexcept { return catalog_.mtime; }

 private:
  Tree() = default;
  friend class TreeBuilder;

  Catalog catalog_;
  std::vector<Node> nodes_;
  std::vector<DirEntry> entries_;               // every folder's children, folder after folder
  std::vector<Part> parts_;                     // every file's parts, file after file
  std::vector<std::optional<NpyContent>> npy_;  // one per catalog tensor
  // What nodes point into beyond the catalog: entry names; the converted
  // .npy views (one arena, numeric_views.hpp).
  TextStore texts_;
  std::shared_ptr<const void> views_;
  // The raw files of encoded tensors, inflated per read (inflate_view.hpp).
  std::vector<std::unique_ptr<const ComputedBytes>> decoded_views_;
  // Bytes the tree made and files point into: .npy headers (one per dtype
  // and shape) and the documents it printed. Node-based and deque storage:
  // adding one never moves another.
  std::unordered_set<std::string> npy_headers_;
  std::deque<std::string> documents_;
  std::vector<uint64_t> tensor_files_;  // each tensor's raw file
  // index.json, printed by the first reader (its size, measured at build,
  // is the file's).
  mutable std::once_flag index_printed_;
  mutable std::string index_text_;
  const std::string& index_text(uint64_t size) const;
  void for_each_tensor_path(const std::function<void(size_t, std::string_view)>& visit) const;
  uint64_t total_bytes_ = 0;
};

}  // namespace modelfs
