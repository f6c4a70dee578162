// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the three PyTorch readers share: turning an unpickled object into
// tensors (docs/formats.md, "Storage classes", "Tensor rebuilds"). The
// walker follows dict keys, attributes and indices from the root, names
// every tensor by that path (docs/design.md, "Tensor names"), resolves each
// storage through the reader's callback, and collects the plain values of
// the object for metadata.json.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/tensor_spec.hpp"
#include "io/unpickler.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::torch {

// A storage's element type as its class (or a v3 dtype argument) names it.
struct StorageType {
  DType dtype = DType::UInt8;
  uint32_t element_size = 1;
  std::string torch_name;  // "float32", "qint8", "complex32", ...
  bool quantized = false;
  bool packed = false;   // several values per byte (quint4x2, float4_e2m1fn_x2, ...)
  bool untyped = false;  // UntypedStorage: bytes, typed by the tensor
};

// The bytes of one storage, as the reader found them.
struct StorageBytes {
  ByteSpan bytes;                       // the whole record
  std::optional<uint64_t> file_offset;  // absent for inflated or swapped bytes
};

// The type of `torch.<name>` (or its alias: "float", "long", ...) when its
// elements are served as they are: not quantized, not packed several to a
// byte, not a stand-in of the same width for a type modelfs has no dtype of
// (complex32, bits8, bits16). Its torch_name is the canonical name.
std::optional<StorageType> plain_dtype(std::string_view name);

// A storage reference taken apart: ('storage', type, key, location, numel[, view]).
struct StorageId {
  StorageType type;
  std::string key;
  std::string location;
  uint64_t numel = 0;
  // Legacy view of a root storage: (view_key, offset, size) in elements.
  std::optional<std::pair<uint64_t, uint64_t>> view;
};

// Parses a persistent id; ModelError (via `fail`) when it is not a storage.
std::optional<StorageId> parse_storage_id(const pickle::Value& id, std::string* why);

struct WalkOptions {
  std::string file;            // for messages
  std::string format;          // for messages and sidecars
  std::string source;          // Catalog::files entry the bytes lie in
  bool pickle_in_file = true;  // values' offsets are file offsets (not an inflated record)
  bool byte_swap = false;      // storages are big-endian: swap into owned bytes
  bool collect_values = true;  // plain values into metadata "values"
  std::string default_kind;    // "kind" for tensors not known as parameters ("" none)
  // TorchScript: attribute names that are parameters / buffers, by class.
  std::map<std::string, std::vector<std::string>> parameters_by_class;
  std::map<std::string, std::vector<std::string>> buffers_by_class;
};

// Big-endian storages are swapped into memory up to this many bytes.
inline constexpr uint64_t kMaxSwapBytes = uint64_t{1} << 30;
// JSON nodes kept in metadata "values"; the rest is elided.
inline constexpr uint64_t kMaxPlainValues = 100'000;
inline constexpr size_t kMaxRank = 64;

// Where a value lies in the pickled object: the keys, attributes and
// indices that lead to it, joined with '.'. The top of the object has no
// name at all, which is not the name "" of a value under an empty key:
// {'': t} names t "" (a lone tensor at the top is "tensor").
struct ObjectPath {
  std::string name;
  bool top = false;

  ObjectPath child(const std::string& key) const { return {top ? key : name + "." + key, false}; }
  // The name of what lies here, `at_top` for the top itself.
  std::string name_or(std::string_view at_top) const { return top ? std::string(at_top) : name; }
};

class ObjectWalker {
 public:
  // Resolves a storage key to its bytes (a record, or a range of a legacy file).
  using Resolver = std::function<StorageBytes(const StorageId&)>;

  ObjectWalker(WalkOptions options, Resolver resolver)
      : options_(std::move(options)), resolver_(std::move(resolver)) {}

  // Walks `root`, naming what it finds under `prefix` ("" at the top).
  // `pickle_bytes`, the length of the pickle `root` came from, bounds how
  // many tensor names a structure shared through the memo may add.
  void walk(const pickle::Value* root, const std::string& prefix, uint64_t pickle_bytes);

  std::vector<TensorSpec>& tensors() { return tensors_; }
  nlohmann::json& values() { return values_; }

 private:
  // A container reached again through the memo, at `path`: its tensors
  // named again under `path`, its plain values by reference.
  std::optional<nlohmann::json> revisit(const pickle::Value* v, const ObjectPath& path);
  std::optional<nlohmann::json> visit(const pickle::Value* v, const ObjectPath& path, uint32_t depth,
                                      const std::string& kind);
  bool try_tensor(const pickle::Value* v, const ObjectPath& path, const std::string& kind, uint32_t depth);
  void make_tensor(const pickle::Value* storage, const pickle::Value& args, size_t first,
                   std::optional<StorageType> dtype_override, const std::string& path, nlohmann::json extras);
  StorageBytes storage_bytes(const StorageId& id);
  void storage_only(const pickle::Value* v, const ObjectPath& path);
  void search_only(const pickle::Value* v, const ObjectPath& path, uint32_t depth);
  void search_state(const pickle::Value* state, const ObjectPath& path, uint32_t depth);
  [[noreturn]] void fail(const std::string& reason) const;
  void add_tensor(TensorSpec&& t);
  nlohmann::json plain(const pickle::Value* v);

  WalkOptions options_;
  Resolver resolver_;
  std::vector<TensorSpec> tensors_;
  nlohmann::json values_ = nlohmann::json::object();
  std::map<std::string, StorageBytes> storages_;
  std::vector<const pickle::Value*> path_stack_;
  // Each container is walked once, at the first path that reaches it: a
  // structure shared through the memo (d = {'l': d, 'r': d}, 60 times over)
  // has 2^60 paths but as many containers as the pickle made.
  struct Walked {
    ObjectPath path;
    size_t first_tensor = 0, end_tensor = 0;  // the tensors its walk named
    bool plain = false;                       // it held no tensor
  };
  std::unordered_map<const pickle::Value*, Walked> walked_;
  // Tensor names a walk may give: the pickles' lengths in bytes (a pickled
  // tensor takes tens of bytes, so a file's own tensors stay far below).
  uint64_t max_names_ = 0;
  uint64_t plain_nodes_ = 0;
  const pickle::Value* current_ = nullptr;  // what is being read, for messages
};

}  // namespace modelfs::torch
