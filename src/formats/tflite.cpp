// SPDX-License-Identifier: Apache-2.0
// The TensorFlow Lite reader (tflite.hpp): a strict walk of the flatbuffer's
// fields modelfs needs, each access bounds-checked first.
#include "formats/tflite.hpp"

#include "formats/flatbuffer.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/string_lines.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "io/json_text.hpp"
#include "io/tensor_spec.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"

namespace modelfs::tflite {
namespace {

// The walker and the parts both flatbuffer readers share.
using namespace flatbuffer;  // NOLINT(google-build-using-namespace): this file is one of its readers

constexpr std::string_view kFormat = "TensorFlow Lite";  // what messages call it
constexpr std::string_view kCatalogFormat = "tflite";    // the catalog's name of the format
constexpr uint64_t kMaxRank = 64;
// How many entries of a list metadata.json and sidecars print.
constexpr uint64_t kMaxListed = 4096;

// Field ids (slot numbers) of the schema's tables (docs/formats.md).
namespace model_field {
constexpr uint32_t kVersion = 0, kOperatorCodes = 1, kSubgraphs = 2, kDescription = 3, kBuffers = 4,
                   kMetadata = 6, kSignatureDefs = 7;
}
namespace subgraph_field {
constexpr uint32_t kTensors = 0, kInputs = 1, kOutputs = 2, kOperators = 3, kName = 4;
}
namespace tensor_field {
constexpr uint32_t kShape = 0, kType = 1, kBuffer = 2, kName = 3, kQuantization = 4, kIsVariable = 5,
                   kSparsity = 6, kExternalBuffer = 10;
}
namespace buffer_field {
constexpr uint32_t kData = 0, kOffset = 1, kSize = 2;
}
namespace quant_field {
constexpr uint32_t kMin = 0, kMax = 1, kScale = 2, kZeroPoint = 3, kDetailsType = 4, kQuantizedDimension = 6;
}
namespace opcode_field {
constexpr uint32_t kDeprecatedBuiltin = 0, kCustomCode = 1, kVersion = 2, kBuiltinCode = 3;
}
namespace metadata_field {
constexpr uint32_t kName = 0, kBuffer = 1;
}
namespace signature_field {
constexpr uint32_t kKey = 2, kSubgraphIndex = 4;
}

// TensorType values 0..22 (docs/formats.md, "TensorType"); RESOURCE and
// VARIANT hold no data.
constexpr std::array<TypeInfo, 23> kTypes{{
    {"FLOAT32", DType::Float32},
    {"FLOAT16", DType::Float16},
    {"INT32", DType::Int32},
    {"UINT8", DType::UInt8},
    {"INT64", DType::Int64},
    {"STRING", DType::String},
    {"BOOL", DType::Bool},
    {"INT16", DType::Int16},
    {"COMPLEX64", DType::Complex64},
    {"INT8", DType::Int8},
    {"FLOAT64", DType::Float64},
    {"COMPLEX128", DType::Complex128},
    {"UINT64", DType::UInt64},
    {"RESOURCE", std::nullopt},
    {"VARIANT", std::nullopt},
    {"UINT32", DType::UInt32},
    {"UINT16", DType::UInt16},
    {"INT4", DType::Int4},
    {"BFLOAT16", DType::BFloat16},
    {"INT2", DType::Int2},
    {"UINT4", DType::UInt4},
    {"FLOAT8_E4M3FN", DType::Float8E4M3FN},
    {"FLOAT8_E5M2", DType::Float8E5M2},
}};

// A STRING buffer (docs/formats.md, "STRING tensors") as JSON Lines: a
// u32 count, count + 1 u32 offsets into the buffer, the characters.
std::string string_lines(const Flat& flat, std::span<const std::byte> bytes, uint64_t numel, uint64_t at,
                         const std::string& what, StringLines& lines) {
  const auto u32 = [&](uint64_t pos) { return uint64_t{load_le<uint32_t>(bytes, pos)}; };
  if (bytes.size() < 4)
    flat.fail(at, what + ": a string buffer of " + std::to_string(bytes.size()) + " bytes");
  const uint64_t n = u32(0);
  if (n != numel)
    flat.fail(at, what + ": the string buffer holds " + std::to_string(n) + " strings, the shape " +
                      std::to_string(numel));
  const uint64_t table_end = (n + 2) * 4;
  if (table_end > bytes.size()) flat.fail(at, what + ": the string offsets run past the buffer");
  uint64_t previous = u32(4);
  if (previous != table_end) flat.fail(at, what + ": the first string offset is not the offsets' end");
  auto text = lines.write(n, [&](uint64_t i) {
    const uint64_t next = u32(8 + 4 * i);
    if (next < previous || next > bytes.size())
      flat.fail(at,
                what + ": string offset " + std::to_string(i + 1) + " is out of order or past the buffer");
    const std::string_view element(reinterpret_cast<const char*>(bytes.data() + previous), next - previous);
    previous = next;
    return element;
  });
  if (previous != bytes.size()) flat.fail(at, what + ": the last string offset is not the buffer's end");
  if (!text.lines) flat.fail(at, what + ": " + lines.over_cap(text.length));
  return std::move(*text.lines);
}

// Where a buffer's bytes lie in the file.
struct Range {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Buffer `index` of Model.buffers: its bytes in the flatbuffer (data), or
// at an absolute offset past it (offset/size, for models over 2 GB), which
// must lie in the file; none when it holds no bytes.
std::optional<Range> buffer_bytes(const Table& root, const Vec& buffers, uint64_t index, uint64_t file_size) {
  const Table b = root.entry(buffers, index, "Buffer " + std::to_string(index));
  if (auto data = b.vector(buffer_field::kData, 1, "Buffer " + std::to_string(index) + ".data"))
    return data->size > 0 ? std::optional<Range>(Range{data->at, data->size}) : std::nullopt;
  const uint64_t offset = b.get<uint64_t>(buffer_field::kOffset, 0);
  const uint64_t size = b.get<uint64_t>(buffer_field::kSize, 0);
  if (offset <= 1) return std::nullopt;
  if (!range_fits(offset, size, file_size))
    root.flat().fail(b.at(), "buffer " + std::to_string(index) + "'s bytes [" + std::to_string(offset) +
                                 ", +" + std::to_string(size) + ") lie past the end of the file (" +
                                 std::to_string(file_size) + " bytes)");
  return size > 0 ? std::optional<Range>(Range{offset, size}) : std::nullopt;
}

// The root table, once the file is checked to be a TFL3 flatbuffer.
Table model_root(Flat& flat) {
  if (flat.limit() < 8) flat.fail(0, "the file is too short for a flatbuffer");
  if (std::memcmp(flat.bytes(4, 4).data(), "TFL3", 4) != 0) flat.fail(4, "no file identifier TFL3");
  return Table(flat, flat.follow(0, "the root offset"), "Model");
}

class Reader {
 public:
  explicit Reader(const ModelFile& model)
      : model_(model),
        file_name_(model.path.filename().string()),
        flat_(*model.mapped, kFormat),
        root_(model_root(flat_)),
        buffers_(root_.vector(model_field::kBuffers, 4, "Model.buffers")),
        buffer_count_(buffers_ ? buffers_->size : 0),
        catalog_(flat_catalog(kCatalogFormat, model)) {}

  Catalog read() {
    nlohmann::json& meta = catalog_.metadata;
    meta["schema_version"] = root_.get<uint32_t>(model_field::kVersion, 0);
    if (auto d = root_.string(model_field::kDescription, "Model.description")) meta["description"] = *d;
    read_operator_codes();
    meta["buffer_count"] = buffer_count_;
    read_metadata_and_signatures();
    const auto graphs = root_.vector(model_field::kSubgraphs, 4, "Model.subgraphs");
    const uint64_t graph_count = graphs ? graphs->size : 0;
    for (uint64_t g = 0; g < graph_count; ++g)
      read_subgraph(root_.entry(*graphs, g, "SubGraph " + std::to_string(g)), g);
    meta["subgraph_count"] = graph_count;
    meta["subgraphs"] = std::move(subgraphs_);
    if (!left_out_.empty()) meta["not_tensors"] = std::move(left_out_);
    add_buffer_check();
    return std::move(catalog_);
  }

 private:
  // Operator codes used.
  void read_operator_codes() {
    auto ops = root_.vector(model_field::kOperatorCodes, 4, "Model.operator_codes");
    if (!ops) return;
    nlohmann::json codes = nlohmann::json::array();
    for (uint64_t i = 0; i < std::min(ops->size, kMaxListed); ++i) {
      const Table op = root_.entry(*ops, i, "OperatorCode " + std::to_string(i));
      nlohmann::json code = nlohmann::json::object();
      const int32_t builtin = std::max<int32_t>(op.get<int8_t>(opcode_field::kDeprecatedBuiltin, 0),
                                                op.get<int32_t>(opcode_field::kBuiltinCode, 0));
      code["builtin_code"] = builtin;
      if (auto c = op.string(opcode_field::kCustomCode, "OperatorCode.custom_code")) code["custom_code"] = *c;
      code["version"] = op.get<int32_t>(opcode_field::kVersion, 1);
      codes.push_back(std::move(code));
    }
    catalog_.metadata["operator_codes"] = std::move(codes);
    catalog_.metadata["operator_code_count"] = ops->size;
  }

  // Metadata entries (names and the buffer they point at) and signatures.
  void read_metadata_and_signatures() {
    if (auto entries = root_.vector(model_field::kMetadata, 4, "Model.metadata")) {
      nlohmann::json names = nlohmann::json::array();
      for (uint64_t i = 0; i < std::min(entries->size, kMaxListed); ++i) {
        const Table m = root_.entry(*entries, i, "Metadata " + std::to_string(i));
        names.push_back({{"name", m.string(metadata_field::kName, "Metadata.name").value_or("")},
                         {"buffer", m.get<uint32_t>(metadata_field::kBuffer, 0)}});
      }
      catalog_.metadata["metadata"] = std::move(names);
    }
    if (auto sigs = root_.vector(model_field::kSignatureDefs, 4, "Model.signature_defs")) {
      nlohmann::json list = nlohmann::json::array();
      for (uint64_t i = 0; i < std::min(sigs->size, kMaxListed); ++i) {
        const Table sig = root_.entry(*sigs, i, "SignatureDef " + std::to_string(i));
        list.push_back(
            {{"signature_key", sig.string(signature_field::kKey, "SignatureDef.signature_key").value_or("")},
             {"subgraph_index", sig.get<uint32_t>(signature_field::kSubgraphIndex, 0)}});
      }
      catalog_.metadata["signature_defs"] = std::move(list);
    }
  }

  // Where buffer `index`'s bytes lie (none: empty), read once per index.
  std::optional<Range> buffer_range(uint32_t index, const std::string& what, uint64_t at) {
    auto it = ranges_.find(index);
    if (it != ranges_.end()) return it->second;
    if (index >= buffer_count_)
      flat_.fail(at, what + ": buffer " + std::to_string(index) + " is out of range (the model has " +
                         std::to_string(buffer_count_) + " buffers)");
    const auto range = buffer_bytes(root_, *buffers_, index, model_.mapped->size());
    ranges_.emplace(index, range);
    return range;
  }

  // A subgraph's summary, and its tensors that hold bytes. The first
  // subgraph's tensors are named as stored, the others' under its name.
  void read_subgraph(const Table& graph, uint64_t g) {
    const std::optional<std::string> graph_name = graph.string(subgraph_field::kName, "SubGraph.name");
    const std::string prefix =
        g == 0 ? std::string()
               : (graph_name && !graph_name->empty() ? *graph_name : "subgraph" + std::to_string(g)) + "/";
    const auto tensors = graph.vector(subgraph_field::kTensors, 4, "SubGraph.tensors");
    const auto operators = graph.vector(subgraph_field::kOperators, 4, "SubGraph.operators");
    const auto inputs = graph.vector(subgraph_field::kInputs, 4, "SubGraph.inputs");
    const auto outputs = graph.vector(subgraph_field::kOutputs, 4, "SubGraph.outputs");
    if (subgraphs_.size() < kMaxListed)
      subgraphs_.push_back({{"name", graph_name.value_or("")},
                            {"tensors", tensors ? tensors->size : 0},
                            {"operators", operators ? operators->size : 0},
                            {"inputs", inputs ? inputs->size : 0},
                            {"outputs", outputs ? outputs->size : 0}});
    if (!tensors) return;
    for (uint64_t i = 0; i < tensors->size; ++i) {
      const std::string what = "tensor " + std::to_string(i) + " of subgraph " + std::to_string(g);
      read_tensor(graph.entry(*tensors, i, what), what, g, prefix);
    }
  }

  // A tensor whose buffer holds bytes: a tensor of the catalog (a sparse
  // one listed instead).
  void read_tensor(const Table& t, const std::string& what, uint64_t g, const std::string& prefix) {
    const uint32_t index = t.get<uint32_t>(tensor_field::kBuffer, 0);
    if (index == 0) return;
    const std::string name = t.string(tensor_field::kName, what + "'s name").value_or("");
    const std::string named = what + " \"" + name + "\"";
    const auto range = buffer_range(index, named, t.at());
    if (!range) return;
    if (t.get<uint8_t>(tensor_field::kIsVariable, 0) != 0)
      flat_.fail(t.at(), named + " is a variable and has constant bytes");
    if (t.get<uint32_t>(tensor_field::kExternalBuffer, 0) != 0)
      flat_.fail(t.at(), named + " names an external buffer and has constant bytes");
    const TypeInfo& info = type_of(kTypes, t.get<int8_t>(tensor_field::kType, 0), t, named, "tensor type",
                                   "which holds no data");
    if (t.field(tensor_field::kSparsity, 4)) {
      // The buffer holds only the stored values of a sparse layout: no
      // dense tensor file; listed instead.
      if (left_out_.size() < kMaxListed)
        left_out_.push_back({{"name", prefix + name}, {"reason", "sparse tensor"}});
      return;
    }
    TensorSpec spec;
    if (auto dims = t.vector(tensor_field::kShape, 4, named + "'s shape"))
      spec.shape = read_shape(flat_, *dims, kMaxRank, named, "dimension");
    const auto numel = checked_numel(spec.shape);
    const auto strides = contiguous_strides(spec.shape);
    if (!numel || !strides) flat_.fail(t.at(), named + "'s shape overflows");
    spec.name = prefix + name;
    spec.dtype = *info.dtype;
    spec.strides = *strides;
    spec.source = {file_name_, range->offset};
    place_bytes(spec, *range, *numel, t, info, named);
    spec.extras["tflite_type"] = info.name;
    spec.extras["tflite_buffer"] = index;
    spec.extras["tflite_subgraph"] = g;
    if (auto q = t.table(tensor_field::kQuantization, named + "'s quantization"))
      read_quantization(*q, spec, named);
    catalog_.add(spec);
  }

  // A STRING tensor's text, any other's bytes in place (as many as its
  // shape needs).
  void place_bytes(TensorSpec& spec, Range range, uint64_t numel, const Table& t, const TypeInfo& info,
                   const std::string& named) {
    if (spec.dtype == DType::String) {
      spec.bytes = ByteSpan::owned(string_lines(flat_, model_.mapped->read(range.offset, range.size), numel,
                                                range.offset, named, text_lines_));
      spec.extras["text"] = kJsonLinesText;
      return;
    }
    const auto bits = checked_mul(numel, dtype_bits(spec.dtype));
    if (!bits) flat_.fail(t.at(), named + "'s shape overflows");
    const uint64_t expected = *bits / 8 + (*bits % 8 != 0 ? 1 : 0);
    if (expected != range.size)
      flat_.fail(range.offset, named + " (" + info.name + ") has " + std::to_string(range.size) +
                                   " bytes; its shape needs " + std::to_string(expected));
    spec.bytes = ByteSpan::mapped(model_.mapped, range.offset, range.size);
  }

  // The quantization parameters, listed; one scale and zero point (and no
  // details) are affine per tensor, dequantized in the .npy where the
  // storage type allows, as are per-channel ones along
  // quantized_dimension.
  void read_quantization(const Table& q, TensorSpec& spec, const std::string& named) {
    nlohmann::json j = nlohmann::json::object();
    std::vector<float> scales;
    std::vector<int64_t> zero_points;
    Vec scale_vector, zero_vector;  // size 0 when absent
    if (auto v = q.vector(quant_field::kScale, 4, named + "'s scale")) {
      scales = read_scalars<float>(flat_, *v, kMaxListed);
      scale_vector = *v;
    }
    if (auto v = q.vector(quant_field::kZeroPoint, 8, named + "'s zero_point")) {
      zero_points = read_scalars<int64_t>(flat_, *v, kMaxListed);
      zero_vector = *v;
    }
    if (auto v = q.vector(quant_field::kMin, 4, named + "'s min"))
      j["min"] = read_scalars<float>(flat_, *v, kMaxListed);
    if (auto v = q.vector(quant_field::kMax, 4, named + "'s max"))
      j["max"] = read_scalars<float>(flat_, *v, kMaxListed);
    const int32_t axis = q.get<int32_t>(quant_field::kQuantizedDimension, 0);
    const uint8_t details = q.get<uint8_t>(quant_field::kDetailsType, 0);
    const uint64_t scale_count = scale_vector.size, zero_count = zero_vector.size;
    if (scale_count > 0) {
      j["scale"] = scales;
      j["zero_point"] = zero_points;
      j["quantized_dimension"] = axis;
      if (scale_count > kMaxListed) j["scale_count"] = scale_count;
    }
    if (details != 0) j["details_type"] = details;
    const bool affine_storage = details == 0 && (spec.dtype == DType::Int8 || spec.dtype == DType::UInt8 ||
                                                 spec.dtype == DType::Int32);
    if (affine_storage && scale_count == 1 && zero_count == 1) {
      BasicQuantization<std::string> bq;
      bq.scheme = QScheme::PerTensorAffine;
      bq.scale = scales[0];
      bq.zero_point = zero_points[0];
      spec.quantization = std::move(bq);
    } else if (affine_storage && scale_count > 1 && zero_count == scale_count && axis >= 0 &&
               static_cast<uint64_t>(axis) < spec.shape.size() &&
               spec.shape[static_cast<size_t>(axis)] == scale_count) {
      // The scales (float32) and zero points (int64) read where the
      // flatbuffer holds them.
      BasicQuantization<std::string> bq;
      bq.scheme = QScheme::PerChannelAffine;
      bq.axis = axis;
      bq.channel_scales = ByteSpan::mapped(model_.mapped, scale_vector.at, 4 * scale_count);
      bq.channel_scales_dtype = DType::Float32;
      bq.channel_zero_points = ByteSpan::mapped(model_.mapped, zero_vector.at, 8 * zero_count);
      bq.channel_zero_points_dtype = DType::Int64;
      spec.quantization = std::move(bq);
    }
    if (!j.empty()) spec.extras["tflite_quantization"] = std::move(j);
  }

  // --check: every buffer's range lies in the file (the offset ones past
  // the flatbuffer), the unused ones too. Buffers may overlap: the
  // converter writes one copy of equal constants, which several buffers
  // then name.
  void add_buffer_check() {
    if (model_.checks == nullptr) return;
    const uint64_t count = buffer_count_;
    const std::shared_ptr<const MappedFile> mapped = model_.mapped;
    model_.checks->push_back(
        {"TensorFlow Lite buffer ranges", 0, [mapped, count](const std::function<void(uint64_t)>& progress) {
           Flat f(*mapped, kFormat);
           const Table r(f, f.follow(0, "the root offset"), "Model");
           const auto bufs = r.vector(model_field::kBuffers, 4, "Model.buffers");
           for (uint64_t i = 0; bufs && i < count; ++i) buffer_bytes(r, *bufs, i, mapped->size());
           progress(0);
         }});
  }

  const ModelFile& model_;
  const std::string file_name_;
  Flat flat_;
  const Table root_;
  const std::optional<Vec> buffers_;
  const uint64_t buffer_count_;
  Catalog catalog_;
  std::map<uint32_t, std::optional<Range>> ranges_;
  StringLines text_lines_;  // the model's STRING tensors' text
  nlohmann::json subgraphs_ = nlohmann::json::array();
  nlohmann::json left_out_ = nlohmann::json::array();
};

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  return head.size() >= 8 && std::memcmp(head.data() + 4, "TFL3", 4) == 0;
}

Catalog open_file(const ModelFile& model) { return Reader(model).read(); }

}  // namespace modelfs::tflite
