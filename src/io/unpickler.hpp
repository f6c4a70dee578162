// SPDX-License-Identifier: Apache-2.0
#pragma once
// A restricted unpickler (docs/formats.md, "Pickle opcodes" to "Tensor
// rebuilds"): it reads the pickle opcodes
// of protocols 0-5 that torch files use and builds plain values, but it never
// imports or calls anything. A GLOBAL becomes a Global value naming what the
// pickle asked for; REDUCE, NEWOBJ and BUILD become Call values recording the
// callable, its arguments and the state set on the result. Readers interpret
// the few calls they know (tensor rebuilds) from that record.
//
// Only globals on a fixed list (OrderedDict, torch.Size, the rebuild
// functions, storage types, dtypes, the weights_only allowlist) count as
// known; a few of them are folded into plain values here (OrderedDict ->
// dict, torch.Size -> tuple, _codecs.encode -> bytes). Any other global is
// an opaque object: logged as skipped, its arguments and state kept so that
// tensors inside it (argparse Namespaces, Lightning checkpoints, TorchScript
// modules) are still found.
//
// The machine is a loop over opcodes (no recursion), every length is checked
// against the bytes that remain, and the stack, memo, marks, value count,
// nesting depth and the bytes values copy from other values are bounded by
// the limits below.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace modelfs::pickle {

inline constexpr uint64_t kMaxValues = 50'000'000;      // values built from one pickle
inline constexpr uint64_t kMaxStackDepth = 10'000'000;  // values on the stack at once
inline constexpr uint64_t kMaxMemoEntries = 10'000'000;
inline constexpr uint64_t kMaxMarks = 100'000;    // open MARKs at once
inline constexpr uint32_t kMaxNesting = 1'000;    // containers inside containers
inline constexpr uint64_t kMaxLongBytes = 1'024;  // LONG1/LONG4 integers
// Copied from value to value, in all (OrderedDict(d), bytearray(s), ...):
// this much, plus this many bytes for each byte of the pickle.
inline constexpr uint64_t kMaxCopiedBytes = 64ULL << 20;
inline constexpr uint64_t kCopiedBytesPerPickleByte = 8;

enum class Kind : uint8_t {
  None,
  Bool,
  Int,     // fits int64: `integer`
  BigInt,  // does not: `text` holds its two's-complement little-endian bytes
  Float,
  String,  // UTF-8 `text`
  Bytes,   // raw `text`
  List,
  Tuple,
  Set,
  Dict,
  Global,        // `module`, `name`
  Call,          // callable(*args) then BUILD(state): an object we did not make
  PersistentId,  // `items[0]` is the persistent id (torch: a storage tuple)
};

// What modelfs knows a global to be; everything else is Unknown.
enum class KnownGlobal : uint8_t {
  Unknown,
  OrderedDict,
  Counter,
  Set,
  FrozenSet,
  Bytearray,
  CodecsEncode,
  Complex,
  Size,
  Device,
  Tensor,
  Parameter,
  Layout,
  DType,
  QScheme,
  Storage,  // typed storage classes, UntypedStorage, TypedStorage
  LegacyTensorClass,
  RebuildTensor,
  RebuildTensorV2,
  RebuildTensorV3,
  RebuildParameter,
  RebuildParameterWithState,
  RebuildQTensor,
  RebuildSparseTensor,
  RebuildNestedTensor,
  RebuildMetaTensorNoStorage,
  RebuildWrapperSubclass,
  RebuildDeviceTensorFromNumpy,
  RebuildDeviceTensorFromCpuTensor,
  RebuildFromTypeV2,
  LoadFromBytes,     // torch.storage._load_from_bytes: a legacy blob inside
  JitPassThrough,    // torch.jit._pickle build_*list / restore_type_tag: value = args[0]
  TorchScriptClass,  // __torch__.*: a TorchScript module or class object
  // torch.distributed.checkpoint's .metadata classes (and the pathlib
  // paths it records): recorded as calls, read by formats/dcp.cpp only.
  DistributedCheckpoint,
};

struct Value {
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;                          // String, Bytes, BigInt
  std::string module;                        // Global
  std::string name;                          // Global
  KnownGlobal known = KnownGlobal::Unknown;  // Global
  // List, Tuple, Set: the elements. Call: items appended to the object.
  // PersistentId: the id.
  std::vector<Value*> items;
  // Dict: the entries in insertion order. Call: items set on the object.
  std::vector<std::pair<Value*, Value*>> entries;
  Value* callable = nullptr;  // Call: a Global (or any value a pickle reduces)
  Value* args = nullptr;      // Call: a Tuple (or whatever the pickle gave)
  Value* state = nullptr;     // Call, Dict: what BUILD set, or null
  bool newobj = false;        // Call: made by NEWOBJ/NEWOBJ_EX (cls.__new__), not REDUCE
  uint32_t depth = 0;         // containers nested inside, at the time it was built
  uint64_t offset = 0;        // where the opcode that made it is (base + position), for messages

  bool is_string() const noexcept { return kind == Kind::String; }
  bool is_int() const noexcept { return kind == Kind::Int; }
  bool is_sequence() const noexcept { return kind == Kind::List || kind == Kind::Tuple; }
  // A Call whose callable is a Global of this kind.
  bool is_call_of(KnownGlobal global) const noexcept {
    return kind == Kind::Call && callable != nullptr && callable->kind == Kind::Global &&
           callable->known == global;
  }
  // "module.name" of a Global, or of a Call's callable; "" otherwise.
  std::string qualified_name() const;
};

// Values that hold others (and so are walked, with a depth limit): lists,
// tuples, sets, dicts, calls and persistent ids.
inline bool is_container(const Value* v) noexcept {
  switch (v->kind) {
    case Kind::List:
    case Kind::Tuple:
    case Kind::Set:
    case Kind::Dict:
    case Kind::Call:
    case Kind::PersistentId:
      return true;
    default:
      return false;
  }
}

// Where a pickle's values live: at stable addresses (values point at each
// other), in chunks from the heap that neither growing nor moving the store
// moves (why not a std::deque: bench/results/2026-12-01_memory.md).
class ValueStore {
 public:
  static constexpr size_t kChunkValues = 256;

  ValueStore() = default;
  ValueStore(ValueStore&& other) noexcept
      : chunks_(std::move(other.chunks_)), size_(std::exchange(other.size_, 0)) {}
  ValueStore& operator=(ValueStore&& other) noexcept {
    chunks_ = std::move(other.chunks_);
    size_ = std::exchange(other.size_, 0);
    return *this;
  }

  // A default Value at a new, stable address; std::bad_alloc if no memory.
  Value& emplace_back() {
    if (size_ == chunks_.size() * kChunkValues) chunks_.push_back(std::make_unique<Value[]>(kChunkValues));
    Value& v = chunks_[size_ / kChunkValues][size_ % kChunkValues];
    ++size_;
    return v;
  }
  size_t size() const noexcept { return size_; }

  // Enough of an iterator for range-for over the values in order.
  struct const_iterator {
    const Value& operator*() const { return store->chunks_[index / kChunkValues][index % kChunkValues]; }
    const Value* operator->() const { return &**this; }
    const_iterator& operator++() {
      ++index;
      return *this;
    }
    bool operator==(const const_iterator& other) const { return index == other.index; }

    const ValueStore* store;
    size_t index;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

 private:
  std::vector<std::unique_ptr<Value[]>> chunks_;
  size_t size_ = 0;
};

// The values of one pickle. They live in `values` (stable addresses) and
// point at each other; `root` is what STOP returned.
struct Pickle {
  ValueStore values;
  const Value* root = nullptr;
  uint64_t end = 0;  // offset just past STOP, relative to the input
  int protocol = 0;
  // Globals not on the known list, "module.name", once each in first-seen order.
  std::vector<std::string> unknown_globals;
};

// Reads one pickle from the start of `bytes` up to its STOP. `file`,
// `format` and `base` (file offset of bytes[0]) are for messages; ModelError
// on any malformed, truncated or over-limit input. Unknown globals are
// logged with spdlog::warn, unless `warn_unknown` is false (a reader that
// refuses them by name itself: formats/dcp.cpp). With `fold_latin1` false,
// _codecs.encode(text, ...) stays a Call whose text argument's `offset` is
// the opcode that holds it, so a reader can find the text in the file
// rather than hold its bytes decoded (formats/paddle_pickle.cpp).
Pickle unpickle(std::span<const std::byte> bytes, const std::string& file, const std::string& format,
                uint64_t base = 0, bool warn_unknown = true, bool fold_latin1 = true);

}  // namespace modelfs::pickle
