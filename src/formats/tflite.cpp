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

#include "io/checked_math.hpp"
#include "io/json_text.hpp"
#include "io/tensor_spec.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"

namespace modelfs::tflite {
namespace {

using flatbuffer::Flat;
using flatbuffer::read_scalars;
using flatbuffer::Table;
using flatbuffer::Vec;

constexpr std::string_view kFormat = "TensorFlow Lite";  // what messages call it
constexpr std::string_view kCatalogFormat = "tflite";    // the catalog's name of the format
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

struct TypeInfo {
  const char* name;
  std::optional<DType> dtype;  // none: RESOURCE, VARIANT (no data)
};

// TensorType values 0..22 (docs/formats.md, "TensorType").
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

// A STRING buffer (docs/formats.md, "STRING tensors") as JSON Lines.
std::string string_lines(const Flat& flat, std::span<const std::byte> bytes, uint64_t numel, uint64_t at,
                         const std::string& what, uint64_t& text_total) {
  auto u32 = [&](uint64_t pos) {
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + pos, 4);
    return uint64_t{v};
  };
  if (bytes.size() < 4)
    flat.fail(at, what + ": a string buffer of " + std::to_string(bytes.size()) + " bytes");
  const uint64_t n = u32(0);
  if (n != numel)
    flat.fail(at, what + ": the string buffer holds " + std::to_string(n) + " strings, the shape " +
                      std::to_string(numel));
  const uint64_t table_end = (n + 2) * 4;
  if (table_end > bytes.size()) flat.fail(at, what + ": the string offsets run past the buffer");
  std::string out;
  uint64_t previous = u32(4);
  if (previous != table_end) flat.fail(at, what + ": the first string offset is not the offsets' end");
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t next = u32(8 + 4 * i);
    if (next < previous || next > bytes.size())
      flat.fail(at,
                what + ": string offset " + std::to_string(i + 1) + " is out of order or past the buffer");
    const std::string_view text(reinterpret_cast<const char*>(bytes.data() + previous), next - previous);
    // Checked before the text is made: one string may be most of the file.
    if (text_total + out.size() + json_bytes_length(text) + 1 > kMaxStringTextBytes)
      flat.fail(at, what + ": the model's strings take more than " + std::to_string(kMaxStringTextBytes) +
                        " bytes as text");
    append_json_bytes(out, text);
    out += '\n';
    previous = next;
  }
  if (previous != bytes.size()) flat.fail(at, what + ": the last string offset is not the buffer's end");
  text_total += out.size();
  return out;
}

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  return head.size() >= 8 && std::memcmp(head.data() + 4, "TFL3", 4) == 0;
}

Catalog open_file(const ModelFile& model) {
  const MappedFile& file = *model.mapped;
  const std::string file_name = model.path.filename().string();
  Flat flat(file, kFormat);
  if (flat.limit() < 8) flat.fail(0, "the file is too short for a flatbuffer");
  if (std::memcmp(flat.bytes(4, 4).data(), "TFL3", 4) != 0) flat.fail(4, "no file identifier TFL3");
  const Table root(flat, flat.follow(0, "the root offset"), "Model");

  Catalog catalog;
  catalog.format = std::string(kCatalogFormat);
  catalog.mtime = file.mtime();
  catalog.files.push_back(file_name);
  // Tensors may name one buffer (the converter shares equal constants).
  catalog.tensors_may_share_bytes = true;
  nlohmann::json& meta = catalog.metadata;
  meta["schema_version"] = root.get<uint32_t>(model_field::kVersion, 0);
  if (auto d = root.string(model_field::kDescription, "Model.description")) meta["description"] = *d;

  // Operator codes used.
  if (auto ops = root.vector(model_field::kOperatorCodes, 4, "Model.operator_codes")) {
    nlohmann::json codes = nlohmann::json::array();
    for (uint64_t i = 0; i < std::min(ops->size, kMaxListed); ++i) {
      const Table op = root.entry(*ops, i, "OperatorCode " + std::to_string(i));
      nlohmann::json code = nlohmann::json::object();
      const int32_t builtin = std::max<int32_t>(op.get<int8_t>(opcode_field::kDeprecatedBuiltin, 0),
                                                op.get<int32_t>(opcode_field::kBuiltinCode, 0));
      code["builtin_code"] = builtin;
      if (auto c = op.string(opcode_field::kCustomCode, "OperatorCode.custom_code")) code["custom_code"] = *c;
      code["version"] = op.get<int32_t>(opcode_field::kVersion, 1);
      codes.push_back(std::move(code));
    }
    meta["operator_codes"] = std::move(codes);
    meta["operator_code_count"] = ops->size;
  }

  const std::optional<Vec> buffers = root.vector(model_field::kBuffers, 4, "Model.buffers");
  const uint64_t buffer_count = buffers ? buffers->size : 0;
  meta["buffer_count"] = buffer_count;

  // Metadata entries: names (and the buffer they point at).
  if (auto entries = root.vector(model_field::kMetadata, 4, "Model.metadata")) {
    nlohmann::json names = nlohmann::json::array();
    for (uint64_t i = 0; i < std::min(entries->size, kMaxListed); ++i) {
      const Table m = root.entry(*entries, i, "Metadata " + std::to_string(i));
      names.push_back({{"name", m.string(metadata_field::kName, "Metadata.name").value_or("")},
                       {"buffer", m.get<uint32_t>(metadata_field::kBuffer, 0)}});
    }
    meta["metadata"] = std::move(names);
  }
  if (auto sigs = root.vector(model_field::kSignatureDefs, 4, "Model.signature_defs")) {
    nlohmann::json list = nlohmann::json::array();
    for (uint64_t i = 0; i < std::min(sigs->size, kMaxListed); ++i) {
      const Table s = root.entry(*sigs, i, "SignatureDef " + std::to_string(i));
      list.push_back(
          {{"signature_key", s.string(signature_field::kKey, "SignatureDef.signature_key").value_or("")},
           {"subgraph_index", s.get<uint32_t>(signature_field::kSubgraphIndex, 0)}});
    }
    meta["signature_defs"] = std::move(list);
  }

  // Where each buffer's bytes lie (none: empty), read once per index used.
  std::map<uint32_t, std::optional<std::pair<uint64_t, uint64_t>>> ranges;
  auto buffer_range = [&](uint32_t index, const std::string& what, uint64_t at) {
    auto it = ranges.find(index);
    if (it != ranges.end()) return it->second;
    if (index >= buffer_count)
      flat.fail(at, what + ": buffer " + std::to_string(index) + " is out of range (the model has " +
                        std::to_string(buffer_count) + " buffers)");
    const Table b = root.entry(*buffers, index, "Buffer " + std::to_string(index));
    std::optional<std::pair<uint64_t, uint64_t>> range;
    if (auto data = b.vector(buffer_field::kData, 1, "Buffer " + std::to_string(index) + ".data")) {
      if (data->size > 0) range = std::pair{data->at, data->size};
    } else {
      const uint64_t offset = b.get<uint64_t>(buffer_field::kOffset, 0);
      const uint64_t size = b.get<uint64_t>(buffer_field::kSize, 0);
      if (offset > 1) {
        if (!range_fits(offset, size, file.size()))
          flat.fail(b.at(), "buffer " + std::to_string(index) + "'s bytes [" + std::to_string(offset) +
                                ", +" + std::to_string(size) + ") lie past the end of the file (" +
                                std::to_string(file.size()) + " bytes)");
        if (size > 0) range = std::pair{offset, size};
      }
    }
    ranges.emplace(index, range);
    return range;
  };

  uint64_t text_total = 0;
  nlohmann::json subgraphs = nlohmann::json::array();
  nlohmann::json left_out = nlohmann::json::array();
  const auto graphs = root.vector(model_field::kSubgraphs, 4, "Model.subgraphs");
  const uint64_t graph_count = graphs ? graphs->size : 0;
  for (uint64_t g = 0; g < graph_count; ++g) {
    const Table graph = root.entry(*graphs, g, "SubGraph " + std::to_string(g));
    const std::optional<std::string> graph_name = graph.string(subgraph_field::kName, "SubGraph.name");
    const std::string prefix =
        g == 0 ? std::string()
               : (graph_name && !graph_name->empty() ? *graph_name : "subgraph" + std::to_string(g)) + "/";
    const auto tensors = graph.vector(subgraph_field::kTensors, 4, "SubGraph.tensors");
    const auto operators = graph.vector(subgraph_field::kOperators, 4, "SubGraph.operators");
    const auto inputs = graph.vector(subgraph_field::kInputs, 4, "SubGraph.inputs");
    const auto outputs = graph.vector(subgraph_field::kOutputs, 4, "SubGraph.outputs");
    if (subgraphs.size() < kMaxListed)
      subgraphs.push_back({{"name", graph_name.value_or("")},
                           {"tensors", tensors ? tensors->size : 0},
                           {"operators", operators ? operators->size : 0},
                           {"inputs", inputs ? inputs->size : 0},
                           {"outputs", outputs ? outputs->size : 0}});
    if (!tensors) continue;
    for (uint64_t i = 0; i < tensors->size; ++i) {
      const std::string what = "tensor " + std::to_string(i) + " of subgraph " + std::to_string(g);
      const Table t = graph.entry(*tensors, i, what);
      const uint32_t index = t.get<uint32_t>(tensor_field::kBuffer, 0);
      if (index == 0) continue;
      const std::string name = t.string(tensor_field::kName, what + "'s name").value_or("");
      const std::string named = what + " \"" + name + "\"";
      const auto range = buffer_range(index, named, t.at());
      if (!range) continue;
      if (t.get<uint8_t>(tensor_field::kIsVariable, 0) != 0)
        flat.fail(t.at(), named + " is a variable and has constant bytes");
      if (t.get<uint32_t>(tensor_field::kExternalBuffer, 0) != 0)
        flat.fail(t.at(), named + " names an external buffer and has constant bytes");
      const int8_t type = t.get<int8_t>(tensor_field::kType, 0);
      if (type < 0 || static_cast<size_t>(type) >= kTypes.size())
        flat.fail(t.at(), named + " has unknown tensor type " + std::to_string(type));
      const TypeInfo& info = kTypes[static_cast<size_t>(type)];
      if (!info.dtype) flat.fail(t.at(), named + " is of type " + info.name + ", which holds no data");
      if (t.field(tensor_field::kSparsity, 4)) {
        // The buffer holds only the stored values of a sparse layout: no
        // dense tensor file; listed instead.
        if (left_out.size() < kMaxListed)
          left_out.push_back({{"name", prefix + name}, {"reason", "sparse tensor"}});
        continue;
      }
      std::vector<uint64_t> shape;
      if (auto dims = t.vector(tensor_field::kShape, 4, named + "'s shape")) {
        if (dims->size > kMaxRank)
          flat.fail(dims->at, named + " has rank " + std::to_string(dims->size) + " (at most " +
                                  std::to_string(kMaxRank) + ")");
        for (const int32_t d : read_scalars<int32_t>(flat, *dims, kMaxRank)) {
          if (d < 0) flat.fail(dims->at, named + " has negative dimension " + std::to_string(d));
          shape.push_back(static_cast<uint64_t>(d));
        }
      }
      const auto numel = checked_numel(shape);
      const auto strides = contiguous_strides(shape);
      if (!numel || !strides) flat.fail(t.at(), named + "'s shape overflows");
      const auto [offset, size] = *range;
      TensorSpec spec;
      spec.name = prefix + name;
      spec.dtype = *info.dtype;
      spec.shape = shape;
      spec.strides = *strides;
      spec.source = {file_name, offset};
      if (spec.dtype == DType::String) {
        spec.bytes =
            ByteSpan::owned(string_lines(flat, file.read(offset, size), *numel, offset, named, text_total));
        spec.extras["text"] = kJsonLinesText;
      } else {
        const auto bits = checked_mul(*numel, dtype_bits(spec.dtype));
        if (!bits) flat.fail(t.at(), named + "'s shape overflows");
        const uint64_t expected = *bits / 8 + (*bits % 8 != 0 ? 1 : 0);
        if (expected != size)
          flat.fail(offset, named + " (" + info.name + ") has " + std::to_string(size) +
                                " bytes; its shape needs " + std::to_string(expected));
        spec.bytes = ByteSpan::mapped(model.mapped, offset, size);
      }
      spec.extras["tflite_type"] = info.name;
      spec.extras["tflite_buffer"] = index;
      spec.extras["tflite_subgraph"] = g;
      if (auto q = t.table(tensor_field::kQuantization, named + "'s quantization")) {
        nlohmann::json j = nlohmann::json::object();
        std::vector<float> scales;
        std::vector<int64_t> zero_points;
        uint64_t scale_count = 0, zero_count = 0;
        Vec scale_vector, zero_vector;
        if (auto v = q->vector(quant_field::kScale, 4, named + "'s scale")) {
          scales = read_scalars<float>(flat, *v, kMaxListed);
          scale_count = v->size;
          scale_vector = *v;
        }
        if (auto v = q->vector(quant_field::kZeroPoint, 8, named + "'s zero_point")) {
          zero_points = read_scalars<int64_t>(flat, *v, kMaxListed);
          zero_count = v->size;
          zero_vector = *v;
        }
        if (auto v = q->vector(quant_field::kMin, 4, named + "'s min"))
          j["min"] = read_scalars<float>(flat, *v, kMaxListed);
        if (auto v = q->vector(quant_field::kMax, 4, named + "'s max"))
          j["max"] = read_scalars<float>(flat, *v, kMaxListed);
        const int32_t axis = q->get<int32_t>(quant_field::kQuantizedDimension, 0);
        const uint8_t details = q->get<uint8_t>(quant_field::kDetailsType, 0);
        if (scale_count > 0) {
          j["scale"] = scales;
          j["zero_point"] = zero_points;
          j["quantized_dimension"] = axis;
          if (scale_count > kMaxListed) j["scale_count"] = scale_count;
        }
        if (details != 0) j["details_type"] = details;
        // One scale and zero point (and no details): affine per tensor,
        // dequantized in the .npy where the storage type allows.
        const bool affine_storage =
            details == 0 &&
            (spec.dtype == DType::Int8 || spec.dtype == DType::UInt8 || spec.dtype == DType::Int32);
        if (affine_storage && scale_count == 1 && zero_count == 1) {
          BasicQuantization<std::string> bq;
          bq.scheme = QScheme::PerTensorAffine;
          bq.scale = scales[0];
          bq.zero_point = zero_points[0];
          spec.quantization = std::move(bq);
        } else if (affine_storage && scale_count > 1 && zero_count == scale_count && axis >= 0 &&
                   static_cast<uint64_t>(axis) < spec.shape.size() &&
                   spec.shape[static_cast<size_t>(axis)] == scale_count) {
          // Per channel along quantized_dimension: the scales (float32) and
          // zero points (int64) read where the flatbuffer holds them.
          BasicQuantization<std::string> bq;
          bq.scheme = QScheme::PerChannelAffine;
          bq.axis = axis;
          bq.channel_scales = ByteSpan::mapped(model.mapped, scale_vector.at, 4 * scale_count);
          bq.channel_scales_dtype = DType::Float32;
          bq.channel_zero_points = ByteSpan::mapped(model.mapped, zero_vector.at, 8 * zero_count);
          bq.channel_zero_points_dtype = DType::Int64;
          spec.quantization = std::move(bq);
        }
        if (!j.empty()) spec.extras["tflite_quantization"] = std::move(j);
      }
      catalog.add(spec);
    }
  }
  meta["subgraph_count"] = graph_count;
  meta["subgraphs"] = std::move(subgraphs);
  if (!left_out.empty()) meta["not_tensors"] = std::move(left_out);

  if (model.checks != nullptr) {
    // Every buffer's range lies in the file (the offset ones past the
    // flatbuffer). Buffers may overlap: the converter writes one copy of
    // equal constants, which several buffers then name.
    const uint64_t count = buffer_count;
    const std::shared_ptr<const MappedFile> mapped = model.mapped;
    model.checks->push_back(
        {"TensorFlow Lite buffer ranges", 0, [mapped, count](const std::function<void(uint64_t)>& progress) {
           Flat f(*mapped, kFormat);
           const Table r(f, f.follow(0, "the root offset"), "Model");
           const auto bufs = r.vector(model_field::kBuffers, 4, "Model.buffers");
           for (uint64_t i = 0; bufs && i < count; ++i) {
             const Table b = r.entry(*bufs, i, "Buffer " + std::to_string(i));
             if (b.vector(buffer_field::kData, 1, "Buffer " + std::to_string(i) + ".data")) continue;
             const uint64_t offset = b.get<uint64_t>(buffer_field::kOffset, 0);
             const uint64_t size = b.get<uint64_t>(buffer_field::kSize, 0);
             if (offset > 1 && !range_fits(offset, size, mapped->size()))
               f.fail(b.at(), "buffer " + std::to_string(i) + "'s bytes [" + std::to_string(offset) + ", +" +
                                  std::to_string(size) + ") lie past the end of the file");
           }
           progress(0);
         }});
  }
  return catalog;
}

}  // namespace modelfs::tflite
