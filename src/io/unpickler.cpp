// SPDX-License-Identifier: Apache-2.0
#include "io/unpickler.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <iterator>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/dtype.hpp"
#include "modelfs/error.hpp"

namespace modelfs::pickle {
namespace {

// Python 2 module names, as pickle's compatibility tables map them, and
// torch's own rename.
std::string_view remap_module(std::string_view module) {
  if (module == "__builtin__") return "builtins";
  if (module == "copy_reg") return "copyreg";
  if (module == "torch.tensor") return "torch._tensor";
  return module;
}

constexpr std::string_view kDTypeNames[] = {"float64",
                                            "double",
                                            "float32",
                                            "float",
                                            "float16",
                                            "half",
                                            "bfloat16",
                                            "int64",
                                            "long",
                                            "int32",
                                            "int",
                                            "int16",
                                            "short",
                                            "int8",
                                            "uint8",
                                            "bool",
                                            "complex128",
                                            "cdouble",
                                            "complex64",
                                            "cfloat",
                                            "complex32",
                                            "chalf",
                                            "qint8",
                                            "qint32",
                                            "quint8",
                                            "quint4x2",
                                            "quint2x4",
                                            "float8_e5m2",
                                            "float8_e4m3fn",
                                            "float8_e5m2fnuz",
                                            "float8_e4m3fnuz",
                                            "float8_e8m0fnu",
                                            "float4_e2m1fn_x2",
                                            "bits8",
                                            "bits16",
                                            "bits1x8",
                                            "bits2x4",
                                            "bits4x2",
                                            "uint16",
                                            "uint32",
                                            "uint64",
                                            "uint1",
                                            "uint2",
                                            "uint3",
                                            "uint4",
                                            "uint5",
                                            "uint6",
                                            "uint7",
                                            "int1",
                                            "int2",
                                            "int3",
                                            "int4",
                                            "int5",
                                            "int6",
                                            "int7"};

struct NamedGlobal {
  std::string_view module;
  std::string_view name;
  KnownGlobal known;
};

constexpr NamedGlobal kNamedGlobals[] = {
    {"collections", "OrderedDict", KnownGlobal::OrderedDict},
    {"collections", "Counter", KnownGlobal::Counter},
    {"builtins", "set", KnownGlobal::Set},
    {"builtins", "frozenset", KnownGlobal::FrozenSet},
    {"builtins", "bytearray", KnownGlobal::Bytearray},
    {"builtins", "complex", KnownGlobal::Complex},
    {"_codecs", "encode", KnownGlobal::CodecsEncode},
    {"torch", "Size", KnownGlobal::Size},
    {"torch", "device", KnownGlobal::Device},
    {"torch", "Tensor", KnownGlobal::Tensor},
    {"torch.nn.parameter", "Parameter", KnownGlobal::Parameter},
    {"torch.serialization", "_get_layout", KnownGlobal::Layout},
    {"torch.storage", "UntypedStorage", KnownGlobal::Storage},
    {"torch.storage", "TypedStorage", KnownGlobal::Storage},
    {"torch.storage", "_load_from_bytes", KnownGlobal::LoadFromBytes},
    {"torch._utils", "_rebuild_tensor", KnownGlobal::RebuildTensor},
    {"torch._utils", "_rebuild_tensor_v2", KnownGlobal::RebuildTensorV2},
    {"torch._utils", "_rebuild_tensor_v3", KnownGlobal::RebuildTensorV3},
    {"torch._utils", "_rebuild_parameter", KnownGlobal::RebuildParameter},
    {"torch._utils", "_rebuild_parameter_with_state", KnownGlobal::RebuildParameterWithState},
    {"torch._utils", "_rebuild_qtensor", KnownGlobal::RebuildQTensor},
    {"torch._utils", "_rebuild_sparse_tensor", KnownGlobal::RebuildSparseTensor},
    {"torch._utils", "_rebuild_nested_tensor", KnownGlobal::RebuildNestedTensor},
    {"torch._utils", "_rebuild_meta_tensor_no_storage", KnownGlobal::RebuildMetaTensorNoStorage},
    {"torch._utils", "_rebuild_wrapper_subclass", KnownGlobal::RebuildWrapperSubclass},
    {"torch._utils", "_rebuild_device_tensor_from_numpy", KnownGlobal::RebuildDeviceTensorFromNumpy},
    {"torch._utils", "_rebuild_device_tensor_from_cpu_tensor", KnownGlobal::RebuildDeviceTensorFromCpuTensor},
    {"torch._tensor", "_rebuild_from_type_v2", KnownGlobal::RebuildFromTypeV2},
    {"torch.jit._pickle", "build_intlist", KnownGlobal::JitPassThrough},
    {"torch.jit._pickle", "build_tensorlist", KnownGlobal::JitPassThrough},
    {"torch.jit._pickle", "build_doublelist", KnownGlobal::JitPassThrough},
    {"torch.jit._pickle", "build_boollist", KnownGlobal::JitPassThrough},
    {"torch.jit._pickle", "restore_type_tag", KnownGlobal::JitPassThrough},
    // docs/formats.md, "torch.distributed.checkpoint": the classes of a
    // .metadata pickle.
    {"torch.distributed.checkpoint.metadata", "Metadata", KnownGlobal::DistributedCheckpoint},
    {"torch.distributed.checkpoint.metadata", "TensorStorageMetadata", KnownGlobal::DistributedCheckpoint},
    {"torch.distributed.checkpoint.metadata", "ChunkStorageMetadata", KnownGlobal::DistributedCheckpoint},
    {"torch.distributed.checkpoint.metadata", "BytesStorageMetadata", KnownGlobal::DistributedCheckpoint},
    {"torch.distributed.checkpoint.metadata", "MetadataIndex", KnownGlobal::DistributedCheckpoint},
    {"torch.distributed.checkpoint.metadata", "StorageMeta", KnownGlobal::DistributedCheckpoint},
    {"torch.distributed.checkpoint.metadata", "TensorProperties", KnownGlobal::DistributedCheckpoint},
    {"torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING", KnownGlobal::DistributedCheckpoint},
    {"torch.distributed._shard.sharded_tensor.metadata", "TensorProperties",
     KnownGlobal::DistributedCheckpoint},
    {"torch.distributed._shard.sharded_tensor.metadata", "MEM_FORMAT_ENCODING",
     KnownGlobal::DistributedCheckpoint},
    {"torch.distributed.checkpoint.filesystem", "_StorageInfo", KnownGlobal::DistributedCheckpoint},
    {"pathlib", "PosixPath", KnownGlobal::DistributedCheckpoint},
    // How Python 3.11+ pickles an enum member (_MEM_FORMAT_ENCODING's):
    // getattr(cls, name), which formats/dcp.cpp reads only in that form.
    {"builtins", "getattr", KnownGlobal::DistributedCheckpoint},
    {"pathlib._local", "PosixPath", KnownGlobal::DistributedCheckpoint},
};

// What modelfs knows the global module.name to be.
KnownGlobal classify_global(std::string_view module, std::string_view name) {
  for (const auto& g : kNamedGlobals)
    if (g.module == module && g.name == name) return g.known;
  if (module == "__torch__" || module.starts_with("__torch__.")) return KnownGlobal::TorchScriptClass;
  if (module == "torch") {
    if (std::ranges::find(kDTypeNames, name) != std::end(kDTypeNames)) return KnownGlobal::DType;
    if (qscheme_from_name(name)) return KnownGlobal::QScheme;
  }
  if ((module == "torch" || module == "torch.cuda") && name.ends_with("Storage") && name.size() > 7)
    return KnownGlobal::Storage;
  if ((module == "torch" || module == "torch.cuda" || module == "torch.sparse" ||
       module == "torch.cuda.sparse") &&
      name.ends_with("Tensor") && name.size() > 6)
    return KnownGlobal::LegacyTensorClass;
  return KnownGlobal::Unknown;
}

// Python's name for each Kind, in the enum's order.
constexpr std::string_view kKindNames[] = {"None", "bool",   "int",    "int",          "float",
                                           "str",  "bytes",  "list",   "tuple",        "set",
                                           "dict", "global", "object", "persistent id"};
static_assert(std::size(kKindNames) == static_cast<size_t>(Kind::PersistentId) + 1);

std::string kind_name(Kind kind) { return std::string(kKindNames[static_cast<size_t>(kind)]); }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// UTF-8 text whose code points are all below 256 back to the bytes that
// latin-1 decoding made of them (how protocol 2 pickles `bytes`).
std::optional<std::string> latin1_bytes(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size(); ++i) {
    const auto c = static_cast<unsigned char>(utf8[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if ((c == 0xC2 || c == 0xC3) && i + 1 < utf8.size()) {
      const auto next = static_cast<unsigned char>(utf8[++i]);
      if ((next & 0xC0) != 0x80) return std::nullopt;
      out.push_back(static_cast<char>(((c & 0x03) << 6) | (next & 0x3F)));
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// The opcodes that push a text or bytes after its length (little-endian,
// `length_bytes` wide): one row each rather than one case each.
struct CountedText {
  char op;
  uint8_t length_bytes;
  Kind kind;
  const char* name;
  const char* length_name;
};
constexpr CountedText kCountedTexts[] = {
    {'X', 4, Kind::String, "BINUNICODE", "BINUNICODE length"},
    {'\x8c', 1, Kind::String, "SHORT_BINUNICODE", "SHORT_BINUNICODE length"},
    {'\x8d', 8, Kind::String, "BINUNICODE8", "BINUNICODE8 length"},
    {'U', 1, Kind::String, "SHORT_BINSTRING", "SHORT_BINSTRING length"},
    {'B', 4, Kind::Bytes, "BINBYTES", "BINBYTES length"},
    {'C', 1, Kind::Bytes, "SHORT_BINBYTES", "SHORT_BINBYTES length"},
    {'\x8e', 8, Kind::Bytes, "BINBYTES8", "BINBYTES8 length"},
    {'\x96', 8, Kind::Bytes, "BYTEARRAY8", "BYTEARRAY8 length"},
};

class Machine {
 public:
  Machine(std::span<const std::byte> bytes, const std::string& file, const std::string& format, uint64_t base,
          bool warn_unknown, bool fold_latin1)
      : in_(bytes, file, format, base),
        file_(file),
        format_(format),
        base_(base),
        copy_budget_(kMaxCopiedBytes + kCopiedBytesPerPickleByte * bytes.size()),
        warn_unknown_(warn_unknown),
        fold_latin1_(fold_latin1) {}

  Pickle run() {
    // The budget grows with the pickle as it is read, ahead of the values
    // its bytes make (charged as they are allocated).
    constexpr uint64_t kMetadataStep = 64 << 10;
    uint64_t counted = in_.position();
    while (true) {
      op_at_ = in_.position();
      if (op_at_ - counted >= kMetadataStep) {
        add_metadata_bytes(op_at_ - counted);
        counted = op_at_;
      }
      const auto op = static_cast<char>(in_.u8("opcode"));
      if (op == '.') break;
      step(op);
    }
    add_metadata_bytes(in_.position() - counted);
    if (stack_.empty()) fail("STOP with an empty stack");
    out_.root = stack_.back();
    out_.end = in_.position();
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& reason) const {
    throw ModelError(file_, format_, base_ + op_at_, "pickle: " + reason);
  }

  Value* make(Kind kind) {
    if (out_.values.size() >= kMaxValues) fail("more than " + std::to_string(kMaxValues) + " values");
    Value& v = out_.values.emplace_back();
    v.kind = kind;
    v.offset = base_ + op_at_;
    return &v;
  }

  void push(Value* v) {
    if (stack_.size() >= kMaxStackDepth)
      fail("stack deeper than " + std::to_string(kMaxStackDepth) + " values");
    if (stack_.size() == stack_.capacity()) {
      // The stack doubles at once, which the budget would refuse only at
      // its next checkpoint, once made (two million memo repeats: a 64 MiB
      // stack under a budget of 95): tested for room first.
      const uint64_t grown = std::max<size_t>(stack_.capacity() * 2, 16) * sizeof(Value*);
      charge_budget(grown, file_, format_, "the pickle's stack");
      release_budget(grown);
    }
    stack_.push_back(v);
  }

  // The top of the stack, which must lie above the last MARK.
  Value* top() {
    const size_t bottom = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= bottom) fail("stack underflow");
    return stack_.back();
  }

  Value* pop() {
    Value* v = top();
    stack_.pop_back();
    return v;
  }

  // The values pushed since the last MARK, which is removed.
  std::vector<Value*> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<Value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  // A container now holds `child`: nesting depth is bounded here so that
  // anything walking the values later has a known limit.
  void nest(Value* container, const Value* child) {
    if (!is_container(child)) return;
    const uint32_t depth = child->depth + 1;
    if (depth > kMaxNesting) fail("values nest deeper than " + std::to_string(kMaxNesting) + " levels");
    container->depth = std::max(container->depth, depth);
  }

  // What the pickle builds is bounded by its length, except where a value
  // copies another's contents: OrderedDict(d), set(l), bytearray(s), keyword
  // arguments set on an object, a BUILD merging two states. Each copy costs
  // a few bytes of pickle when its source is memoized, so their sum is
  // bounded here (by the pickle's length: a real one copies a value once or
  // twice), or a small file could fill memory.
  // What one copied dict entry and one copied item cost.
  static constexpr uint64_t kEntryBytes = sizeof(decltype(Value::entries)::value_type);
  static constexpr uint64_t kItemBytes = sizeof(decltype(Value::items)::value_type);

  void charge_copy(uint64_t count, uint64_t unit_bytes) {
    const uint64_t left = copy_budget_ - copied_bytes_;
    if (count > left / unit_bytes)
      fail("copies more than " + std::to_string(copy_budget_) + " bytes from value to value");
    copied_bytes_ += count * unit_bytes;
  }

  Value* sequence(Kind kind, std::vector<Value*> items) {
    Value* v = make(kind);
    for (Value* item : items) nest(v, item);
    v->items = std::move(items);
    return v;
  }

  Value* make_bool(bool value) {
    Value* v = make(Kind::Bool);
    v->boolean = value;
    return v;
  }

  Value* make_int(int64_t value) {
    Value* v = make(Kind::Int);
    v->integer = value;
    return v;
  }

  Value* make_text(Kind kind, std::string_view text) {
    Value* v = make(kind);
    v->text = std::string(text);
    return v;
  }

  // Two's-complement little-endian bytes (LONG1, LONG4).
  Value* make_long(std::span<const std::byte> raw) {
    if (raw.size() <= 8) {
      uint64_t value = 0;
      for (size_t i = 0; i < raw.size(); ++i)
        value |= static_cast<uint64_t>(std::to_integer<uint8_t>(raw[i])) << (8 * i);
      if (!raw.empty() && raw.size() < 8 && (std::to_integer<uint8_t>(raw.back()) & 0x80))
        value |= ~uint64_t{0} << (8 * raw.size());
      return make_int(static_cast<int64_t>(value));
    }
    return make_text(Kind::BigInt, std::string_view(reinterpret_cast<const char*>(raw.data()), raw.size()));
  }

  std::string_view line(std::string_view what) {
    const uint64_t start = in_.position();
    std::string_view rest = in_.take_string(in_.remaining(), what);
    const size_t newline = rest.find('\n');
    if (newline == std::string_view::npos) fail(std::string(what) + " has no terminating newline");
    in_.seek(start + newline + 1);
    return rest.substr(0, newline);
  }

  Value* make_global(std::string_view module, std::string_view name) {
    Value* v = make(Kind::Global);
    v->module = std::string(remap_module(module));
    v->name = std::string(name);
    v->known = classify_global(v->module, v->name);
    if (v->known == KnownGlobal::Unknown) {
      std::string qualified = v->module + "." + v->name;
      if (unknown_seen_.insert(qualified).second) {
        if (warn_unknown_)
          spdlog::warn(
              "{}: {}: pickle names {}, which modelfs does not know; it is never called, "
              "its arguments and state are only searched for tensors",
              file_, format_, qualified);
        out_.unknown_globals.push_back(std::move(qualified));
      }
    }
    return v;
  }

  Value* memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " was never stored");
    return it->second;
  }

  void memo_put(uint64_t index) {
    Value* v = top();
    if (memo_.size() >= kMaxMemoEntries && !memo_.count(index))
      fail("more than " + std::to_string(kMaxMemoEntries) + " memo entries");
    memo_[index] = v;
  }

  // callable(*args) as REDUCE asks: a few known globals are folded into the
  // plain value they build; everything else is recorded, never called.
  Value* reduce(Value* callable, Value* args, bool newobj) {
    if (callable->kind == Kind::Global) {
      Value* arg = args && args->is_sequence() && !args->items.empty() ? args->items[0] : nullptr;
      switch (callable->known) {
        case KnownGlobal::OrderedDict:
        case KnownGlobal::Counter: {
          Value* dict = make(Kind::Dict);
          if (!newobj && arg && arg->kind == Kind::Dict) {
            charge_copy(arg->entries.size(), kEntryBytes);
            for (auto& entry : arg->entries) add_entry(dict, entry.first, entry.second);
          } else if (!newobj && arg && (arg->is_sequence())) {
            charge_copy(arg->items.size(), kEntryBytes);
            for (Value* pair : arg->items)
              if (pair->is_sequence() && pair->items.size() == 2)
                add_entry(dict, pair->items[0], pair->items[1]);
          }
          return dict;
        }
        case KnownGlobal::Set:
        case KnownGlobal::FrozenSet:
          if (!arg || arg->kind == Kind::List || arg->kind == Kind::Tuple || arg->kind == Kind::Set) {
            if (arg) charge_copy(arg->items.size(), kItemBytes);
            return sequence(Kind::Set, arg ? arg->items : std::vector<Value*>{});
          }
          break;
        case KnownGlobal::Size:
          if (!newobj && arg && arg->is_sequence()) {
            charge_copy(arg->items.size(), kItemBytes);
            return sequence(Kind::Tuple, arg->items);
          }
          break;
        case KnownGlobal::CodecsEncode:
        case KnownGlobal::Bytearray:
          if (!arg) return make_text(Kind::Bytes, "");
          if (arg->kind == Kind::Bytes || arg->kind == Kind::String) charge_copy(arg->text.size(), 1);
          if (arg->kind == Kind::Bytes) return make_text(Kind::Bytes, arg->text);
          if (arg->kind == Kind::String && (fold_latin1_ || callable->known != KnownGlobal::CodecsEncode)) {
            if (auto raw = latin1_bytes(arg->text)) return make_text(Kind::Bytes, *raw);
          }
          break;
        case KnownGlobal::JitPassThrough:
          if (arg) return arg;
          break;
        default:
          break;
      }
    }
    Value* call = make(Kind::Call);
    call->callable = callable;
    call->args = args;
    call->newobj = newobj;
    nest(call, args);
    return call;
  }

  void add_entry(Value* target, Value* key, Value* value) {
    if (target->kind != Kind::Dict && target->kind != Kind::Call)
      fail("SETITEM on a " + kind_name(target->kind));
    nest(target, value);
    target->entries.emplace_back(key, value);
  }

  void add_item(Value* target, Value* item) {
    if (target->kind != Kind::List && target->kind != Kind::Set && target->kind != Kind::Call)
      fail("APPEND on a " + kind_name(target->kind));
    nest(target, item);
    target->items.push_back(item);
  }

  // A second state updates the first, as Python updates __dict__.
  void build(Value* target, Value* state) {
    nest(target, state);
    Value* into = target->state;
    if (into && into->kind == Kind::Dict && state->kind == Kind::Dict) {
      // The state may be that very dict (DUP): nothing to add, and a vector
      // appended to itself would be read after it reallocated.
      if (into == state) return;
      charge_copy(state->entries.size(), kEntryBytes);
      into->entries.insert(into->entries.end(), state->entries.begin(), state->entries.end());
      return;
    }
    target->state = state;
  }

  // An opcode of kCountedTexts: its length, then that many bytes.
  void push_counted_text(char op) {
    const CountedText& c = *std::ranges::find(kCountedTexts, op, &CountedText::op);
    const uint64_t n = c.length_bytes == 1   ? in_.u8(c.length_name)
                       : c.length_bytes == 4 ? in_.u32(c.length_name)
                                             : in_.u64(c.length_name);
    push(make_text(c.kind, in_.take_string(n, c.name)));
  }

  void step(char op) {
    switch (op) {
      case '\x80':  // PROTO
        out_.protocol = in_.u8("protocol");
        if (out_.protocol > 5) fail("protocol " + std::to_string(out_.protocol) + " is newer than 5");
        break;
      case '\x95':  // FRAME: only a read-ahead hint; its length must fit
        if (in_.u64("frame length") > in_.remaining()) fail("FRAME runs past the end of the pickle");
        break;
      case '(':  // MARK
        if (marks_.size() >= kMaxMarks) fail("more than " + std::to_string(kMaxMarks) + " open MARKs");
        marks_.push_back(stack_.size());
        break;
      case '0':
        pop();
        break;  // POP
      case '1':
        pop_mark();
        break;  // POP_MARK
      case '2':
        push(top());
        break;  // DUP
      case 'N':
        push(make(Kind::None));
        break;
      case '\x88':
      case '\x89':
        push(make_bool(op == '\x88'));
        break;  // NEWTRUE / NEWFALSE
      case 'K':
        push(make_int(in_.u8("BININT1")));
        break;
      case 'M':
        push(make_int(in_.u16("BININT2")));
        break;
      case 'J':
        push(make_int(in_.read_le<int32_t>("BININT")));
        break;
      case '\x8a':
        push(make_long(in_.take(in_.u8("LONG1 length"), "LONG1")));
        break;
      case '\x8b': {  // LONG4
        const int32_t n = in_.read_le<int32_t>("LONG4 length");
        if (n < 0) fail("LONG4 with negative length");
        if (static_cast<uint64_t>(n) > kMaxLongBytes)
          fail("LONG4 of " + std::to_string(n) + " bytes exceeds the limit of " +
               std::to_string(kMaxLongBytes));
        push(make_long(in_.take(static_cast<uint64_t>(n), "LONG4")));
        break;
      }
      case 'I': {  // INT (text)
        std::string_view text = line("INT");
        if (text == "00" || text == "01")
          push(make_bool(text == "01"));
        else
          push(make_int(parse_decimal(text, "INT")));
        break;
      }
      case 'L': {  // LONG (text)
        std::string_view text = line("LONG");
        if (!text.empty() && text.back() == 'L') text.remove_suffix(1);
        push(make_int(parse_decimal(text, "LONG")));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian IEEE double
        auto raw = in_.take(8, "BINFLOAT");
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | std::to_integer<uint8_t>(raw[i]);
        Value* v = make(Kind::Float);
        v->real = std::bit_cast<double>(bits);
        push(v);
        break;
      }
      case 'F': {  // FLOAT (text)
        std::string text(line("FLOAT"));
        char* end = nullptr;
        Value* v = make(Kind::Float);
        v->real = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) fail("FLOAT is not a number");
        push(v);
        break;
      }
      case 'T': {  // BINSTRING (Python 2 str): read as text, as torch.load does
        const int32_t n = in_.read_le<int32_t>("BINSTRING length");
        if (n < 0) fail("BINSTRING with negative length");
        push(make_text(Kind::String, in_.take_string(static_cast<uint64_t>(n), "BINSTRING")));
        break;
      }
      case 'X':
      case '\x8c':
      case '\x8d':
      case 'U':
      case 'B':
      case 'C':
      case '\x8e':
      case '\x96':
        push_counted_text(op);
        break;
      case 'S':
        push(make_text(Kind::String, unquote(line("STRING"))));
        break;
      case 'V':
        push(make_text(Kind::String, raw_unicode_escape(line("UNICODE"))));
        break;
      case ')':
        push(make(Kind::Tuple));
        break;
      case ']':
        push(make(Kind::List));
        break;
      case '}':
        push(make(Kind::Dict));
        break;
      case '\x8f':
        push(make(Kind::Set));
        break;
      case 't':
        push(sequence(Kind::Tuple, pop_mark()));
        break;
      case 'l':
        push(sequence(Kind::List, pop_mark()));
        break;
      case '\x91':
        push(sequence(Kind::Set, pop_mark()));
        break;  // FROZENSET
      case '\x85':
      case '\x86':
      case '\x87': {  // TUPLE1..3
        const size_t n = static_cast<size_t>(op - '\x85' + 1);
        std::vector<Value*> items(n);
        for (size_t i = n; i-- > 0;) items[i] = pop();
        push(sequence(Kind::Tuple, std::move(items)));
        break;
      }
      case 'a': {  // APPEND
        Value* item = pop();
        add_item(top(), item);
        break;
      }
      case 'e':
      case '\x90': {  // APPENDS / ADDITEMS
        auto items = pop_mark();
        Value* target = top();
        for (Value* item : items) add_item(target, item);
        break;
      }
      case 's': {  // SETITEM
        Value* value = pop();
        Value* key = pop();
        add_entry(top(), key, value);
        break;
      }
      case 'd':
      case 'u': {  // DICT / SETITEMS: the key, value pairs since MARK into a new dict / the top
        const bool dict = op == 'd';
        auto items = pop_mark();
        if (items.size() % 2) fail(std::string(dict ? "DICT" : "SETITEMS") + " with an odd number of items");
        Value* target = dict ? make(Kind::Dict) : top();
        for (size_t i = 0; i < items.size(); i += 2) add_entry(target, items[i], items[i + 1]);
        if (dict) push(target);
        break;
      }
      case 'p':
        memo_put(parse_unsigned(line("PUT"), "PUT"));
        break;
      case 'q':
        memo_put(in_.u8("BINPUT index"));
        break;
      case 'r':
        memo_put(in_.u32("LONG_BINPUT index"));
        break;
      case '\x94':
        memo_put(next_memo_++);
        break;  // MEMOIZE
      case 'g':
        push(memo_get(parse_unsigned(line("GET"), "GET")));
        break;
      case 'h':
        push(memo_get(in_.u8("BINGET index")));
        break;
      case 'j':
        push(memo_get(in_.u32("LONG_BINGET index")));
        break;
      case 'c': {  // GLOBAL
        std::string module(line("GLOBAL module"));
        std::string name(line("GLOBAL name"));
        push(make_global(module, name));
        break;
      }
      case '\x93': {  // STACK_GLOBAL
        Value* name = pop();
        Value* module = pop();
        if (!name->is_string() || !module->is_string()) fail("STACK_GLOBAL needs two strings");
        push(make_global(module->text, name->text));
        break;
      }
      case 'R':
      case '\x81': {  // REDUCE / NEWOBJ
        Value* args = pop();
        Value* callable = pop();
        push(reduce(callable, args, op == '\x81'));
        break;
      }
      case '\x92': {  // NEWOBJ_EX: keyword arguments become items set on the object
        Value* kwargs = pop();
        Value* args = pop();
        Value* cls = pop();
        Value* object = reduce(cls, args, true);
        if (kwargs->kind == Kind::Dict && object->kind == Kind::Call) {
          charge_copy(kwargs->entries.size(), kEntryBytes);
          for (auto& entry : kwargs->entries) add_entry(object, entry.first, entry.second);
        }
        push(object);
        break;
      }
      case 'i': {  // INST: module, name lines; arguments since MARK
        std::string module(line("INST module"));
        std::string name(line("INST name"));
        Value* cls = make_global(module, name);
        push(reduce(cls, sequence(Kind::Tuple, pop_mark()), true));
        break;
      }
      case 'o': {  // OBJ: class and arguments since MARK
        auto items = pop_mark();
        if (items.empty()) fail("OBJ without a class");
        Value* cls = items.front();
        items.erase(items.begin());
        push(reduce(cls, sequence(Kind::Tuple, std::move(items)), true));
        break;
      }
      case 'b': {  // BUILD
        Value* state = pop();
        build(top(), state);
        break;
      }
      case 'Q':
        push(sequence(Kind::PersistentId, {pop()}));
        break;  // BINPERSID
      case 'P':
        push(sequence(Kind::PersistentId, {make_text(Kind::String, line("PERSID"))}));
        break;
      case '\x82':
      case '\x83':
      case '\x84':
        fail("extension registry codes (EXT1/2/4) are not supported");
      case '\x97':
      case '\x98':
        fail("out-of-band buffers (NEXT_BUFFER/READONLY_BUFFER) are not supported");
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned>(static_cast<unsigned char>(op)));
        fail(std::string("unknown opcode ") + hex);
      }
    }
  }

  int64_t parse_decimal(std::string_view text, std::string_view what) {
    int64_t value = 0;
    if (!text.empty() && text.front() == '+') text.remove_prefix(1);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty())
      fail(std::string(what) + " \"" + std::string(text.substr(0, 40)) + "\" is not a 64-bit integer");
    return value;
  }

  uint64_t parse_unsigned(std::string_view text, std::string_view what) {
    const int64_t value = parse_decimal(text, what);
    if (value < 0) fail(std::string(what) + " with a negative memo index");
    return static_cast<uint64_t>(value);
  }

  // STRING's argument: a Python repr, '...' or "...", with backslash escapes.
  std::string unquote(std::string_view text) {
    if (text.size() < 2 || text.front() != text.back() || (text.front() != '\'' && text.front() != '"'))
      fail("STRING argument is not quoted");
    text = text.substr(1, text.size() - 2);
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '\\' || i + 1 == text.size()) {
        out.push_back(text[i]);
        continue;
      }
      const char e = text[++i];
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'x': {
          if (i + 2 >= text.size()) fail("STRING \\x escape cut short");
          unsigned value = 0;
          auto [end, ec] =
              std::from_chars(text.data() + i + 1, text.data() + std::min(i + 3, text.size()), value, 16);
          if (ec != std::errc() || end != text.data() + i + 3) fail("bad \\x escape in STRING");
          out.push_back(static_cast<char>(value));
          i += 2;
          break;
        }
        default:
          out.push_back(e);
          break;
      }
    }
    return out;
  }

  // UNICODE's argument: raw-unicode-escape (latin-1 bytes, \uXXXX, \UXXXXXXXX).
  std::string raw_unicode_escape(std::string_view text) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
      const bool escape =
          text[i] == '\\' && i + 1 < text.size() && (text[i + 1] == 'u' || text[i + 1] == 'U');
      if (!escape) {
        append_utf8(out, static_cast<unsigned char>(text[i]));
        continue;
      }
      const size_t digits = text[i + 1] == 'u' ? 4 : 8;
      uint32_t cp = 0;
      auto [end, ec] =
          std::from_chars(text.data() + i + 2, text.data() + std::min(i + 2 + digits, text.size()), cp, 16);
      if (ec != std::errc() || end != text.data() + i + 2 + digits || cp > 0x10FFFF)
        fail("bad escape in UNICODE");
      append_utf8(out, cp);
      i += 1 + digits;
    }
    return out;
  }

  ByteReader in_;
  std::string file_;
  std::string format_;
  uint64_t base_;
  uint64_t op_at_ = 0;
  Pickle out_;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  uint64_t copy_budget_;
  uint64_t copied_bytes_ = 0;  // see charge_copy
  std::unordered_map<uint64_t, Value*> memo_;
  uint64_t next_memo_ = 0;
  std::unordered_set<std::string> unknown_seen_;
  bool warn_unknown_ = true;
  bool fold_latin1_ = true;
};

}  // namespace

std::string Value::qualified_name() const {
  if (kind == Kind::Global) return module + "." + name;
  if (kind == Kind::Call && callable && callable->kind == Kind::Global) return callable->qualified_name();
  return "";
}

Pickle unpickle(std::span<const std::byte> bytes, const std::string& file, const std::string& format,
                uint64_t base, bool warn_unknown, bool fold_latin1) {
  Pickle pickle = Machine(bytes, file, format, base, warn_unknown, fold_latin1).run();
  return pickle;
}

}  // namespace modelfs::pickle
