// SPDX-License-Identifier: Apache-2.0
#include "formats/dcp.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "formats/model_folder.hpp"
#include "formats/torch_objects.hpp"
#include "formats/torch_save.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "io/tensor_spec.hpp"
#include "io/unpickler.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/error.hpp"

namespace modelfs::dcp {
namespace {

namespace fs = std::filesystem;
using pickle::Kind;
using pickle::KnownGlobal;
using pickle::Value;

constexpr std::string_view kFormat = "torch.distributed.checkpoint";
constexpr std::string_view kMetadataName = ".metadata";
constexpr std::string_view kMetadataModule = "torch.distributed.checkpoint.metadata";
constexpr size_t kMaxRank = 64;

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

std::string dims_text(std::span<const uint64_t> dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

// The class name of an object made from one of DCP's classes, "" otherwise.
std::string_view class_of(const Value* v) {
  if (!v || v->kind != Kind::Call || !v->callable || v->callable->kind != Kind::Global ||
      v->callable->known != KnownGlobal::DistributedCheckpoint)
    return {};
  return v->callable->name;
}

// A global naming one of DCP's classes.
bool class_of_global(const Value* v) {
  return v && v->kind == Kind::Global && v->known == KnownGlobal::DistributedCheckpoint &&
         v->name != "getattr";
}

// Where a pickle's storage record points: a range of one data file.
struct Storage {
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// A tensor's entry, checked: its chunks' offsets and sizes kept flat
// (chunk i: offsets at dims[2 i rank], sizes after them).
struct TensorEntry {
  std::string fqn;
  DType dtype = DType::Float32;
  std::string dtype_name;
  std::vector<uint64_t> shape;
  uint64_t numel = 0;
  size_t chunks = 0;
  std::vector<uint64_t> dims;
  std::span<const uint64_t> offsets(size_t i) const {
    return {dims.data() + 2 * i * shape.size(), shape.size()};
  }
  std::span<const uint64_t> sizes(size_t i) const {
    return {dims.data() + (2 * i + 1) * shape.size(), shape.size()};
  }
};

using StorageKey = std::pair<std::string, std::optional<std::vector<uint64_t>>>;

class Reader {
 public:
  explicit Reader(const ModelFile& model)
      : model_(model), file_(model.mapped->display_name()), name_(model.path.filename().string()) {}

  Catalog read() {
    const auto& mapped = model_.mapped;
    if (mapped->size() > kMaxMetadataBytes)
      refuse(std::nullopt, "the .metadata pickle is " + std::to_string(mapped->size()) +
                               " bytes, over the limit of " + std::to_string(kMaxMetadataBytes));
    // Not made present here: the unpickler's cursor makes present what it reads.
    pickle::Pickle pickled =
        pickle::unpickle(mapped->unchecked_bytes(), file_, std::string(kFormat), 0, false);
    check_globals(pickled);
    const auto root = fields(pickled.root, "Metadata", "the pickle's top object");

    catalog_ = torch_save::torch_catalog(std::string(kFormat), *mapped, name_);

    read_storage_data(get(root, "storage_data"));
    const Value* entries = get(root, "state_dict_metadata");
    if (!entries || entries->kind != Kind::Dict)
      refuse(at(pickled.root), "Metadata.state_dict_metadata is not a dict");
    std::vector<TensorEntry> tensors;
    nlohmann::json bytes_entries = nlohmann::json::array();
    uint64_t bytes_count = 0;
    std::vector<std::string> names;  // data files needed, in first-use order
    std::set<std::string, std::less<>> named;
    auto need = [&](const std::string& file) {
      if (!named.insert(file).second) return;
      if (names.size() >= kMaxFiles)
        refuse(std::nullopt, "storage_data names more than " + std::to_string(kMaxFiles) + " data files");
      names.push_back(file);
    };
    std::set<std::string_view> fqns;
    std::vector<std::pair<std::string_view, const Storage*>> bytes_storage;
    for (const auto& [key, value] : entries->entries) {
      check_budget();
      if (!key->is_string()) refuse(at(key), "a state_dict_metadata key is not a string");
      if (!fqns.insert(key->text).second)
        refuse(at(key), "state_dict_metadata lists " + in_quotes(key->text) + " twice");
      const std::string_view cls = class_of(value);
      if (cls == "BytesStorageMetadata") {
        const Storage& s = storage_for({key->text, std::nullopt}, "bytes entry " + in_quotes(key->text));
        need(s.file);
        bytes_storage.emplace_back(key->text, &s);
        if (++bytes_count <= kMaxListed)
          bytes_entries.push_back(
              {{"fqn", key->text}, {"file", s.file}, {"offset", s.offset}, {"length", s.length}});
        continue;
      }
      if (cls != "TensorStorageMetadata")
        refuse(at(value), "state_dict_metadata entry " + in_quotes(key->text) +
                              " is neither a TensorStorageMetadata nor a BytesStorageMetadata");
      tensors.push_back(tensor_entry(key->text, value));
      const TensorEntry& t = tensors.back();
      for (size_t i = 0; i < t.chunks; ++i)
        if (volume(t.sizes(i)) != 0)
          need(storage_for({t.fqn, to_vector(t.offsets(i))}, chunk_name(t, i)).file);
    }

    open_files(names);
    // A bytes item is listed, never read: its range must still lie in its file.
    for (const auto& [fqn, s] : bytes_storage)
      if (!range_fits(s->offset, s->length, files_.at(s->file)->size()))
        refuse_in(*files_.at(s->file), std::nullopt,
                  "bytes entry " + in_quotes(fqn) + ": its slice [" + std::to_string(s->offset) + ", +" +
                      std::to_string(s->length) + ") runs past the end of " + s->file);
    for (const TensorEntry& t : tensors) add_tensor(t);

    nlohmann::json info = nlohmann::json::object();
    const Value* version = get(root, "version");
    info["version"] = version && version->is_string() ? nlohmann::json(version->text) : nlohmann::json();
    info["storage_meta"] = storage_meta(get(root, "storage_meta"));
    info["counts"] = {{"tensors", tensors.size()},
                      {"bytes_entries", bytes_count},
                      {"chunks", chunk_total_},
                      {"files", names.size()}};
    if (const Value* planner = get(root, "planner_data"); planner && planner->kind == Kind::Dict) {
      nlohmann::json keys = nlohmann::json::array();
      for (const auto& [k, v] : planner->entries) {
        if (keys.size() >= kMaxListed) break;
        if (k->is_string()) keys.push_back(k->text);
      }
      info["planner_data_keys"] = std::move(keys);
      info["planner_data_count"] = planner->entries.size();
    }
    catalog_.metadata["dcp"] = std::move(info);
    if (bytes_count) {
      catalog_.metadata["bytes_entries"] = std::move(bytes_entries);
      if (bytes_count > kMaxListed) catalog_.metadata["bytes_entries_listed"] = kMaxListed;
    }
    return std::move(catalog_);
  }

 private:
  using Fields = std::map<std::string, const Value*, std::less<>>;

  [[noreturn]] void refuse(std::optional<uint64_t> offset, const std::string& reason) const {
    throw ModelError(file_, std::string(kFormat), offset, reason);
  }
  // A fault of a data file's bytes, named by that file.
  [[noreturn]] static void refuse_in(const MappedFile& file, std::optional<uint64_t> offset,
                                     const std::string& reason) {
    throw ModelError(file.display_name(), std::string(kFormat), offset, reason);
  }
  static std::optional<uint64_t> at(const Value* v) {
    return v ? std::optional<uint64_t>(v->offset) : std::nullopt;
  }

  // Every global the pickle names must be one a .metadata holds
  // (docs/formats.md, "Classes / module paths"): nothing else is read.
  void check_globals(const pickle::Pickle& pickled) const {
    for (const Value& v : pickled.values) {
      // getattr only as an enum member is pickled: getattr(DCP class, name).
      if (v.kind == Kind::Call && v.callable && v.callable->kind == Kind::Global &&
          v.callable->name == "getattr" && v.callable->module == "builtins") {
        const bool member = v.args && v.args->kind == Kind::Tuple && v.args->items.size() == 2 &&
                            class_of_global(v.args->items[0]) && v.args->items[1]->is_string();
        if (!member)
          refuse(v.offset, "the pickle calls builtins.getattr on something other than a DCP class");
      }
      if (v.kind != Kind::Global) continue;
      switch (v.known) {
        case KnownGlobal::DistributedCheckpoint:
        case KnownGlobal::DType:
        case KnownGlobal::Size:
        case KnownGlobal::Layout:
        case KnownGlobal::OrderedDict:
          continue;
        default:
          refuse(v.offset, "the pickle names " + v.module + "." + v.name +
                               ", which is not a class of a DCP .metadata (refused, never called)");
      }
    }
  }

  // The fields of a dataclass object of class `cls` (its BUILD state: a
  // dict, or a (dict, slots) pair).
  Fields fields(const Value* v, std::string_view cls, const std::string& what) const {
    if (class_of(v) != cls) refuse(at(v), what + " is not a " + std::string(cls));
    Fields out;
    auto take = [&](const Value* dict) {
      if (!dict || dict->kind == Kind::None) return;
      if (dict->kind != Kind::Dict) refuse(at(v), what + "'s state is not a dict of fields");
      for (const auto& [key, value] : dict->entries)
        if (key->is_string()) out[key->text] = value;
    };
    const Value* state = v->state;
    if (state && state->kind == Kind::Tuple && state->items.size() == 2) {
      take(state->items[0]);
      take(state->items[1]);
    } else {
      take(state);
    }
    return out;
  }
  static const Value* get(const Fields& f, std::string_view key) {
    auto it = f.find(key);
    return it == f.end() ? nullptr : it->second;
  }

  uint64_t count(const Value* v, const std::string& what) const {
    if (!v || !v->is_int() || v->integer < 0) refuse(at(v), what + " is not a non-negative integer");
    return static_cast<uint64_t>(v->integer);
  }
  std::vector<uint64_t> dims(const Value* v, const std::string& what) const {
    if (!v || !v->is_sequence()) refuse(at(v), what + " is not a torch.Size");
    if (v->items.size() > kMaxRank)
      refuse(at(v), what + " has " + std::to_string(v->items.size()) + " dimensions, over " +
                        std::to_string(kMaxRank));
    std::vector<uint64_t> out;
    for (const Value* item : v->items) out.push_back(count(item, what + "'s dimension"));
    return out;
  }
  static std::vector<uint64_t> to_vector(std::span<const uint64_t> s) { return {s.begin(), s.end()}; }
  static uint64_t volume(std::span<const uint64_t> sizes) {
    uint64_t n = 1;
    for (uint64_t d : sizes) n *= d;  // callers bounded it by the tensor's numel
    return n;
  }
  static std::string chunk_name(const TensorEntry& t, size_t i) {
    return "chunk " + std::to_string(i) + " of tensor " + in_quotes(t.fqn);
  }

  void read_storage_data(const Value* data) {
    if (!data || data->kind != Kind::Dict)
      refuse(at(data), "Metadata.storage_data is not a dict (a FileSystemWriter checkpoint's)");
    for (const auto& [key, value] : data->entries) {
      check_budget();
      if (storage_.size() >= kMaxChunks)
        refuse(at(key), "storage_data has more than " + std::to_string(kMaxChunks) + " records");
      const Fields index = fields(key, "MetadataIndex", "a storage_data key");
      const Value* fqn = get(index, "fqn");
      if (!fqn || !fqn->is_string()) refuse(at(key), "a MetadataIndex's fqn is not a string");
      const std::string what = "storage record of " + in_quotes(fqn->text);
      const Value* offset = get(index, "offset");
      StorageKey k{fqn->text, std::nullopt};
      if (offset && offset->kind != Kind::None) k.second = dims(offset, what + "'s offset");
      const Fields info = fields(value, "_StorageInfo", what);
      const Value* path = get(info, "relative_path");
      if (!path || !path->is_string()) refuse(at(value), what + ": relative_path is not a string");
      if (const Value* t = get(info, "transform_descriptors");
          t && t->kind != Kind::None && !(t->is_sequence() && t->items.empty()))
        refuse(at(value), what +
                              " names transform descriptors (compressed items), which modelfs does not "
                              "undo");
      Storage s{path->text, count(get(info, "offset"), what + "'s offset"),
                count(get(info, "length"), what + "'s length")};
      if (!storage_.emplace(std::move(k), std::move(s)).second)
        refuse(at(key),
               what +
                   (offset && offset->kind != Kind::None ? " at offsets " + dims_text(dims(offset, what))
                                                         : std::string()) +
                   " is listed twice");
    }
  }

  const Storage& storage_for(const StorageKey& key, const std::string& what) const {
    auto it = storage_.find(key);
    if (it == storage_.end()) refuse(std::nullopt, what + " has no storage_data record");
    return it->second;
  }

  TensorEntry tensor_entry(const std::string& fqn, const Value* v) {
    const std::string what = "tensor " + in_quotes(fqn);
    const Fields f = fields(v, "TensorStorageMetadata", what);
    TensorEntry t;
    t.fqn = fqn;
    // TensorProperties: its __getstate__ 5-tuple (dtype, layout,
    // requires_grad, memory format, pin_memory), or a dict of fields.
    const Value* props = get(f, "properties");
    if (class_of(props) != "TensorProperties") refuse(at(v), what + ": properties is not a TensorProperties");
    const Value* dtype = nullptr;
    const Value* layout = nullptr;
    if (props->state && props->state->kind == Kind::Tuple && props->state->items.size() >= 2) {
      dtype = props->state->items[0];
      layout = props->state->items[1];
    } else {
      const Fields p = fields(props, "TensorProperties", what + "'s properties");
      dtype = get(p, "dtype");
      layout = get(p, "layout");
    }
    if (!dtype || dtype->kind != Kind::Global || dtype->known != KnownGlobal::DType)
      refuse(at(props), what + ": properties name no torch dtype");
    // The dtypes whose torch.save storages are served as plain elements.
    const auto known = torch::plain_dtype(dtype->name);
    if (!known)
      refuse(at(dtype), what + " has dtype torch." + dtype->name +
                            ", which modelfs does not serve from a DCP checkpoint");
    t.dtype = known->dtype;
    t.dtype_name = known->torch_name;
    if (layout && layout->is_call_of(KnownGlobal::Layout) && layout->args && layout->args->is_sequence() &&
        !layout->args->items.empty() && layout->args->items[0]->is_string() &&
        layout->args->items[0]->text != "torch.strided")
      refuse(at(layout),
             what + " has layout " + layout->args->items[0]->text + "; only torch.strided is served");

    t.shape = dims(get(f, "size"), what + "'s size");
    const auto numel = checked_numel(t.shape);
    const auto nbytes = numel ? checked_mul(*numel, dtype_bits(t.dtype) / 8) : std::nullopt;
    if (!nbytes) refuse(at(v), what + "'s size " + dims_text(t.shape) + " holds more bytes than 2^64");
    t.numel = *numel;

    const Value* chunks = get(f, "chunks");
    if (!chunks || !chunks->is_sequence()) refuse(at(v), what + ": chunks is not a list");
    if (chunks->items.size() > kMaxChunks - chunk_total_)
      refuse(at(chunks), what + " declares " + std::to_string(chunks->items.size()) +
                             " chunks; a checkpoint may have " + std::to_string(kMaxChunks) + " in all");
    chunk_total_ += chunks->items.size();
    t.chunks = chunks->items.size();
    const size_t rank = t.shape.size();
    t.dims.reserve(2 * rank * t.chunks);
    for (size_t i = 0; i < t.chunks; ++i) {
      check_budget();
      const std::string which = chunk_name(t, i);
      const Fields c = fields(chunks->items[i], "ChunkStorageMetadata", which);
      const auto offsets = dims(get(c, "offsets"), which + "'s offsets");
      const auto sizes = dims(get(c, "sizes"), which + "'s sizes");
      if (offsets.size() != rank || sizes.size() != rank)
        refuse(at(chunks->items[i]), which + " has offsets " + dims_text(offsets) + " and sizes " +
                                         dims_text(sizes) + ", not of the tensor's " + std::to_string(rank) +
                                         " dimensions");
      for (size_t d = 0; d < rank; ++d)
        if (!range_fits(offsets[d], sizes[d], t.shape[d]))
          refuse(at(chunks->items[i]), which + " (offsets " + dims_text(offsets) + ", sizes " +
                                           dims_text(sizes) + ") lies outside the tensor's size " +
                                           dims_text(t.shape));
      t.dims.insert(t.dims.end(), offsets.begin(), offsets.end());
      t.dims.insert(t.dims.end(), sizes.begin(), sizes.end());
    }
    check_coverage(t);
    return t;
  }

  // docs/formats.md, "Validation rules": the chunks cover the tensor exactly
  // once. Two chunks of one start overlap; volumes that add up to more
  // overlap, to less leave a hole; the rest (a tiling that is not a grid)
  // the catalog's check of the pieces refuses.
  void check_coverage(const TensorEntry& t) const {
    std::vector<uint32_t> order;
    Size covered = 0;
    for (size_t i = 0; i < t.chunks; ++i)
      if (const uint64_t n = volume(t.sizes(i)); n != 0) {
        order.push_back(static_cast<uint32_t>(i));
        covered += n;
      }
    auto offsets_less = [&](uint32_t a, uint32_t b) {
      const auto x = t.offsets(a), y = t.offsets(b);
      return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end());
    };
    std::sort(order.begin(), order.end(), offsets_less);
    for (size_t k = 1; k < order.size(); ++k)
      if (!offsets_less(order[k - 1], order[k]))
        refuse(std::nullopt, "DCP chunks overlap in tensor " + in_quotes(t.fqn) + ": chunks " +
                                 std::to_string(std::min(order[k - 1], order[k])) + " and " +
                                 std::to_string(std::max(order[k - 1], order[k])) + " both start at " +
                                 dims_text(t.offsets(order[k])));
    if (!covered.ok() || covered.value() > t.numel)
      refuse(std::nullopt,
             "DCP chunks overlap in tensor " + in_quotes(t.fqn) + ": they hold " +
                 (covered.ok() ? std::to_string(covered.value()) : std::string("more than 2^64")) +
                 " elements, the tensor " + std::to_string(t.numel));
    if (covered.value() < t.numel)
      refuse(std::nullopt, "DCP chunks leave a hole in tensor " + in_quotes(t.fqn) + ": they hold " +
                               std::to_string(covered.value()) + " elements, the tensor " +
                               std::to_string(t.numel));
  }

  void open_files(const std::vector<std::string>& names) {
    if (names.empty()) return;
    folder_.emplace(ModelFolder::of_file(model_.path, std::string(kFormat), model_.remote));
    auto opened = folder_->open_all(names, 0);
    for (size_t i = 0; i < names.size(); ++i) {
      auto& o = opened[i];
      if (o.problem == ModelFolder::Problem::NotAName || o.problem == ModelFolder::Problem::Outside)
        refuse(std::nullopt, "a storage record names relative_path " + in_quotes(names[i]) +
                                 ", which is not a file inside the checkpoint's folder (it " + o.reason +
                                 ")");
      if (!o) refuse(std::nullopt, "data file " + in_quotes(names[i]) + " " + o.reason);
      files_.emplace(names[i], std::move(o.file));
      catalog_.files.push_back(names[i]);
    }
  }

  // The one tensor of the torch.save archive a chunk's slice holds.
  TensorSpec chunk_tensor(const TensorEntry& t, size_t i, const Storage& s) {
    const std::string which = chunk_name(t, i);
    const auto& file = files_.at(s.file);
    if (!range_fits(s.offset, s.length, file->size()))
      refuse_in(*file, std::nullopt,
                which + ": its slice [" + std::to_string(s.offset) + ", +" + std::to_string(s.length) +
                    ") runs past the end of " + s.file + " (" + std::to_string(file->size()) + " bytes)");
    const std::string where = which + ": the slice [" + std::to_string(s.offset) + ", +" +
                              std::to_string(s.length) + ") of " + s.file +
                              " is not a torch.save archive of one tensor: ";
    torch_save::SaveContents contents;
    try {
      const ZipArchive zip = ZipArchive::open(file, s.offset, s.length, std::string(kFormat));
      torch::WalkOptions options;
      options.file = file->display_name();
      options.format = std::string(kFormat);
      options.source = s.file;
      options.collect_values = false;
      contents = torch_save::read_save(zip, options, "", true);
      if (model_.checks)
        for (auto& check : zip.crc_checks()) model_.checks->push_back(std::move(check));
    } catch (const ModelError& e) {
      refuse_in(*file, s.offset, where + e.reason());
    }
    if (contents.tensors.size() != 1)
      refuse_in(*file, s.offset, where + "it holds " + std::to_string(contents.tensors.size()) + " tensors");
    TensorSpec& c = contents.tensors.front();
    const auto sizes = t.sizes(i);
    if (c.dtype != t.dtype || c.quantization || c.extras.contains("torch_dtype"))
      refuse_in(*file, s.offset,
                which + " is stored as " +
                    std::string(c.extras.contains("torch_dtype") ? c.extras["torch_dtype"].get<std::string>()
                                                                 : std::string(dtype_name(c.dtype))) +
                    ", but the metadata says " + t.dtype_name);
    if (!std::equal(c.shape.begin(), c.shape.end(), sizes.begin(), sizes.end()))
      refuse_in(
          *file, s.offset,
          which + " is stored with shape " + dims_text(c.shape) + ", but its sizes are " + dims_text(sizes));
    const auto strides = contiguous_strides(c.shape);
    if (!strides || c.strides != *strides || !c.pieces.empty() || c.encoded)
      refuse_in(*file, s.offset, which + " is not stored as one C-order array");
    const uint64_t expected = volume(sizes) * (dtype_bits(t.dtype) / 8);
    if (c.bytes.size() != expected)
      refuse_in(*file, s.offset,
                which + " holds " + std::to_string(c.bytes.size()) + " bytes, its sizes need " +
                    std::to_string(expected));
    return std::move(c);
  }

  void add_tensor(const TensorEntry& t) {
    check_budget();
    TensorSpec spec;
    spec.name = t.fqn;
    spec.dtype = t.dtype;
    spec.shape = t.shape;
    const auto strides = contiguous_strides(t.shape);
    if (!strides)
      refuse(std::nullopt, "tensor " + in_quotes(t.fqn) + "'s size " + dims_text(t.shape) + " is too large");
    spec.strides = *strides;
    spec.extras = {{"chunks", t.chunks}};
    std::vector<size_t> stored;
    for (size_t i = 0; i < t.chunks; ++i)
      if (volume(t.sizes(i)) != 0) stored.push_back(i);
    if (t.numel == 0) {
      spec.bytes = ByteSpan::owned("");
      spec.source = {name_, std::nullopt};
    } else if (stored.size() == 1) {
      // One chunk covers the tensor: its archive's bytes as they are.
      const size_t i = stored.front();
      const Storage& s = storage_for({t.fqn, to_vector(t.offsets(i))}, chunk_name(t, i));
      TensorSpec c = chunk_tensor(t, i, s);
      spec.bytes = c.bytes;
      spec.source = {s.file, c.source.offset};
    } else {
      spec.pieces.reserve(stored.size());
      for (const size_t i : stored) {
        check_budget();
        const Storage& s = storage_for({t.fqn, to_vector(t.offsets(i))}, chunk_name(t, i));
        TensorSpec c = chunk_tensor(t, i, s);
        auto& piece = spec.pieces.emplace_back();
        piece.bytes = c.bytes;
        piece.size = c.bytes.size();
        piece.start = to_vector(t.offsets(i));
        piece.extent = to_vector(t.sizes(i));
        piece.source = {s.file, c.source.offset};
      }
      spec.source = {name_, std::nullopt};
    }
    try {
      catalog_.add(spec);
    } catch (const ModelError& e) {
      if (spec.pieces.empty()) throw;
      refuse(std::nullopt, "DCP chunks of tensor " + in_quotes(t.fqn) + " do not tile it: " + e.reason());
    }
  }

  nlohmann::json storage_meta(const Value* v) const {
    if (!v || v->kind == Kind::None || class_of(v) != "StorageMeta") return nullptr;
    const Fields f = fields(v, "StorageMeta", "Metadata.storage_meta");
    nlohmann::json out = nlohmann::json::object();
    for (const char* key : {"checkpoint_id", "save_id", "load_id"}) {
      const Value* x = get(f, key);
      if (x && x->is_string()) {
        out[key] = x->text;
      } else if (class_of(x) == "PosixPath" && x->args && x->args->is_sequence()) {
        // pathlib pickles a path as its parts.
        std::string path;
        for (const Value* part : x->args->items)
          if (part->is_string()) path += (path.empty() || path.ends_with('/') ? "" : "/") + part->text;
        out[key] = path;
      } else {
        out[key] = nullptr;
      }
    }
    if (const Value* modules = get(f, "modules"); modules && modules->is_sequence()) {
      nlohmann::json list = nlohmann::json::array();
      for (const Value* m : modules->items)
        if (m->is_string() && list.size() < kMaxListed) list.push_back(m->text);
      out["modules"] = std::move(list);
    }
    return out;
  }

  const ModelFile& model_;
  std::string file_;
  std::string name_;
  Catalog catalog_;
  std::map<StorageKey, Storage> storage_;
  std::optional<ModelFolder> folder_;
  std::map<std::string, std::shared_ptr<const MappedFile>> files_;
  uint64_t chunk_total_ = 0;
};

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  if (head.size() < 2 || head[0] != std::byte{0x80}) return false;
  const std::string_view text(reinterpret_cast<const char*>(head.data()), head.size());
  const size_t module = text.find(kMetadataModule);
  return module != std::string_view::npos &&
         text.find("Metadata", module + kMetadataModule.size()) != std::string_view::npos;
}

bool probe_folder(const fs::path& folder) {
  std::error_code ec;
  const fs::path metadata = folder / kMetadataName;
  if (!fs::is_regular_file(metadata, ec)) return false;
  try {
    const auto mapped = open_mapped(metadata);
    return probe_file(mapped->read(0, std::min<uint64_t>(mapped->size(), 4096)));
  } catch (const ModelError&) {
    return false;
  }
}

Catalog open_file(const ModelFile& model) { return Reader(model).read(); }

Catalog open_folder(const fs::path& folder, IntegrityChecks* checks) {
  return open_file(ModelFile::open(folder / kMetadataName, checks));
}

}  // namespace modelfs::dcp
