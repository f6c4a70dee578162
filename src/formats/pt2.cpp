// SPDX-License-Identifier: Apache-2.0
#include "formats/pt2.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ranges>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "formats/json_limits.hpp"
#include "formats/torch_objects.hpp"
#include "formats/torch_save.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"

namespace modelfs::pt2 {
namespace {

using nlohmann::json;
using torch_save::trimmed;

constexpr std::string_view kFormat = "pt2";
constexpr int kMaxJsonDepth = 256;
// JSON records are parsed in memory; exported programs of large graphs run
// to tens of MiB, far below this.
constexpr uint64_t kMaxJsonBytes = uint64_t{256} << 20;
// Small text records (archive_format, version, byteorder) and the extra
// files shown as documents.
constexpr uint64_t kMaxRecordBytes = 4096;
constexpr uint64_t kMaxDocumentBytes = uint64_t{16} << 20;
// Layout code of a strided tensor (docs/formats.md, "Export schema codes").
constexpr int64_t kLayoutStrided = 7;

// ScalarType codes of the export schema (docs/formats.md, "Export schema codes"); they differ from
// c10's numbering. complex32 has no canonical dtype: served as the unsigned
// integers of its width, the sidecar's torch_dtype saying what they are.
struct ScalarCode {
  int64_t code;
  DType dtype;
  uint32_t element_size;
  std::string_view torch_name;
};
constexpr ScalarCode kScalarCodes[] = {
    {1, DType::UInt8, 1, "uint8"},
    {2, DType::Int8, 1, "int8"},
    {3, DType::Int16, 2, "int16"},
    {4, DType::Int32, 4, "int32"},
    {5, DType::Int64, 8, "int64"},
    {6, DType::Float16, 2, "float16"},
    {7, DType::Float32, 4, "float32"},
    {8, DType::Float64, 8, "float64"},
    {9, DType::UInt32, 4, "complex32"},
    {10, DType::Complex64, 8, "complex64"},
    {11, DType::Complex128, 16, "complex128"},
    {12, DType::Bool, 1, "bool"},
    {13, DType::BFloat16, 2, "bfloat16"},
    {28, DType::UInt16, 2, "uint16"},
    {29, DType::Float8E4M3FN, 1, "float8_e4m3fn"},
    {30, DType::Float8E5M2, 1, "float8_e5m2"},
    {31, DType::Float8E4M3FNUZ, 1, "float8_e4m3fnuz"},
    {32, DType::Float8E5M2FNUZ, 1, "float8_e5m2fnuz"},
    {33, DType::Float8E8M0FNU, 1, "float8_e8m0fnu"},
    {34, DType::UInt32, 4, "uint32"},
    {35, DType::UInt64, 8, "uint64"},
};

// Where the archive's records lie: "" or the top folder with its slash.
// PyTorch's writer puts every record in one folder; Python-zipfile writers
// (flat layout, early AOTInductor packages) put them at the root.
std::optional<std::string> archive_root(const ZipArchive& zip) {
  if (zip.find("archive_format") || zip.find("serialized_exported_program.json")) return "";
  for (const auto& member : zip.members()) {
    const size_t slash = member.name.find('/');
    if (slash != std::string::npos && slash > 0 &&
        std::string_view(member.name).substr(slash + 1) == "archive_format")
      return member.name.substr(0, slash + 1);
  }
  return std::nullopt;
}

// The variant of a union of the export schema (docs/formats.md, "Export schema codes"): an object
// with one key naming it, {"as_int": 5}. The serializers of torch 2.1-2.2
// (dataclasses.asdict) wrote every variant, the unused ones null:
// {"as_expr": null, "as_int": 5}; the variant is then the one non-null
// member. Nothing when `value` is neither form.
struct Variant {
  std::string_view kind;
  const json* value;
};
std::optional<Variant> union_variant(const json& value) {
  if (!value.is_object() || value.empty()) return std::nullopt;
  if (value.size() == 1) return Variant{value.begin().key(), &value.begin().value()};
  std::optional<Variant> found;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it->is_null()) continue;
    if (found) return std::nullopt;  // two set: not a union
    found = Variant{it.key(), &it.value()};
  }
  return found;
}

// A graph argument's name: {"as_tensor": {"name": "x"}}, {"name": "x"},
// {"as_sym_int": {"as_name": "s0"}}; otherwise its JSON, as a hint.
json argument_name(const json& arg) {
  if (auto it = arg.find("name"); it != arg.end() && it->is_string()) return *it;
  if (auto variant = union_variant(arg); variant && variant->value->is_object()) {
    for (const char* key : {"name", "as_name"})
      if (auto it = variant->value->find(key); it != variant->value->end() && it->is_string()) return *it;
  }
  return arg;
}

std::string string_field(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// What the graph signature says about a model's names.
struct Signature {
  json summary = json::object();
  std::map<std::string, std::string> kind_by_name;  // fqn -> parameter, buffer, constant
};

// The first schema's signature (torch 2.1): maps from graph input names to
// fully qualified names, and lists of user input and output names.
void read_early_signature(const json& signature, Signature& out) {
  json& summary = out.summary;
  auto names = [&](const char* key, const char* into, const char* kind) {
    auto map = signature.find(key);
    if (map == signature.end() || !map->is_object()) return;
    for (const auto& [graph_name, fqn] : map->items()) {
      if (!fqn.is_string()) continue;
      summary["inputs"].push_back(
          {{"kind", kind}, {"graph_name", graph_name}, {std::string(kind) + "_name", fqn}});
      summary[into].push_back(fqn);
      out.kind_by_name[fqn.get<std::string>()] = kind;
    }
  };
  names("inputs_to_parameters", "parameters", "parameter");
  names("inputs_to_buffers", "buffers", "buffer");
  for (const auto& [list, into, kind] : {std::tuple{"user_inputs", "inputs", "user_input"},
                                         std::tuple{"user_outputs", "outputs", "user_output"}}) {
    auto it = signature.find(list);
    if (it == signature.end() || !it->is_array()) continue;
    for (const json& name : *it) {
      summary[list].push_back(name);
      summary[into].push_back({{"kind", kind}, {"graph_name", name}});
    }
  }
  if (auto it = signature.find("buffers_to_mutate"); it != signature.end() && it->is_object())
    for (const auto& [graph_name, fqn] : it->items())
      summary["outputs"].push_back(
          {{"kind", "buffer_mutation"}, {"graph_name", graph_name}, {"buffer_name", fqn}});
}

// graph_module.signature of an ExportedProgram: every input and output spec
// kept (kind, graph name, fqn), and lists of the names users ask about.
Signature read_signature(const json& program) {
  Signature out;
  json& summary = out.summary;
  for (const char* list : {"parameters", "buffers", "non_persistent_buffers", "constants", "custom_objects",
                           "user_inputs", "user_outputs", "inputs", "outputs"})
    summary[list] = json::array();
  auto module = program.find("graph_module");
  if (module == program.end() || !module->is_object()) return out;
  auto signature = module->find("signature");
  if (signature == module->end() || !signature->is_object()) return out;

  auto specs = [&](const char* key, const char* into) {
    auto list = signature->find(key);
    if (list == signature->end() || !list->is_array()) return;
    for (const json& spec : *list) {
      const auto variant = union_variant(spec);
      if (!variant) continue;
      const std::string kind(variant->kind);
      const json& body = *variant->value;
      json entry = {{"kind", kind}};
      if (body.is_object()) {
        if (auto arg = body.find("arg"); arg != body.end()) entry["graph_name"] = argument_name(*arg);
        for (const auto& [field, value] : body.items())
          if (field != "arg") entry[field] = value;
      }
      summary[into].push_back(entry);
      if (kind == "parameter") {
        const std::string fqn = string_field(body, "parameter_name");
        summary["parameters"].push_back(fqn);
        out.kind_by_name[fqn] = "parameter";
      } else if (kind == "buffer") {
        const std::string fqn = string_field(body, "buffer_name");
        const bool persistent = !body.contains("persistent") || body["persistent"] != false;
        summary[persistent ? "buffers" : "non_persistent_buffers"].push_back(fqn);
        out.kind_by_name[fqn] = "buffer";
      } else if (kind == "tensor_constant") {
        const std::string fqn = string_field(body, "tensor_constant_name");
        summary["constants"].push_back(fqn);
        out.kind_by_name[fqn] = "constant";
      } else if (kind == "custom_obj") {
        summary["custom_objects"].push_back(string_field(body, "custom_obj_name"));
      } else if (kind == "user_input") {
        summary["user_inputs"].push_back(entry.value("graph_name", json()));
      } else if (kind == "user_output") {
        summary["user_outputs"].push_back(entry.value("graph_name", json()));
      }
    }
  };
  specs("input_specs", "inputs");
  specs("output_specs", "outputs");
  if (!signature->contains("input_specs")) read_early_signature(*signature, out);
  return out;
}

class ArchiveReader {
 public:
  ArchiveReader(const ModelFile& model, const ZipArchive& zip, std::string root)
      : file_(model.mapped),
        checks_(model.checks),
        zip_(zip),
        root_(std::move(root)),
        display_(file_->display_name()),
        source_(model.path.filename().string()) {}

  Catalog read();

 private:
  // One model of a layered archive (or an AOTInductor directory).
  struct Model {
    std::string name;
    std::string prefix;  // "" or "<name>."
    Signature signature;
    json info = json::object();
  };

  [[noreturn]] void fail(std::optional<uint64_t> at, const std::string& reason) const {
    throw ModelError(display_, std::string(kFormat), at, reason);
  }
  std::optional<uint64_t> offset_of(const ZipMember& member) const {
    return member.stored() ? std::optional(zip_.file_offset(member)) : std::nullopt;
  }
  const ZipMember* find(const std::string& path) const { return zip_.find(root_ + path); }
  // ModelError when `member` inflates to more than `limit` bytes.
  void refuse_over(const ZipMember& member, uint64_t limit) const;
  std::string text_of(const ZipMember& member, uint64_t limit) const;
  json json_of(const ZipMember& member) const;
  void add_document(const std::string& path, const ZipMember& member);
  void add_tensor(TensorSpec tensor);
  void add_save_tensors(torch_save::SaveContents contents, const std::string& what);

  bool holds_zip(const ZipMember& member) const;
  torch_save::SaveContents read_nested(const ZipMember& member, const std::string& name_prefix,
                                       const std::string& default_kind);
  void read_layered();
  void read_flat();
  void read_program(const std::string& path, Model& model);
  void read_model(Model& model);
  void read_payload_config(Model& model, const ZipMember& config, const std::string& folder, bool constants);
  TensorSpec raw_tensor(const std::string& name, const std::string& fqn, const json& meta,
                        const ZipMember& payload);
  void read_sample_inputs(const ZipMember& member, const std::string& prefix, json& info);
  void read_aoti(Model& model);
  void apply_kinds(size_t first_tensor, const Model& model);
  void read_extras(const std::string& folder);
  void set_export_hints();

  std::shared_ptr<const MappedFile> file_;
  IntegrityChecks* checks_;
  const ZipArchive& zip_;
  std::string root_;
  std::string display_;
  std::string source_;
  Catalog catalog_;
  std::vector<TensorSpec> tensors_;  // added to the catalog once their kinds are known
  std::set<std::string> names_;
  std::map<std::string, ByteSpan> payloads_;  // inflated once, shared by aliases
  json skipped_ = json::array();
};

void ArchiveReader::refuse_over(const ZipMember& member, uint64_t limit) const {
  if (member.uncompressed_size > limit)
    fail(offset_of(member), member.name + " is " + std::to_string(member.uncompressed_size) +
                                " bytes, over the limit of " + std::to_string(limit) + " for it");
}

std::string ArchiveReader::text_of(const ZipMember& member, uint64_t limit) const {
  refuse_over(member, limit);
  return std::string(zip_.contents(member).view());
}

// Parsed where the member's bytes are (the mapping, or its inflated copy):
// a copy of a 30 MB model JSON first held it twice.
json ArchiveReader::json_of(const ZipMember& member) const {
  refuse_over(member, kMaxJsonBytes);
  const ByteSpan bytes = zip_.contents(member);
  return parse_json_limited(bytes.view(), display_, kFormat, offset_of(member).value_or(0), kMaxJsonDepth);
}

void ArchiveReader::add_document(const std::string& path, const ZipMember& member) {
  catalog_.documents.push_back({path, text_of(member, kMaxJsonBytes)});
}

void ArchiveReader::add_tensor(TensorSpec tensor) {
  if (!names_.insert(tensor.name).second)
    fail(tensor.source.offset, "two tensors are named \"" + tensor.name + "\"");
  tensors_.push_back(std::move(tensor));
}

void ArchiveReader::add_save_tensors(torch_save::SaveContents contents, const std::string& what) {
  for (auto& t : contents.tensors) add_tensor(std::move(t));
  for (auto& name : contents.skipped_objects) skipped_.push_back({{"in", what}, {"object", name}});
}

// The member's bytes begin as a ZIP archive does (a nested torch.save).
bool ArchiveReader::holds_zip(const ZipMember& member) const {
  if (member.uncompressed_size < 4) return false;
  return zip_.contents(member).subspan(0, 4).view() == std::string_view("PK\x03\x04", 4);
}

// A torch.save archive stored as `member`: read in place when stored,
// inflated into a memory file when compressed.
torch_save::SaveContents ArchiveReader::read_nested(const ZipMember& member, const std::string& name_prefix,
                                                    const std::string& default_kind) {
  torch::WalkOptions options;
  options.file = display_;
  options.format = kFormat;
  options.source = source_;
  options.default_kind = default_kind;
  if (member.stored()) return torch_save::read_save(zip_.nested(member), options, name_prefix, true);
  const ByteSpan inflated = zip_.contents(member);
  // The memory file is not the heap: charged by hand.
  charge_budget(inflated.size(), display_, kFormat, "the nested archive " + member.name);
  auto memory = MappedFile::from_bytes(inflated.view(), display_ + ":" + member.name);
  return torch_save::read_save(ZipArchive::open(memory, "ZIP archive"), options, name_prefix, false);
}

// A SymInt that must be concrete: {"as_int": n} (a plain n is taken too).
uint64_t concrete_int(const json& value, const std::string& what,
                      const std::function<void(const std::string&)>& refuse) {
  const json* v = &value;
  if (value.is_object()) {
    const auto variant = union_variant(value);
    if (variant && variant->kind == "as_expr") {
      const json& expr = *variant->value;
      const std::string text = expr.is_object() && expr.contains("expr_str") && expr["expr_str"].is_string()
                                   ? expr["expr_str"].get<std::string>()
                                   : expr.dump();
      refuse(what + " is symbolic (as_expr \"" + text.substr(0, 80) +
             "\"); a payload config must give concrete sizes");
    }
    if (!variant || variant->kind != "as_int") refuse(what + " is not {\"as_int\": n}");
    v = variant->value;
  }
  if (!v->is_number_integer() || v->get<int64_t>() < 0) refuse(what + " is not a non-negative integer");
  return v->get<uint64_t>();
}

TensorSpec ArchiveReader::raw_tensor(const std::string& name, const std::string& fqn, const json& meta,
                                     const ZipMember& payload) {
  auto refuse = [&](const std::string& reason) {
    fail(offset_of(payload), "tensor \"" + fqn + "\": " + reason);
  };
  if (!meta.is_object()) refuse("tensor_meta is not an object");
  auto dtype = meta.find("dtype");
  if (dtype == meta.end() || !dtype->is_number_integer()) refuse("tensor_meta has no integer dtype");
  const auto code = std::ranges::find(kScalarCodes, dtype->get<int64_t>(), &ScalarCode::code);
  if (code == std::end(kScalarCodes))
    refuse("dtype code " + dtype->dump() +
           " is not a ScalarType of the export schema modelfs knows (1-13, 28-35)");
  if (auto layout = meta.find("layout"); layout != meta.end() && !layout->is_null() &&
                                         (!layout->is_number_integer() || *layout != kLayoutStrided))
    refuse("layout " + layout->dump() + " is not strided (7); its payload cannot be read as a strided array");
  auto sizes = meta.find("sizes");
  auto strides = meta.find("strides");
  if (sizes == meta.end() || strides == meta.end() || !sizes->is_array() || !strides->is_array() ||
      sizes->size() != strides->size() || sizes->size() > torch::kMaxRank)
    refuse("sizes and strides are not lists of one rank (at most " + std::to_string(torch::kMaxRank) + ")");

  TensorSpec t;
  t.name = name;
  t.dtype = code->dtype;
  for (size_t i = 0; i < sizes->size(); ++i) {
    t.shape.push_back(concrete_int((*sizes)[i], "size " + std::to_string(i), refuse));
    const uint64_t stride = concrete_int((*strides)[i], "stride " + std::to_string(i), refuse);
    if (stride > uint64_t{INT64_MAX}) refuse("stride overflows");
    t.strides.push_back(static_cast<int64_t>(stride));
  }
  uint64_t storage_offset = 0;
  if (auto offset = meta.find("storage_offset"); offset != meta.end() && !offset->is_null())
    storage_offset = concrete_int(*offset, "storage offset", refuse);

  const uint64_t e = code->element_size;
  auto numel = checked_numel(t.shape);
  if (!numel) refuse("element count overflows");
  const auto reach = checked_strided_span(t.shape, t.strides);
  if (!reach) refuse("strides overflow");
  // Inflated once, shared by aliases.
  auto [cached, inserted] = payloads_.try_emplace(payload.name);
  if (inserted) cached->second = zip_.contents(payload);
  const ByteSpan record = cached->second;
  auto begin = checked_mul(storage_offset, e);
  auto length = checked_mul(*reach, e);
  if (*numel > 0 && (!begin || !length || !range_fits(*begin, *length, record.size())))
    refuse("storage offset " + std::to_string(storage_offset) +
           " with its sizes and strides runs past its payload " + payload.name + " (" +
           std::to_string(record.size()) + " bytes)");
  const uint64_t first = *numel > 0 ? *begin : 0;
  t.bytes = record.subspan(first, *numel > 0 ? *length : 0);
  t.source = {source_, std::nullopt};
  if (payload.stored() && *numel > 0) t.source.offset = zip_.file_offset(payload) + first;

  json& extras = t.extras;
  if (code->torch_name != dtype_name(code->dtype)) extras["torch_dtype"] = code->torch_name;
  if (auto rg = meta.find("requires_grad"); rg != meta.end() && rg->is_boolean())
    extras["requires_grad"] = *rg;
  if (auto device = meta.find("device"); device != meta.end() && device->is_object()) {
    const std::string type = string_field(*device, "type");
    if (!type.empty() && type != "cpu") {
      auto index = device->find("index");
      extras["device"] =
          index != device->end() && index->is_number_integer() ? type + ":" + index->dump() : type;
    }
  }
  extras["payload"] = {{"path", payload.name.substr(root_.size())}, {"storage_offset", storage_offset}};

  return t;
}

// {"config": {fqn: {path_name, is_param, use_pickle, tensor_meta}}}
// (docs/formats.md, "Payload configs").
void ArchiveReader::read_payload_config(Model& model, const ZipMember& config_member,
                                        const std::string& folder, bool constants) {
  const json config = json_of(config_member);
  auto refuse = [&](const std::string& reason) {
    fail(offset_of(config_member), config_member.name.substr(root_.size()) + ": " + reason);
  };
  if (!config.is_object() || !config.contains("config") || !config["config"].is_object())
    refuse("no \"config\" object mapping names to payloads");
  json custom_objects = json::array();
  for (const auto& [fqn, entry] : config["config"].items()) {
    if (!entry.is_object()) refuse("entry \"" + fqn + "\" is not an object");
    const std::string path_name = string_field(entry, "path_name");
    if (path_name.empty() || path_name.find('/') != std::string::npos)
      refuse("entry \"" + fqn + "\" names no payload file (path_name)");
    const ZipMember* payload = find(folder + path_name);
    if (!payload)
      refuse("entry \"" + fqn + "\" names payload " + folder + path_name + ", which the archive lacks");
    const bool use_pickle = entry.value("use_pickle", false) == true;
    const json meta = entry.value("tensor_meta", json());
    if (constants && path_name.starts_with("custom_obj_")) {
      // A TorchScript-pickled object: running it is what a loader does and
      // what modelfs never does. Listed so that it is not missed.
      custom_objects.push_back({{"name", fqn},
                                {"path", payload->name.substr(root_.size())},
                                {"bytes", payload->uncompressed_size}});
      continue;
    }
    if (constants && !path_name.starts_with("tensor_")) {
      spdlog::warn("{}: pt2: constant \"{}\" ({}) is neither a tensor nor a custom object; skipped", display_,
                   fqn, path_name);
      skipped_.push_back({{"in", config_member.name.substr(root_.size())}, {"object", fqn}});
      continue;
    }
    const std::string kind = constants                                ? "constant"
                             : entry.value("is_param", false) == true ? "parameter"
                                                                      : "buffer";
    const std::string name = model.prefix + fqn;
    if (use_pickle) {
      // A tensor subclass saved whole with torch.save: its tensors, named
      // from the fqn (a lone tensor is the fqn itself).
      auto contents = read_nested(*payload, name, kind);
      if (contents.tensors.empty())
        spdlog::warn("{}: pt2: pickled payload {} of \"{}\" holds no tensor modelfs can serve", display_,
                     payload->name, fqn);
      for (auto& t : contents.tensors) {
        t.extras["kind"] = kind;
        if (meta.is_object() && meta.contains("requires_grad") && meta["requires_grad"].is_boolean())
          t.extras["requires_grad"] = meta["requires_grad"];
        t.extras["payload"] = {{"path", payload->name.substr(root_.size())}, {"pickled", true}};
      }
      add_save_tensors(std::move(contents), payload->name.substr(root_.size()));
      continue;
    }
    if (meta.is_null()) refuse("entry \"" + fqn + "\" has no tensor_meta");
    TensorSpec t = raw_tensor(name, fqn, meta, *payload);
    t.extras["kind"] = kind;
    add_tensor(std::move(t));
  }
  if (!custom_objects.empty()) model.info["custom_objects"] = custom_objects;
}

// (args, kwargs) as sample_inputs.args.N / sample_inputs.kwargs.K.
void ArchiveReader::read_sample_inputs(const ZipMember& member, const std::string& prefix, json& info) {
  if (member.uncompressed_size == 0) {
    info["sample_inputs"] = "empty";
    return;
  }
  auto contents = read_nested(member, "", "sample_input");
  for (auto& t : contents.tensors) {
    std::string rest = t.name;
    if (rest.starts_with("0."))
      rest = "args." + rest.substr(2);
    else if (rest.starts_with("1."))
      rest = "kwargs." + rest.substr(2);
    t.name = prefix + "sample_inputs." + rest;
    t.extras["kind"] = "sample_input";
  }
  if (!contents.values.empty()) info["sample_input_values"] = contents.values;
  info["sample_inputs"] = member.name.substr(root_.size());
  add_save_tensors(std::move(contents), member.name.substr(root_.size()));
}

// Tensors read before `first_tensor` are left alone; the signature's word
// on parameter, buffer and constant wins over the payload's.
void ArchiveReader::apply_kinds(size_t first_tensor, const Model& model) {
  for (size_t i = first_tensor; i < tensors_.size(); ++i) {
    TensorSpec& t = tensors_[i];
    if (t.extras.value("kind", "") == "sample_input") continue;
    const std::string fqn = t.name.substr(model.prefix.size());
    if (auto it = model.signature.kind_by_name.find(fqn); it != model.signature.kind_by_name.end())
      t.extras["kind"] = it->second;
  }
}

// data/aotinductor/<name>/: compiled artifacts. weights_config.json maps a
// weight name to [file, shape, stride, storage_offset], `file` a nested
// torch.save in data/weights/; without it the weights are in the .so.
void ArchiveReader::read_aoti(Model& model) {
  json& info = model.info["aotinductor"] = json::object();
  const std::string folder = root_ + "data/aotinductor/" + model.name + "/";
  json files = json::array();
  json libraries = json::array();
  const ZipMember* weights_config = nullptr;
  for (const auto& member : zip_.members()) {
    if (!member.name.starts_with(folder) || member.name.size() == folder.size()) continue;
    const std::string relative = member.name.substr(root_.size());
    files.push_back(relative);
    if (member.name.ends_with(".so")) libraries.push_back(relative);
    if (member.name == folder + "weights_config.json") weights_config = &member;
    if (member.name.ends_with(".json") && member.uncompressed_size <= kMaxDocumentBytes)
      add_document(relative, member);
  }
  info["files"] = files;
  if (!weights_config) {
    info["weights"] = libraries.empty() ? "none found" : "compiled into the shared library";
    info["libraries"] = libraries;
    return;
  }
  info["weights"] = "weights_config.json";
  const json config = json_of(*weights_config);
  if (!config.is_object())
    fail(offset_of(*weights_config), weights_config->name + ": not an object of weight names");
  json skipped = json::array();
  for (const auto& [weight, spec] : config.items()) {
    const std::string name = model.prefix + weight;
    if (names_.count(name)) continue;  // already read from the model's payload config
    if (!spec.is_array() || spec.empty() || !spec[0].is_string() ||
        spec[0].get<std::string>().find('/') != std::string::npos)
      fail(offset_of(*weights_config),
           weights_config->name + ": weight \"" + weight + "\" is not [file, shape, stride, offset]");
    const ZipMember* payload = find("data/weights/" + spec[0].get<std::string>());
    if (!payload)
      fail(offset_of(*weights_config), weights_config->name + ": weight \"" + weight +
                                           "\" names data/weights/" + spec[0].get<std::string>() +
                                           ", which the archive lacks");
    if (!holds_zip(*payload)) {
      spdlog::warn("{}: pt2: AOTInductor weight \"{}\" ({}) is not a torch.save archive; skipped", display_,
                   weight, payload->name);
      skipped.push_back(weight);
      continue;
    }
    auto contents = read_nested(*payload, name, "");
    for (auto& t : contents.tensors)
      t.extras["payload"] = {{"path", payload->name.substr(root_.size())}, {"pickled", true}};
    add_save_tensors(std::move(contents), payload->name.substr(root_.size()));
  }
  if (!skipped.empty()) info["weights_not_read"] = skipped;
}

// The exported program at `path`, if any: shown as a document; its signature
// and the versions it records about itself go to `model`.
void ArchiveReader::read_program(const std::string& path, Model& model) {
  const ZipMember* member = find(path);
  if (!member) return;
  add_document(path, *member);
  const json program = json_of(*member);
  model.signature = read_signature(program);
  model.info["signature"] = model.signature.summary;
  if (auto v = program.find("schema_version");
      v != program.end() && v->is_object() && v->contains("major") && v->contains("minor"))
    model.info["schema_version"] = (*v)["major"].dump() + "." + (*v)["minor"].dump();
  if (auto v = program.find("torch_version"); v != program.end() && v->is_string())
    model.info["torch_version"] = *v;
}

void ArchiveReader::read_model(Model& model) {
  const size_t first_tensor = tensors_.size();
  read_program("models/" + model.name + ".json", model);
  // Raw payloads with a config (2.9+), else a nested save of the whole dict (2.8).
  for (const bool constants : {false, true}) {
    const std::string folder = constants ? "data/constants/" : "data/weights/";
    const std::string config =
        folder + model.name + (constants ? "_constants_config.json" : "_weights_config.json");
    const char* what = constants ? "constants" : "weights";
    if (const ZipMember* member = find(config)) {
      read_payload_config(model, *member, folder, constants);
      model.info[what] = config;
    } else if (const ZipMember* saved = find(folder + model.name + ".pt")) {
      if (saved->uncompressed_size > 0) {
        const std::string name_prefix = model.prefix.empty() ? "" : model.name;
        add_save_tensors(read_nested(*saved, name_prefix, constants ? "constant" : ""),
                         saved->name.substr(root_.size()));
      }
      model.info[what] = folder + model.name + ".pt";
    }
  }
  if (const ZipMember* samples = find("data/sample_inputs/" + model.name + ".pt"))
    read_sample_inputs(*samples, model.prefix, model.info);
  const std::string aoti_folder = root_ + "data/aotinductor/" + model.name + "/";
  if (std::ranges::any_of(zip_.members(),
                          [&](const ZipMember& m) { return m.name.starts_with(aoti_folder); }))
    read_aoti(model);
  apply_kinds(first_tensor, model);
}

void ArchiveReader::read_extras(const std::string& folder) {
  for (const auto& member : zip_.members()) {
    if (!member.name.starts_with(root_ + folder) || member.name.size() == root_.size() + folder.size())
      continue;
    if (member.uncompressed_size > kMaxDocumentBytes) {
      spdlog::warn("{}: pt2: extra file {} ({} bytes) not shown", display_, member.name,
                   member.uncompressed_size);
      continue;
    }
    add_document("extra/" + member.name.substr(root_.size() + folder.size()), member);
  }
}

void ArchiveReader::read_layered() {
  json& pt2 = catalog_.metadata["pt2"];
  pt2["layout"] = "layered";
  pt2["archive"] = root_.empty() ? "" : root_.substr(0, root_.size() - 1);
  const ZipMember* format = find("archive_format");
  const std::string format_text = trimmed(text_of(*format, kMaxRecordBytes));
  if (format_text != "pt2")
    fail(offset_of(*format),
         "archive_format says \"" + format_text.substr(0, 40) + "\", not \"pt2\": not a PT2 archive");
  pt2["archive_format"] = format_text;
  int64_t archive_version = 0;  // absent: 0, as torch's loader assumes
  if (const ZipMember* version = find("archive_version")) {
    const std::string text = trimmed(text_of(*version, kMaxRecordBytes));
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), archive_version);
    if (ec != std::errc() || end != text.data() + text.size() || archive_version != 0)
      fail(offset_of(*version),
           "archive_version \"" + text.substr(0, 40) + "\" is not 0, the only PT2 archive version defined");
  }
  pt2["archive_version"] = archive_version;
  for (const auto& [record, key] :
       {std::pair{".data/version", "container_version"}, std::pair{"version", "version"}})
    if (const ZipMember* version = find(record)) pt2[key] = trimmed(text_of(*version, kMaxRecordBytes));
  if (const ZipMember* order = find("byteorder")) {
    const std::string text = trimmed(text_of(*order, kMaxRecordBytes));
    if (text != "little")
      fail(offset_of(*order),
           "byteorder says \"" + text.substr(0, 40) + "\"; only little-endian PT2 archives are supported");
    pt2["byteorder"] = text;
  }
  if (const ZipMember* id = find(".data/serialization_id"))
    pt2["serialization_id"] = trimmed(text_of(*id, kMaxRecordBytes));

  // Models: every models/<name>.json, and AOTInductor directories.
  std::vector<std::string> names;
  auto add_name = [&](const std::string& name) {
    if (!name.empty() && name.find('/') == std::string::npos &&
        std::find(names.begin(), names.end(), name) == names.end())
      names.push_back(name);
  };
  const std::string models = root_ + "models/";
  const std::string aoti = root_ + "data/aotinductor/";
  for (const auto& member : zip_.members()) {
    if (member.name.starts_with(models) && member.name.ends_with(".json"))
      add_name(member.name.substr(models.size(), member.name.size() - models.size() - 5));
    else if (member.name.starts_with(aoti)) {
      const std::string rest = member.name.substr(aoti.size());
      if (rest.find('/') != std::string::npos) add_name(rest.substr(0, rest.find('/')));
    }
  }
  if (names.empty())
    fail(std::nullopt,
         "archive_format says pt2, but the archive holds no models/<name>.json "
         "and no data/aotinductor/<name>/: no model to mount");
  json& models_info = catalog_.metadata["models"] = json::object();
  for (const auto& name : names) {
    Model model;
    model.name = name;
    model.prefix = names.size() == 1 && name == "model" ? "" : name + ".";
    model.info["prefix"] = model.prefix;
    read_model(model);
    models_info[name] = model.info;
  }
  read_extras("extra/");
}

void ArchiveReader::read_flat() {
  json& pt2 = catalog_.metadata["pt2"];
  pt2["layout"] = "flat";
  if (const ZipMember* version = find("version"))
    pt2["version"] = trimmed(text_of(*version, kMaxRecordBytes));
  Model model;
  model.name = "model";
  read_program("serialized_exported_program.json", model);

  // torch 2.1-2.2's torch._export.save named every member
  // serialized_<field>.json, the torch.save archives of the state dict and
  // the constants included; later exporters name those .pt. What a member
  // holds is decided by its first bytes, never by its name.
  const size_t first_tensor = tensors_.size();
  for (const auto& [field, kind] : {std::pair{"state_dict", ""}, std::pair{"constants", "constant"},
                                    std::pair{"example_inputs", "sample_input"}}) {
    for (const char* suffix : {".pt", ".json"}) {
      const std::string record = std::string("serialized_") + field + suffix;
      const ZipMember* member = find(record);
      if (!member) continue;
      // A .pt member must be a torch.save archive (read_nested says why
      // not); a .json one that is not is shown as it is.
      if (std::string_view(suffix) == ".json" && member->uncompressed_size > 0 && !holds_zip(*member)) {
        add_document(record, *member);
        spdlog::warn(
            "{}: pt2: {} is not a torch.save archive; shown as a document, no tensors "
            "read from it",
            display_, record);
        model.info["not_mounted"].push_back(record);
      } else if (std::string_view(kind) == "sample_input") {
        read_sample_inputs(*member, "", model.info);
      } else if (member->uncompressed_size > 0) {
        add_save_tensors(read_nested(*member, "", kind), record);
      }
    }
  }
  apply_kinds(first_tensor, model);
  catalog_.metadata["models"] = {{"model", model.info}};
  read_extras("extra_files/");
}

// A PT2 archive's tensors are torch's: the export says "pt" of them, as of
// a torch checkpoint's. Each model named under a prefix (metadata
// "models.<name>.prefix") also gets a file of its own.
void ArchiveReader::set_export_hints() {
  ExportHints& hints = catalog_.export_hints;
  hints.checkpoint_format = "pt";
  const auto models = catalog_.metadata.find("models");
  if (models == catalog_.metadata.end() || !models->is_object()) return;
  for (const auto& [name, info] : models->items()) {
    if (!info.is_object()) continue;
    const auto prefix = info.find("prefix");
    if (prefix != info.end() && prefix->is_string() && !prefix->get_ref<const std::string&>().empty())
      hints.models.emplace_back(name, prefix->get<std::string>());
  }
}

Catalog ArchiveReader::read() {
  catalog_.format = std::string(kFormat);
  catalog_.mtime = file_->mtime();
  catalog_.files.push_back(source_);
  if (find("serialized_exported_program.json"))
    read_flat();
  else
    read_layered();
  if (!skipped_.empty()) catalog_.metadata["skipped_objects"] = skipped_;
  set_export_hints();
  catalog_.tensors_may_share_bytes = true;  // deduplicated storages, tied weights, views
  for (const auto& t : tensors_) catalog_.add(t);
  if (checks_)
    for (auto& check : zip_.crc_checks()) checks_->push_back(std::move(check));
  return std::move(catalog_);
}

}  // namespace

bool is_pt2_archive(const ZipArchive& zip) { return archive_root(zip).has_value(); }

Catalog open_archive(const ModelFile& model, const ZipArchive& zip) {
  auto root = archive_root(zip);
  if (!root)
    throw ModelError(model.mapped->display_name(), std::string(kFormat), std::nullopt,
                     "holds no archive_format record and no serialized_exported_program.json");
  return ArchiveReader(model, zip, *root).read();
}

}  // namespace modelfs::pt2
