// SPDX-License-Identifier: Apache-2.0
// The ONNX graph document (onnx_reader.hpp): graphs, nodes, attributes,
// value types, functions and training info read into graph.json, and the
// attribute tensors handed to the tensor half (onnx.cpp). Separate from the
// tensors because it is the model's structure, kept as JSON, while onnx.cpp
// is about where each tensor's bytes lie and how they are served.
#include <algorithm>
#include <string>
#include <vector>

#include "formats/onnx_reader.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "io/json_object.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"

namespace modelfs::onnx::detail {

uint64_t Reader::varint(const WireField& f) const {
  protobuf::expect_type(f, WireType::Varint, "be a varint", context_);
  return f.value;
}

std::string Reader::last_text(const Fields& fields, uint32_t number) const {
  const auto* f = fields.last(number);
  return f ? text(*f) : std::string();
}

std::vector<std::string> Reader::texts(const Fields& fields, uint32_t number) const {
  std::vector<std::string> out;
  for (const auto& f : fields.every(number)) out.push_back(text(f));
  return out;
}

// A repeated int64 field, packed or not.
std::vector<int64_t> Reader::int64s(const Fields& fields, uint32_t number) const {
  std::vector<uint64_t> values;
  for (const auto& f : fields.every(number)) protobuf::append_varints(f, context_, values);
  return {values.begin(), values.end()};
}

// StringStringEntryProto list -> {key: value}; a repeated key keeps the last.
Json Reader::string_map(const WireMessage& parent, const std::vector<WireField>& entries) const {
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
Json Reader::opsets(const WireMessage& parent, const std::vector<WireField>& entries) const {
  Json out = Json::array();
  for (const auto& f : entries) {
    Fields opset(parent.child(f));
    const auto* version = opset.last(2);
    out.push_back(
        {{"domain", last_text(opset, 1)}, {"version", version ? static_cast<int64_t>(varint(*version)) : 0}});
  }
  return out;
}

// ---- types (ValueInfoProto, TypeProto) --------------------------------

Json Reader::read_shape(const WireMessage& shape) const {
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

Json Reader::read_tensor_type(const WireMessage& tensor_type) const {
  Fields fields(tensor_type);
  Json out;
  const auto* elem = fields.last(1);
  out["elem_type"] = elem ? data_type_name(varint(*elem)) : "UNDEFINED";
  if (const auto shape = fields.message(2)) out["shape"] = read_shape(*shape);
  return out;
}

// The TypeProto a field of `fields` holds; null JSON if none.
Json Reader::type_field(const Fields& fields, uint32_t number) const {
  const auto type = fields.message(number);
  return type ? read_type(*type) : Json();
}

Json Reader::read_type(const WireMessage& type) const {
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

Json Reader::read_value_info(const WireMessage& info) const {
  Fields fields(info);
  Json out;
  out["name"] = last_text(fields, 1);
  out["type"] = type_field(fields, 2);
  return out;
}

// ---- graphs, nodes, attributes, functions -----------------------------

Json Reader::read_graph(const WireMessage& graph, const std::string& graph_path) {
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

Json Reader::read_node(const WireMessage& node, size_t index, const std::string& graph_path) {
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
uint64_t Reader::effective_type(const Fields& fields) const {
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

namespace {

// The attribute types whose value is a message, or a list of them: the
// field that holds it, the key the attribute's JSON gives it under, and
// what it is.
enum class Holds { Tensor, SparseTensor, Graph, Type };
struct MessageForm {
  uint64_t type;
  uint32_t field;
  const char* key;
  bool list;
  Holds holds;
};
constexpr MessageForm kMessageForms[] = {
    {attribute_type::kTensor, attribute_field::kT, "tensor", false, Holds::Tensor},
    {attribute_type::kTensors, attribute_field::kTensors, "tensors", true, Holds::Tensor},
    {attribute_type::kSparseTensor, attribute_field::kSparseTensor, "sparse_tensor", false,
     Holds::SparseTensor},
    {attribute_type::kSparseTensors, attribute_field::kSparseTensors, "sparse_tensors", true,
     Holds::SparseTensor},
    {attribute_type::kGraph, attribute_field::kG, "graph", false, Holds::Graph},
    {attribute_type::kGraphs, attribute_field::kGraphs, "graphs", true, Holds::Graph},
    {attribute_type::kTypeProto, attribute_field::kTp, "type", false, Holds::Type},
    {attribute_type::kTypeProtos, attribute_field::kTypeProtos, "types", true, Holds::Type},
};

}  // namespace

// (name, JSON value) of one AttributeProto; its tensors go to the catalog
// and its graphs are read in place (nested in the JSON).
std::pair<std::string, Json> Reader::read_attribute(const WireMessage& attribute, const std::string& owner,
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
  if (constant_name && constant_value_tensor(fields, name, *constant_name, graph_path, attribute.offset())) {
    value["tensor"] = *constant_name;
    return {name, value};
  }
  // A message-valued attribute holds one message (the merge of its
  // field's occurrences) or a list; each is read with the suffix,
  // "/<index>" in a list, that its tensors' names and graphs' paths take.
  const auto read_message = [&](Holds holds, const WireMessage& m, const std::string& suffix) -> Json {
    if (holds == Holds::Graph) return read_graph(m, graph_path + "/" + tensor_base + suffix);
    if (holds == Holds::Type) return read_type(m);
    // Tensors, dense or sparse: a Constant's one is named after its output.
    const bool constant = constant_name && suffix.empty();
    return read_any(m, constant ? *constant_name : tensor_base + suffix, false,
                    constant ? "constant" : "attribute", graph_path, holds == Holds::SparseTensor);
  };
  for (const MessageForm& form : kMessageForms) {
    if (form.type != type) continue;
    if (!form.list) {
      if (const auto message = fields.message(form.field))
        value[form.key] = read_message(form.holds, *message, "");
    } else {
      value[form.key] = Json::array();
      const auto list = fields.every(form.field);
      for (size_t i = 0; i < list.size(); ++i)
        value[form.key].push_back(
            read_message(form.holds, attribute.child(list[i]), "/" + std::to_string(i)));
    }
    check_budget();
    return {name, value};
  }
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
            value.push_back(static_cast<double>(load_le<float>(packed, at)));
          }
        } else {
          value.push_back(fixed32_float(f));
        }
      }
      break;
    }
    case attribute_type::kInts: {
      const auto ints = int64s(fields, kInts);
      // Its JSON array is one allocation of a value a number, which the
      // budget would refuse only at its next checkpoint, once made (four
      // million numbers: 200 MiB under a budget of 95): tested first.
      charge_budget(ints.size() * sizeof(Json), context_.file, kFormat, "attribute \"" + name + "\"");
      release_budget(ints.size() * sizeof(Json));
      value = ints;
      break;
    }
    case attribute_type::kStrings:
      value = texts(fields, kStrings);
      break;
    default:
      value["unknown_type"] = type;
      break;
  }
  check_budget();
  return {name, std::move(value)};  // not a copy: an attribute may hold millions of values
}

// A Constant node's value_float(s), value_int(s) or value_string(s): a
// float32, int64 or string tensor named like its `value` would be, 0-D
// for the one-value forms and 1-D for the lists. The attribute's name
// says which, as the operator reads it, not its type: onnx's helper marks
// an empty list INTS whatever its name. False for any other attribute.
bool Reader::constant_value_tensor(const Fields& fields, const std::string& name,
                                   const std::string& tensor_name, const std::string& graph_path,
                                   uint64_t at) {
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

Json Reader::read_function(const WireMessage& function) {
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

Json Reader::read_training_info(const WireMessage& info, size_t index) {
  Fields fields(info);
  Json out;
  for (auto [key, number] : {std::pair{"initialization", training_field::kInitialization},
                             std::pair{"algorithm", training_field::kAlgorithm}})
    if (const auto graph = fields.message(number))
      out[key] = read_graph(*graph, "training_info/" + std::to_string(index) + "/" + key);
  return out;
}

}  // namespace modelfs::onnx::detail
