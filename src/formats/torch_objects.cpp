// SPDX-License-Identifier: Apache-2.0
#include "formats/torch_objects.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"

namespace modelfs::torch {
namespace {

using pickle::Kind;
using pickle::KnownGlobal;
using pickle::Value;

struct TypeEntry {
  std::string_view storage_class;  // torch.<X>Storage, as torch.save and the JIT write it
  std::string_view dtype;          // torch.<dtype> (v3 argument), canonical torch name
  std::string_view alias;          // another torch.<dtype> spelling, or ""
  DType as;                        // how modelfs serves the bytes
  uint32_t element_size;
  bool quantized = false;
  bool packed = false;
  bool stand_in = false;  // `as` stands in for a type modelfs has no dtype of
};

// docs/formats.md, "Storage classes" and "Tensor rebuilds" (v3 dtypes). Types with
// no modelfs dtype of their own are served as the unsigned integers of
// their width, the sidecar's "torch_dtype" saying what they are.
constexpr TypeEntry kTypes[] = {
    {"DoubleStorage", "float64", "double", DType::Float64, 8},
    {"FloatStorage", "float32", "float", DType::Float32, 4},
    {"HalfStorage", "float16", "half", DType::Float16, 2},
    {"BFloat16Storage", "bfloat16", "", DType::BFloat16, 2},
    {"LongStorage", "int64", "long", DType::Int64, 8},
    {"IntStorage", "int32", "int", DType::Int32, 4},
    {"ShortStorage", "int16", "short", DType::Int16, 2},
    {"CharStorage", "int8", "", DType::Int8, 1},
    {"ByteStorage", "uint8", "", DType::UInt8, 1},
    {"BoolStorage", "bool", "", DType::Bool, 1},
    {"ComplexFloatStorage", "complex64", "cfloat", DType::Complex64, 8},
    {"ComplexDoubleStorage", "complex128", "cdouble", DType::Complex128, 16},
    {"ComplexHalfStorage", "complex32", "chalf", DType::UInt32, 4, false, false, true},
    {"QInt8Storage", "qint8", "", DType::Int8, 1, true},
    {"QUInt8Storage", "quint8", "", DType::UInt8, 1, true},
    {"QInt32Storage", "qint32", "", DType::Int32, 4, true},
    {"QUInt4x2Storage", "quint4x2", "", DType::UInt8, 1, true, true},
    {"QUInt2x4Storage", "quint2x4", "", DType::UInt8, 1, true, true},
    {"UInt16Storage", "uint16", "", DType::UInt16, 2},
    {"UInt32Storage", "uint32", "", DType::UInt32, 4},
    {"UInt64Storage", "uint64", "", DType::UInt64, 8},
    {"Float8_e5m2Storage", "float8_e5m2", "", DType::Float8E5M2, 1},
    {"Float8_e4m3fnStorage", "float8_e4m3fn", "", DType::Float8E4M3FN, 1},
    {"Float8_e5m2fnuzStorage", "float8_e5m2fnuz", "", DType::Float8E5M2FNUZ, 1},
    {"Float8_e4m3fnuzStorage", "float8_e4m3fnuz", "", DType::Float8E4M3FNUZ, 1},
    {"Float8_e8m0fnuStorage", "float8_e8m0fnu", "", DType::Float8E8M0FNU, 1},
    {"Float4_e2m1fn_x2Storage", "float4_e2m1fn_x2", "", DType::UInt8, 1, false, true},
    {"Bits8Storage", "bits8", "", DType::UInt8, 1, false, false, true},
    {"Bits16Storage", "bits16", "", DType::UInt16, 2, false, false, true},
    {"Bits1x8Storage", "bits1x8", "", DType::UInt8, 1, false, true},
    {"Bits2x4Storage", "bits2x4", "", DType::UInt8, 1, false, true},
    {"Bits4x2Storage", "bits4x2", "", DType::UInt8, 1, false, true},
};

StorageType from_entry(const TypeEntry& e) {
  return {.dtype = e.as,
          .element_size = e.element_size,
          .torch_name = std::string(e.dtype),
          .quantized = e.quantized,
          .packed = e.packed};
}

// Looks up `torch.<name>` storage classes ("FloatStorage", ...) and dtypes
// ("float32", "uint16", ...).
std::optional<StorageType> storage_type_from_class(std::string_view name) {
  if (name == "UntypedStorage") return StorageType{.torch_name = "uint8", .untyped = true};
  for (const auto& e : kTypes)
    if (e.storage_class == name) return from_entry(e);
  return std::nullopt;
}

std::optional<StorageType> storage_type_from_dtype(std::string_view name) {
  for (const auto& e : kTypes)
    if (e.dtype == name || (!e.alias.empty() && e.alias == name)) return from_entry(e);
  return std::nullopt;
}

const Value* arg(const Value& args, size_t i) {
  return args.is_sequence() && i < args.items.size() ? args.items[i] : nullptr;
}

std::optional<int64_t> int_of(const Value* v) {
  if (v && v->kind == Kind::Int) return v->integer;
  return std::nullopt;
}

std::optional<std::vector<int64_t>> ints_of(const Value* v) {
  if (!v || !v->is_sequence() || v->items.size() > kMaxRank || !std::ranges::all_of(v->items, &Value::is_int))
    return std::nullopt;
  std::vector<int64_t> out;
  for (const Value* item : v->items) out.push_back(item->integer);
  return out;
}

std::string hex_of_bigint(const std::string& le) {
  static const char* digits = "0123456789abcdef";
  std::string out = "0x";
  for (size_t i = le.size(); i-- > 0;) {
    const auto b = static_cast<unsigned char>(le[i]);
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

// The element key of a dict key or index, as a name component.
std::string key_text(const Value* key) {
  switch (key->kind) {
    case Kind::String:
      return key->text;
    case Kind::Int:
      return std::to_string(key->integer);
    case Kind::Bool:
      return key->boolean ? "True" : "False";
    case Kind::None:
      return "None";
    case Kind::Float:
      return nlohmann::json(key->real).dump();
    case Kind::BigInt:
      return hex_of_bigint(key->text);
    case Kind::Bytes:
      return key->text;
    case Kind::Tuple: {
      std::string out;
      for (const Value* item : key->items) out += (out.empty() ? "" : ",") + key_text(item);
      return "(" + out + ")";
    }
    case Kind::Global:
      return key->qualified_name();
    default:
      return "<" + key->qualified_name() + ">";
  }
}

}  // namespace

std::optional<StorageId> parse_storage_id(const Value& id, std::string* why) {
  auto refuse = [&](const std::string& reason) -> std::optional<StorageId> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (!id.is_sequence() || id.items.size() < 5 || !id.items[0]->is_string() || id.items[0]->text != "storage")
    return refuse("persistent id is not a ('storage', type, key, location, numel) tuple");
  const Value* type = id.items[1];
  if (type->kind != Kind::Global || type->known != KnownGlobal::Storage)
    return refuse("storage type is not a torch storage class");
  StorageId out;
  auto parsed = storage_type_from_class(type->name);
  if (!parsed) return refuse("unknown storage class torch." + type->name);
  out.type = *parsed;
  if (id.items[2]->is_string())
    out.key = id.items[2]->text;
  else if (id.items[2]->is_int())
    out.key = std::to_string(id.items[2]->integer);
  else
    return refuse("storage key is neither a string nor an int");
  if (id.items[3]->is_string()) out.location = id.items[3]->text;
  auto numel = int_of(id.items[4]);
  if (!numel || *numel < 0) return refuse("storage element count is not a non-negative int");
  out.numel = static_cast<uint64_t>(*numel);
  if (id.items.size() >= 6 && id.items[5]->is_sequence()) {
    const Value* view = id.items[5];
    auto offset = int_of(arg(*view, 1));
    auto size = int_of(arg(*view, 2));
    if (!offset || !size || *offset < 0 || *size < 0)
      return refuse("storage view is not (key, offset, size)");
    out.view = std::make_pair(static_cast<uint64_t>(*offset), static_cast<uint64_t>(*size));
  }
  return out;
}

// The table of tensors doubles at once, which the budget would refuse only
// at its next checkpoint, once made (65 536 tensors repeated through the
// memo doubled it to 65 MiB under a budget of 95): tested for room first.
void ObjectWalker::add_tensor(TensorSpec&& t) {
  if (tensors_.size() == tensors_.capacity()) {
    const uint64_t grown = std::max<size_t>(tensors_.capacity() * 2, 1) * sizeof(TensorSpec);
    charge_budget(grown, options_.file, options_.format, "the table of tensors");
    release_budget(grown);
  }
  tensors_.push_back(std::move(t));
}

void ObjectWalker::fail(const std::string& reason) const {
  std::optional<uint64_t> at;
  if (current_ && options_.pickle_in_file) at = current_->offset;
  throw ModelError(options_.file, options_.format, at, reason);
}

void ObjectWalker::walk(const Value* root, const std::string& prefix, uint64_t pickle_bytes) {
  max_names_ += pickle_bytes;
  // Under a prefix (a PT2 model's name), the top is named by it.
  auto plain_root = visit(root, ObjectPath{prefix, prefix.empty()}, 0, "");
  if (plain_root && options_.collect_values && !plain_root->is_null())
    values_[prefix.empty() ? "." : prefix] = *plain_root;
}

nlohmann::json ObjectWalker::plain(const Value* v) {
  ++plain_nodes_;
  check_budget();
  switch (v->kind) {
    case Kind::None:
      return nullptr;
    case Kind::Bool:
      return v->boolean;
    case Kind::Int:
      return v->integer;
    case Kind::BigInt:
      return hex_of_bigint(v->text);
    case Kind::Float:
      return v->real;
    case Kind::String:
      return v->text;
    case Kind::Bytes:
      return {{"bytes", v->text.size()}};
    case Kind::Global:
      return v->qualified_name();
    default:
      return nullptr;
  }
}

std::optional<nlohmann::json> ObjectWalker::visit(const Value* v, const ObjectPath& path, uint32_t depth,
                                                  const std::string& kind) {
  if (depth > pickle::kMaxNesting)
    fail("the pickled object nests deeper than " + std::to_string(pickle::kMaxNesting) + " levels");
  check_budget();
  if (std::find(path_stack_.begin(), path_stack_.end(), v) != path_stack_.end())
    return nlohmann::json("<cycle>");
  current_ = v;

  if (v->kind == Kind::PersistentId) {
    storage_only(v, path);
    return std::nullopt;
  }
  if (!is_container(v)) return plain(v);
  path_stack_.push_back(v);
  if (v->kind == Kind::Call && try_tensor(v, path, kind, depth)) {
    path_stack_.pop_back();
    return std::nullopt;
  }
  if (walked_.contains(v)) {
    path_stack_.pop_back();
    return revisit(v, path);
  }
  const size_t first_tensor = tensors_.size();
  struct Child {
    std::string path;
    std::string key;  // for dict-shaped JSON; empty for positional
    std::optional<nlohmann::json> plain;
  };
  std::vector<Child> children;
  const bool keyed = v->kind == Kind::Dict || v->kind == Kind::Call;
  const std::string class_name = v->qualified_name();  // of a Call; "" otherwise
  auto add = [&](const Value* child, const std::string& key, const std::string& child_kind) {
    const ObjectPath child_path = path.child(key);
    children.push_back({child_path.name, key, visit(child, child_path, depth + 1, child_kind)});
  };
  // Attributes of an object: TorchScript classes say which are parameters and buffers.
  auto attribute_kind = [&](const std::string& name) -> std::string {
    auto listed = [&](const std::map<std::string, std::vector<std::string>>& table) {
      auto it = table.find(class_name);
      return it != table.end() && std::ranges::find(it->second, name) != it->second.end();
    };
    if (listed(options_.parameters_by_class)) return "parameter";
    if (listed(options_.buffers_by_class)) return "buffer";
    return "";
  };
  auto entry = [](const Value* dict, std::string_view key) -> const Value* {
    for (const auto& [k, value] : dict->entries)
      if (k->is_string() && k->text == key) return value;
    return nullptr;
  };
  auto add_attributes = [&](const Value* state) {
    const Value* parameters = state->kind == Kind::Dict ? entry(state, "_parameters") : nullptr;
    const Value* modules = state->kind == Kind::Dict ? entry(state, "_modules") : nullptr;
    if (parameters && modules && parameters->kind == Kind::Dict && modules->kind == Kind::Dict) {
      // A pickled nn.Module (torch.save(model)): named as its state_dict is,
      // parameters, buffers and submodules directly under the module's path.
      for (const auto& [key, value] : state->entries) {
        const std::string name = key_text(key);
        const bool tables = name == "_parameters" || name == "_buffers" || name == "_modules";
        if (!tables || value->kind != Kind::Dict) {
          search_only(value, path.child(name), depth + 1);
          continue;
        }
        const std::string table_kind = name == "_parameters" ? "parameter"
                                       : name == "_buffers"  ? "buffer"
                                                             : "";
        for (const auto& [member_key, member] : value->entries)
          if (member->kind != Kind::None) add(member, key_text(member_key), table_kind);
      }
      return;
    }
    if (state->kind == Kind::Dict) {
      for (const auto& [key, value] : state->entries) {
        const std::string name = key_text(key);
        add(value, name, attribute_kind(name));
      }
    } else if (state->kind == Kind::Tuple && state->items.size() == 2 &&
               state->items[0]->kind != Kind::Call) {
      // (instance dict, slots dict), as object.__reduce_ex__ pickles slots.
      for (const Value* part : state->items)
        if (part->kind == Kind::Dict)
          for (const auto& [key, value] : part->entries) add(value, key_text(key), "");
    } else if (state->kind != Kind::None) {
      add(state, "state", "");
    }
  };

  if (v->kind == Kind::Dict) {
    for (const auto& [key, value] : v->entries) add(value, key_text(key), "");
    if (v->state) search_state(v->state, path, depth + 1);  // a state_dict's _metadata
  } else if (v->kind == Kind::Call) {
    if (v->args && v->args->is_sequence()) {
      for (size_t i = 0; i < v->args->items.size(); ++i) add(v->args->items[i], std::to_string(i), "");
    } else if (v->args) {
      add(v->args, "args", "");
    }
    if (v->state) add_attributes(v->state);
    for (size_t i = 0; i < v->items.size(); ++i) add(v->items[i], std::to_string(i), "");
    for (const auto& [key, value] : v->entries) add(value, key_text(key), "");
  } else {
    for (size_t i = 0; i < v->items.size(); ++i) add(v->items[i], std::to_string(i), "");
  }
  path_stack_.pop_back();

  const bool all_plain =
      std::all_of(children.begin(), children.end(), [](const Child& c) { return c.plain.has_value(); });
  walked_.emplace(v,
                  Walked{path, first_tensor, tensors_.size(), all_plain && tensors_.size() == first_tensor});
  if (all_plain) {
    nlohmann::json out = keyed ? nlohmann::json::object() : nlohmann::json::array();
    if (v->kind == Kind::Call) out["object"] = class_name;
    for (auto& child : children) {
      if (plain_nodes_ > kMaxPlainValues) {
        out = "<elided: over " + std::to_string(kMaxPlainValues) + " values>";
        break;
      }
      if (keyed)
        out[child.key] = std::move(*child.plain);
      else
        out.push_back(std::move(*child.plain));
    }
    return out;
  }
  if (options_.collect_values)
    for (auto& child : children)
      if (child.plain && !child.plain->is_null() && plain_nodes_ <= kMaxPlainValues)
        values_[child.path] = std::move(*child.plain);
  return std::nullopt;
}

// Searched for tensors only; plain values dropped (a module's `training`
// flags, a state_dict's _metadata are noise in metadata.json).
void ObjectWalker::search_only(const Value* v, const ObjectPath& path, uint32_t depth) {
  const bool collect = std::exchange(options_.collect_values, false);
  visit(v, path, depth, "");
  options_.collect_values = collect;
}

// The attributes of an object that is not walked as one: a dict's entries
// under their keys, anything else as "state".
void ObjectWalker::search_state(const Value* state, const ObjectPath& path, uint32_t depth) {
  if (state->kind != Kind::Dict) return search_only(state, path.child("state"), depth);
  for (const auto& [key, value] : state->entries) search_only(value, path.child(key_text(key)), depth);
}

std::optional<nlohmann::json> ObjectWalker::revisit(const Value* v, const ObjectPath& path) {
  const Walked& first = walked_.at(v);
  if (first.plain) return nlohmann::json{{"$ref", first.path.name_or(".")}};
  // The same tensors under this path: a module used twice is two prefixes
  // in a state_dict too. Copies share the bytes.
  if (tensors_.size() + (first.end_tensor - first.first_tensor) > max_names_)
    fail(
        "the pickled object names more tensors through structure shared in its memo than the "
        "pickle has bytes (" +
        std::to_string(max_names_) + ")");
  const size_t needed = tensors_.size() + (first.end_tensor - first.first_tensor);
  if (needed > tensors_.capacity()) {  // as add_tensor: room tested before the table grows
    charge_budget(needed * sizeof(TensorSpec), options_.file, options_.format, "the table of tensors");
    release_budget(needed * sizeof(TensorSpec));
  }
  tensors_.reserve(needed);
  for (size_t i = first.first_tensor; i < first.end_tensor; ++i) {
    TensorSpec copy = tensors_[i];
    copy.name = first.path.top ? path.child(copy.name).name
                               : path.name_or("") + copy.name.substr(first.path.name.size());
    tensors_.push_back(std::move(copy));
  }
  return std::nullopt;
}

bool ObjectWalker::try_tensor(const Value* v, const ObjectPath& path, const std::string& kind,
                              uint32_t depth) {
  if (depth > pickle::kMaxNesting)
    fail("tensor arguments nest deeper than " + std::to_string(pickle::kMaxNesting) + " levels");
  const Value* callable = v->callable;
  if (!callable || callable->kind != Kind::Global || !v->args) return false;
  const Value& args = *v->args;
  current_ = v;
  const std::string name = path.name_or("tensor");
  const std::string tensor_kind = kind.empty() ? options_.default_kind : kind;
  auto extras_for = [&](const Value* requires_grad) {
    nlohmann::json extras = nlohmann::json::object();
    if (!tensor_kind.empty()) extras["kind"] = tensor_kind;
    if (requires_grad && requires_grad->kind == Kind::Bool) extras["requires_grad"] = requires_grad->boolean;
    return extras;
  };
  auto skip = [&](const std::string& why) {
    spdlog::warn("{}: {}: tensor \"{}\" skipped: {}", options_.file, options_.format, name, why);
    return true;
  };

  switch (callable->known) {
    case KnownGlobal::RebuildTensor:
    case KnownGlobal::RebuildTensorV2:
      make_tensor(arg(args, 0), args, 1, std::nullopt, name, extras_for(arg(args, 4)));
      return true;
    case KnownGlobal::RebuildTensorV3: {
      const Value* dtype = arg(args, 6);
      std::optional<StorageType> type;
      if (dtype && dtype->kind == Kind::Global) type = storage_type_from_dtype(dtype->name);
      if (!type) return skip("_rebuild_tensor_v3 names no dtype modelfs knows");
      make_tensor(arg(args, 0), args, 1, type, name, extras_for(arg(args, 4)));
      return true;
    }
    case KnownGlobal::RebuildQTensor: {
      const Value* q = arg(args, 4);
      nlohmann::json extras = extras_for(arg(args, 5));
      if (!q || !q->is_sequence() || q->items.empty() || q->items[0]->kind != Kind::Global)
        return skip("quantizer parameters are not (qscheme, ...)");
      const auto scheme = qscheme_from_name(q->items[0]->name);
      if (!scheme) {
        // Parameters of a scheme we do not know mean nothing to us; the
        // stored integers are still the file's.
        spdlog::warn(
            "{}: {}: tensor \"{}\": quantizer scheme is none of torch's: served as its stored integers",
            options_.file, options_.format, name);
        make_tensor(arg(args, 0), args, 1, std::nullopt, name, extras);
        return true;
      }
      BasicQuantization<std::string> quant;
      quant.scheme = *scheme;
      if (qscheme_per_tensor(*scheme)) {
        const Value* scale = arg(*q, 1);
        const Value* zero = arg(*q, 2);
        if (scale && scale->kind == Kind::Float) quant.scale = scale->real;
        if (zero && zero->kind == Kind::Int) quant.zero_point = zero->integer;
      } else {
        // Per-channel scales and zero points are tensors of their own.
        quant.axis = int_of(arg(*q, 3));
        quant.scales = name + ".q_per_channel_scales";
        quant.zero_points = name + ".q_per_channel_zero_points";
        auto tensor_at = [&](const Value* p, const std::string& p_name) {
          return p && p->kind == Kind::Call && try_tensor(p, ObjectPath{p_name}, "", depth + 1);
        };
        if (!tensor_at(arg(*q, 1), quant.scales) || !tensor_at(arg(*q, 2), quant.zero_points))
          return skip("per-channel quantizer parameters are not tensors");
      }
      const size_t before = tensors_.size();
      make_tensor(arg(args, 0), args, 1, std::nullopt, name, extras);
      if (tensors_.size() > before) tensors_.back().quantization = std::move(quant);
      return true;
    }
    case KnownGlobal::RebuildParameter:
    case KnownGlobal::RebuildParameterWithState:
    case KnownGlobal::Parameter: {
      const Value* data = arg(args, 0);
      if (!data || data->kind != Kind::Call) return false;
      const size_t before = tensors_.size();
      if (!try_tensor(data, path, "parameter", depth + 1)) return false;
      if (tensors_.size() > before) {
        if (const Value* rg = arg(args, 1); rg && rg->kind == Kind::Bool)
          tensors_.back().extras["requires_grad"] = rg->boolean;
      }
      if (callable->known == KnownGlobal::RebuildParameterWithState) {
        if (const Value* state = arg(args, 3)) visit(state, path.child("state"), depth + 1, "");
      }
      return true;
    }
    case KnownGlobal::RebuildFromTypeV2: {
      // func(*args) gives the tensor; new_type is a Python subclass we do
      // not make; state holds its Python attributes (maybe tensors).
      const Value* func = arg(args, 0);
      const Value* new_type = arg(args, 1);
      const Value* inner_args = arg(args, 2);
      const Value* state = arg(args, 3);
      if (!func || !inner_args) return false;
      Value inner;
      inner.kind = Kind::Call;
      inner.callable = const_cast<Value*>(func);
      inner.args = const_cast<Value*>(inner_args);
      const size_t before = tensors_.size();
      if (!try_tensor(&inner, path, kind, depth + 1)) visit(inner_args, path.child("args"), depth + 1, "");
      if (tensors_.size() > before && new_type && new_type->qualified_name() != "torch._tensor.Tensor" &&
          new_type->qualified_name() != "torch.Tensor")
        tensors_.back().extras["subclass"] = new_type->qualified_name();
      if (state && state->kind != Kind::None) search_state(state, path, depth + 1);
      return true;
    }
    case KnownGlobal::RebuildDeviceTensorFromCpuTensor: {
      const Value* data = arg(args, 0);
      return data && data->kind == Kind::Call && try_tensor(data, path, kind, depth + 1);
    }
    case KnownGlobal::RebuildSparseTensor: {
      // The components are ordinary tensors: indices and values.
      const Value* data = arg(args, 1);
      if (!data || !data->is_sequence()) return skip("sparse tensor data is not a tuple");
      const bool compressed = data->items.size() == 4 && data->items[3]->is_sequence();
      const std::vector<std::string> names =
          compressed ? std::vector<std::string>{"compressed_indices", "plain_indices", "values"}
                     : std::vector<std::string>{"indices", "values"};
      for (size_t i = 0; i < names.size() && i < data->items.size(); ++i)
        visit(data->items[i], ObjectPath{name}.child(names[i]), depth + 1, kind);
      spdlog::warn("{}: {}: sparse tensor \"{}\" is served as its components ({}.indices, {}.values, ...)",
                   options_.file, options_.format, name, name, name);
      return true;
    }
    case KnownGlobal::RebuildNestedTensor:
      visit(arg(args, 0) ? arg(args, 0) : v->args, ObjectPath{name}.child("buffer"), depth + 1, kind);
      spdlog::warn("{}: {}: nested tensor \"{}\" is served as its flat buffer {}.buffer", options_.file,
                   options_.format, name, name);
      return true;
    case KnownGlobal::RebuildMetaTensorNoStorage:
    case KnownGlobal::RebuildWrapperSubclass:
      return skip("it has no storage (meta device or wrapper subclass)");
    case KnownGlobal::RebuildDeviceTensorFromNumpy:
      return skip("its bytes are a pickled numpy array, which modelfs does not unpickle");
    case KnownGlobal::LoadFromBytes:
      return skip("it is a storage pickled as a nested legacy torch.save blob");
    default:
      return false;
  }
}

StorageBytes ObjectWalker::storage_bytes(const StorageId& id) {
  std::string cache_key = id.key;
  if (id.view) cache_key += ":" + std::to_string(id.view->first) + ":" + std::to_string(id.view->second);
  if (auto it = storages_.find(cache_key); it != storages_.end()) return it->second;

  StorageBytes root = resolver_(id);
  const uint32_t element_size = id.type.untyped ? 1 : id.type.element_size;
  auto nbytes = checked_mul(id.numel, element_size);
  if (!nbytes || *nbytes > root.bytes.size())
    fail("storage " + id.key + " holds " + std::to_string(root.bytes.size()) + " bytes, fewer than its " +
         std::to_string(id.numel) + " elements of " + std::to_string(element_size) + " bytes");
  StorageBytes out = root;
  if (id.view) {
    auto begin = checked_mul(id.view->first, element_size);
    auto length = checked_mul(id.view->second, element_size);
    if (!begin || !length || !range_fits(*begin, *length, *nbytes))
      fail("view of storage " + id.key + " lies outside it");
    out.bytes = root.bytes.subspan(*begin, *length);
    if (out.file_offset) *out.file_offset += *begin;
  } else {
    out.bytes = root.bytes.subspan(0, *nbytes);
  }
  storages_.emplace(cache_key, out);
  return out;
}

void ObjectWalker::make_tensor(const Value* storage, const Value& args, size_t first,
                               std::optional<StorageType> dtype_override, const std::string& name,
                               nlohmann::json extras) {
  auto skip = [&](const std::string& why) {
    spdlog::warn("{}: {}: tensor \"{}\" skipped: {}", options_.file, options_.format, name, why);
  };
  if (!storage || storage->kind != Kind::PersistentId || storage->items.empty())
    fail("tensor \"" + name + "\": its storage is not a persistent id");
  std::string why;
  auto id = parse_storage_id(*storage->items[0], &why);
  if (!id) fail("tensor \"" + name + "\": " + why);
  StorageType type = dtype_override && (id->type.untyped || dtype_override->torch_name != id->type.torch_name)
                         ? *dtype_override
                         : id->type;
  if (type.untyped) fail("tensor \"" + name + "\": untyped storage without a dtype");
  if (type.packed) return skip("packed sub-byte type " + type.torch_name + " is not served");

  auto offset = int_of(arg(args, first));
  auto size = ints_of(arg(args, first + 1));
  auto stride = ints_of(arg(args, first + 2));
  if (!offset || !size || !stride || *offset < 0 || size->size() != stride->size())
    fail("tensor \"" + name + "\": storage offset, size and stride are not ints of one rank");
  auto negative = [](int64_t n) { return n < 0; };
  if (std::ranges::any_of(*size, negative)) fail("tensor \"" + name + "\": negative size");
  if (std::ranges::any_of(*stride, negative)) fail("tensor \"" + name + "\": negative stride");
  TensorSpec t;
  t.name = name;
  t.dtype = type.dtype;
  t.shape.assign(size->begin(), size->end());
  t.strides = *stride;

  const StorageBytes bytes = storage_bytes(*id);
  const uint64_t e = type.element_size;
  auto numel = checked_numel(t.shape);
  if (!numel) fail("tensor \"" + name + "\": element count overflows");
  const auto reach = checked_strided_span(t.shape, t.strides);
  if (!reach) fail("tensor \"" + name + "\": strides overflow");
  auto begin = checked_mul(static_cast<uint64_t>(*offset), e);
  auto length = checked_mul(*reach, e);
  if (!begin || !length || !range_fits(*begin, *length, bytes.bytes.size()))
    fail("tensor \"" + name + "\": elements at storage offset " + std::to_string(*offset) +
         " with shape and strides given run past its storage " + id->key + " (" +
         std::to_string(bytes.bytes.size()) + " bytes)");

  ByteSpan span = bytes.bytes.subspan(*numel > 0 ? *begin : 0, *length);
  std::optional<uint64_t> file_offset;
  if (bytes.file_offset && *numel > 0) file_offset = *bytes.file_offset + *begin;
  if (options_.byte_swap && e > 1) {
    const uint64_t unit = (type.dtype == DType::Complex64 || type.dtype == DType::Complex128) ? e / 2 : e;
    if (span.size() > kMaxSwapBytes)
      fail("tensor \"" + name + "\": big-endian storage of " + std::to_string(span.size()) +
           " bytes exceeds the byte-swap limit of " + std::to_string(kMaxSwapBytes));
    std::string swapped(span.view());
    for (uint64_t at = 0; at + unit <= swapped.size(); at += unit)
      std::reverse(swapped.begin() + static_cast<std::ptrdiff_t>(at),
                   swapped.begin() + static_cast<std::ptrdiff_t>(at + unit));
    span = ByteSpan::owned(std::move(swapped));
    file_offset.reset();
    extras["byte_order_in_file"] = "big";
  }
  t.bytes = span;
  t.source = {options_.source, file_offset};

  if (type.torch_name != dtype_name(type.dtype)) extras["torch_dtype"] = type.torch_name;
  extras["storage"] = {{"key", id->key}, {"offset", *offset}};
  if (!id->location.empty() && id->location != "cpu") extras["device"] = id->location;
  t.extras = std::move(extras);

  add_tensor(std::move(t));
}

void ObjectWalker::storage_only(const Value* v, const ObjectPath& path) {
  if (v->items.empty()) return;
  std::string why;
  auto id = parse_storage_id(*v->items[0], &why);
  if (!id) {
    spdlog::warn("{}: {}: persistent id at \"{}\" skipped: {}", options_.file, options_.format, path.name,
                 why);
    return;
  }
  if (id->type.packed || (options_.byte_swap && id->type.element_size > 1)) {
    spdlog::warn("{}: {}: storage at \"{}\" skipped: packed or big-endian", options_.file, options_.format,
                 path.name);
    return;
  }
  // A storage saved on its own: served as a 1-D tensor of its elements.
  const StorageBytes bytes = storage_bytes(*id);
  TensorSpec t;
  t.name = path.name_or("storage");
  t.dtype = id->type.dtype;
  t.shape = {id->numel};
  t.strides = {1};
  t.bytes = bytes.bytes;
  t.source = {options_.source, bytes.file_offset};
  t.extras = {{"kind", "storage"}, {"storage", {{"key", id->key}, {"offset", 0}}}};
  add_tensor(std::move(t));
}

std::optional<StorageType> plain_dtype(std::string_view name) {
  const auto type = storage_type_from_dtype(name);
  const auto entry = std::ranges::find(kTypes, type ? type->torch_name : "", &TypeEntry::dtype);
  if (!type || type->quantized || type->packed || entry->stand_in) return std::nullopt;
  return type;
}

}  // namespace modelfs::torch
