// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Catalog is where format readers and the tree meet: what a model holds,
// independent of how its format stores it. A reader fills one; the tree
// builder turns it into files. Neither side knows the other's insides.
//
//   tensors    name, dtype, shape, strides and the bytes to serve (a range
//              of a mapped model file, or a small buffer modelfs made),
//              kept compact from the start: readers append TensorSpecs,
//              the catalog copies them into its own stores, and the tree
//              points at the catalog's tensors
//   metadata   what the format says about the model as a whole (JSON)
//   documents  files stored as they are under .modelfs/ (graph.json, ...)
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "modelfs/api.hpp"
#include "modelfs/block_store.hpp"
#include "modelfs/dtype.hpp"
#include "modelfs/json_release.hpp"
#include "modelfs/mapped_file.hpp"

namespace modelfs {

// Bytes that stay valid as long as the span (or a copy) lives: `owner` keeps
// the mapping or buffer they point into alive. What hands out the bytes
// themselves (span(), view()) makes them present first, so a remote model's
// unfetched range is never read as the zeros of its sparse cache file.
class MODELFS_API ByteSpan {
 public:
  ByteSpan() = default;
  // A range of a mapped file; the caller has bounds-checked it (throws
  // std::out_of_range otherwise, a bug, never a bad file).
  static ByteSpan mapped(std::shared_ptr<const MappedFile> file, uint64_t offset, uint64_t length);
  // Bytes modelfs made itself (sidecars, .npy headers, decoded fields).
  static ByteSpan owned(std::string bytes);

  // Where the bytes lie, not made present: an address to compare or to
  // hand on, not to read (span() and view() read).
  const std::byte* data() const noexcept { return data_; }
  uint64_t size() const noexcept { return size_; }
  // The bytes, present (MappedFile::read: a remote model's blocks are
  // fetched, or ModelError), for the read `scope` (null: a reader's parse).
  std::span<const std::byte> span(ReadScope* scope = nullptr) const;
  std::string_view view() const {
    const auto bytes = span();
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }
  // Bytes [offset, offset + length) of these, sharing their owner; throws
  // std::out_of_range when the range does not fit (a bug, never a bad file).
  ByteSpan subspan(uint64_t offset, uint64_t length) const;
  // The mapped file these bytes lie in, or null for owned bytes.
  const MappedFile* mapped_file() const noexcept { return file_; }
  // Where they start in that file (0 for owned bytes).
  uint64_t file_offset() const noexcept;

 private:
  std::shared_ptr<const void> owner_;
  const MappedFile* file_ = nullptr;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

// Where a tensor's bytes lie in the model's files, for the sidecar.
struct TensorSource {
  std::string file;                // as listed in Catalog::files
  std::optional<uint64_t> offset;  // absent when the bytes were decoded
};

// How a quantized tensor's stored values q become its values. Torch's
// schemes: (q - zero_point) x scale, per tensor or per channel along
// `axis`, whose scales and zero points are the catalog's tensors of those
// names. MinScaleAffine: q x scale + min, computed in float64 and rounded
// to `values` (float32, or int32: rounded half up to an integer first, and
// wrapped modulo 2^32). Widened: the stored floats as `values` (float32).
// What the file gave, unchecked: the views check it against the tensor.
// These are the fields but the names of the parameter tensors, the same in
// a TensorSpec and a Tensor: the catalog copies them as one.
struct QuantizationParameters {
  QScheme scheme = QScheme::PerTensorAffine;
  std::optional<double> scale;        // per tensor
  std::optional<int64_t> zero_point;  // per tensor (torch)
  std::optional<int64_t> axis;        // per channel
  std::optional<double> min;          // MinScaleAffine
  DType values = DType::Float32;      // the values' type (the .npy's)
  // Per channel, when the file keeps the parameters beside the tensor
  // (TensorFlow Lite) rather than as tensors of their own, so that
  // `scales` and `zero_points` name none: their bytes, one entry per
  // channel (float32 or float64 scales, int32 or int64 zero points).
  ByteSpan channel_scales;
  DType channel_scales_dtype = DType::Float32;
  ByteSpan channel_zero_points;
  DType channel_zero_points_dtype = DType::Int64;
};
// `Text` is std::string in a TensorSpec, a view into the catalog's stores
// in a Tensor.
template <typename Text>
struct BasicQuantization : QuantizationParameters {
  Text scales;       // per channel: the tensor's name
  Text zero_points;  // per channel: the tensor's name
};
using Quantization = BasicQuantization<std::string_view>;

// A tensor whose bytes are stored encoded (a deflated .npz member, a
// big-endian array, a pickled array's latin-1 text): its `bytes` are the encoded stream (a range of the
// mapping), and its raw file is `size` bytes from `decoded_offset` of what
// the stream decodes to. The tree decodes what each read asks for
// (src/tree/inflate_view.hpp, SwapView in src/tree/numeric_views.hpp);
// nothing is decoded whole.
struct Encoded {
  enum class Method : uint8_t {
    Deflate,   // raw deflate (ZIP method 8)
    ByteSwap,  // big-endian: every `swap_bytes` bytes reversed (both parts of a complex number)
    // Latin-1 text in UTF-8 (a protocol-2 pickle's bytes): each byte below
    // 0x80 as itself, each other as two; the stream is all of `bytes`.
    Latin1Utf8,
  };
  Method method = Method::Deflate;
  uint64_t decoded_offset = 0;
  uint64_t size = 0;
  // What the whole stream decodes to: a stream that yields more or less is
  // a fault of the read that reaches its end.
  uint64_t decoded_size = 0;
  uint8_t swap_bytes = 0;  // ByteSwap: 2, 4 or 8; the stream is `size` bytes from 0
};

// A tensor whose bytes are not one range of one file is a list of pieces
// (TensorSpec::pieces): the shard files a tensor spans (TensorFlow.js), the
// slices of a partitioned variable (TensorFlow bundles, distributed torch
// checkpoints), the chunks of an HDF5 dataset. The raw file is still the
// tensor's C-order bytes; the tree assembles it from the pieces, serving
// pieces that are runs of the raw file straight from their mappings and
// gathering or decoding the rest per read.
//
// Run pieces (start and extent empty): each is the next `size` bytes of the
// raw file, in order. Box pieces (start and extent of the tensor's rank):
// each holds the elements [start, start + extent) of every dimension as a
// C-order array of `extent`, which may reach past the shape (an HDF5 edge
// chunk): what lies outside is dropped. A tensor's pieces are all of one
// kind; box pieces cover every element exactly once (Catalog::add refuses
// overlaps and holes).
enum class PieceFilter : uint8_t {
  Deflate,  // a zlib stream (HDF5's gzip filter)
  Shuffle,  // bytes transposed by element size (HDF5's shuffle filter)
  // The bytes and 4 more: HDF5's Fletcher-32 checksum of them (its
  // fletcher32 filter), only as the last filter applied.
  Fletcher32,
};

template <typename Text, typename Dims, typename Filters>
struct BasicPiece {
  ByteSpan bytes;     // as stored: encoded when `filters` is not empty
  uint64_t size = 0;  // decoded bytes: bytes.size() when there is no filter
  Dims start;         // box pieces: per dimension, in elements
  Dims extent;
  Filters filters;  // in the order the writer applied them; undone last first
  // Where the stored bytes lie, for the sidecar and --check.
  struct Source {
    Text file;
    std::optional<uint64_t> offset;
  } source;
  // No bytes stored: the piece reads as zeros (an HDF5 chunk never written).
  bool zeros = false;
};
using Piece = BasicPiece<std::string_view, std::span<const uint64_t>, std::span<const PieceFilter>>;

struct TensorSpec;  // src/io/tensor_spec.hpp, the readers' side

// A tensor of a catalog: views into the catalog's stores, valid while the
// catalog lives (a catalog may be moved; its stores do not move).
struct MODELFS_API Tensor {
  std::string_view name;  // as the format stores it, unsplit
  DType dtype = DType::Float32;
  const GgmlType* ggml = nullptr;  // as TensorSpec::ggml
  std::span<const uint64_t> shape;
  std::span<const int64_t> strides;
  ByteSpan bytes;
  struct Source {
    std::string_view file;
    std::optional<uint64_t> offset;
  } source;
  const Quantization* quantization = nullptr;  // a torch quantized tensor's, in the catalog's stores
  // The sidecar's lines for the format extras, as printed once by the
  // catalog: ",\n  \"key\": value" each, in key order; empty for none.
  std::string_view extras_lines;
  // As TensorSpec::encoded, in the catalog's stores (null: stored as it
  // is, as nearly every tensor is: a pointer, not the 40 bytes of an
  // optional, in every tensor).
  const Encoded* encoded = nullptr;
  // As TensorSpec::pieces (then `bytes` is empty), in the catalog's stores.
  std::span<const Piece> pieces;

  // Bytes of the raw file: the stored bytes' size, the decoded size of an
  // encoded tensor, or what its pieces assemble to.
  uint64_t nbytes() const noexcept {
    return encoded ? encoded->size : pieces.empty() ? bytes.size() : pieces_size;
  }
  uint64_t pieces_size = 0;  // what the pieces assemble to, set by Catalog::add
  // The sidecar's extras as JSON (null: none), the typed fields' among
  // them: for listing them, not for printing a sidecar.
  nlohmann::json extras() const;
  // What the typed fields (ggml, quantization) print in the sidecar, among
  // the extras: an object, empty for none.
  nlohmann::json typed_extras() const;
  // "float32", ..., or the ggml block type name.
  std::string_view dtype_name() const;
  // Strides are exactly those of a C-order (row-major) array of `shape`.
  bool is_c_contiguous() const;
  // Strides are exactly those of a Fortran-order (column-major) array.
  bool is_f_contiguous() const;
};

// C-order strides of `shape`, in elements, as torch computes them (a zero
// dimension counts as one, so strides stay meaningful for empty tensors);
// none when the product of the dimensions other than zeros passes int64, a
// shape numpy and torch refuse (an empty tensor's other dimensions are
// still the file's numbers).
MODELFS_API std::optional<std::vector<int64_t>> contiguous_strides(std::span<const uint64_t> shape);

struct Document {
  std::string path;     // relative to .modelfs/, '/'-separated
  std::string content;  // stored as is
};

// A verification a format can make beyond parsing (a CRC, a checksum), run
// by `modelfs --check`, never at mount. `run` reads the bytes it checks,
// reports them through `progress`, and throws ModelError on a fault.
// Readers make them only when the caller asks (open_model's `checks`): a
// mount never holds them (a torch.save archive has one per record).
struct IntegrityCheck {
  std::string what;  // "CRC-32 of archive/data/0", for messages
  uint64_t bytes = 0;
  std::function<void(const std::function<void(uint64_t)>& progress)> run;
};
using IntegrityChecks = std::vector<IntegrityCheck>;

// What the export file (.modelfs/model.safetensors) needs to know of a
// model beyond its tensors, said by the reader that knows it.
struct ExportHints {
  // What `__metadata__`'s "format" says the tensors are laid out as (what
  // transformers reads: "pt" for a PyTorch checkpoint); none where claiming
  // a layout would mislead a loader (a format's own names and layouts).
  std::optional<std::string> checkpoint_format;
  // Models held side by side, each under a tensor-name prefix: (name,
  // prefix), each also exported to a file of its own.
  std::vector<std::pair<std::string, std::string>> models;
};

class Catalog {
 public:
  Catalog() = default;
  Catalog(const Catalog&) = default;
  Catalog(Catalog&&) noexcept = default;
  Catalog& operator=(const Catalog&) = default;
  Catalog& operator=(Catalog&&) noexcept = default;
  // The metadata is let go without the scratch nlohmann's destructor takes
  // (json_release.hpp): a catalog refused at its budget unwinds within it.
  ~Catalog() { release_json(metadata); }

  std::string format;  // "safetensors", ...
  // Model files read, named as the model names them: the model file's own
  // name, shards and external data relative to its folder. The same names
  // as each tensor's source.file; never the path given on the command line,
  // so index.json and --info are the same wherever the model is opened from.
  std::vector<std::string> files;
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<Document> documents;
  timespec mtime{};  // of the (first) model file: the tree's times
  // Formats whose tensors may share bytes (tied weights, views of one
  // storage) set this; elsewhere overlapping tensors are a fault.
  bool tensors_may_share_bytes = false;
  ExportHints export_hints;

  // Appends a tensor, copying what it names into the catalog's stores
  // (charged to the current budget).
  const Tensor& add(const TensorSpec& spec);
  // Appends another catalog's tensor (a shard's), into this one's stores.
  const Tensor& add(const Tensor& tensor);
  // Room for `count` tensors, when a reader knows how many it will add:
  // the table is then made once at its size, not doubled as it grows
  // (each doubling holding both copies at once).
  void reserve(size_t count) { tensors_.reserve(count); }
  // In the order added (file order).
  std::span<const Tensor> tensors() const noexcept { return tensors_; }
  // Gives back the table's spare room once every tensor is added (the tree
  // is built on top of it; the catalog's stores never move).
  void shrink_to_fit() { tensors_.shrink_to_fit(); }

 private:
  std::string_view intern(std::string_view text);
  // Both adds: `from` (a TensorSpec or a Tensor) copied into the stores.
  template <typename From>
  const Tensor& store(const From& from);

  std::vector<Tensor> tensors_;
  // What the tensors view: names and printed extras, and the few distinct
  // source files and block types (interned); shapes; strides. Blocks that
  // never move, so a moved catalog's views stay valid.
  TextStore texts_;
  std::unordered_set<std::string_view> interned_;
  BlockStore<uint64_t> shapes_;
  BlockStore<int64_t> strides_;
  BlockStore<Quantization> quantizations_;
  BlockStore<Encoded> encodings_;
  BlockStore<Piece> pieces_;
  BlockStore<PieceFilter> filters_;
};

}  // namespace modelfs
