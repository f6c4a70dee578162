// SPDX-License-Identifier: Apache-2.0
#include "modelfs/tree.hpp"

#include <malloc.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <initializer_list>
#include <unordered_map>
#include <unordered_set>

#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "io/json_text.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"
#include "tree/export.hpp"
#include "tree/inflate_view.hpp"
#include "tree/naming.hpp"
#include "tree/npy.hpp"
#include "tree/numeric_views.hpp"
#include "tree/pieces_view.hpp"
#include "tree/sidecar.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs {

class TreeBuilder {
 public:
  TreeBuilder(Tree::Impl& tree, const TreeOptions& options)
      : tree_(tree), options_(options), export_(options.export_float32) {}

  void build() {
    Node root;
    root.kind = NodeKind::Directory;
    root.nlink = 2;
    root.parent = Tree::kRootIno;
    push(std::move(root));
    meta_dir_ = directory(Tree::kRootIno, ".modelfs");

    // Folders first, so that a tensor file never takes a folder's name:
    // the folder keeps it and the file gets a "~N" suffix.
    // A name's components are split again in the second pass rather than
    // kept: that would be several strings per tensor alive at once, and
    // fresh pages cost more than splitting twice.
    const auto tensors = tree_.catalog_.tensors();
    std::vector<uint64_t> folder_of(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i)
      folder_of[i] = directories_for(tensor_path_components(tensors[i].name, options_.flat));
    // The rest is known now: three files a tensor, the documents with their
    // folders, and the few files and folders of .modelfs/ (an export file
    // for each of at most kMaxModelFiles models). Growing past a
    // reservation would copy the whole table, holding both copies at once.
    size_t more = 3 * tensors.size() + 2 * kMaxModelFiles + 16;
    for (const auto& document : tree_.catalog_.documents)
      more += 1 + static_cast<size_t>(std::count(document.path.begin(), document.path.end(), '/'));
    tree_.nodes_.reserve(tree_.nodes_.size() + more);
    // A tensor's raw file, .npy header and body, and its export part; a
    // document's one. Growing past it would copy the table.
    tree_.parts_.reserve(4 * tensors.size() + tree_.catalog_.documents.size() + 8);
    // Every node but the root is one folder entry.
    tree_.entries_.reserve(tree_.nodes_.size() + more);

    export_.reserve(tensors.size());
    Size stored = 0;
    for (const Tensor& t : tensors) {
      if (t.pieces.empty()) stored += t.bytes.size();
      for (const Piece& p : t.pieces) stored += p.bytes.size();
    }
    export_.set_model_stored(stored.ok() ? stored.value() : UINT64_MAX);
    tree_.tensor_files_.reserve(tensors.size());
    tree_.npy_.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i)
      add_tensor(tensors[i], tensor_path_components(tensors[i].name, options_.flat), folder_of[i]);
    add_export();
    add_documents();
    finish_folders();
    // Several export files (a PT2 archive's models) may pass the reservation,
    // growing the table to up to twice what it holds: given back then. (A
    // table that fits its reservation is not copied for a few spare parts.)
    if (tree_.parts_.capacity() - tree_.parts_.size() > tree_.parts_.size() / 8) tree_.parts_.shrink_to_fit();
  }

 private:
  static constexpr size_t kMaxModelFiles = 64;
  // Sidecars up to this size are printed for each read (most are a few
  // hundred bytes, and a read asks for the whole file).
  static constexpr size_t kPrintedWhenRead = 16 << 10;
  // For each folder, .npy or not, and base that clashed: the first suffix
  // free_name has not found taken.
  std::unordered_map<std::string, uint64_t> next_suffix_;

  Node& node(uint64_t ino) { return tree_.nodes_[ino - 1]; }

  uint64_t push(Node value) {
    tree_.nodes_.push_back(std::move(value));
    return tree_.nodes_.size();
  }

  // Every node but the root is an entry of its folder: the tree's entries
  // table holds them in the order they are made while building (sorted by
  // folder and name at the end, in place), and a table of entry indices
  // hashed by folder and name finds them.
  uint64_t add_node(uint64_t parent, std::string_view name, Node value) {
    value.parent = parent;
    const uint64_t ino = push(std::move(value));
    auto& entries = tree_.entries_;
    if ((entries.size() + 1) * 2 > slots_.size()) rehash(std::max<size_t>(64, slots_.size() * 2));
    entries.push_back({tree_.texts_.add(name), ino});
    slots_[slot_of(parent, name)] = static_cast<uint32_t>(entries.size());
    return ino;
  }

  static size_t hash(uint64_t dir, std::string_view name) noexcept {
    return std::hash<std::string_view>()(name) ^ (dir * 0x9E3779B97F4A7C15ULL);
  }

  // The slot of `name` in `dir`, or the empty slot where it would go.
  size_t slot_of(uint64_t dir, std::string_view name) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash(dir, name) & mask;; i = (i + 1) & mask) {
      const uint32_t at = slots_[i];
      if (at == 0) return i;
      const DirEntry& entry = tree_.entries_[at - 1];
      if (entry.name == name && tree_.nodes_[entry.ino - 1].parent == dir) return i;
    }
  }

  void rehash(size_t size) {
    std::vector<uint32_t>(size, 0).swap(slots_);
    const size_t mask = size - 1;
    const auto& entries = tree_.entries_;
    for (size_t e = 0; e < entries.size(); ++e) {
      size_t i = hash(tree_.nodes_[entries[e].ino - 1].parent, entries[e].name) & mask;
      while (slots_[i] != 0) i = (i + 1) & mask;
      slots_[i] = static_cast<uint32_t>(e + 1);
    }
  }

  // The entry `name` of `dir`.
  std::optional<uint64_t> find(uint64_t dir, std::string_view name) const {
    if (slots_.empty()) return std::nullopt;
    const uint32_t at = slots_[slot_of(dir, name)];
    if (at == 0) return std::nullopt;
    return tree_.entries_[at - 1].ino;
  }

  uint64_t directory(uint64_t parent, std::string_view name) {
    Node dir;
    dir.kind = NodeKind::Directory;
    dir.nlink = 2;
    const uint64_t ino = add_node(parent, name, std::move(dir));
    node(parent).nlink++;
    return ino;
  }

  // The folders of a tensor's path, made as needed; returns the innermost.
  // Consecutive tensors mostly share folders (model.layers.3.*), so the
  // previous tensor's chain is reused as far as it matches, and each folder
  // past that is looked up in its parent. Only folders exist yet, and no
  // component of a dotted name can be ".modelfs", so a name found is a
  // folder to reuse.
  uint64_t directories_for(const std::vector<std::string>& parts) {
    const size_t depth = parts.empty() ? 0 : parts.size() - 1;
    size_t same = 0;
    while (same < depth && same < chain_.size() && chain_[same].first == parts[same]) ++same;
    chain_.resize(same);
    uint64_t parent = same ? chain_.back().second : Tree::kRootIno;
    for (size_t i = same; i < depth; ++i) {
      const auto found = find(parent, parts[i]);
      parent = found ? *found : directory(parent, parts[i]);
      chain_.emplace_back(parts[i], parent);
    }
    return parent;
  }

  // The first of base, base~1, base~2, ... whose file names are all free.
  // Names are only ever added, so a suffix found taken stays taken: the
  // search for a clashing base goes on from where the last one for it (in
  // that folder, with or without a .npy) stopped, and n names clashing on
  // one path cost n tries, not n^2 / 2.
  std::string free_name(uint64_t dir, const std::string& base, bool with_npy) {
    auto is_free = [&](const std::string& name) {
      return !find(dir, name) && !find(dir, name + ".json") && (!with_npy || !find(dir, name + ".npy"));
    };
    if (is_free(base)) return base;
    std::string key = std::to_string(dir) + (with_npy ? "+" : "-") + base;
    auto [next, fresh] = next_suffix_.try_emplace(std::move(key), 1);
    if (fresh) charge(next->first.size() + 64, "the tree's suffixes for clashing names");
    for (uint64_t& n = next->second;; ++n) {
      std::string candidate = base + "~" + std::to_string(n);
      if (is_free(candidate)) return candidate;
    }
  }

  uint64_t add_file(uint64_t dir, std::string_view name, FileRole role, std::initializer_list<Part> parts,
                    const Tensor* tensor) {
    return add_file(dir, name, role, std::span(parts.begin(), parts.size()), tensor);
  }

  // The file's parts go to the end of the tree's table, each with its offset.
  uint64_t add_file(uint64_t dir, std::string_view name, FileRole role, std::span<const Part> parts,
                    const Tensor* tensor) {
    Node file;
    file.role = role;
    file.tensor = tensor;
    auto& table = tree_.parts_;
    if (table.size() + parts.size() > UINT32_MAX)
      throw ModelError(tree_.catalog_.files.empty() ? std::string() : tree_.catalog_.files.front(),
                       tree_.catalog_.format, std::nullopt, "more file parts than the tree can number");
    file.first_part = static_cast<uint32_t>(table.size());
    file.part_count = static_cast<uint32_t>(parts.size());
    Size size = 0;
    for (Part part : parts) {
      part.offset = size.value();
      size += part.size;
      table.push_back(part);
    }
    file.size = size.value();
    return add_node(dir, name, std::move(file));
  }

  // What the tree allocates while it is built is charged as it is allocated
  // (budget.hpp); what it charges by hand is memory it will hold later.
  void charge(uint64_t bytes, std::string_view what) {
    const auto& catalog = tree_.catalog_;
    charge_budget(bytes, catalog.files.empty() ? std::string() : catalog.files.front(), catalog.format, what);
  }

  // A tensor's .npy: its header's descr and order, its body, and what it
  // holds (for the sidecar); no body, no .npy.
  struct NpyBody {
    std::optional<PartList> body;
    std::optional<NpyContent> content;
    std::string_view descr;
    bool fortran = false;
    bool dequantized = false;  // its values are not its stored integers
    bool converted = false;    // `body` converts the stored values (numeric_views.hpp)
  };

  // The stored bytes where numpy has the type and they are in C or Fortran
  // order; else the view's elements gathered into C order on each read;
  // else (a type numpy lacks, a quantized type) the values converted on
  // each read (numeric_views.hpp).
  NpyBody npy_body(const Tensor& tensor, const std::optional<Part>& decoded) {
    NpyBody out;
    out.content = npy_content(tensor);
    if (!out.content) return out;
    if (tensor.encoded) {
      // The decoded bytes in C or Fortran order, as stored; nothing else is
      // gathered from a stream that is decoded per read.
      if (decoded && out.content->exact && out.content->dtype == tensor.dtype &&
          (tensor.is_c_contiguous() || tensor.is_f_contiguous())) {
        out.body = decoded;
        out.descr = *numpy_descr(tensor.dtype);
        out.fortran = !tensor.is_c_contiguous();
      } else {
        out.content.reset();
      }
      return out;
    }
    out.dequantized = !out.content->exact;
    const bool stored = out.content->exact && out.content->dtype == tensor.dtype;
    if (!stored) {
      std::optional<Part> view;
      if (tensor.dtype == DType::GgmlBlock) {
        const auto numel = checked_numel(tensor.shape);
        if (numel && tensor.is_c_contiguous())
          view = computed(arena().add(BlockView::make(tensor.bytes, *tensor.ggml, *numel)));
      } else if (out.content->exact) {
        view = element_view(tensor, plain_conversion(tensor.dtype));
      } else {
        view = element_view(tensor, quantized_conversion(tensor));
      }
      if (view) {
        out.body = view;
        out.converted = true;
        out.descr = *numpy_descr(out.content->dtype);
        return out;
      }
      // A quantized tensor whose parameters cannot be used: its stored
      // integers.
      if (!numpy_descr(tensor.dtype)) {
        out.content.reset();
        return out;
      }
      out.content = NpyContent{tensor.dtype, dtype_name(tensor.dtype), true};
    }
    out.descr = *numpy_descr(tensor.dtype);
    if (tensor.is_c_contiguous() || tensor.is_f_contiguous()) {
      out.body = Part::held(tensor.bytes);
      out.fortran = !tensor.is_c_contiguous();
    } else {
      out.body = gathered(tensor);
    }
    if (!out.body) out.content.reset();
    return out;
  }

  // The .npy of a tensor of pieces (C order): its raw file where numpy has
  // the type; else its values converted, read through the raw file.
  NpyBody pieced_npy_body(const Tensor& tensor, const PartList& raw) {
    NpyBody out;
    out.content = npy_content(tensor);
    if (!out.content) return out;
    out.dequantized = !out.content->exact;
    if (out.content->exact && out.content->dtype == tensor.dtype) {
      out.body = raw;
      out.descr = *numpy_descr(tensor.dtype);
      return out;
    }
    // ggml block types are held by no format of pieces: no view of them.
    std::shared_ptr<const ElementConversion> conversion;
    if (tensor.dtype != DType::GgmlBlock)
      conversion = out.content->exact ? plain_conversion(tensor.dtype) : quantized_conversion(tensor);
    const auto numel = checked_numel(tensor.shape);
    std::unique_ptr<ConvertedView> view;
    if (numel) view = ConvertedView::make(raw.parts(), *numel, std::move(conversion));
    if (view) {
      out.body = Part{nullptr, view.get(), view->size()};
      out.converted = true;
      out.descr = *numpy_descr(out.content->dtype);
      tree_.decoded_views_.push_back(std::move(view));
      return out;
    }
    // A quantized tensor whose parameters cannot be used: its stored integers.
    if (tensor.dtype == DType::GgmlBlock || !numpy_descr(tensor.dtype)) {
      out.content.reset();
      return out;
    }
    out.content = NpyContent{tensor.dtype, dtype_name(tensor.dtype), true};
    out.descr = *numpy_descr(tensor.dtype);
    out.body = raw;
    return out;
  }

  // The raw file of a tensor of pieces, its parts kept by the tree; none
  // for a tensor of one range.
  std::optional<PartList> pieced_part_list(const Tensor& tensor) {
    if (tensor.pieces.empty()) return std::nullopt;
    const auto& catalog = tree_.catalog_;
    const std::string file = !tensor.source.file.empty() ? std::string(tensor.source.file)
                             : catalog.files.empty()     ? std::string()
                                                         : catalog.files.front();
    const std::vector<Part> parts = pieces_parts(tensor, file, catalog.format, tree_.decoded_views_);
    return PartList(tree_.piece_parts_.add(parts));
  }

  // The part `view` computes (none when the arena refused it).
  template <typename View>
  static std::optional<Part> computed(const View* view) {
    if (view == nullptr) return std::nullopt;
    return Part{nullptr, view, view->size()};
  }

  // The view of `tensor`'s elements through `conversion`, in the arena.
  std::optional<Part> element_view(const Tensor& tensor,
                                   std::shared_ptr<const ElementConversion> conversion) {
    const ElementView* view =
        arena().add(ElementView::make(tensor.bytes, tensor.shape, tensor.strides, std::move(conversion)));
    return computed(view);
  }

  // The tensor's elements gathered into C order, as stored.
  std::optional<Part> gathered(const Tensor& tensor) {
    return element_view(tensor, copy_conversion(dtype_bits(tensor.dtype) / 8));
  }

  // The dequantization of a quantized tensor from its quantization
  // (npy_content has checked its storage type); per channel, the scales and
  // zero points are the catalog's tensors it names. Null when they do not
  // fit the tensor.
  std::unique_ptr<ElementConversion> quantized_conversion(const Tensor& tensor) {
    const auto shape = tensor.shape;
    const Quantization& q = *tensor.quantization;
    if (q.scheme == QScheme::MinScaleAffine || q.scheme == QScheme::Widened)
      return dequantization(q, tensor.dtype);
    if (qscheme_per_tensor(q.scheme)) {
      if (!q.scale || !q.zero_point) return nullptr;
      return affine_conversion(tensor.dtype, PerTensorAffine{*q.scale, *q.zero_point});
    }
    if (!q.axis) return nullptr;
    const int64_t a = *q.axis;
    if (a < 0 || static_cast<uint64_t>(a) >= shape.size()) return nullptr;
    const uint64_t channels = shape[static_cast<size_t>(a)];
    PerChannelAffine p;
    if (q.scales.empty()) {
      // Kept beside the tensor: one entry per channel.
      auto one_per_channel = [channels](const ByteSpan& bytes, DType dtype) {
        return channels > 0 && bytes.size() / (dtype_bits(dtype) / 8) == channels &&
               bytes.size() % (dtype_bits(dtype) / 8) == 0;
      };
      if (!one_per_channel(q.channel_scales, q.channel_scales_dtype) ||
          !one_per_channel(q.channel_zero_points, q.channel_zero_points_dtype))
        return nullptr;
      p.scales = q.channel_scales;
      p.scales_dtype = q.channel_scales_dtype;
      p.zero_points = q.channel_zero_points;
      p.zero_points_dtype = q.channel_zero_points_dtype;
    } else {
      const Tensor* scales = catalog_tensor(q.scales);
      const Tensor* zeros = catalog_tensor(q.zero_points);
      auto one_per_channel = [channels](const Tensor* t) {
        return t != nullptr && t->shape.size() == 1 && t->shape[0] == channels && t->is_c_contiguous();
      };
      if (!one_per_channel(scales) || !one_per_channel(zeros)) return nullptr;
      p.scales = scales->bytes;
      p.scales_dtype = scales->dtype;
      p.zero_points = zeros->bytes;
      p.zero_points_dtype = zeros->dtype;
    }
    p.float_qparams = q.scheme == QScheme::PerChannelAffineFloatQParams;
    p.channels = channels;
    auto inner = checked_numel(shape.subspan(static_cast<size_t>(a) + 1));
    if (!inner) return nullptr;
    p.inner = *inner;
    return affine_conversion(tensor.dtype, p);
  }

  // Where converted views are kept: sized, on first use, for every tensor
  // whose .npy may convert, and owned by the tree with the tensors' bytes.
  ViewArena& arena() {
    if (arena_ == nullptr) {
      size_t elements = 0, blocks = 0;
      for (const auto& t : tree_.catalog_.tensors()) {
        const auto content = npy_content(t);
        if (!content) continue;
        // Converted, or gathered into C order (for the .npy or the export).
        if (content->exact && content->dtype == t.dtype && t.is_c_contiguous()) continue;
        ++(t.dtype == DType::GgmlBlock ? blocks : elements);
      }
      auto arena = std::make_shared<ViewArena>(elements, blocks);
      arena_ = arena.get();
      tree_.views_ = std::move(arena);
    }
    return *arena_;
  }

  // The tensor's elements in C order, for the export: its stored bytes, the
  // .npy's gather of a strided view, or (a Fortran-order or sub-byte-free
  // view the .npy serves as stored) a gather made here; none where the
  // strides reach outside the bytes or elements are smaller than a byte.
  std::optional<PartList> c_order(const Tensor& tensor, const NpyBody& npy,
                                  const std::optional<Part>& decoded, const std::optional<PartList>& pieced) {
    if (pieced) return pieced;
    if (tensor.encoded) {
      if (!tensor.is_c_contiguous() || !decoded) return std::nullopt;
      return *decoded;
    }
    if (tensor.is_c_contiguous()) return Part::held(tensor.bytes);
    if (npy.body && npy.body->single() != nullptr && npy.body->single()->computed != nullptr &&
        !npy.converted)
      return npy.body;
    if (dtype_bits(tensor.dtype) % 8 != 0) return std::nullopt;
    return gathered(tensor);
  }

  // The catalog's tensor of that name (the first, where names repeat).
  const Tensor* catalog_tensor(std::string_view name) {
    if (!catalog_names_) {
      catalog_names_ = std::make_unique<std::unordered_map<std::string_view, const Tensor*>>();
      for (const auto& t : tree_.catalog_.tensors()) catalog_names_->emplace(t.name, &t);
    }
    auto it = catalog_names_->find(name);
    return it == catalog_names_->end() ? nullptr : it->second;
  }

  void add_tensor(const Tensor& tensor, const std::vector<std::string>& parts, uint64_t dir) {
    check_budget();
    const std::optional<PartList> pieced = pieced_part_list(tensor);
    const std::optional<Part> decoded = decoded_part(tensor);
    const NpyBody npy = pieced ? pieced_npy_body(tensor, *pieced) : npy_body(tensor, decoded);
    tree_.npy_.push_back(npy.content);
    const std::string name = free_name(dir, parts.back(), npy.body.has_value());

    const Part stored = decoded ? *decoded : Part::held(tensor.bytes);
    tree_.tensor_files_.push_back(
        add_file(dir, name, FileRole::TensorData, pieced ? pieced->parts() : std::span(&stored, 1), &tensor));
    export_.add({.tensor = &tensor,
                 .c_order = c_order(tensor, npy, decoded, pieced),
                 .dequantized = npy.dequantized,
                 .converted = npy.converted ? std::optional<Part>(*npy.body->single()) : std::nullopt,
                 .converted_dtype = npy.content ? npy.content->dtype : DType::Float32});
    // A sidecar is printed when read, but one too big to print again for
    // every small read (a shape of millions of dimensions) is kept as
    // printed: its size follows the metadata the model file holds.
    std::string sidecar = sidecar_text(tensor, tree_.catalog_.format, npy.content);
    if (sidecar.size() > kPrintedWhenRead) {
      const std::string& kept = tree_.documents_.emplace_back(std::move(sidecar));
      add_file(dir, name + ".json", FileRole::Sidecar, {Part::held(std::as_bytes(std::span(kept)))}, &tensor);
    } else {
      const uint64_t file = add_file(dir, name + ".json", FileRole::Sidecar, {}, &tensor);
      node(file).size = sidecar.size();
    }
    if (npy.body) {
      std::vector<Part>& npy_parts = scratch_parts_;
      npy_parts.assign(1, shared_npy_header(npy_header(npy.descr, tensor.shape, npy.fortran)));
      const auto body = npy.body->parts();
      npy_parts.insert(npy_parts.end(), body.begin(), body.end());
      add_file(dir, name + ".npy", FileRole::NpyView, npy_parts, &tensor);
    }
    tree_.total_bytes_ = (Size(tree_.total_bytes_) + tensor.nbytes()).value();

    // index.json's line for this tensor, printed only to be measured.
    std::string& path = scratch_path_;
    path.clear();
    for (size_t i = 0; i + 1 < parts.size(); ++i) path.append(parts[i]).push_back('/');
    path += name;
    scratch_line_.clear();
    const bool last = tree_.tensor_files_.size() == tree_.catalog_.tensors().size();
    append_index_line(scratch_line_, tensor, path, last);
    if ((tree_.tensor_files_.size() - 1) % Tree::Impl::kIndexStride == 0)
      tree_.index_marks_.push_back(index_size_.value());
    index_size_ += scratch_line_.size();
  }

  // An encoded tensor's raw bytes, decoded for each read; none for a
  // tensor stored as it is.
  std::optional<Part> decoded_part(const Tensor& tensor) {
    if (!tensor.encoded) return std::nullopt;
    const auto& catalog = tree_.catalog_;
    if (tensor.encoded->method == Encoded::Method::ByteSwap) {
      const Encoded& e = *tensor.encoded;
      if (e.decoded_offset != 0 || e.size != tensor.bytes.size() || e.decoded_size != e.size ||
          (e.swap_bytes != 2 && e.swap_bytes != 4 && e.swap_bytes != 8) || e.size % e.swap_bytes != 0)
        throw std::logic_error("a byte-swapped tensor whose sizes disagree");
      auto view = std::make_unique<SwapView>(tensor.bytes, e.swap_bytes);
      const Part part{nullptr, view.get(), view->size()};
      tree_.decoded_views_.push_back(std::move(view));
      return part;
    }
    if (tensor.encoded->method == Encoded::Method::Latin1Utf8) {
      const Encoded& e = *tensor.encoded;
      if (e.decoded_offset != 0 || e.decoded_size != e.size)
        throw std::logic_error("a latin-1 tensor whose sizes disagree");
      auto view = Latin1View::make(tensor.bytes, e.size);
      if (!view)
        throw ModelError(std::string(tensor.source.file), catalog.format, tensor.bytes.file_offset(),
                         "tensor " + std::string(tensor.name) + ": its latin-1 text does not decode to " +
                             std::to_string(e.size) + " bytes");
      const Part part{nullptr, view.get(), view->size()};
      tree_.decoded_views_.push_back(std::move(view));
      return part;
    }
    auto view = std::make_unique<InflateView>(tensor, std::string(tensor.source.file), catalog.format);
    const Part part{nullptr, view.get(), view->size()};
    tree_.decoded_views_.push_back(std::move(view));
    return part;
  }

  // Tensors of one dtype and shape share one .npy header: a model's layers
  // repeat a few shapes, and a header copy per tensor adds up.
  Part shared_npy_header(std::string header) {
    const std::string& kept = *tree_.npy_headers_.insert(std::move(header)).first;
    return Part::held(std::as_bytes(std::span(kept.data(), kept.size())));
  }

  void add_document(const std::string& relative_path, const std::string& content) {
    add_document(relative_path,
                 std::array{Part::held(std::as_bytes(std::span(content.data(), content.size())))});
  }

  void add_document(const std::string& relative_path, std::span<const Part> parts) {
    const std::vector<std::string> names = escaped_components(relative_path, "/");
    uint64_t dir = meta_dir_;
    for (size_t i = 0; i + 1 < names.size(); ++i) {
      const auto existing = find(dir, names[i]);
      if (existing && node(*existing).kind == NodeKind::Directory)
        dir = *existing;
      else
        dir = directory(dir, free_name(dir, names[i], false));
    }
    add_file(dir, free_name(dir, names.back(), false), FileRole::Document, parts, nullptr);
  }

  // A document the tree made: kept by the tree, which its file points into.
  void add_made_document(const std::string& relative_path, std::string content) {
    content.shrink_to_fit();
    add_document(relative_path, tree_.documents_.emplace_back(std::move(content)));
  }

  // .modelfs/model.safetensors, a PT2 archive's models/NAME.safetensors
  // (export.hpp), and export.json saying what they leave out. Before the
  // documents: the metadata is read here, and the files take these names.
  void add_export() {
    const auto& catalog = tree_.catalog_;
    const ExportMetadata metadata = export_metadata(catalog);
    std::string note;
    auto add = [&](const std::string& path, std::string_view prefix) {
      std::string why_not;
      auto file = export_.file(prefix, metadata, why_not);
      if (!file) {
        note += path + ": not made, " + why_not + ". ";
        return;
      }
      const std::string& header = tree_.documents_.emplace_back(std::move(file->header));
      file->tensors.front() = Part::held(std::as_bytes(std::span(header)));
      add_document(path, file->tensors);
    };
    add("model.safetensors", "");
    // Each model's file is a pass over every tensor: an archive naming
    // thousands of models gets the whole model's file alone.
    const auto& models = catalog.export_hints.models;
    if (models.size() <= kMaxModelFiles)
      for (const auto& [name, prefix] : models) add("models/" + name + ".safetensors", prefix);
    else
      note += std::to_string(models.size()) + " models: no file of each (at most " +
              std::to_string(kMaxModelFiles) + "). ";
    std::string report = export_.report(note);
    // The plan's table is done with: given back before the rest is built.
    export_ = ExportPlan(options_.export_float32);
    add_made_document("export.json", std::move(report));
  }

  void add_documents() {
    const auto& catalog = tree_.catalog_;
    std::string ends;
    append_index_head(ends, catalog);
    tree_.index_head_size_ = ends.size();
    append_index_tail(ends);
    const uint64_t index =
        add_file(meta_dir_, free_name(meta_dir_, "index.json", false), FileRole::Index, {}, nullptr);
    node(index).size = (index_size_ + ends.size()).value();

    add_made_document("metadata.json", readable_metadata(catalog.format, catalog.files, catalog.metadata));
    // Served from that text from now on; the parsed form (an ONNX graph's
    // inputs and outputs: tens of KiB of small nodes) would only hold
    // memory. Let go without the scratch nlohmann's destructor takes.
    release_json(tree_.catalog_.metadata);
    tree_.catalog_.metadata = nlohmann::json::object();

    // The catalog's documents stay where they are: the tree owns the catalog.
    // A printed document's string may have up to twice its length in
    // capacity, pages held for nothing.
    for (auto& document : tree_.catalog_.documents) {
      document.content.shrink_to_fit();
      add_document(document.path, document.content);
    }
  }

  // Each folder's entries, sorted by name, laid end to end in one table:
  // the entries sorted in place by folder (in inode order) and name.
  void finish_folders() {
    std::vector<uint32_t>().swap(slots_);
    auto& entries = tree_.entries_;
    auto& nodes = tree_.nodes_;
    std::sort(entries.begin(), entries.end(), [&nodes](const DirEntry& a, const DirEntry& b) {
      const uint64_t pa = nodes[a.ino - 1].parent, pb = nodes[b.ino - 1].parent;
      return pa != pb ? pa < pb : a.name < b.name;
    });
    // The spans below stay valid: the table is not grown again.
    for (size_t first = 0; first < entries.size();) {
      const uint64_t dir = nodes[entries[first].ino - 1].parent;
      size_t end = first + 1;
      while (end < entries.size() && nodes[entries[end].ino - 1].parent == dir) ++end;
      nodes[dir - 1].children = std::span(entries.data() + first, end - first);
      first = end;
    }
    tree_.entry_of_.resize(nodes.size());
    for (size_t i = 0; i < entries.size(); ++i)
      tree_.entry_of_[entries[i].ino - 1] = static_cast<uint32_t>(i);
  }

  Tree::Impl& tree_;
  const TreeOptions& options_;
  uint64_t meta_dir_ = 0;
  // While building: the entries' indices plus one (0: free), by folder
  // and name, open addressing, at most half full.
  std::vector<uint32_t> slots_;
  // The previous tensor's folders: names and inodes, outermost first.
  std::vector<std::pair<std::string, uint64_t>> chain_;
  // index.json's size, its lines measured as the tensors are added.
  Size index_size_ = 0;
  std::string scratch_path_;
  std::string scratch_line_;
  std::vector<Part> scratch_parts_;  // a .npy's parts, before the table copies them
  // The catalog's tensors by name, made when a per-channel quantized
  // tensor first asks for its scales.
  std::unique_ptr<std::unordered_map<std::string_view, const Tensor*>> catalog_names_;
  ViewArena* arena_ = nullptr;  // owned by the tree (its byte owners)
  ExportPlan export_;
};

std::unique_ptr<const Tree> Tree::build(Catalog catalog, const TreeOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->catalog_ = std::move(catalog);
  impl->catalog_.shrink_to_fit();
  const auto& built = impl->catalog_;
  const std::string file = built.files.empty() ? std::string() : built.files.front();
  try {
    const auto build = [&] { TreeBuilder(*impl, options).build(); };
    if (options.budget)
      within_budget(*options.budget, file, built.format, "building the tree", build);
    else
      within_budget(file, built.format, "building the tree", build);
  } catch (const SizeOverflow& e) {
    // A file's size, a part's offset, the model's total: each sums the
    // model's numbers (Size), and a model whose sums pass 2^64 is refused
    // whole, as a reader refuses a size it cannot hold.
    throw ModelError(file, built.format, std::nullopt, e.what());
  }
  // Reading the model and building the tree free a lot of short-lived memory
  // (a header's JSON, a pickle's values, the builder's maps) that glibc
  // keeps below the tree's live blocks, where it never returns it by itself:
  // without this a mount holds it as anonymous RSS for its life
  // (bench/results/2026-12-01_memory.md measures how much).
  ::malloc_trim(0);
  return std::unique_ptr<const Tree>(new Tree(std::move(impl)));
}

Tree::Tree(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}

Tree::~Tree() = default;

const Node* Tree::node(uint64_t ino) const noexcept {
  return ino >= 1 && ino <= impl_->nodes_.size() ? &impl_->nodes_[ino - 1] : nullptr;
}

std::span<const Part> Tree::parts(const Node& file) const noexcept {
  return std::span(impl_->parts_).subspan(file.first_part, file.part_count);
}

const Catalog& Tree::catalog() const noexcept { return impl_->catalog_; }

const std::optional<NpyContent>& Tree::npy_of(const Tensor& tensor) const {
  return impl_->npy_[static_cast<size_t>(&tensor - impl_->catalog_.tensors().data())];
}

size_t Tree::node_count() const noexcept { return impl_->nodes_.size(); }

uint64_t Tree::total_bytes() const noexcept { return impl_->total_bytes_; }

void Tree::Impl::tensor_path(size_t i, std::string& out) const {
  out.clear();
  // Built from the leaf up, each name reversed, then the whole reversed once.
  for (uint64_t ino = tensor_files_[i]; ino != kRootIno; ino = nodes_[ino - 1].parent) {
    if (!out.empty()) out += '/';
    const std::string_view name = entries_[entry_of_[ino - 1]].name;
    out.append(name.rbegin(), name.rend());
  }
  std::reverse(out.begin(), out.end());
}

void Tree::path(uint64_t ino, std::string& out) const {
  out.clear();
  if (node(ino) == nullptr) return;
  for (; ino != kRootIno; ino = impl_->nodes_[ino - 1].parent) {
    if (!out.empty()) out += '/';
    const std::string_view name = impl_->entries_[impl_->entry_of_[ino - 1]].name;
    out.append(name.rbegin(), name.rend());
  }
  std::reverse(out.begin(), out.end());
}

std::vector<std::string> Tree::tensor_paths() const {
  std::vector<std::string> paths(impl_->tensor_files_.size());
  for (size_t i = 0; i < paths.size(); ++i) impl_->tensor_path(i, paths[i]);
  return paths;
}

std::optional<uint64_t> Tree::lookup(uint64_t parent, std::string_view name) const {
  const Node* dir = node(parent);
  if (dir == nullptr || dir->kind != NodeKind::Directory) return std::nullopt;
  auto it = std::lower_bound(dir->children.begin(), dir->children.end(), name,
                             [](const DirEntry& e, std::string_view n) { return e.name < n; });
  if (it == dir->children.end() || it->name != name) return std::nullopt;
  return it->ino;
}

std::optional<uint64_t> Tree::resolve(std::string_view path) const {
  uint64_t ino = kRootIno;
  for (size_t start = 0; start < path.size();) {
    const size_t end = std::min(path.find('/', start), path.size());
    const auto next = lookup(ino, path.substr(start, end - start));
    if (!next) return std::nullopt;
    ino = *next;
    start = end + 1;
  }
  return ino;
}

}  // namespace modelfs
