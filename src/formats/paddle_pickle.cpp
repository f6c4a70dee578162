// SPDX-License-Identifier: Apache-2.0
// PaddlePaddle state dicts (.pdparams): a pickled dict of numpy arrays,
// read by our unpickler and never run (paddle.hpp; docs/formats.md,
// "PaddlePaddle").
#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/paddle.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "io/unpickler.hpp"
#include "io/utf8.hpp"

namespace modelfs::paddle {
namespace {

using pickle::Kind;
using pickle::Value;

constexpr std::string_view kReconstruct = "_reconstruct";
// numpy before 2.0 and since (numpy.core became numpy._core).
constexpr std::array<std::string_view, 2> kMultiarray{"numpy.core.multiarray", "numpy._core.multiarray"};
constexpr size_t kMaxListed = 1000;

// numpy's dtype names of the types modelfs has.
struct NumpyType {
  std::string_view name;
  DType dtype;
};
constexpr std::array<NumpyType, 14> kNumpyTypes{{{"b1", DType::Bool},
                                                 {"i1", DType::Int8},
                                                 {"i2", DType::Int16},
                                                 {"i4", DType::Int32},
                                                 {"i8", DType::Int64},
                                                 {"u1", DType::UInt8},
                                                 {"u2", DType::UInt16},
                                                 {"u4", DType::UInt32},
                                                 {"u8", DType::UInt64},
                                                 {"f2", DType::Float16},
                                                 {"f4", DType::Float32},
                                                 {"f8", DType::Float64},
                                                 {"c8", DType::Complex64},
                                                 {"c16", DType::Complex128}}};

bool is_global(const Value* v, std::span<const std::string_view> modules, std::string_view name) {
  if (v == nullptr || v->kind != Kind::Global || v->name != name) return false;
  for (std::string_view m : modules)
    if (v->module == m) return true;
  return false;
}

const Value* item(const Value* v, size_t i) {
  return v != nullptr && v->is_sequence() && i < v->items.size() ? v->items[i] : nullptr;
}

// Why a value is not an array this reader serves; empty when it is one.
struct Array {
  std::string not_array;
  DType dtype = DType::Float32;
  std::string numpy_type;
  std::vector<uint64_t> shape;
  bool fortran = false;
  const Value* data = nullptr;  // Bytes, or _codecs.encode(String, "latin1")
};

// numpy.dtype(name, False, True) with BUILD state (version, byte order,
// subarray, names, fields, ...): a plain little-endian (or byte-sized) type.
std::string read_dtype(const Value* d, Array& out) {
  if (d == nullptr || d->kind != Kind::Call ||
      !is_global(d->callable, std::array{std::string_view("numpy")}, "dtype"))
    return "its dtype is not a numpy.dtype";
  const Value* name = item(d->args, 0);
  if (name == nullptr || !name->is_string()) return "its numpy.dtype has no name";
  out.numpy_type = name->text;
  const Value* order = item(d->state, 1);
  const std::string byte_order = order != nullptr && order->is_string() ? order->text : "";
  for (size_t i = 2; i <= 4; ++i)
    if (const Value* v = item(d->state, i); v != nullptr && v->kind != Kind::None)
      return "a structured or subarray numpy dtype (" + name->text + ")";
  for (const NumpyType& t : kNumpyTypes)
    if (t.name == name->text) {
      if (byte_order != "<" && byte_order != "|")
        return "numpy dtype " + name->text + " in byte order \"" + byte_order +
               "\" (only little-endian is read)";
      out.dtype = t.dtype;
      return "";
    }
  return "numpy dtype " + name->text + ", which modelfs has no dtype for";
}

// numpy's ndarray reduce: _reconstruct(ndarray, (0,), b"b"), then BUILD
// (version, shape, dtype, is_fortran, data).
Array read_array(const Value* v) {
  Array out;
  if (v == nullptr || v->kind != Kind::Call || !is_global(v->callable, kMultiarray, kReconstruct)) {
    out.not_array = "not a numpy array";
    return out;
  }
  const Value* state = v->state;
  if (state == nullptr || state->kind != Kind::Tuple || state->items.size() != 5) {
    out.not_array = "a numpy array whose state is not (version, shape, dtype, is_fortran, data)";
    return out;
  }
  const Value* shape = state->items[1];
  if (!shape->is_sequence()) {
    out.not_array = "a numpy array whose shape is not a tuple";
    return out;
  }
  if (shape->items.size() > kMaxRank) {
    out.not_array = "a numpy array of more than " + std::to_string(kMaxRank) + " dimensions";
    return out;
  }
  for (const Value* d : shape->items) {
    if (!d->is_int() || d->integer < 0) {
      out.not_array = "a numpy array whose shape is not non-negative integers";
      return out;
    }
    out.shape.push_back(static_cast<uint64_t>(d->integer));
  }
  out.not_array = read_dtype(state->items[2], out);
  if (!out.not_array.empty()) return out;
  out.fortran = state->items[3]->kind == Kind::Bool && state->items[3]->boolean;
  out.data = state->items[4];
  return out;
}

class Reader {
 public:
  explicit Reader(const ModelFile& model)
      : model_(model), display_(model.mapped->display_name()), file_name_(model.path.filename().string()) {
    catalog_.format = "paddle";
    catalog_.mtime = model.mapped->mtime();
    catalog_.files.push_back(file_name_);
    catalog_.tensors_may_share_bytes = true;  // a dict may name one (memoized) array twice
  }

  Catalog read() {
    const pickle::Pickle p =
        pickle::unpickle(model_.mapped->unchecked_bytes(), display_, std::string(kFormat), 0, false, false);
    const Value* root = p.root;
    if (root->kind != Kind::Dict)
      refuse(root->offset, "the pickle's value is not a dict (a paddle.save state dict is a dict of arrays)");
    for (const auto& [key, value] : root->entries) {
      check_budget();
      if (!key->is_string()) {
        leave_out("(a key that is not a string)", "a key that is not a string");
        continue;
      }
      Array array = read_array(value);
      if (!array.not_array.empty()) {
        leave_out(key->text, value->kind == Kind::Dict ? "a dict, not an array" : array.not_array);
        continue;
      }
      add(key->text, array, value->offset);
    }
    nlohmann::json& meta = catalog_.metadata;
    meta["kind"] = "state dict (paddle.save)";
    meta["pickle_protocol"] = p.protocol;
    meta["entries"] = root->entries.size();
    meta["not_tensor_count"] = not_tensor_count_;
    if (!not_tensors_.empty()) meta["not_tensors"] = std::move(not_tensors_);
    // numpy's own globals are what a state dict names; any other is told.
    std::vector<std::string> others;
    for (const std::string& g : p.unknown_globals)
      if (g != "numpy.ndarray" && g != "numpy.dtype" && !g.ends_with("multiarray._reconstruct"))
        others.push_back(g);
    if (!others.empty()) meta["pickle_globals_not_read"] = others;
    if (p.end != model_.mapped->size()) meta["bytes_after_pickle"] = model_.mapped->size() - p.end;
    return std::move(catalog_);
  }

 private:
  [[noreturn]] void refuse(uint64_t at, const std::string& reason) const {
    throw ModelError(display_, std::string(kFormat), at, reason);
  }

  void leave_out(const std::string& name, const std::string& reason) {
    ++not_tensor_count_;
    if (not_tensors_.size() < kMaxListed) not_tensors_.push_back({{"name", name}, {"reason", reason}});
  }

  // Where the text or bytes of `v` lie in the file: after the opcode at
  // its offset and that opcode's length field, which must say its size.
  std::optional<uint64_t> payload_at(const Value* v) const {
    struct Op {
      char op;
      uint8_t length_bytes;
      bool text;
    };
    constexpr std::array<Op, 6> kOps{{{'X', 4, true},
                                      {'\x8c', 1, true},
                                      {'\x8d', 8, true},
                                      {'B', 4, false},
                                      {'C', 1, false},
                                      {'\x8e', 8, false}}};
    ByteReader in(*model_.mapped, std::string(kFormat));
    if (v->offset >= model_.mapped->size()) return std::nullopt;
    in.seek(v->offset);
    const char op = static_cast<char>(in.u8("opcode"));
    for (const Op& o : kOps) {
      if (o.op != op || o.text != v->is_string()) continue;
      const uint64_t n = o.length_bytes == 1   ? in.u8("length")
                         : o.length_bytes == 4 ? in.u32("length")
                                               : in.u64("length");
      if (n != v->text.size() || n > in.remaining()) return std::nullopt;
      return in.position();
    }
    return std::nullopt;
  }

  void add(const std::string& name, const Array& a, uint64_t at) {
    const std::string quote = "array " + shown(name) + ": ";
    const auto numel = checked_numel(a.shape);
    const auto nbytes = numel ? checked_mul(*numel, dtype_bits(a.dtype) / 8) : std::nullopt;
    auto strides = contiguous_strides(a.shape);
    if (!nbytes || !strides) refuse(at, quote + "its shape overflows");
    TensorSpec t;
    t.name = name;
    t.dtype = a.dtype;
    t.shape = a.shape;
    if (a.fortran) {
      Checked<int64_t> stride = 1;
      for (size_t i = 0; i < a.shape.size(); ++i) {
        (*strides)[i] = stride.value();
        stride *= a.shape[i] == 0 ? 1 : a.shape[i];
      }
    }
    t.strides = std::move(*strides);
    t.extras["numpy_dtype"] = a.numpy_type;
    const Value* data = a.data;
    if (data->kind == Kind::Bytes) {
      // Protocol 3 and later: the bytes as they are.
      if (data->text.size() != *nbytes)
        refuse(data->offset, quote + "holds " + std::to_string(data->text.size()) + " bytes; " +
                                 std::string(dtype_name(a.dtype)) + " of its shape needs " +
                                 std::to_string(*nbytes));
      const auto where = payload_at(data);
      if (!where) return leave_out(name, "array bytes the pickle builds rather than stores");
      t.bytes = ByteSpan::mapped(model_.mapped, *where, *nbytes);
      t.source = {file_name_, *where};
    } else if (data->is_call_of(pickle::KnownGlobal::CodecsEncode) && item(data->args, 0) != nullptr &&
               item(data->args, 0)->is_string()) {
      // Protocol 2: _codecs.encode(text, "latin1"), decoded per read.
      const Value* text = item(data->args, 0);
      const Value* codec = item(data->args, 1);
      if (codec == nullptr || !codec->is_string() || (codec->text != "latin1" && codec->text != "latin-1"))
        return leave_out(name, "array bytes encoded other than as latin-1 text");
      const auto size = latin1_size(text->text);
      if (!size) refuse(text->offset, quote + "its bytes' text has a character above U+00FF (not latin-1)");
      if (*size != *nbytes)
        refuse(text->offset, quote + "its text stands for " + std::to_string(*size) + " bytes; " +
                                 std::string(dtype_name(a.dtype)) + " of its shape needs " +
                                 std::to_string(*nbytes));
      const auto where = payload_at(text);
      if (!where) return leave_out(name, "array bytes as text the pickle builds rather than stores");
      t.bytes = ByteSpan::mapped(model_.mapped, *where, text->text.size());
      if (*nbytes == text->text.size()) {
        t.source = {file_name_, *where};  // every byte below 0x80: stored as it is
      } else {
        // The raw bytes lie nowhere in the file as they are: no offset.
        t.encoded = Encoded{Encoded::Method::Latin1Utf8, 0, *nbytes, *nbytes};
        t.source = {file_name_, std::nullopt};
        t.extras["stored_as"] = "latin-1 text in UTF-8 (pickle protocol 2)";
      }
    } else if (data->kind == Kind::Call && data->qualified_name() == "builtins.bytes" && *nbytes == 0) {
      // An empty bytes under protocol 2: bytes().
      t.source = {file_name_, std::nullopt};
    } else {
      return leave_out(name, "a numpy array whose bytes are neither bytes nor latin-1 text");
    }
    catalog_.add(t);
  }

  const ModelFile& model_;
  std::string display_;
  std::string file_name_;
  Catalog catalog_;
  uint64_t not_tensor_count_ = 0;
  nlohmann::json not_tensors_ = nlohmann::json::array();
};

}  // namespace

bool probe_pdparams(std::span<const std::byte> head) {
  const std::string_view text(reinterpret_cast<const char*>(head.data()), head.size());
  // PROTO 2..5, then EMPTY_DICT, or a FRAME and EMPTY_DICT (protocol 4+).
  if (text.size() < 3 || text[0] != '\x80' || text[1] < 2 || text[1] > 5) return false;
  const bool dict = text[2] == '}' || (text[2] == '\x95' && text.size() > 11 && text[11] == '}');
  if (!dict) return false;
  if (text.find(kReconstruct) == std::string_view::npos) return false;
  for (std::string_view module : kMultiarray)
    if (text.find(module) != std::string_view::npos) return true;
  return false;
}

Catalog open_pdparams(const ModelFile& model) { return Reader(model).read(); }

}  // namespace modelfs::paddle
