// SPDX-License-Identifier: Apache-2.0
#pragma once
// A strict, bounds-checked walker of a FlatBuffers binary, shared by the
// readers of flatbuffer formats (TensorFlow Lite, ExecuTorch). Private to
// the library.
//
// Every offset, vtable, field, vector and string is checked against the
// flatbuffer's extent (at most the first 2^31 - 1 bytes of the file, the
// format's own limit) before it is read; a fault is a ModelError naming the
// file, the format and the offset. The walker never recurses by itself: a
// reader follows its fixed schema, so a cyclic or backwards offset graph
// only makes it visit tables again, and at most kMaxTables tables are
// visited per walk (the flatbuffers verifier's default), the budget checked
// at each.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/format_reader.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "io/tensor_spec.hpp"
#include "modelfs/error.hpp"

namespace modelfs::flatbuffer {

inline constexpr uint64_t kMaxFlatbuffer = 0x7fffffff;  // flatbuffers' 2 GiB - 1
inline constexpr uint64_t kMaxTables = 1'000'000;

// The flatbuffer: the first min(size, `extent`, 2^31 - 1) bytes of the file.
class Flat {
 public:
  Flat(const MappedFile& file, std::string_view format, uint64_t extent = kMaxFlatbuffer)
      : file_(file),
        name_(file.display_name()),
        format_(format),
        limit_(std::min({file.size(), extent, kMaxFlatbuffer})) {}

  [[noreturn]] void fail(uint64_t at, const std::string& reason) const {
    throw ModelError(name_, format_, at, reason);
  }
  const std::string& name() const { return name_; }
  const std::string& format() const { return format_; }
  uint64_t limit() const { return limit_; }

  template <typename T>
  T scalar(uint64_t at, std::string_view what) const {
    if (!range_fits(at, sizeof(T), limit_)) fail(at, std::string(what) + " lies past the flatbuffer");
    return load_le<T>(file_.read(at, sizeof(T)));
  }

  // The position an uoffset_t at `at` points to.
  uint64_t follow(uint64_t at, std::string_view what) const {
    const uint64_t target = at + scalar<uint32_t>(at, what);  // both < 2^32: no overflow
    if (target >= limit_) fail(at, std::string(what) + " points past the flatbuffer");
    return target;
  }

  void count_table(uint64_t at) {
    check_budget();
    if (++tables_ > kMaxTables)
      fail(at, "more than " + std::to_string(kMaxTables) + " tables (the flatbuffers verifier's limit)");
  }

  std::span<const std::byte> bytes(uint64_t at, uint64_t length) const { return file_.read(at, length); }

 private:
  const MappedFile& file_;
  std::string name_;
  std::string format_;
  uint64_t limit_;
  uint64_t tables_ = 0;
};

struct Vec {
  uint64_t at = 0;  // first element
  uint64_t size = 0;
};

class Table {
 public:
  Table(Flat& flat, uint64_t at, std::string what) : flat_(&flat), at_(at), what_(std::move(what)) {
    flat.count_table(at);
    const int32_t soffset = flat.scalar<int32_t>(at, what_ + "'s vtable offset");
    const int64_t vt = static_cast<int64_t>(at) - soffset;
    if (vt < 0 || static_cast<uint64_t>(vt) + 4 > flat.limit())
      flat.fail(at, what_ + "'s vtable lies outside the flatbuffer");
    vtable_ = static_cast<uint64_t>(vt);
    vtable_size_ = flat.scalar<uint16_t>(vtable_, what_ + "'s vtable size");
    table_size_ = flat.scalar<uint16_t>(vtable_ + 2, what_ + "'s table size");
    if (vtable_size_ < 4 || vtable_size_ % 2 != 0 || vtable_ + vtable_size_ > flat.limit())
      flat.fail(vtable_, what_ + "'s vtable size " + std::to_string(vtable_size_) + " is not valid");
    if (table_size_ < 4 || at + table_size_ > flat.limit())
      flat.fail(at, what_ + "'s table size " + std::to_string(table_size_) + " runs past the flatbuffer");
  }

  const std::string& what() const { return what_; }
  uint64_t at() const { return at_; }

  // Where field `id` of `size` bytes lies, or none when absent.
  std::optional<uint64_t> field(uint32_t id, uint64_t size) const {
    const uint64_t slot = 4 + 2 * uint64_t{id};
    if (slot + 2 > vtable_size_) return std::nullopt;
    const uint16_t offset = flat_->scalar<uint16_t>(vtable_ + slot, what_ + "'s vtable");
    if (offset == 0) return std::nullopt;
    // As the flatbuffers verifier: a field must lie in the buffer, not
    // necessarily within the table size its vtable gives (some writers,
    // e.g. ExecuTorch's exporter, record a table size short of a last
    // 8-byte field).
    if (offset < 4 || !range_fits(at_ + offset, size, flat_->limit()))
      flat_->fail(vtable_ + slot, what_ + "'s field " + std::to_string(id) + " lies outside the flatbuffer");
    return at_ + offset;
  }

  template <typename T>
  T get(uint32_t id, T fallback) const {
    const auto at = field(id, sizeof(T));
    return at ? flat_->scalar<T>(*at, what_) : fallback;
  }

  std::optional<Table> table(uint32_t id, const std::string& what) const {
    const auto at = field(id, 4);
    if (!at) return std::nullopt;
    return Table(*flat_, flat_->follow(*at, what), what);
  }

  // A vector of `element` bytes each.
  std::optional<Vec> vector(uint32_t id, uint64_t element, const std::string& what) const {
    const auto at = field(id, 4);
    if (!at) return std::nullopt;
    return vector_at(*flat_, flat_->follow(*at, what), element, what);
  }

  static Vec vector_at(const Flat& flat, uint64_t at, uint64_t element, const std::string& what) {
    const uint64_t size = flat.scalar<uint32_t>(at, what + "'s length");
    const uint64_t start = at + 4;
    if (!range_fits(start, size * element, flat.limit()))  // size < 2^32, element <= 8
      flat.fail(at, what + " of " + std::to_string(size) + " entries runs past the flatbuffer");
    return {start, size};
  }

  std::optional<std::string> string(uint32_t id, const std::string& what) const {
    const auto v = vector(id, 1, what);
    if (!v) return std::nullopt;
    const auto raw = flat_->bytes(v->at, v->size);
    return std::string(reinterpret_cast<const char*>(raw.data()), raw.size());
  }

  // Entry `i` of a vector of tables.
  Table entry(const Vec& v, uint64_t i, const std::string& what) const {
    const uint64_t slot = v.at + 4 * i;
    return Table(*flat_, flat_->follow(slot, what), what);
  }

  Flat& flat() const { return *flat_; }

 private:
  Flat* flat_;
  uint64_t at_;
  std::string what_;
  uint64_t vtable_ = 0;
  uint16_t vtable_size_ = 0;
  uint16_t table_size_ = 0;
};

// The first min(v.size, max) scalars of a vector.
template <typename T>
std::vector<T> read_scalars(const Flat& flat, const Vec& v, uint64_t max) {
  std::vector<T> out;
  const uint64_t n = std::min(v.size, max);
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) out.push_back(flat.scalar<T>(v.at + sizeof(T) * i, "vector"));
  return out;
}

// An entry of a format's type table: its name of the type and the dtype
// modelfs serves it as (none: the type holds no data modelfs serves).
struct TypeInfo {
  const char* name;
  std::optional<DType> dtype;
};

// Entry `value` of `types`, the type of table `t`; refused when the table
// has none of that number (`kind`: "tensor type"), or when the type has no
// dtype (`no_data` says why).
template <size_t N>
const TypeInfo& type_of(const std::array<TypeInfo, N>& types, int8_t value, const Table& t,
                        const std::string& named, std::string_view kind, std::string_view no_data) {
  if (value < 0 || static_cast<size_t>(value) >= N)
    t.flat().fail(t.at(), named + " has unknown " + std::string(kind) + " " + std::to_string(value));
  const TypeInfo& info = types[static_cast<size_t>(value)];
  if (!info.dtype)
    t.flat().fail(t.at(),
                  named + " is of " + std::string(kind) + " " + info.name + ", " + std::string(no_data));
  return info;
}

// A shape stored as a vector of int32: at most `max_rank` dimensions, none
// negative (`dimension`: what the format calls one, for messages).
inline std::vector<uint64_t> read_shape(const Flat& flat, const Vec& dims, uint64_t max_rank,
                                        const std::string& named, std::string_view dimension) {
  if (dims.size > max_rank)
    flat.fail(dims.at, named + " has rank " + std::to_string(dims.size) + " (at most " +
                           std::to_string(max_rank) + ")");
  std::vector<uint64_t> shape;
  for (const int32_t d : read_scalars<int32_t>(flat, dims, max_rank)) {
    if (d < 0)
      flat.fail(dims.at, named + " has negative " + std::string(dimension) + " " + std::to_string(d));
    shape.push_back(static_cast<uint64_t>(d));
  }
  return shape;
}

// The catalog of a flatbuffer model file: `format` (the catalog's name),
// the file's time and name. Both formats' writers store equal constants
// once, which several tensors then name: tensors may share bytes.
inline Catalog flat_catalog(std::string_view format, const ModelFile& model) {
  Catalog catalog;
  catalog.format = std::string(format);
  catalog.mtime = model.mapped->mtime();
  catalog.files.push_back(model.path.filename().string());
  catalog.tensors_may_share_bytes = true;
  return catalog;
}

}  // namespace modelfs::flatbuffer
