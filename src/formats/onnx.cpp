// SPDX-License-Identifier: Apache-2.0
#include "onnx.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "modelfs/budget.hpp"
#include "modelfs/budget_charge.hpp"
#include "modelfs/checked_math.hpp"
#include "modelfs/error.hpp"
#include "modelfs/json_object.hpp"
#include "modelfs/json_text.hpp"
#include "modelfs/mapped_file.hpp"
#include "modelfs/model_folder.hpp"
#include "modelfs/protobuf_wire.hpp"
#include "modelfs/remote.hpp"
#include "modelfs/sha1.hpp"

namespace modelfs::onnx {
namespace {

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

const DataTypeInfo* data_type_info(uint64_t code) {
  for (const auto& info : kDataTypes)
    if (info.code == code) return &info;
  return nullptr;
}

std::string data_type_name(uint64_t code) {
  const auto* info = data_type_info(code);
  return info ? std::string(info->name) : std::to_string(code);
}

// The TensorProto fields that hold data in the message itself.
constexpr std::pair<uint32_t, std::string_view> kDataFields[] = {
    {tensor_field::kFloatData, "float_data"},   {tensor_field::kInt32Data, "int32_data"},
    {tensor_field::kStringData, "string_data"}, {tensor_field::kInt64Data, "int64_data"},
    {tensor_field::kDoubleData, "double_data"}, {tensor_field::kUint64Data, "uint64_data"},
    {tensor_field::kRawData, "raw_data"}};

bool is_data_field(uint32_t number) {
  return std::ranges::any_of(kDataFields, [&](const auto& field) { return field.first == number; });
}

// Where a tensor's data is: one of kDataFields, else external data.
std::string typed_field_name(uint32_t field) {
  for (const auto& [number, name] : kDataFields)
    if (number == field) return std::string(name);
  return "external_data";
}

// Appends the low `width` bytes of `value`, little-endian.
void append_le(std::string& out, uint64_t value, uint64_t width) {
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
std::optional<uint64_t> parse_decimal(std::string_view text) {
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

  Catalog read() {
    context_ = {model_->display_name(), std::string(kFormat)};
    if (model_->size() > kMaxModelBytes)
      fail(0, "file is " + std::to_string(model_->size()) +
                  " bytes; a protobuf message (and so an .onnx file) is limited to " +
                  std::to_string(kMaxModelBytes) +
                  " bytes, larger models keep weights in "
                  "external data");
    model_name_ = model_path_.filename().string();
    // An .onnx file has no header apart from its weights: it all counts as
    // metadata (external data does not).
    add_metadata_bytes(model_->size());
    folder_ = ModelFolder::of_file(model_path_, std::string(kFormat));

    catalog_.format = std::string(kFormat);
    // Nothing in ONNX forbids two external-data entries naming one range.
    catalog_.tensors_may_share_bytes = true;
    catalog_.mtime = model_->mtime();
    catalog_.files.push_back(model_name_);

    WireMessage model(model_->unchecked_bytes(), 0, &context_);
    Fields fields(model);
    auto& meta = catalog_.metadata;
    if (const auto* f = fields.last(model_field::kIrVersion)) meta["ir_version"] = varint(*f);
    meta["opset_import"] = opsets(model, fields.every(model_field::kOpsetImport));
    meta["producer_name"] = last_text(fields, model_field::kProducerName);
    meta["producer_version"] = last_text(fields, model_field::kProducerVersion);
    meta["domain"] = last_text(fields, model_field::kDomain);
    if (const auto* f = fields.last(model_field::kModelVersion))
      meta["model_version"] = static_cast<int64_t>(varint(*f));
    meta["doc_string"] = last_text(fields, model_field::kDocString);
    meta["metadata_props"] = string_map(model, fields.every(model_field::kMetadataProps));

    // Room for its three keys first: an ordered object that grows copies
    // its values (their keys are const, so not moved), and the graph's
    // may be most of the model.
    Json graph_doc = Json::object();
    graph_doc.get_ref<Json::object_t&>().reserve(3);
    const auto graph = fields.message(model_field::kGraph);
    if (!graph) fail(0, "the model has no graph (ModelProto field 7)");
    if (remote::is_url(model_path_.native())) open_remote_external(*graph);
    graph_doc["graph"] = read_graph(*graph, "main");
    const Json& main = graph_doc["graph"];
    meta["graph_name"] = main["name"];
    meta["inputs"] = main["inputs"];
    meta["outputs"] = main["outputs"];

    graph_doc["functions"] = Json::array();
    meta["functions"] = Json::array();
    for (const auto& f : fields.every(model_field::kFunctions)) {
      Json function = read_function(model.child(f));
      meta["functions"].push_back(function["domain"].get<std::string>() + ":" +
                                  function["name"].get<std::string>());
      graph_doc["functions"].push_back(std::move(function));
    }
    graph_doc["training_info"] = Json::array();
    const auto training = fields.every(model_field::kTrainingInfo);
    for (size_t i = 0; i < training.size(); ++i)
      graph_doc["training_info"].push_back(read_training_info(model.child(training[i]), i));

    // Printing the graph may take several times its memory: not once the
    // graph has passed the budget.
    check_budget();
    const auto replace = nlohmann::json::error_handler_t::replace;
    catalog_.documents.push_back({"graph.json", graph_doc.dump(2, ' ', false, replace) + "\n"});
    return std::move(catalog_);
  }

 private:
  [[noreturn]] void fail(std::optional<uint64_t> offset, const std::string& reason) const {
    throw ModelError(context_.file, context_.format, offset, reason);
  }

  uint64_t varint(const WireField& f) const {
    protobuf::expect_type(f, WireType::Varint, "be a varint", context_);
    return f.value;
  }

  std::string text(const WireField& f) const { return std::string(protobuf::field_text(f, context_)); }

  std::string last_text(const Fields& fields, uint32_t number) const {
    const auto* f = fields.last(number);
    return f ? text(*f) : std::string();
  }

  std::vector<std::string> texts(const Fields& fields, uint32_t number) const {
    std::vector<std::string> out;
    for (const auto& f : fields.every(number)) out.push_back(text(f));
    return out;
  }

  // A repeated int64 field, packed or not.
  std::vector<int64_t> int64s(const Fields& fields, uint32_t number) const {
    std::vector<uint64_t> values;
    for (const auto& f : fields.every(number)) protobuf::append_varints(f, context_, values);
    return {values.begin(), values.end()};
  }

  // StringStringEntryProto list -> {key: value}; a repeated key keeps the last.
  Json string_map(const WireMessage& parent, const std::vector<WireField>& entries) const {
    Json out = Json::object();
    ObjectFiller fill(out);
    fill.reserve(entries.size());
    for (const auto& f : entries) {
      Fields entry(parent.child(f));
      fill.set(last_text(entry, 1), last_text(entry, 2));
    }
    return out;
  }

  // OperatorSetIdProto list -> [{domain, version}].
  Json opsets(const WireMessage& parent, const std::vector<WireField>& entries) const {
    Json out = Json::array();
    for (const auto& f : entries) {
      Fields opset(parent.child(f));
      const auto* version = opset.last(2);
      out.push_back({{"domain", last_text(opset, 1)},
                     {"version", version ? static_cast<int64_t>(varint(*version)) : 0}});
    }
    return out;
  }

  // ---- types (ValueInfoProto, TypeProto) --------------------------------

  Json read_shape(const WireMessage& shape) const {
    Json dims = Json::array();
    Fields fields(shape);
    for (const auto& d : fields.every(1)) {
      Fields dim(shape.child(d));
      if (const auto* value = dim.last(1))
        dims.push_back(static_cast<int64_t>(varint(*value)));
      else if (const auto* param = dim.last(2))
        dims.push_back(text(*param));
      else
        dims.push_back(nullptr);
    }
    return dims;
  }

  Json read_tensor_type(const WireMessage& tensor_type) const {
    Fields fields(tensor_type);
    Json out;
    const auto* elem = fields.last(1);
    out["elem_type"] = elem ? data_type_name(varint(*elem)) : "UNDEFINED";
    if (const auto shape = fields.message(2)) out["shape"] = read_shape(*shape);
    return out;
  }

  // The TypeProto a field of `fields` holds; null JSON if none.
  Json type_field(const Fields& fields, uint32_t number) const {
    const auto type = fields.message(number);
    return type ? read_type(*type) : Json();
  }

  Json read_type(const WireMessage& type) const {
    Fields fields(type);
    Json out = Json::object();
    if (const auto tensor = fields.message(1)) out["tensor"] = read_tensor_type(*tensor);
    if (const auto sequence = fields.message(4)) out["sequence"] = type_field(Fields(*sequence), 1);
    if (const auto map = fields.message(5)) {
      Fields entries(*map);
      const auto* key = entries.last(1);
      out["map"] = {{"key", key ? data_type_name(varint(*key)) : "UNDEFINED"},
                    {"value", type_field(entries, 2)}};
    }
    if (const auto sparse = fields.message(8)) out["sparse_tensor"] = read_tensor_type(*sparse);
    if (const auto optional = fields.message(9)) out["optional"] = type_field(Fields(*optional), 1);
    if (const auto* d = fields.last(6)) out["denotation"] = text(*d);
    return out;
  }

  Json read_value_info(const WireMessage& info) const {
    Fields fields(info);
    Json out;
    out["name"] = last_text(fields, 1);
    out["type"] = type_field(fields, 2);
    return out;
  }

  // ---- graphs, nodes, attributes, functions -----------------------------

  Json read_graph(const WireMessage& graph, const std::string& graph_path) {
    Fields fields(graph);
    Json out;
    out["name"] = last_text(fields, graph_field::kName);
    out["path"] = graph_path;
    out["doc_string"] = last_text(fields, graph_field::kDocString);
    for (auto [key, number] :
         {std::pair{"inputs", graph_field::kInput}, std::pair{"outputs", graph_field::kOutput},
          std::pair{"value_info", graph_field::kValueInfo}}) {
      out[key] = Json::array();
      for (const auto& f : fields.every(number)) out[key].push_back(read_value_info(graph.child(f)));
    }
    // Initializers keep their stored names; <kind>_<index> names one without.
    for (auto [key, kind, number, sparse] :
         {std::tuple{"initializers", "initializer", graph_field::kInitializer, false},
          std::tuple{"sparse_initializers", "sparse_initializer", graph_field::kSparseInitializer, true}}) {
      out[key] = Json::array();
      const auto list = fields.every(number);
      for (size_t i = 0; i < list.size(); ++i)
        out[key].push_back(read_any(graph.child(list[i]), std::string(kind) + "_" + std::to_string(i), true,
                                    kind, graph_path, sparse));
    }
    out["nodes"] = Json::array();
    const auto nodes = fields.every(graph_field::kNode);
    for (size_t i = 0; i < nodes.size(); ++i)
      out["nodes"].push_back(read_node(graph.child(nodes[i]), i, graph_path));
    return out;
  }

  Json read_node(const WireMessage& node, size_t index, const std::string& graph_path) {
    Fields fields(node);
    Json out;
    out["name"] = last_text(fields, node_field::kName);
    out["op_type"] = last_text(fields, node_field::kOpType);
    out["domain"] = last_text(fields, node_field::kDomain);
    out["inputs"] = texts(fields, node_field::kInput);
    const auto outputs = texts(fields, node_field::kOutput);
    out["outputs"] = outputs;

    // What this node's attribute tensors and subgraphs are named after.
    std::string ident = out["name"].get<std::string>();
    if (ident.empty() && !outputs.empty()) ident = outputs.front();
    if (ident.empty()) ident = out["op_type"].get<std::string>() + "_" + std::to_string(index);
    const std::string domain = out["domain"].get<std::string>();
    const bool constant = out["op_type"] == "Constant" && (domain.empty() || domain == "ai.onnx");
    std::optional<std::string> constant_name;
    if (constant && !outputs.empty() && !outputs.front().empty()) constant_name = outputs.front();

    ObjectFiller attributes(out["attributes"] = Json::object());
    for (const auto& f : fields.every(node_field::kAttribute)) {
      auto [name, value] = read_attribute(node.child(f), ident, graph_path, constant_name);
      attributes.set(std::move(name), std::move(value));
    }
    return out;
  }

  // The attribute's type; files from old exporters (CNTK) leave it
  // UNDEFINED, so then it is inferred from the field that is present.
  uint64_t effective_type(const Fields& fields) const {
    namespace type = attribute_type;
    namespace field = attribute_field;
    if (const auto* t = fields.last(field::kType); t && varint(*t) != type::kUndefined) return varint(*t);
    // The first field present decides: one message, then a list of
    // messages, a list of numbers or strings, and last a single value.
    constexpr std::pair<uint32_t, uint64_t> kByField[] = {{field::kT, type::kTensor},
                                                          {field::kG, type::kGraph},
                                                          {field::kSparseTensor, type::kSparseTensor},
                                                          {field::kTp, type::kTypeProto},
                                                          {field::kTensors, type::kTensors},
                                                          {field::kGraphs, type::kGraphs},
                                                          {field::kSparseTensors, type::kSparseTensors},
                                                          {field::kTypeProtos, type::kTypeProtos},
                                                          {field::kFloats, type::kFloats},
                                                          {field::kInts, type::kInts},
                                                          {field::kStrings, type::kStrings},
                                                          {field::kS, type::kString},
                                                          {field::kF, type::kFloat},
                                                          {field::kI, type::kInt}};
    for (auto [number, found] : kByField)
      if (fields.last(number)) return found;
    return type::kUndefined;
  }

  // (name, JSON value) of one AttributeProto; its tensors go to the catalog
  // and its graphs are read in place (nested in the JSON).
  std::pair<std::string, Json> read_attribute(const WireMessage& attribute, const std::string& owner,
                                              const std::string& graph_path,
                                              const std::optional<std::string>& constant_name) {
    using namespace attribute_field;
    Fields fields(attribute);
    const std::string name = last_text(fields, kName);
    const std::string tensor_base = owner + "/" + name;
    const uint64_t type = effective_type(fields);
    Json value;
    if (const auto* ref = fields.last(kRefAttrName)) {
      value["ref_attr_name"] = text(*ref);
      return {name, value};
    }
    auto fixed32_float = [&](const WireField& f) {
      if (f.type != WireType::Fixed32) fail(f.offset, "attribute \"" + name + "\": f is not a float");
      const auto bits = static_cast<uint32_t>(f.value);
      return static_cast<double>(std::bit_cast<float>(bits));
    };
    if (constant_name &&
        constant_value_tensor(fields, name, *constant_name, graph_path, attribute.offset())) {
      value["tensor"] = *constant_name;
      return {name, value};
    }
    // A message-valued attribute holds one message (the merge of its
    // field's occurrences) or a list; `read` gets each with the suffix,
    // "/<index>" in a list, that its tensors' names and graphs' paths take.
    const auto one = [&](uint32_t field, const char* key, const auto& read) {
      if (const auto message = fields.message(field)) value[key] = read(*message, "");
    };
    const auto each = [&](uint32_t field, const char* key, const auto& read) {
      value[key] = Json::array();
      const auto list = fields.every(field);
      for (size_t i = 0; i < list.size(); ++i)
        value[key].push_back(read(attribute.child(list[i]), "/" + std::to_string(i)));
    };
    // Tensors, dense or sparse: a Constant's one is named after its output.
    const auto tensors = [&](bool sparse) {
      return [&, sparse](const WireMessage& tensor, const std::string& suffix) {
        const bool constant = constant_name && suffix.empty();
        return read_any(tensor, constant ? *constant_name : tensor_base + suffix, false,
                        constant ? "constant" : "attribute", graph_path, sparse);
      };
    };
    const auto graph = [&](const WireMessage& g, const std::string& suffix) {
      return read_graph(g, graph_path + "/" + tensor_base + suffix);
    };
    const auto type_proto = [&](const WireMessage& t, const std::string&) { return read_type(t); };
    switch (type) {
      case attribute_type::kFloat: {
        const auto* f = fields.last(kF);
        value = f ? Json(fixed32_float(*f)) : Json(0.0);
        break;
      }
      case attribute_type::kInt: {
        const auto* f = fields.last(kI);
        value = f ? static_cast<int64_t>(varint(*f)) : 0;
        break;
      }
      case attribute_type::kString:
        value = last_text(fields, kS);
        break;
      case attribute_type::kFloats: {
        value = Json::array();
        for (const auto& f : fields.every(kFloats)) {
          if (f.type == WireType::Length) {
            if (f.length % 4 != 0) fail(f.offset, "attribute \"" + name + "\": packed floats of odd length");
            const auto packed = payload_bytes(f);
            for (uint64_t at = 0; at < f.length; at += 4) {
              uint32_t bits = 0;
              std::memcpy(&bits, packed.data() + at, 4);
              value.push_back(static_cast<double>(std::bit_cast<float>(bits)));
            }
          } else {
            value.push_back(fixed32_float(f));
          }
        }
        break;
      }
      case attribute_type::kInts:
        value = int64s(fields, kInts);
        break;
      case attribute_type::kStrings:
        value = texts(fields, kStrings);
        break;
      case attribute_type::kTensor:
        one(kT, "tensor", tensors(false));
        break;
      case attribute_type::kTensors:
        each(kTensors, "tensors", tensors(false));
        break;
      case attribute_type::kSparseTensor:
        one(kSparseTensor, "sparse_tensor", tensors(true));
        break;
      case attribute_type::kSparseTensors:
        each(kSparseTensors, "sparse_tensors", tensors(true));
        break;
      case attribute_type::kGraph:
        one(kG, "graph", graph);
        break;
      case attribute_type::kGraphs:
        each(kGraphs, "graphs", graph);
        break;
      case attribute_type::kTypeProto:
        one(kTp, "type", type_proto);
        break;
      case attribute_type::kTypeProtos:
        each(kTypeProtos, "types", type_proto);
        break;
      default:
        value["unknown_type"] = type;
        break;
    }
    check_budget();
    return {name, value};
  }

  // A Constant node's value_float(s), value_int(s) or value_string(s): a
  // float32, int64 or string tensor named like its `value` would be, 0-D
  // for the one-value forms and 1-D for the lists. The attribute's name
  // says which, as the operator reads it, not its type: onnx's helper marks
  // an empty list INTS whatever its name. False for any other attribute.
  bool constant_value_tensor(const Fields& fields, const std::string& name, const std::string& tensor_name,
                             const std::string& graph_path, uint64_t at) {
    using namespace attribute_field;
    struct Form {
      std::string_view attribute;
      DType dtype;
      std::string_view onnx_type;
      bool list;
    };
    static constexpr Form kForms[] = {
        {"value_float", DType::Float32, "FLOAT", false},  {"value_floats", DType::Float32, "FLOAT", true},
        {"value_int", DType::Int64, "INT64", false},      {"value_ints", DType::Int64, "INT64", true},
        {"value_string", DType::String, "STRING", false}, {"value_strings", DType::String, "STRING", true},
    };
    const Form* form = std::ranges::find(kForms, name, &Form::attribute);
    if (form == std::end(kForms)) return false;
    const std::string quote = "tensor \"" + tensor_name + "\" (Constant " + name + "): ";

    TensorSpec t;
    t.name = tensor_name;
    t.dtype = form->dtype;
    std::string bytes;
    uint64_t count = 0;
    if (form->dtype == DType::Float32) {
      // One float (field f, fixed32), or a list (field floats, packed or one
      // fixed32 each); a one-value form without its field is 0, proto's default.
      if (form->list) {
        for (const auto& f : fields.every(kFloats)) {
          if (f.type == WireType::Length) {
            if (f.length % 4 != 0) fail(f.offset, quote + "packed floats of odd length");
            const auto packed = payload_bytes(f);
            bytes.append(reinterpret_cast<const char*>(packed.data()), packed.size());
          } else if (f.type == WireType::Fixed32) {
            append_le(bytes, f.value, 4);
          } else {
            fail(f.offset, quote + "floats has wire type " + std::to_string(static_cast<int>(f.type)));
          }
        }
      } else {
        const auto* f = fields.last(kF);
        if (f && f->type != WireType::Fixed32) fail(f->offset, quote + "f is not a float");
        append_le(bytes, f ? f->value : 0, 4);
      }
      count = bytes.size() / 4;
    } else if (form->dtype == DType::Int64) {
      if (form->list) {
        // Eight bytes for each varint, which may take one byte of the file:
        // counted (a varint ends at a byte below 0x80) and bounded first.
        const auto list = fields.every(kInts);
        uint64_t entries = 0;
        for (const auto& f : list) {
          if (f.type != WireType::Length) {
            ++entries;
            continue;
          }
          for (std::byte b : payload_bytes(f)) entries += std::to_integer<uint8_t>(b) < 0x80;
        }
        if (entries > kMaxConstantListBytes / 8)
          fail(at, quote + std::to_string(entries) + " integers take more than the " +
                       std::to_string(kMaxConstantListBytes) + "-byte limit on a Constant's list");
        bytes.reserve(entries * 8);
        for (const auto& f : list) {
          if (f.type == WireType::Varint) {
            append_le(bytes, f.value, 8);
          } else if (f.type == WireType::Length) {
            for (uint64_t pos = 0; pos < f.payload.size();)
              append_le(bytes, protobuf::read_varint(f.payload, pos, context_, f.offset), 8);
          } else {
            fail(f.offset, quote + "ints has wire type " + std::to_string(static_cast<int>(f.type)));
          }
        }
      } else {
        const auto* f = fields.last(kI);
        append_le(bytes, f ? varint(*f) : 0, 8);
      }
      count = bytes.size() / 8;
    } else {
      std::vector<std::string_view> elements;
      if (form->list) {
        for (const auto& f : fields.every(kStrings)) elements.push_back(protobuf::field_text(f, context_));
      } else {
        const auto* f = fields.last(kS);
        elements.push_back(f ? protobuf::field_text(*f, context_) : std::string_view());
      }
      bytes = json_lines(elements, at, quote);
      count = elements.size();
      t.extras["text"] = kStringText;
    }
    if (form->list) t.shape = {count};
    t.strides.assign(t.shape.size(), 1);  // rank 0 or 1
    t.bytes = ByteSpan::owned(std::move(bytes));
    t.source = {model_name_, std::nullopt};
    t.extras["onnx_data_type"] = form->onnx_type;
    t.extras["kind"] = "constant";
    t.extras["graph"] = graph_path;
    t.extras["storage"] = name;
    catalog_.add(t);
    return true;
  }

  Json read_function(const WireMessage& function) {
    using namespace function_field;
    Fields fields(function);
    Json out;
    out["name"] = last_text(fields, kName);
    out["domain"] = last_text(fields, kDomain);
    out["overload"] = last_text(fields, kOverload);
    const std::string path =
        "function:" + out["domain"].get<std::string>() + ":" + out["name"].get<std::string>();
    out["path"] = path;
    out["inputs"] = texts(fields, kInput);
    out["outputs"] = texts(fields, kOutput);
    out["attributes"] = texts(fields, kAttribute);
    out["opset_import"] = opsets(function, fields.every(kOpsetImport));
    ObjectFiller defaults(out["attribute_defaults"] = Json::object());
    const std::string function_name = out["name"].get<std::string>();
    for (const auto& f : fields.every(kAttributeProto)) {
      auto [name, value] = read_attribute(function.child(f), function_name, path, std::nullopt);
      defaults.set(std::move(name), std::move(value));
    }
    out["nodes"] = Json::array();
    const auto nodes = fields.every(kNode);
    for (size_t i = 0; i < nodes.size(); ++i)
      out["nodes"].push_back(read_node(function.child(nodes[i]), i, path));
    return out;
  }

  Json read_training_info(const WireMessage& info, size_t index) {
    Fields fields(info);
    Json out;
    for (auto [key, number] : {std::pair{"initialization", training_field::kInitialization},
                               std::pair{"algorithm", training_field::kAlgorithm}})
      if (const auto graph = fields.message(number))
        out[key] = read_graph(*graph, "training_info/" + std::to_string(index) + "/" + key);
    return out;
  }

  // ---- tensors ------------------------------------------------------------

  // Reads a TensorProto or SparseTensorProto named `name`, or by the name
  // it stores when it has one and `stored_name_first`. Returns the name it
  // was given.
  std::string read_any(const WireMessage& tensor, const std::string& name, bool stored_name_first,
                       const std::string& kind, const std::string& graph_path, bool sparse) {
    return sparse ? read_sparse(tensor, name, stored_name_first, kind, graph_path)
                  : read_tensor(tensor, name, stored_name_first, kind, graph_path);
  }

  // Reads a SparseTensorProto as two tensors, <name>.values and
  // <name>.indices (its name: that of its values).
  std::string read_sparse(const WireMessage& sparse, std::string name, bool stored_name_first,
                          const std::string& kind, const std::string& graph_path) {
    Fields fields(sparse);
    const auto dense_shape = int64s(fields, sparse_field::kDims);
    const auto values = fields.message(sparse_field::kValues);
    if (!values) fail(sparse.offset(), "sparse tensor without values");

    if (stored_name_first) {
      const std::string stored = last_text(Fields(*values), tensor_field::kName);
      if (!stored.empty()) name = stored;
    }
    nlohmann::json extras;
    extras["sparse_tensor"] = name;
    extras["dense_shape"] = dense_shape;
    extras["sparse_part"] = "values";
    read_tensor(*values, name + ".values", false, kind, graph_path, extras);
    if (const auto indices = fields.message(sparse_field::kIndices)) {
      extras["sparse_part"] = "indices";
      read_tensor(*indices, name + ".indices", false, kind, graph_path, extras);
    }
    return name;
  }

  // Reads one TensorProto into the catalog, named as read_any says.
  std::string read_tensor(const WireMessage& tensor, const std::string& given_name, bool stored_name_first,
                          const std::string& kind, const std::string& graph_path,
                          const nlohmann::json& more_extras = nlohmann::json::object()) {
    using namespace tensor_field;
    // First pass: everything but the data itself.
    std::vector<uint64_t> dims;
    std::optional<uint64_t> data_type;
    std::string stored_name;
    std::optional<WireField> raw;  // the last raw_data wins
    std::vector<WireField> external;
    uint64_t location = 0;
    std::map<uint32_t, uint64_t> data_bytes;  // payload bytes per data field
    tensor.scan([&](const WireField& f) {
      switch (f.number) {
        case kDims:
          protobuf::append_varints(f, context_, dims);
          break;
        case kDataType:
          data_type = varint(f);
          break;
        case kName:
          stored_name = text(f);
          break;
        case kRawData:
          protobuf::field_text(f, context_);
          raw = f;
          break;
        case kExternalData:
          external.push_back(f);
          break;
        case kDataLocation:
          location = varint(f);
          break;
        case kSegment:
          fail(f.offset, "tensor uses segment (chunked storage), which onnx itself does not read");
        default:
          break;
      }
      if (is_data_field(f.number)) data_bytes[f.number] += f.length;
    });
    const std::string name = stored_name_first && !stored_name.empty() ? stored_name : given_name;
    const uint64_t at = tensor.offset();
    const std::string quote = "tensor \"" + name + "\": ";

    if (!data_type) fail(at, quote + "has no data_type");
    const DataTypeInfo* info = data_type_info(*data_type);
    if (!info) fail(at, quote + "unknown data_type " + std::to_string(*data_type));
    for (uint64_t d : dims)
      if (d > static_cast<uint64_t>(INT64_MAX))
        fail(at, quote + "negative dimension " + std::to_string(static_cast<int64_t>(d)));
    auto numel = checked_numel(dims);
    if (!numel) fail(at, quote + "element count of the shape overflows");

    // Exactly one place holds the data (the checker's rule); a tensor with
    // no elements may hold none.
    std::vector<uint32_t> holders;
    // string_data counts by its entries: strings may all be empty.
    for (auto [field, bytes] : data_bytes)
      if (bytes > 0 || field == kRawData || (field == kStringData && info->dtype == DType::String))
        holders.push_back(field);
    const bool is_external = location == 1;
    if (is_external) holders.push_back(kExternalData);
    if (holders.size() > 1)
      fail(at, quote + "data is stored in both " + typed_field_name(holders[0]) + " and " +
                   typed_field_name(holders[1]));
    const uint32_t holder = holders.empty() ? 0 : holders.front();
    if (holder != 0 && holder != kRawData && holder != kExternalData && holder != info->typed_field)
      fail(at, quote + "a " + std::string(info->name) + " tensor cannot store its data in " +
                   typed_field_name(holder) + " (expected " + typed_field_name(info->typed_field) + ")");

    TensorSpec t;
    t.name = name;
    t.dtype = info->dtype;
    auto strides = contiguous_strides(dims);
    if (!strides)
      fail(at, quote + "the strides of the shape pass 2^63 (numpy and torch refuse such a shape)");
    t.strides = std::move(*strides);
    t.shape = std::move(dims);
    auto& extras = t.extras;
    extras = more_extras;
    extras["onnx_data_type"] = info->name;
    extras["kind"] = kind;
    extras["graph"] = graph_path;
    if (!stored_name.empty() && stored_name != name) extras["onnx_name"] = stored_name;

    if (t.dtype == DType::String) {
      if (holder == kRawData || is_external)
        fail(at, quote + "a STRING tensor must store its data in string_data");
      std::vector<std::string_view> elements;
      tensor.scan([&](const WireField& f) {
        if (f.number != kStringData) return;
        if (f.type != WireType::Length)
          fail(f.offset, quote + "string_data has wire type " + std::to_string(static_cast<int>(f.type)));
        // Collected only up to one more than the tensor holds.
        if (elements.size() <= *numel) elements.push_back(protobuf::field_text(f, context_));
      });
      if (elements.size() != *numel)
        fail(at, quote + "string_data holds " + std::to_string(elements.size()) +
                     (elements.size() > *numel ? " or more" : "") + " entries but the shape needs " +
                     std::to_string(*numel));
      t.bytes = ByteSpan::owned(json_lines(elements, at, quote));
      t.source = {model_name_, std::nullopt};
      extras["storage"] = elements.empty() ? "none" : "string_data";
      extras["text"] = kStringText;
      catalog_.add(t);
      return name;
    }

    const uint32_t bits = dtype_bits(t.dtype);
    auto total_bits = checked_mul(*numel, bits);
    if (!total_bits || !checked_add(*total_bits, 7)) fail(at, quote + "byte size of the shape overflows");
    const uint64_t nbytes = (*total_bits + 7) / 8;  // sub-byte types: odd tails padded
    if (bits < 8) {
      extras["element_bits"] = bits;
      extras["packing"] = bits == 4 ? "two per byte, first element in the low nibble"
                                    : "four per byte, first element in the lowest two bits";
    }

    if (holder == 0) {
      if (nbytes != 0) fail(at, quote + "has " + std::to_string(*numel) + " elements but no data");
      t.bytes = ByteSpan::owned(std::string());
      t.source = {model_name_, std::nullopt};
      extras["storage"] = "none";
    } else if (holder == kRawData) {
      if (raw->length != nbytes)
        fail(raw->offset, quote + "raw_data holds " + std::to_string(raw->length) +
                              " bytes but shape and data_type need " + std::to_string(nbytes));
      t.bytes = ByteSpan::mapped(model_, raw->offset, raw->length);
      t.source = {model_name_, raw->offset};
      extras["storage"] = "raw_data";
    } else if (holder == kExternalData) {
      read_external(tensor, external, nbytes, t, quote);
    } else {
      read_typed(tensor, holder, bits, nbytes, t, quote);
      extras["storage"] = typed_field_name(holder);
    }
    catalog_.add(t);
    return name;
  }

  // Text elements as JSON Lines (dtype.hpp, DType::String), within what the
  // model may make of them in all (kMaxStringTextBytes).
  std::string json_lines(const std::vector<std::string_view>& elements, uint64_t at,
                         const std::string& quote) {
    uint64_t length = 0;
    // At most seven bytes of text per byte of the model, plus three per
    // element: no overflow.
    for (auto element : elements) length += json_bytes_length(element) + 1;
    if (length > kMaxStringTextBytes - string_text_bytes_)
      fail(at, quote + "its strings as JSON Lines take " + std::to_string(length) +
                   " bytes, over what is left of the " + std::to_string(kMaxStringTextBytes) +
                   "-byte limit on a model's string tensors");
    string_text_bytes_ += length;
    std::string out;
    out.reserve(length);
    for (auto element : elements) {
      append_json_bytes(out, element);
      out += '\n';
    }
    return out;
  }

  // float_data / double_data (fixed width) and the varint fields.
  void read_typed(const WireMessage& tensor, uint32_t field, uint32_t bits, uint64_t nbytes, TensorSpec& t,
                  const std::string& quote) {
    using namespace tensor_field;
    const bool fixed = field == kFloatData || field == kDoubleData;
    // Bytes each entry of the field becomes: a float or double its own (a
    // complex element takes two); a varint the element's low bytes (the
    // field matches the data_type), one packed byte for sub-byte types.
    const uint64_t entry_bytes = field == kFloatData ? 4 : field == kDoubleData ? 8 : std::max(bits / 8, 1u);
    std::vector<WireField> occurrences;
    tensor.scan([&](const WireField& f) {
      if (f.number == field) occurrences.push_back(f);
    });
    const uint64_t at = occurrences.front().offset;

    // One packed blob of exactly the right size: the bytes are the tensor.
    if (fixed && occurrences.size() == 1 && occurrences.front().type == WireType::Length &&
        occurrences.front().length == nbytes) {
      t.bytes = ByteSpan::mapped(model_, occurrences.front().offset, nbytes);
      t.source = {model_name_, occurrences.front().offset};
      return;
    }
    // Decoded into bytes of our own (charged as they are allocated).
    std::string out;
    if (fixed) {
      const WireType element_type = entry_bytes == 4 ? WireType::Fixed32 : WireType::Fixed64;
      uint64_t total = 0;  // payloads lie in the file, so this cannot overflow
      for (const auto& f : occurrences) {
        if (f.type == WireType::Length) {
          if (f.length % entry_bytes != 0)
            fail(f.offset, quote + "packed " + typed_field_name(field) + " of " + std::to_string(f.length) +
                               " bytes is not whole elements");
        } else if (f.type != element_type) {
          fail(f.offset, quote + typed_field_name(field) + " has wire type " +
                             std::to_string(static_cast<int>(f.type)));
        }
        total += f.length;
      }
      if (total != nbytes)
        fail(at, quote + typed_field_name(field) + " holds " + std::to_string(total / entry_bytes) +
                     " entries but shape and data_type need " + std::to_string(nbytes / entry_bytes));
      out.reserve(nbytes);
      for (const auto& f : occurrences) {
        const auto raw = payload_bytes(f);
        out.append(reinterpret_cast<const char*>(raw.data()), raw.size());
      }
    } else {
      // Stop collecting once there are more entries than the tensor holds,
      // so a hostile count cannot make this allocate beyond the file's size.
      const uint64_t expected = nbytes / entry_bytes;
      std::vector<uint64_t> values;
      for (const auto& f : occurrences) {
        protobuf::append_varints(f, context_, values);
        if (values.size() > expected) break;
      }
      if (values.size() != expected)
        fail(at, quote + typed_field_name(field) + " holds " + std::to_string(values.size()) +
                     (values.size() > expected ? " or more" : "") + " entries but shape and data_type need " +
                     std::to_string(expected));
      out.reserve(nbytes);
      for (uint64_t v : values) append_le(out, v, entry_bytes);
    }
    t.bytes = ByteSpan::owned(std::move(out));
    t.source = {model_name_, std::nullopt};
  }

  void read_external(const WireMessage& tensor, const std::vector<WireField>& entries, uint64_t nbytes,
                     TensorSpec& t, const std::string& quote) {
    std::optional<std::string> location, checksum;
    std::optional<uint64_t> offset, length;
    uint64_t at = tensor.offset();
    for (const auto& f : entries) {
      Fields entry(tensor.child(f));
      const std::string key = last_text(entry, 1), value = last_text(entry, 2);
      at = f.offset;
      auto number = [&](const char* what) {
        auto parsed = parse_decimal(value);
        if (!parsed)
          fail(f.offset,
               quote + "external_data " + what + " \"" + value + "\" is not a non-negative integer");
        return *parsed;
      };
      if (key == "location")
        location = value;
      else if (key == "offset")
        offset = number("offset");
      else if (key == "length")
        length = number("length");
      else if (key == "checksum")
        checksum = value;
    }
    if (!location) fail(at, quote + "data_location is EXTERNAL but external_data has no location");
    auto file = external_file(*location, at, quote);
    const uint64_t begin = offset.value_or(0);
    if (begin > file->size())
      fail(at, quote + "external_data offset " + std::to_string(begin) + " is past the end of " + *location +
                   " (" + std::to_string(file->size()) + " bytes)");
    const uint64_t size = length.value_or(file->size() - begin);
    if (!range_fits(begin, size, file->size()))
      fail(at, quote + "external data [" + std::to_string(begin) + ", +" + std::to_string(size) +
                   ") runs past the end of " + *location + " (" + std::to_string(file->size()) + " bytes)");
    if (size != nbytes)
      fail(at, quote + "external data holds " + std::to_string(size) +
                   " bytes but shape and data_type need " + std::to_string(nbytes));
    t.bytes = ByteSpan::mapped(file, begin, size);
    t.source = {*location, begin};
    t.extras["storage"] = "external_data";
    t.extras["external_data"] = {{"location", *location}, {"offset", begin}, {"length", size}};
    if (checksum) {
      t.extras["external_data"]["checksum"] = *checksum;
      add_checksum_check(t.name, file, *location, begin, size, *checksum, at);
    }
  }

  // ONNX's external_data "checksum" is the SHA-1 of the data; its docs say
  // "of the file the location names", writers have used the tensor's range.
  // `--check` accepts either, and refuses a digest that matches neither.
  void add_checksum_check(const std::string& name, std::shared_ptr<const MappedFile> file,
                          const std::string& location, uint64_t begin, uint64_t size, std::string expected,
                          uint64_t at) {
    for (auto& c : expected) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!checks_) return;
    checks_->push_back({"SHA-1 of the external data of " + name, size,
                        [file, location, begin, size, expected, at, name,
                         model = model_->display_name()](const std::function<void(uint64_t)>& progress) {
                          auto digest = [&](uint64_t from, uint64_t length, bool report) {
                            Sha1 sha;
                            constexpr uint64_t kChunk = 1 << 20;
                            for (uint64_t done = 0; done < length; done += kChunk) {
                              const uint64_t n = std::min(kChunk, length - done);
                              sha.update(file->read(from + done, n));
                              if (report) progress(n);
                            }
                            return sha.hex_digest();
                          };
                          if (digest(begin, size, true) == expected) return;
                          if (digest(0, file->size(), false) == expected) return;
                          throw ModelError(model, "onnx", at,
                                           "tensor \"" + name + "\": external data in " + location +
                                               " does not match its SHA-1 checksum " + expected);
                        }});
  }

  // A remote model's external data files, opened side by side before the
  // graph is read (ModelFolder::open_all): each open is a round trip, and a
  // model saved a file per tensor names hundreds. Only the main graph's
  // initializers are looked at, only for their locations; the graph's own
  // reading then takes each file from here as it would open it, checks it
  // as it would, and opens any other itself. A file that fails to open, or
  // a message this look cannot parse, is left to that reading to report.
  void open_remote_external(const WireMessage& graph) {
    std::vector<std::string> names;
    std::set<std::string, std::less<>> seen;
    try {
      Fields graph_fields(graph);
      for (const auto& f : graph_fields.every(graph_field::kInitializer)) {
        const WireMessage tensor = graph.child(f);
        Fields tensor_fields(tensor);
        for (const auto& e : tensor_fields.every(tensor_field::kExternalData)) {
          Fields entry(tensor.child(e));
          if (last_text(entry, 1) != "location") continue;
          std::string location = last_text(entry, 2);
          if (location.empty() || location.front() == '#' || names.size() >= kMaxFilesOpenedEarly) continue;
          if (seen.insert(location).second) names.push_back(std::move(location));
        }
      }
    } catch (const ModelError&) {
      return;
    }
    early_.open(*folder_, std::move(names));
  }

  // The external data file a location names, mapped once however many
  // tensors point into it. The rules of onnx's checker, which are
  // modelfs's rule for every file a model names (model_folder.hpp): a
  // relative path without "..", which stays inside the model's folder once
  // symlinks are followed; the file is read from what was opened there.
  std::shared_ptr<const MappedFile> external_file(const std::string& location, uint64_t at,
                                                  const std::string& quote) {
    auto refuse = [&](const std::string& why) {
      fail(at, quote + "external data location \"" + location + "\" " + why);
    };
    if (!location.empty() && location.front() == '#') refuse("is an in-memory placeholder, not a file");
    if (auto it = external_.find(location); it != external_.end()) return it->second;
    auto named = early_.take(*folder_, location);
    if (!named) refuse(named.reason);
    std::shared_ptr<const MappedFile> file = std::move(named.file);
    // Another name for a file opened already ("./w.bin", a link to it):
    // the one mapping, listed once.
    struct stat st {};
    bool fresh = true;
    if (::fstat(file->fd(), &st) == 0) {
      auto [it, added] = external_by_identity_.emplace(std::pair{st.st_dev, st.st_ino}, file);
      if (!added) file = it->second;
      fresh = added;
    }
    if (fresh) catalog_.files.push_back(location);
    external_.emplace(location, file);
    return file;
  }

  fs::path model_path_;
  std::shared_ptr<const MappedFile> model_;
  IntegrityChecks* checks_;  // null: none wanted
  std::string model_name_;
  std::optional<ModelFolder> folder_;
  WireContext context_;
  Catalog catalog_;
  uint64_t string_text_bytes_ = 0;                                     // made so far for STRING tensors
  std::map<std::string, std::shared_ptr<const MappedFile>> external_;  // by location
  EarlyOpens early_;                                                   // open_remote_external's
  std::map<std::pair<dev_t, ino_t>, std::shared_ptr<const MappedFile>> external_by_identity_;
};

// The wire type each ModelProto field is declared with, for the probe.
std::optional<WireType> model_field_type(uint64_t number) {
  using namespace model_field;
  constexpr uint64_t kLengthDelimited[] = {
      kProducerName, kProducerVersion, kDomain,       kDocString, kGraph,
      kOpsetImport,  kMetadataProps,   kTrainingInfo, kFunctions, 26 /* configuration */};
  if (number == kIrVersion || number == kModelVersion) return WireType::Varint;
  if (std::ranges::find(kLengthDelimited, number) != std::end(kLengthDelimited)) return WireType::Length;
  return std::nullopt;
}

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  // ir_version first (writers emit fields in number order), with a value an
  // IR could have, then at least one more well-formed ModelProto field.
  constexpr uint64_t kMaxPlausibleIrVersion = 1000;
  const WireContext context{"", std::string(kFormat)};
  uint64_t pos = 0;
  int fields = 0;
  try {
    while (pos < head.size()) {
      const uint64_t key = protobuf::read_varint(head, pos, context, 0);
      const auto expected = model_field_type(key >> 3);
      if (!expected || static_cast<uint64_t>(*expected) != (key & 7)) return false;
      const uint64_t value = protobuf::read_varint(head, pos, context, 0);
      if (fields == 0 &&
          ((key >> 3) != model_field::kIrVersion || value == 0 || value > kMaxPlausibleIrVersion))
        return false;
      ++fields;
      if (*expected == WireType::Length) {
        if (value >= head.size() - pos) return true;  // runs on past the head
        pos += value;
      }
    }
  } catch (const ModelError&) {
    return fields >= 2;  // a field cut off by the end of the head
  }
  return fields >= 2;
}

Catalog open_file(const ModelFile& model) { return Reader(model).read(); }

}  // namespace modelfs::onnx
