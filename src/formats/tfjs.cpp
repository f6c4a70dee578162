// SPDX-License-Identifier: Apache-2.0
#include "formats/tfjs.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "formats/json_limits.hpp"
#include "formats/model_folder.hpp"
#include "formats/read_back.hpp"
#include "formats/string_lines.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "io/json_text.hpp"
#include "io/tensor_spec.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"

namespace modelfs::tfjs {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::string_view kFormat = "tfjs";                // the catalog's name of the format
constexpr std::string_view kErrorFormat = "TensorFlow.js";  // what messages call it
constexpr std::string_view kModelJson = "model.json";

// Manifest dtypes (docs/formats.md, "TensorFlow.js"): bytes per element as
// stored; 0 for string, whose elements carry their own lengths.
struct WeightType {
  std::string_view name;
  DType dtype;
  uint32_t bytes;
};
constexpr WeightType kWeightTypes[] = {{"float32", DType::Float32, 4},
                                       {"int32", DType::Int32, 4},
                                       {"bool", DType::Bool, 1},
                                       {"complex64", DType::Complex64, 8},
                                       {"string", DType::String, 0}};

// Quantization dtypes: what is stored in place of the weight's dtype.
struct StoredType {
  std::string_view name;
  DType dtype;
  uint32_t bytes;
};
constexpr StoredType kStoredTypes[] = {
    {"uint8", DType::UInt8, 1}, {"uint16", DType::UInt16, 2}, {"float16", DType::Float16, 2}};

// A group's byte stream: its shards one after another.
class GroupBytes {
 public:
  struct Shard {
    std::string name;
    std::shared_ptr<const MappedFile> file;
    uint64_t start = 0;  // in the stream
  };

  void add(std::string name, std::shared_ptr<const MappedFile> file) {
    const uint64_t start = size_.value();
    size_ += file->size();
    shards_.push_back({std::move(name), std::move(file), start});
  }
  // Fits: a stream is at most the sum of mapped files' sizes.
  uint64_t size() const { return size_.value(); }
  const std::vector<Shard>& shards() const noexcept { return shards_; }

  // The shard that holds byte `offset` (< size()); a shard of no bytes
  // holds none.
  const Shard& at(uint64_t offset) const {
    auto after = std::upper_bound(shards_.begin(), shards_.end(), offset,
                                  [](uint64_t at, const Shard& s) { return at < s.start; });
    // The last shard starting at or before `offset`: past the empty ones
    // that start where it does.
    return *std::prev(after);
  }
  // Appends bytes [offset, offset + length) (within size()) to `out`.
  void copy(uint64_t offset, uint64_t length, std::string& out) const {
    while (length > 0) {
      const Shard& shard = at(offset);
      const uint64_t local = offset - shard.start;
      const uint64_t take = std::min(length, shard.file->size() - local);
      const auto bytes = shard.file->read(local, take);
      out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      offset += take;
      length -= take;
    }
  }

 private:
  std::vector<Shard> shards_;
  Size size_ = 0;
};

class Reader {
 public:
  explicit Reader(const ModelFile& model) : model_(model), name_(model.path.filename().string()) {}

  Catalog read() {
    const auto& file = model_.mapped;
    const std::string_view text = whole_text(*file, kMaxModelJsonBytes, kErrorFormat, "a model.json");
    // All of it is metadata: the weights are in the shards.
    add_metadata_bytes(file->size());
    Json json = parse_json_limited(text, display(), kErrorFormat, 0, kMaxJsonDepth);
    if (!json.is_object()) fail("is not a JSON object");
    auto manifest = json.find("weightsManifest");
    if (manifest == json.end() || !manifest->is_array())
      fail("has no \"weightsManifest\" array: not a TensorFlow.js model.json");

    catalog_.format = std::string(kFormat);
    catalog_.mtime = file->mtime();
    catalog_.files.push_back(name_);
    folder_.emplace(ModelFolder::of_file(model_.path, std::string(kErrorFormat)));

    std::vector<GroupBytes> groups = open_shards(*manifest);
    Json summary = Json::array();
    for (size_t g = 0; g < groups.size(); ++g)
      summary.push_back(read_group((*manifest)[g], groups[g], g + 1));

    for (auto& [key, value] : json.items()) {
      if (key == "weightsManifest") continue;
      if (auto doc = document_name(key)) {
        catalog_.documents.push_back(
            {std::string(*doc), value.dump(2, ' ', false, Json::error_handler_t::replace) + "\n"});
      } else {
        catalog_.metadata[key] = std::move(value);
      }
    }
    catalog_.metadata["weights_groups"] = std::move(summary);
    if (model_.checks != nullptr)
      for (size_t g = 0; g < groups.size(); ++g) add_check(groups[g], g + 1);
    return std::move(catalog_);
  }

 private:
  // The parts of model.json that are documents of their own under .modelfs/.
  static std::optional<std::string_view> document_name(std::string_view key) {
    if (key == "modelTopology") return "model_topology.json";
    if (key == "trainingConfig") return "training_config.json";
    if (key == "modelInitializer") return "model_initializer.json";
    return std::nullopt;
  }

  std::string display() const { return model_.mapped->display_name(); }

  [[noreturn]] void fail(const std::string& reason) const {
    throw ModelError(display(), std::string(kErrorFormat), std::nullopt, reason);
  }

  // Every group's shards opened inside the model's folder (model_folder.hpp)
  // before any is read, each once; a remote model's side by side
  // (ModelFolder::open_all: nothing of a shard is parsed at open, so no
  // bytes are fetched ahead).
  std::vector<GroupBytes> open_shards(const Json& manifest) {
    std::vector<std::string> names;
    std::vector<size_t> group_of_name;                 // each name's group (0-based)
    std::unordered_map<std::string, size_t> group_of;  // shard name -> its group (1-based)
    for (size_t g = 0; g < manifest.size(); ++g) {
      check_budget();
      const Json& group = manifest[g];
      const std::string where = "weightsManifest group " + std::to_string(g + 1);
      if (!group.is_object()) fail(where + " is not an object");
      const auto paths = group.find("paths");
      if (paths == group.end() || !paths->is_array()) fail(where + " has no \"paths\" array");
      const auto weights = group.find("weights");
      if (weights == group.end() || !weights->is_array()) fail(where + " has no \"weights\" array");
      for (const Json& path : *paths) {
        check_budget();
        if (!path.is_string()) fail(where + " has a path that is not a string");
        const std::string& name = path.get_ref<const std::string&>();
        if (auto [first, added] = group_of.emplace(name, g + 1); !added)
          fail(where + " names shard \"" + name + "\" again (" +
               (first->second == g + 1 ? std::string("twice in its paths")
                                       : "also in group " + std::to_string(first->second)) +
               ")");
        names.push_back(name);
        group_of_name.push_back(g);
      }
    }
    auto opened = folder_->open_all(names, 0);
    std::vector<GroupBytes> groups(manifest.size());
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string where = "weightsManifest group " + std::to_string(group_of_name[i] + 1);
      auto& shard = opened[i];
      if (shard.problem == ModelFolder::Problem::NotAName)
        fail(where + " names shard \"" + names[i] +
             "\", which is not a file name inside the model's folder (it " + shard.reason + ")");
      if (!shard) fail(where + " names shard \"" + names[i] + "\", which " + shard.reason);
      catalog_.files.push_back(names[i]);
      groups[group_of_name[i]].add(names[i], std::move(shard.file));
    }
    return groups;
  }

  static std::string shard_list(const GroupBytes& group) {
    std::string out;
    for (const auto& s : group.shards()) out.append(out.empty() ? "" : ", ").append(s.name);
    return out.empty() ? "none" : out;
  }

  // One group's weights, placed one after another in its stream; its
  // summary for metadata.json.
  Json read_group(const Json& group, const GroupBytes& bytes, size_t number) {
    const Json& weights = group["weights"];
    const std::string where = "weightsManifest group " + std::to_string(number);
    Size offset = 0;
    for (const Json& entry : weights) {
      check_budget();
      offset = read_weight(entry, bytes, number, offset.value());
    }
    if (offset.value() != bytes.size())
      fail("the weights of " + where + " take " + std::to_string(offset.value()) + " bytes but its shards (" +
           shard_list(bytes) + ") hold " + std::to_string(bytes.size()) + ": " +
           std::to_string(bytes.size() - offset.value()) + " bytes are left over");
    Json paths = Json::array();
    for (const auto& s : bytes.shards()) paths.push_back(s.name);
    return {{"paths", std::move(paths)}, {"weights", weights.size()}, {"bytes", bytes.size()}};
  }

  // Appends the weight whose bytes start at `offset` of its group's stream;
  // where the next one starts.
  uint64_t read_weight(const Json& entry, const GroupBytes& group, size_t number, uint64_t offset) {
    const std::string where = "weightsManifest group " + std::to_string(number);
    if (!entry.is_object()) fail(where + " has a weight that is not an object");
    const auto name_field = entry.find("name");
    if (name_field == entry.end() || !name_field->is_string()) fail(where + " has a weight with no name");
    TensorSpec t;
    t.name = name_field->get<std::string>();
    const std::string quote = "weight \"" + t.name + "\" of " + where + ": ";
    if (!names_.insert(t.name).second) fail(quote + "another weight has this name");

    const auto dtype_field = entry.find("dtype");
    if (dtype_field == entry.end() || !dtype_field->is_string()) fail(quote + "no \"dtype\" string");
    const std::string& dtype = dtype_field->get_ref<const std::string&>();
    const WeightType* type = nullptr;
    for (const auto& w : kWeightTypes)
      if (w.name == dtype) type = &w;
    if (type == nullptr) fail(quote + "unknown dtype \"" + dtype + "\"");

    const auto shape_field = entry.find("shape");
    if (shape_field == entry.end() || !shape_field->is_array()) fail(quote + "no \"shape\" array");
    Size numel = 1;
    for (const Json& dim : *shape_field) {
      if (!dim.is_number_unsigned()) {
        fail(quote + "shape has " +
             (dim.is_number_integer() ? std::string("a negative dimension")
              : dim.is_number()       ? std::string("a dimension that is not an integer")
                                      : std::string("a dimension that is not a number")));
      }
      t.shape.push_back(dim.get<uint64_t>());
      numel *= t.shape.back();
    }
    const auto strides = contiguous_strides(t.shape);
    if (!numel.ok() || !strides) fail(quote + "the element count of its shape overflows");
    t.strides = *strides;

    nlohmann::json extras = {{"tfjs_dtype", dtype}, {"weights_group", number}, {"group_offset", offset}};
    if (auto g = entry.find("group"); g != entry.end() && g->is_string()) extras["tfjs_group"] = *g;

    uint32_t element_bytes = type->bytes;
    t.dtype = type->dtype;
    if (auto q = entry.find("quantization"); q != entry.end() && !q->is_null())
      element_bytes = quantize(t, *q, *type, quote, extras);

    uint64_t length = 0;
    if (t.dtype == DType::String) {
      length = read_strings(t, group, offset, numel.value(), quote);
      extras["text"] = kJsonLinesText;
    } else {
      const Size size = numel * element_bytes;
      if (!size.ok()) fail(quote + "the byte size of its shape overflows");
      length = size.value();
      if (offset > group.size() || length > group.size() - offset)
        fail(quote + "needs bytes [" + std::to_string(offset) + ", " +
             std::to_string((Size(offset) + length).get().value_or(UINT64_MAX)) +
             ") of its group, whose shards (" + shard_list(group) + ") hold " + std::to_string(group.size()));
      place(t, group, offset, length);
    }
    t.extras = std::move(extras);
    catalog_.add(t);
    return offset + length;  // within the group's size, checked above
  }

  // The quantization of `t` as stored; the bytes per stored element.
  uint32_t quantize(TensorSpec& t, const Json& q, const WeightType& type, const std::string& quote,
                    nlohmann::json& extras) {
    if (!q.is_object()) fail(quote + "\"quantization\" is not an object");
    const auto dtype_field = q.find("dtype");
    if (dtype_field == q.end() || !dtype_field->is_string())
      fail(quote + "\"quantization\" has no \"dtype\" string");
    const std::string& name = dtype_field->get_ref<const std::string&>();
    const StoredType* stored = nullptr;
    for (const auto& s : kStoredTypes)
      if (s.name == name) stored = &s;
    if (stored == nullptr) fail(quote + "unknown quantization dtype \"" + name + "\"");
    BasicQuantization<std::string> quantization;
    quantization.values = type.dtype;
    if (stored->dtype == DType::Float16) {
      if (type.dtype != DType::Float32)
        fail(quote + "float16 quantization of a " + std::string(type.name) + " weight (only float32 is)");
      quantization.scheme = QScheme::Widened;
    } else {
      if (type.dtype != DType::Float32 && type.dtype != DType::Int32)
        fail(quote + name + " quantization of a " + std::string(type.name) +
             " weight (only float32 and int32 are)");
      const auto number = [&](std::string_view key) {
        const auto field = q.find(std::string(key));
        if (field == q.end() || !field->is_number())
          fail(quote + name + " quantization needs a number \"" + std::string(key) + "\"");
        return field->get<double>();
      };
      quantization.scheme = QScheme::MinScaleAffine;
      quantization.scale = number("scale");
      quantization.min = number("min");
    }
    if (auto original = q.find("original_dtype"); original != q.end() && original->is_string())
      extras["original_dtype"] = *original;
    t.dtype = stored->dtype;
    t.quantization = std::move(quantization);
    return stored->bytes;
  }

  // A string weight's elements, each a u32 LE length and its bytes, as
  // JSON Lines (dtype.hpp, DType::String); the bytes they take.
  uint64_t read_strings(TensorSpec& t, const GroupBytes& group, uint64_t offset, uint64_t count,
                        const std::string& quote) {
    std::string element;
    uint64_t at = offset;
    auto runs_past = [&](const std::string& what) {
      fail(quote + what + " at byte " + std::to_string(at) + " of its group runs past the group's " +
           std::to_string(group.size()) + " bytes");
    };
    // Each element takes at least 4 bytes of a stream that is finite: the
    // elements end at the group's end whatever `count` says.
    auto text = string_lines_.write(count, [&](uint64_t i) -> std::string_view {
      if (at > group.size() || group.size() - at < 4) runs_past("the length of string " + std::to_string(i));
      element.clear();
      group.copy(at, 4, element);
      const auto length = load_le<uint32_t>(std::as_bytes(std::span(element)));
      at += 4;
      if (group.size() - at < length)
        runs_past("string " + std::to_string(i) + " (" + std::to_string(length) + " bytes)");
      element.clear();
      group.copy(at, length, element);
      at += length;
      return element;
    });
    if (!text.lines) fail(quote + string_lines_.over_cap(text.length));
    t.bytes = ByteSpan::owned(std::move(*text.lines));
    // Decoded: the shard it starts in, at no offset of the raw file's.
    t.source = {offset < group.size() ? group.at(offset).name : name_, std::nullopt};
    return at - offset;
  }

  // The bytes [offset, offset + length) of the group's stream: a range of
  // one shard, or run pieces of each shard they span.
  void place(TensorSpec& t, const GroupBytes& group, uint64_t offset, uint64_t length) {
    if (group.shards().empty()) {  // no bytes: nothing to place
      t.bytes = ByteSpan::owned(std::string());
      t.source = {name_, std::nullopt};
      return;
    }
    const auto& first = group.at(std::min(offset, group.size() > 0 ? group.size() - 1 : 0));
    const uint64_t local = std::min(offset - first.start, first.file->size());
    t.source = {first.name, local};
    if (length <= first.file->size() - local) {
      t.bytes = ByteSpan::mapped(first.file, local, length);
      return;
    }
    for (uint64_t at = offset, left = length; left > 0;) {
      const auto& shard = group.at(at);
      const uint64_t begin = at - shard.start;
      const uint64_t take = std::min(left, shard.file->size() - begin);
      auto& piece = t.pieces.emplace_back();
      piece.bytes = ByteSpan::mapped(shard.file, begin, take);
      piece.size = take;
      piece.source = {shard.name, begin};
      at += take;
      left -= take;
    }
  }

  // --check: each shard read back whole with pread, as many bytes as when
  // it was opened (which its weights use exactly).
  void add_check(const GroupBytes& group, size_t number) {
    const std::string what = "the shards of weightsManifest group " + std::to_string(number) + " (" +
                             std::to_string(group.size()) + " bytes, exactly its weights')";
    auto shards = group.shards();
    model_.checks->push_back(
        {what, group.size(), [shards = std::move(shards)](const std::function<void(uint64_t)>& progress) {
           for (const auto& shard : shards) read_back_whole(*shard.file, kErrorFormat, "shard", progress);
         }});
  }

  const ModelFile& model_;
  std::string name_;  // the model file's name, as the catalog lists it
  std::optional<ModelFolder> folder_;
  Catalog catalog_;
  std::unordered_set<std::string> names_;
  StringLines string_lines_;  // the model's string weights' text
};

// Blanks before the text, and a UTF-8 byte order mark.
std::string_view json_text_of(std::span<const std::byte> head) {
  std::string_view text(reinterpret_cast<const char*>(head.data()), head.size());
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  const auto pos = text.find_first_not_of(" \t\r\n");
  return pos == std::string_view::npos ? std::string_view{} : text.substr(pos);
}

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  const std::string_view text = json_text_of(head);
  if (!text.starts_with('{')) return false;
  // The keys TensorFlow.js writes, in whatever order its writers put them:
  // a model.json whose large modelTopology comes first still names it at
  // its start; one that begins with its manifest or format names those.
  constexpr std::array<std::string_view, 6> kMarks{"\"weightsManifest\"", "\"modelTopology\"",
                                                   "\"graph-model\"",     "\"layers-model\"",
                                                   "\"convertedBy\"",     "\"generatedBy\""};
  return std::any_of(kMarks.begin(), kMarks.end(),
                     [&](std::string_view mark) { return text.find(mark) != std::string_view::npos; });
}

bool probe_folder(const fs::path& folder) {
  std::error_code ec;
  return fs::is_regular_file(folder / kModelJson, ec);
}

Catalog open_file(const ModelFile& model) { return Reader(model).read(); }

Catalog open_folder(const fs::path& folder, IntegrityChecks* checks) {
  return open_file(ModelFile::open(folder / kModelJson, checks));
}

}  // namespace modelfs::tfjs
