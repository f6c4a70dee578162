// SPDX-License-Identifier: Apache-2.0
#include "modelfs/catalog.hpp"

#include <algorithm>
#include <stdexcept>

#include "modelfs/budget.hpp"
#include "modelfs/checked_math.hpp"
#include "modelfs/json_text.hpp"
#include "modelfs/tensor_spec.hpp"

namespace modelfs {

ByteSpan ByteSpan::mapped(std::shared_ptr<const MappedFile> file, uint64_t offset, uint64_t length) {
  if (!file || !range_fits(offset, length, file->size()))
    throw std::out_of_range("ByteSpan::mapped: range outside the mapped file");
  ByteSpan span;
  span.file_ = file.get();
  span.data_ = file->data() == nullptr ? nullptr : file->data() + offset;
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

ByteSpan ByteSpan::subspan(uint64_t offset, uint64_t length) const {
  if (!range_fits(offset, length, size_))
    throw std::out_of_range("ByteSpan::subspan: range outside the span");
  ByteSpan span = *this;
  span.data_ = data_ == nullptr ? nullptr : data_ + offset;
  span.size_ = length;
  return span;
}

std::string_view Tensor::dtype_name() const {
  if (dtype == DType::GgmlBlock) return block_type;
  return modelfs::dtype_name(dtype);
}

nlohmann::json Tensor::extras() const {
  if (extras_lines.empty()) return nullptr;
  // The lines are ",\n  \"key\": value" each: an object once the first
  // comma is a brace.
  std::string text = "{";
  text.append(extras_lines.substr(1));
  text += "}";
  return nlohmann::json::parse(text);
}

namespace {

// The sidecar's lines for `extras`, one key a line after "source".
std::string extras_lines(const nlohmann::json& extras) {
  static constexpr std::string_view kFixedKeys[] = {"name",       "dtype", "shape", "strides", "nbytes",
                                                    "byte_order", "numpy", "npy",   "format",  "source"};
  std::string out;
  if (!extras.is_object()) return out;
  for (const auto& [key, value] : extras.items()) {
    for (auto fixed : kFixedKeys)
      if (key == fixed) throw std::logic_error("a reader's extra reuses the sidecar key \"" + key + "\"");
    out += ",\n  ";
    append_json_string(out, key);
    out += ": ";
    out += nlohmann::ordered_json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return out;
}

}  // namespace

const Tensor& Catalog::add(const TensorSpec& spec) {
  // A view of the spec, copied into the stores as another catalog's tensor is.
  const std::string lines = extras_lines(spec.extras);
  return add(Tensor{.name = spec.name,
                    .dtype = spec.dtype,
                    .block_type = spec.block_type,
                    .shape = spec.shape,
                    .strides = spec.strides,
                    .bytes = spec.bytes,
                    .source = {spec.source.file, spec.source.offset},
                    .extras_lines = lines});
}

const Tensor& Catalog::add(const Tensor& tensor) {
  check_budget();
  Tensor t = tensor;
  t.name = texts_.add(tensor.name);
  t.block_type = intern(tensor.block_type);
  t.shape = shapes_.add(tensor.shape);
  t.strides = strides_.add(tensor.strides);
  t.source.file = intern(tensor.source.file);
  t.extras_lines = tensor.extras_lines.empty() ? std::string_view() : texts_.add(tensor.extras_lines);
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
