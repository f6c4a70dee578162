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
//   .modelfs/  index.json (printed for each read from the nearest of a
//              mark every 256 tensors: a line per tensor is not kept),
//              metadata.json
//              and the format's documents; model.safetensors (export.hpp:
//              a printed header, then one part per tensor) and export.json
#include <sys/uio.h>

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelfs/api.hpp"
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

class Budget;

struct TreeOptions {
  // What building the tree may take: the budget the catalog was read with
  // (OpenOptions::budget), which has grown with its metadata. Null: not
  // bounded.
  Budget* budget = nullptr;
  bool flat = false;  // keep every tensor name whole, as a file at the root
  // model.safetensors also holds the tensors safetensors has no type for,
  // as their .npy's converted values (export.hpp).
  bool export_float32 = false;
};

enum class NodeKind : uint8_t { Directory, File };
enum class FileRole : uint8_t { None, TensorData, Sidecar, NpyView, Document, Index };

struct Part;  // tree_parts.hpp

struct DirEntry {
  // Lives in the tree's name store and is followed by a NUL there, so
  // name.data() is also a C string (what FUSE's directory replies take).
  std::string_view name;
  uint64_t ino;
};

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

  MODELFS_API static std::unique_ptr<const Tree> build(Catalog catalog, const TreeOptions& options);
  MODELFS_API ~Tree();

  MODELFS_API const Node* node(uint64_t ino) const noexcept;
  MODELFS_API std::optional<uint64_t> lookup(uint64_t parent, std::string_view name) const;
  // A '/'-separated path relative to the root ("" is the root).
  MODELFS_API std::optional<uint64_t> resolve(std::string_view path) const;

  // The parts of [offset, offset + length) of a file's content, as iovecs
  // (slice_parts: no held byte is copied while `out` has room). A small
  // sidecar is printed, and computed bytes are computed, into `scratch`,
  // which must outlive the iovecs. Returns how many were written.
  // A read of its own (ReadScope::Kind::Copied: each local file it reaches
  // is checked against its size now), or one of the caller's `scope`.
  MODELFS_API size_t read(const Node& file, uint64_t offset, uint64_t length, std::span<iovec> out,
                          std::string& scratch) const;
  MODELFS_API size_t read(const Node& file, uint64_t offset, uint64_t length, std::span<iovec> out,
                          std::string& scratch, ReadScope& scope) const;
  // A front end's read: read() in a ReadScope of Kind::Served, then `reply`
  // given the iovecs, which it must have copied or sent by the time it
  // returns. A remote model's blocks the read made present stay in the
  // cache until then (none evicted under the reply). Returns what `reply`
  // returns.
  int serve(const Node& file, uint64_t offset, uint64_t length, std::span<iovec> out, std::string& scratch,
            const std::function<int(std::span<const iovec>)>& reply) const;
  // A file's parts, in order (tree_parts.hpp: the library's own).
  std::span<const Part> parts(const Node& file) const noexcept;
  // A file's whole content (tests, small documents).
  MODELFS_API std::string content(const Node& file) const;

  // Nodes point into the tree's own tables: a copy would point into the
  // original, so there is none (a Tree lives behind its unique_ptr).
  Tree(const Tree&) = delete;
  Tree& operator=(const Tree&) = delete;

  // The catalog the tree was built from (its parsed metadata dropped:
  // served as metadata.json). Nodes point at its tensors.
  MODELFS_API const Catalog& catalog() const noexcept;
  std::span<const Tensor> tensors() const noexcept { return catalog().tensors(); }
  // What a tensor's .npy holds (its sidecar's "npy"); none: no .npy.
  MODELFS_API const std::optional<NpyContent>& npy_of(const Tensor& tensor) const;
  // The path of each catalog tensor's raw file, relative to the root (made
  // from the tree when asked: index.json and tests are the only users).
  MODELFS_API std::vector<std::string> tensor_paths() const;
  // One node's path relative to the root, '/'-separated ("" for the root),
  // into `out`; each level's name is its entry in its folder.
  MODELFS_API void path(uint64_t ino, std::string& out) const;
  MODELFS_API size_t node_count() const noexcept;
  MODELFS_API uint64_t total_bytes() const noexcept;
  timespec mtime() const noexcept { return catalog().mtime; }

 private:
  struct Impl;  // tree_parts.hpp, beside tree.cpp
  explicit Tree(std::unique_ptr<Impl> impl) noexcept;
  friend class TreeBuilder;

  std::unique_ptr<Impl> impl_;
};

}  // namespace modelfs
