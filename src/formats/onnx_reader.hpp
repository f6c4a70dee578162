// SPDX-License-Identifier: Apache-2.0
#pragma once
// The ONNX reader's shared parts: onnx.proto's field numbers and data
// types, and the Reader whose members are defined in two files by concern:
// onnx_graph.cpp reads the graph document (graphs, nodes, attributes, types,
// functions) into graph.json, onnx.cpp the tensors and their bytes. They
// call each other (an attribute holds a tensor, a tensor records where it
// lives in the graph), so they share one class; the split keeps each file
// about one thing and within the size the project allows.
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "formats/format_reader.hpp"
#include "formats/model_folder.hpp"
#include "formats/onnx.hpp"
#include "formats/string_lines.hpp"
#include "io/json_text.hpp"
#include "io/protobuf_wire.hpp"
#include "modelfs/catalog.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"

namespace modelfs::onnx::detail {

namespace fs = std::filesystem;
using protobuf::WireContext;
using protobuf::WireField;
using protobuf::WireMessage;
using protobuf::WireType;
using Json = nlohmann::ordered_json;

constexpr std::string_view kFormat = "onnx";
// External data files of a remote model opened side by side before its
// graph is read; any more are opened as the graph names them.
constexpr size_t kMaxFilesOpenedEarly = 4096;
// What the sidecar of a STRING tensor says of its raw file.
constexpr std::string_view kStringText = kJsonLinesText;

// Field numbers of onnx.proto (docs/formats.md, "ONNX fields" and "TensorProto").
namespace model_field {
constexpr uint32_t kIrVersion = 1, kProducerName = 2, kProducerVersion = 3, kDomain = 4, kModelVersion = 5,
                   kDocString = 6, kGraph = 7, kOpsetImport = 8, kMetadataProps = 14, kTrainingInfo = 20,
                   kFunctions = 25;
}
namespace graph_field {
constexpr uint32_t kNode = 1, kName = 2, kInitializer = 5, kDocString = 10, kInput = 11, kOutput = 12,
                   kValueInfo = 13, kSparseInitializer = 15;
}
namespace node_field {
constexpr uint32_t kInput = 1, kOutput = 2, kName = 3, kOpType = 4, kAttribute = 5, kDomain = 7;
}
namespace attribute_field {
constexpr uint32_t kName = 1, kF = 2, kI = 3, kS = 4, kT = 5, kG = 6, kFloats = 7, kInts = 8, kStrings = 9,
                   kTensors = 10, kGraphs = 11, kTp = 14, kTypeProtos = 15, kType = 20, kRefAttrName = 21,
                   kSparseTensor = 22, kSparseTensors = 23;
}
namespace tensor_field {
constexpr uint32_t kDims = 1, kDataType = 2, kSegment = 3, kFloatData = 4, kInt32Data = 5, kStringData = 6,
                   kInt64Data = 7, kName = 8, kRawData = 9, kDoubleData = 10, kUint64Data = 11,
                   kExternalData = 13, kDataLocation = 14;
}
namespace sparse_field {
constexpr uint32_t kValues = 1, kIndices = 2, kDims = 3;
}
namespace function_field {
constexpr uint32_t kName = 1, kInput = 4, kOutput = 5, kAttribute = 6, kNode = 7, kOpsetImport = 9,
                   kDomain = 10, kAttributeProto = 11, kOverload = 13;
}
namespace training_field {
constexpr uint32_t kInitialization = 1, kAlgorithm = 2;
}

// AttributeProto.AttributeType.
namespace attribute_type {
constexpr uint64_t kUndefined = 0, kFloat = 1, kInt = 2, kString = 3, kTensor = 4, kGraph = 5, kFloats = 6,
                   kInts = 7, kStrings = 8, kTensors = 9, kGraphs = 10, kSparseTensor = 11,
                   kSparseTensors = 12, kTypeProto = 13, kTypeProtos = 14;
}

// TensorProto.DataType (docs/formats.md, "ONNX data types") and the typed field that stores it.
struct DataTypeInfo {
  uint64_t code;
  std::string_view name;
  DType dtype;
  uint32_t typed_field;
};

constexpr DataTypeInfo kDataTypes[] = {
    {1, "FLOAT", DType::Float32, tensor_field::kFloatData},
    {2, "UINT8", DType::UInt8, tensor_field::kInt32Data},
    {3, "INT8", DType::Int8, tensor_field::kInt32Data},
    {4, "UINT16", DType::UInt16, tensor_field::kInt32Data},
    {5, "INT16", DType::Int16, tensor_field::kInt32Data},
    {6, "INT32", DType::Int32, tensor_field::kInt32Data},
    {7, "INT64", DType::Int64, tensor_field::kInt64Data},
    {8, "STRING", DType::String, tensor_field::kStringData},
    {9, "BOOL", DType::Bool, tensor_field::kInt32Data},
    {10, "FLOAT16", DType::Float16, tensor_field::kInt32Data},
    {11, "DOUBLE", DType::Float64, tensor_field::kDoubleData},
    {12, "UINT32", DType::UInt32, tensor_field::kUint64Data},
    {13, "UINT64", DType::UInt64, tensor_field::kUint64Data},
    {14, "COMPLEX64", DType::Complex64, tensor_field::kFloatData},
    {15, "COMPLEX128", DType::Complex128, tensor_field::kDoubleData},
    {16, "BFLOAT16", DType::BFloat16, tensor_field::kInt32Data},
    {17, "FLOAT8E4M3FN", DType::Float8E4M3FN, tensor_field::kInt32Data},
    {18, "FLOAT8E4M3FNUZ", DType::Float8E4M3FNUZ, tensor_field::kInt32Data},
    {19, "FLOAT8E5M2", DType::Float8E5M2, tensor_field::kInt32Data},
    {20, "FLOAT8E5M2FNUZ", DType::Float8E5M2FNUZ, tensor_field::kInt32Data},
    {21, "UINT4", DType::UInt4, tensor_field::kInt32Data},
    {22, "INT4", DType::Int4, tensor_field::kInt32Data},
    {23, "FLOAT4E2M1", DType::Float4E2M1, tensor_field::kInt32Data},
    {24, "FLOAT8E8M0", DType::Float8E8M0FNU, tensor_field::kInt32Data},
    {25, "UINT2", DType::UInt2, tensor_field::kInt32Data},
    {26, "INT2", DType::Int2, tensor_field::kInt32Data},
};

inline const DataTypeInfo* data_type_info(uint64_t code) {
  for (const auto& info : kDataTypes)
    if (info.code == code) return &info;
  return nullptr;
}

inline std::string data_type_name(uint64_t code) {
  const auto* info = data_type_info(code);
  return info ? std::string(info->name) : std::to_string(code);
}

// The TensorProto fields that hold data in the message itself.
constexpr std::pair<uint32_t, std::string_view> kDataFields[] = {
    {tensor_field::kFloatData, "float_data"},   {tensor_field::kInt32Data, "int32_data"},
    {tensor_field::kStringData, "string_data"}, {tensor_field::kInt64Data, "int64_data"},
    {tensor_field::kDoubleData, "double_data"}, {tensor_field::kUint64Data, "uint64_data"},
    {tensor_field::kRawData, "raw_data"}};

inline bool is_data_field(uint32_t number) {
  return std::ranges::any_of(kDataFields, [&](const auto& field) { return field.first == number; });
}

// Where a tensor's data is: one of kDataFields, else external data.
inline std::string typed_field_name(uint32_t field) {
  for (const auto& [number, name] : kDataFields)
    if (number == field) return std::string(name);
  return "external_data";
}

// Appends the low `width` bytes of `value`, little-endian.
inline void append_le(std::string& out, uint64_t value, uint64_t width) {
  for (uint64_t b = 0; b < width; ++b) out.push_back(static_cast<char>((value >> (8 * b)) & 0xFF));
}

// A message's fields, looked up by number.
class Fields {
 public:
  explicit Fields(WireMessage message) : message_(std::move(message)), fields_(message_.fields()) {}
  std::vector<WireField> every(uint32_t number) const {
    std::vector<WireField> out;
    for (const auto& f : fields_)
      if (f.number == number) out.push_back(f);
    return out;
  }
  // The last occurrence of a non-repeated scalar or string field wins.
  const WireField* last(uint32_t number) const {
    for (auto it = fields_.rbegin(); it != fields_.rend(); ++it)
      if (it->number == number) return &*it;
    return nullptr;
  }
  // The message of a non-repeated message field (the merge of its
  // occurrences), if it has one.
  std::optional<WireMessage> message(uint32_t number) const {
    const auto list = every(number);
    if (list.empty()) return std::nullopt;
    return message_.child(list);
  }

 private:
  WireMessage message_;
  std::vector<WireField> fields_;
};

// Strict decimal for external_data offset/length: at most 20 digits, no
// sign, no overflow.
inline std::optional<uint64_t> parse_decimal(std::string_view text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || text.size() > 20) return std::nullopt;
  return value;
}

class Reader {
 public:
  explicit Reader(const ModelFile& model)
      : model_path_(model.path), model_(model.mapped), checks_(model.checks) {}

  Catalog read();

 private:
  [[noreturn]] void fail(std::optional<uint64_t> offset, const std::string& reason) const {
    throw ModelError(context_.file, context_.format, offset, reason);
  }

  uint64_t varint(const WireField& f) const;
  std::string text(const WireField& f) const { return std::string(protobuf::field_text(f, context_)); }

  std::string last_text(const Fields& fields, uint32_t number) const;
  std::vector<std::string> texts(const Fields& fields, uint32_t number) const;
  std::vector<int64_t> int64s(const Fields& fields, uint32_t number) const;
  Json string_map(const WireMessage& parent, const std::vector<WireField>& entries) const;
  Json opsets(const WireMessage& parent, const std::vector<WireField>& entries) const;

  // ---- types (ValueInfoProto, TypeProto) --------------------------------

  Json read_shape(const WireMessage& shape) const;
  Json read_tensor_type(const WireMessage& tensor_type) const;
  Json type_field(const Fields& fields, uint32_t number) const;
  Json read_type(const WireMessage& type) const;
  Json read_value_info(const WireMessage& info) const;

  // ---- graphs, nodes, attributes, functions -----------------------------

  Json read_graph(const WireMessage& graph, const std::string& graph_path);
  Json read_node(const WireMessage& node, size_t index, const std::string& graph_path);
  uint64_t effective_type(const Fields& fields) const;
  std::pair<std::string, Json> read_attribute(const WireMessage& attribute, const std::string& owner,
                                              const std::string& graph_path,
                                              const std::optional<std::string>& constant_name);
  bool constant_value_tensor(const Fields& fields, const std::string& name, const std::string& tensor_name,
                             const std::string& graph_path, uint64_t at);
  Json read_function(const WireMessage& function);
  Json read_training_info(const WireMessage& info, size_t index);

  // ---- tensors ------------------------------------------------------------

  std::string read_any(const WireMessage& tensor, const std::string& name, bool stored_name_first,
                       const std::string& kind, const std::string& graph_path, bool sparse);
  std::string read_sparse(const WireMessage& sparse, std::string name, bool stored_name_first,
                          const std::string& kind, const std::string& graph_path);
  std::string read_tensor(const WireMessage& tensor, const std::string& given_name, bool stored_name_first,
                          const std::string& kind, const std::string& graph_path,
                          const nlohmann::json& more_extras = nlohmann::json::object());
  std::string json_lines(const std::vector<std::string_view>& elements, uint64_t at,
                         const std::string& quote);
  void read_typed(const WireMessage& tensor, uint32_t field, uint32_t bits, uint64_t nbytes, TensorSpec& t,
                  const std::string& quote);
  void read_external(const WireMessage& tensor, const std::vector<WireField>& entries, uint64_t nbytes,
                     TensorSpec& t, const std::string& quote);
  void add_checksum_check(const std::string& name, std::shared_ptr<const MappedFile> file,
                          const std::string& location, uint64_t begin, uint64_t size, std::string expected,
                          uint64_t at);
  void open_remote_external(const WireMessage& graph);
  std::shared_ptr<const MappedFile> external_file(const std::string& location, uint64_t at,
                                                  const std::string& quote);

  fs::path model_path_;
  std::shared_ptr<const MappedFile> model_;
  IntegrityChecks* checks_;  // null: none wanted
  std::string model_name_;
  std::optional<ModelFolder> folder_;
  WireContext context_;
  Catalog catalog_;
  StringLines string_lines_;                                           // the model's STRING tensors' text
  std::map<std::string, std::shared_ptr<const MappedFile>> external_;  // by location
  EarlyOpens early_;                                                   // open_remote_external's
  std::map<std::pair<dev_t, ino_t>, std::shared_ptr<const MappedFile>> external_by_identity_;
};

}  // namespace modelfs::onnx::detail
