// SPDX-License-Identifier: Apache-2.0
#include "tree/export.hpp"

#include <nlohmann/json.hpp>

#include "io/checked_math.hpp"
#include "io/json_object.hpp"
#include "io/json_text.hpp"
#include "io/safetensors_dtype.hpp"
#include "tree/npy.hpp"

namespace modelfs {
namespace {

constexpr std::string_view kMetadataKey = "__metadata__";

// The bytes `shape` of `dtype` takes in safetensors (overflowed past
// 2^64), or none where they are not whole bytes, as the reference reader
// wants (a sub-byte type's elements must fill them). Counted from the
// elements, not their bits: those pass 2^64 first.
std::optional<Size> safetensors_size(DType dtype, std::span<const uint64_t> shape) {
  Size numel = 1;
  for (uint64_t d : shape) numel *= d;
  if (!numel.ok()) return numel;
  const uint64_t n = numel.value(), bits = dtype_bits(dtype);
  if (n % 8 * bits % 8 != 0) return std::nullopt;
  return Size(n / 8) * bits + n % 8 * bits / 8;
}

// Why a view is left out past kViewBound.
std::string past_view_bound(uint64_t view_bytes, uint64_t stored_bytes) {
  return "a view of " + std::to_string(view_bytes) + " bytes in C order from " +
         std::to_string(stored_bytes) + " stored (an expand() repeats them): past the bound on a view, " +
         std::to_string(kViewBound.floor) + " bytes or " + std::to_string(kViewBound.growth) +
         " times what it stores";
}

}  // namespace

void ExportPlan::add(const ExportInput& input) {
  const Tensor& t = *input.tensor;
  // Names as the header prints them (invalid UTF-8 replaced): two stored
  // names may print alike, and a header names each tensor once.
  std::string key;
  append_json_string(key, t.name);
  auto leave_out = [&](std::string reason) { left_out_.emplace_back(t.name, std::move(reason)); };
  if (t.name == kMetadataKey) return leave_out("the name safetensors keeps for the metadata");
  std::string scratch;
  if (!keys_.empty() && keys_[slot_of(key, scratch)] != 0)
    return leave_out("a second tensor of this name (the first is written)");

  const auto code = safetensors_dtype(t.dtype);
  std::optional<PartList> part;
  std::string_view dtype;
  std::string reason;
  if (!code) {
    reason = "safetensors has no type for " + std::string(t.dtype_name());
  } else if (input.dequantized) {
    reason = "a quantized type (" + std::string(t.dtype_name()) + "): its stored integers are not its values";
  } else if (const auto size = safetensors_size(t.dtype, t.shape); !size) {
    reason = "its " + std::string(t.dtype_name()) + " elements do not fill whole bytes";
  } else if (!size->ok()) {
    reason = "its size in bytes passes 2^64";
  } else if (!kViewBound.allows(size->value(), t.nbytes())) {
    // The .npy follows the same bound: neither is made.
    reason = past_view_bound(size->value(), t.nbytes());
  } else if (input.c_order && input.c_order->size() == size->value()) {
    // Stored in C order, or a strided view (a transpose, an expand, a
    // column) gathered into C order on each read.
    part = input.c_order;
    dtype = *code;
  } else if (t.is_c_contiguous()) {
    reason = "its stored bytes are not what its shape needs";
  } else if (dtype_bits(t.dtype) % 8 == 0) {
    reason = "its strides reach outside its storage";
  } else {
    reason = "a strided view of a sub-byte type";
  }

  if (!part && float32_ && input.converted) {
    // -o export=float32: the .npy's values (float32, or int8/uint8 for the
    // 2- and 4-bit integers), C order.
    const auto converted_code = safetensors_dtype(input.converted_dtype);
    const auto size = safetensors_size(input.converted_dtype, t.shape);
    if (converted_code && size && size->get() == input.converted->size) {
      Part converted = *input.converted;
      converted.offset = 0;
      part = converted;
      dtype = *converted_code;
      converted_.emplace_back(
          t.name, std::string(t.dtype_name()) + " as " + std::string(dtype_name(input.converted_dtype)));
    }
  }
  if (!part) return leave_out(std::move(reason));
  // (A total past 2^64 is the file's to refuse: it is not made.)
  const Size total = total_ + part->size();
  if (total.ok() && !kViewBound.allows(total.value(), model_stored_))
    return leave_out("with it the export would pass the bound on the whole export, " +
                     std::to_string(kViewBound.floor) + " bytes or " + std::to_string(kViewBound.growth) +
                     " times the " + std::to_string(model_stored_) + " bytes the model stores");
  total_ = total;
  if ((entries_.size() + 1) * 2 > keys_.size()) {
    std::vector<uint32_t>(std::max<size_t>(64, keys_.size() * 2), 0).swap(keys_);
    for (size_t i = 0; i < entries_.size(); ++i) {
      std::string printed;
      append_json_string(printed, entries_[i].tensor->name);
      keys_[slot_of(printed, scratch)] = static_cast<uint32_t>(i + 1);
    }
  }
  keys_[slot_of(key, scratch)] = static_cast<uint32_t>(entries_.size() + 1);
  entries_.push_back({&t, dtype, *part});
}

size_t ExportPlan::slot_of(std::string_view key, std::string& scratch) const {
  const size_t mask = keys_.size() - 1;
  for (size_t i = std::hash<std::string_view>()(key) & mask;; i = (i + 1) & mask) {
    if (keys_[i] == 0) return i;
    scratch.clear();
    append_json_string(scratch, entries_[keys_[i] - 1].tensor->name);
    if (scratch == key) return i;
  }
}

std::optional<ExportFile> ExportPlan::file(std::string_view prefix, const ExportMetadata& metadata,
                                           std::string& why_not) const {
  // Measured first, so that the header (the size of the model's own for a
  // safetensors file) is made once at its size, not doubled as it grows.
  ExportFile out;
  size_t size = 0, count = 0;
  {
    std::string scratch;
    if (!print_header(prefix, metadata, scratch, size, nullptr, why_not)) return std::nullopt;
  }
  for (const auto& entry : entries_)
    if (entry.tensor->name.starts_with(prefix)) count += entry.part.parts().size();
  out.header.reserve(size);
  out.tensors.reserve(count + 1);
  out.tensors.emplace_back();  // the header's place
  if (!print_header(prefix, metadata, out.header, size, &out.tensors, why_not)) return std::nullopt;
  return out;
}

bool ExportPlan::print_header(std::string_view prefix, const ExportMetadata& metadata, std::string& h,
                              size_t& size, std::vector<Part>* parts, std::string& why_not) const {
  size = 0;
  // Measuring: each piece is printed into `h` and counted, then dropped.
  auto flush = [&] {
    if (parts != nullptr) return;
    size += h.size();
    h.clear();
  };
  h.clear();
  h.assign(8, ' ');  // the length, written last
  h += '{';
  if (!metadata.empty()) {
    append_json_string(h, kMetadataKey);
    h += ":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) h += ',';
      append_json_string(h, metadata[i].first);
      h += ':';
      append_json_string(h, metadata[i].second);
    }
    h += '}';
  }
  Size offset = 0;
  bool first = metadata.empty();  // a comma before each entry after the metadata's
  flush();
  for (const auto& entry : entries_) {
    if (!entry.tensor->name.starts_with(prefix)) continue;
    const std::string_view name = entry.tensor->name.substr(prefix.size());
    // A model's own names: the prefix alone, or the metadata's key, are no
    // tensor names in its file.
    if (name.empty() || name == kMetadataKey) continue;
    if (!first) h += ',';
    first = false;
    append_json_string(h, name);
    h += ":{\"dtype\":\"";
    h += entry.dtype;
    h += "\",\"shape\":";
    append_json_array(h, entry.tensor->shape);
    const Size end = offset + entry.part.size();
    // Tensors that share bytes (tied weights, views of one storage) each
    // get their own: their sum is bounded by no file's size.
    if (!end.ok()) {
      why_not = "its size would pass 2^64 bytes";
      return false;
    }
    h += ",\"data_offsets\":[" + std::to_string(offset.value()) + ',' + std::to_string(end.value()) + "]}";
    offset = end;
    if (parts != nullptr) {
      const auto list = entry.part.parts();
      parts->insert(parts->end(), list.begin(), list.end());
    }
    flush();
    if (size + h.size() > kMaxHeader + 8) break;
  }
  h += '}';
  flush();
  // The data starts 8-byte aligned: the JSON padded with spaces.
  const size_t printed = size + h.size();
  const size_t padded = printed + (8 - printed % 8) % 8;
  h.append(padded - printed, ' ');
  flush();
  const size_t total = size + h.size();
  if (total - 8 > kMaxHeader || !(offset + total).ok()) {
    why_not = total - 8 > kMaxHeader ? "its header would pass " + std::to_string(kMaxHeader) +
                                           " bytes (the most the reference reader takes)"
                                     : "its size would pass 2^64 bytes";
    return false;
  }
  size = total;
  if (parts == nullptr) return true;
  uint64_t length = h.size() - 8;
  for (size_t i = 0; i < 8; ++i, length >>= 8) h[i] = static_cast<char>(length & 0xff);
  return true;
}

std::string ExportPlan::report(std::string_view file_note) const {
  nlohmann::ordered_json report;
  report["tensors"] = entries_.size();
  if (!file_note.empty()) report["note"] = std::string(file_note);
  report["float32"] = float32_;
  ObjectFiller converted(report["converted"] = nlohmann::ordered_json::object());
  for (const auto& [name, what] : converted_) converted.set(std::string(name), what);
  ObjectFiller left_out(report["left_out"] = nlohmann::ordered_json::object());
  for (const auto& [name, why] : left_out_) left_out.set(std::string(name), why);
  return readable_json(report);
}

ExportMetadata export_metadata(const Catalog& catalog) {
  ExportMetadata out;
  if (const auto& format = catalog.export_hints.checkpoint_format) out.emplace_back("format", *format);
  out.emplace_back("source", catalog.files.empty() ? std::string() : catalog.files.front());
  out.emplace_back("source_format", catalog.format);
  return out;
}

}  // namespace modelfs
