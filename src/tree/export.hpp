// SPDX-License-Identifier: Apache-2.0
#pragma once
// .modelfs/model.safetensors: the whole model as one safetensors file, made
// of parts (tree.hpp): the header the plan prints, then each tensor's
// parts in the header's order. A tensor stored in C order is its range of
// the mapping, a tensor of pieces its raw file's parts; a strided view is gathered into C order on each read
// (the tree's gather, numeric_views.hpp); with -o export=float32, a tensor safetensors has no type for is its
// .npy's converted values (numeric_views.hpp). Nothing is materialised: only the header is printed, at build.
//
// The header follows the rules the reference reader checks: data offsets
// contiguous from 0 in header order with no overlap or gap, each range
// exactly the bytes its dtype and shape need, the header's length a
// multiple of 8 padded with spaces, dtypes by the safetensors names, and no
// name twice. What cannot be written (no safetensors type, a torch
// quantized type, a name already taken, a view past kViewBound: npy.hpp)
// is left out and named, with the reason, in .modelfs/export.json.
// docs/design.md, "The export file".
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/checked_math.hpp"
#include "modelfs/catalog.hpp"
#include "modelfs/tree.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs {

// What the tree offers the export of one tensor.
struct ExportInput {
  const Tensor* tensor = nullptr;  // the catalog's: outlives the plan's files
  // Its elements in C order (the stored bytes, or a gather of a strided
  // view); none when the tree cannot gather them.
  // A tensor of pieces' are its raw file's parts.
  std::optional<PartList> c_order;
  // Its values are not its stored integers (a torch quantized type): the
  // .npy dequantizes them.
  bool dequantized = false;
  // Its .npy's body where that converts the values (C order), and their type.
  std::optional<Part> converted;
  DType converted_dtype = DType::Float32;
};

// One safetensors file of the plan: the header (its 8-byte length, the
// JSON and the padding) and the file's parts: an empty one first, the
// header's place (the header's part is its caller's to make, once the
// header is where it stays), then the tensors', in header order.
struct ExportFile {
  std::string header;
  std::vector<Part> tensors;
};

// `__metadata__`'s entries, in order.
using ExportMetadata = std::vector<std::pair<std::string, std::string>>;

class ExportPlan {
 public:
  // The reference reader refuses a header longer than this.
  static constexpr uint64_t kMaxHeader = 100'000'000;

  // `float32`: -o export=float32.
  explicit ExportPlan(bool float32) : float32_(float32) {}

  // Room for `tensors` adds, so the plan is not copied as it grows.
  void reserve(size_t tensors) { entries_.reserve(tensors); }
  // The bytes the whole model stores (its tensors' stored bytes, chunks
  // never written counting none), before the first add: the export as a
  // whole keeps the view bound against it, so that many views each just
  // under the bound (expand()s, unwritten HDF5 datasets) cannot add up to a
  // terabyte file from a small one.
  void set_model_stored(uint64_t bytes) { model_stored_ = bytes; }
  // The next tensor in catalog order.
  void add(const ExportInput& input);
  // The file of the tensors whose names start with `prefix`, named without
  // it (a PT2 archive's model); "" for the whole model. Null, and why in
  // `why_not`, when its header would pass kMaxHeader or its size 2^64.
  std::optional<ExportFile> file(std::string_view prefix, const ExportMetadata& metadata,
                                 std::string& why_not) const;
  // export.json: what was converted and what was left out, with why.
  std::string report(std::string_view file_note) const;

 private:
  struct Entry {
    const Tensor* tensor;    // its name and shape
    std::string_view dtype;  // safetensors name
    PartList part;
  };
  // Prints the header of `prefix`'s file into `h` (or, `parts` null, only
  // measures it: `h` gets each entry in turn); false, and why, when it
  // cannot be made.
  bool print_header(std::string_view prefix, const ExportMetadata& metadata, std::string& h, size_t& size,
                    std::vector<Part>* parts, std::string& why_not) const;
  // The index of the entry whose name prints as `key`, or of the free slot.
  size_t slot_of(std::string_view key, std::string& scratch) const;

  bool float32_;
  uint64_t model_stored_ = 0;
  Size total_ = 0;  // the entries' bytes
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string_view, std::string>> left_out_;
  std::vector<std::pair<std::string_view, std::string>> converted_;
  // The entries by their names as the header prints them: indices plus one
  // (0: free), open addressing, at most half full. (A set of the printed
  // names would hold a copy of each.)
  std::vector<uint32_t> keys_;
};

// The export's __metadata__ for `catalog`: "format" where the reader gave
// one (ExportHints::checkpoint_format), then the source file's name and
// format.
ExportMetadata export_metadata(const Catalog& catalog);

}  // namespace modelfs
