// SPDX-License-Identifier: Apache-2.0
#include "modelfs/catalog.hpp"

#include <algorithm>
#include <stdexcept>

#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "io/json_text.hpp"
#include "io/pieces.hpp"
#include "io/sidecar_keys.hpp"
#include "io/tensor_spec.hpp"

namespace modelfs {

ByteSpan ByteSpan::mapped(std::shared_ptr<const MappedFile> file, uint64_t offset, uint64_t length) {
  if (!file || !range_fits(offset, length, file->size()))
    throw std::out_of_range("ByteSpan::mapped: range outside the mapped file");
  ByteSpan span;
  span.file_ = file.get();
  span.data_ = file->unchecked_data() == nullptr ? nullptr : file->unchecked_data() + offset;
  span.size_ = length;
  span.owner_ = std::move(file);
  return span;
}

ByteSpan ByteSpan::owned(std::string bytes) {
  auto buffer = std::make_shared<const std::string>(std::move(bytes));
  ByteSpan span;
  span.data_ = reinterpret_cast<const std::byte*>(buffer->data());
  span.size_ = buffer->size();
  span.owner_ = std::move(buffer);
  return span;
}

uint64_t ByteSpan::file_offset() const noexcept {
  if (file_ == nullptr || data_ == nullptr) return 0;
  return static_cast<uint64_t>(data_ - file_->unchecked_data());
}

std::span<const std::byte> ByteSpan::span(ReadScope* scope) const {
  if (file_ != nullptr) return file_->read(file_offset(), size_, scope);
  return {data_, size_};
}

ByteSpan ByteSpan::subspan(uint64_t offset, uint64_t length) const {
  if (!range_fits(offset, length, size_))
    throw std::out_of_range("ByteSpan::subspan: range outside the span");
  ByteSpan span = *this;
  span.data_ = data_ == nullptr ? nullptr : data_ + offset;
  span.size_ = length;
  return span;
}

std::string_view Tensor::dtype_name() const {
  if (dtype == DType::GgmlBlock) return ggml != nullptr ? ggml->name : modelfs::dtype_name(dtype);
  return modelfs::dtype_name(dtype);
}

nlohmann::json Tensor::typed_extras() const {
  nlohmann::json out = nlohmann::json::object();
  if (ggml != nullptr) {
    out["ggml_type"] = ggml->id;
    out["ggml_type_name"] = ggml->name;
    out["block_size"] = ggml->block_size;
    out["type_size"] = ggml->type_size;
  }
  if (quantization) {
    const Quantization& q = *quantization;
    nlohmann::json& j = out["quantization"] = {{"qscheme", qscheme_name(q.scheme)}};
    if (q.scale) j["scale"] = *q.scale;
    if (q.zero_point) j["zero_point"] = *q.zero_point;
    if (q.axis) j["axis"] = *q.axis;
    if (q.min) j["min"] = *q.min;
    if (q.scheme == QScheme::MinScaleAffine || q.scheme == QScheme::Widened)
      j["values_dtype"] = modelfs::dtype_name(q.values);
    if (!qscheme_per_tensor(q.scheme) && !q.scales.empty()) {
      j["scales"] = q.scales;
      j["zero_points"] = q.zero_points;
    }
  }
  return out;
}

nlohmann::json Tensor::extras() const {
  nlohmann::json out = typed_extras();
  if (!extras_lines.empty()) {
    // The lines are ",\n  \"key\": value" each: an object once the first
    // comma is a brace.
    std::string text = "{";
    text.append(extras_lines.substr(1));
    text += "}";
    out.update(nlohmann::json::parse(text));
  }
  if (out.empty()) return nullptr;
  return out;
}

namespace {

// The sidecar's lines for `extras`, one key a line after "source".
std::string extras_lines(const nlohmann::json& extras, const nlohmann::json& typed) {
  std::string out;
  if (!extras.is_object()) return out;
  for (const auto& [key, value] : extras.items()) {
    for (auto fixed : kSidecarKeys)
      if (key == fixed) throw std::logic_error("a reader's extra reuses the sidecar key \"" + key + "\"");
    if (typed.contains(key))
      throw std::logic_error("a reader's extra reuses the key \"" + key + "\" of a typed field");
    out += ",\n  ";
    append_json_string(out, key);
    out += ": ";
    out += nlohmann::ordered_json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return out;
}

// The sidecar lines of a spec's extras (a reader's JSON, printed once here);
// another catalog's tensor has them printed already.
std::string extras_text(const TensorSpec& spec, const Tensor& stored) {
  return extras_lines(spec.extras, stored.typed_extras());
}
std::string_view extras_text(const Tensor& tensor, const Tensor&) { return tensor.extras_lines; }

}  // namespace

const Tensor& Catalog::add(const TensorSpec& spec) { return store(spec); }
const Tensor& Catalog::add(const Tensor& tensor) { return store(tensor); }

template <typename From>
const Tensor& Catalog::store(const From& from) {
  check_budget();
  Tensor t;
  t.name = texts_.add(from.name);
  t.dtype = from.dtype;
  t.ggml = from.ggml;
  t.shape = shapes_.add(from.shape);
  t.strides = strides_.add(from.strides);
  t.bytes = from.bytes;
  t.source = {intern(from.source.file), from.source.offset};
  if (from.quantization) {
    const auto& q = *from.quantization;
    const Quantization stored{q, intern(q.scales), intern(q.zero_points)};
    t.quantization = quantizations_.add(std::span(&stored, 1)).data();
  }
  if (from.encoded) t.encoded = encodings_.add(std::span(&*from.encoded, 1)).data();
  if (const auto lines = extras_text(from, t); !lines.empty()) t.extras_lines = texts_.add(lines);
  if (!from.pieces.empty()) {
    std::vector<Piece> pieces;
    pieces.reserve(from.pieces.size());
    Checked<uint64_t> run_bytes = 0;
    for (size_t i = 0; i < from.pieces.size(); ++i) {
      if (i % 4096 == 0) check_budget();
      const auto& piece = from.pieces[i];
      pieces.push_back({piece.bytes,
                        piece.size,
                        shapes_.add(piece.start),
                        shapes_.add(piece.extent),
                        filters_.add(piece.filters),
                        {intern(piece.source.file), piece.source.offset},
                        piece.zeros});
      run_bytes += piece.size;
    }
    t.pieces = pieces_.add(pieces);
    // Here, so that no reader can forget a rule (modelfs/pieces.hpp); the
    // sizes below hold once it has passed.
    const std::string_view file = !t.source.file.empty() ? t.source.file
                                  : files.empty()        ? std::string_view()
                                                         : std::string_view(files.front());
    check_pieces(t, file, format);
    if (!box_pieces(t)) {
      t.pieces_size = run_bytes.value();
    } else {
      // Box pieces cover the shape exactly once (edge pieces clipped).
      Checked<uint64_t> bytes = dtype_bits(t.dtype) / 8;
      for (const uint64_t dim : t.shape) bytes *= dim;
      t.pieces_size = bytes.value();
    }
  }
  return tensors_.emplace_back(std::move(t));
}

std::string_view Catalog::intern(std::string_view text) {
  if (text.empty()) return {};
  auto it = interned_.find(text);
  if (it == interned_.end()) it = interned_.insert(texts_.add(text)).first;
  return *it;
}

std::optional<std::vector<int64_t>> contiguous_strides(std::span<const uint64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  Checked<int64_t> stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride.get().value_or(0);
    stride *= shape[i] == 0 ? 1 : shape[i];
  }
  // The outermost dimension's product is no stride, but numpy and torch
  // refuse a shape whose elements they cannot count in 64 signed bits.
  if (!stride.ok()) return std::nullopt;
  return strides;
}

namespace {
// Dimensions of size 0 or 1 place no constraint on their stride (as torch's
// is_contiguous); an empty tensor is contiguous in any order.
bool strides_match(const Tensor& t, bool c_order) {
  if (t.strides.size() != t.shape.size()) return false;
  if (std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end()) return true;
  Checked<int64_t> expected = 1;
  const size_t rank = t.shape.size();
  for (size_t k = 0; k < rank; ++k) {
    size_t i = c_order ? rank - 1 - k : k;
    if (t.shape[i] == 1) continue;
    // A product past int64 is no stride a tensor can have.
    if (!expected.ok() || t.strides[i] != expected.value()) return false;
    expected *= t.shape[i];
  }
  return true;
}
}  // namespace

bool Tensor::is_c_contiguous() const { return strides_match(*this, true); }
bool Tensor::is_f_contiguous() const { return strides_match(*this, false); }

}  // namespace modelfs
