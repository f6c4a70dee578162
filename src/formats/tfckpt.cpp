// SPDX-License-Identifier: Apache-2.0
// TensorFlow checkpoint bundles (tfckpt.hpp; docs/formats.md, "TensorFlow
// checkpoint bundles").
#include "formats/tfckpt.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <system_error>

#include "formats/model_folder.hpp"
#include "formats/string_lines.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "io/json_text.hpp"
#include "io/protobuf_wire.hpp"
#include "io/tensor_spec.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"
#include "remote/remote.hpp"

namespace modelfs::tfckpt {
namespace {

const std::string kFormatName(kFormat);
// What the sidecar of a DT_STRING tensor says of its raw file (as ONNX's).
constexpr std::string_view kStringText =
    "JSON Lines: one JSON string per element, in C order; a byte that is not UTF-8 is \\udcXX";

[[noreturn]] void fail(const std::string& file, std::optional<uint64_t> offset, const std::string& reason) {
  throw ModelError(file, kFormatName, offset, reason);
}

// ---- small decoders ----------------------------------------------------------

std::string_view as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::string in_quotes(std::string_view key) { return "\"" + std::string(key) + "\""; }

}  // namespace

// ---- slice keys (OrderedCode) -------------------------------------------------

namespace {

// OrderedCode's WriteNumIncreasing: a length byte, then that many bytes
// big-endian.
std::optional<uint64_t> read_num_increasing(std::string_view& in) {
  if (in.empty()) return std::nullopt;
  const auto n = static_cast<uint8_t>(in[0]);
  if (n > 8 || in.size() < 1u + n) return std::nullopt;
  uint64_t v = 0;
  for (uint8_t i = 1; i <= n; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  in.remove_prefix(1u + n);
  return v;
}

// OrderedCode's WriteString: 0x00 as 00 FF, 0xFF as FF 00, ending 00 01.
std::optional<std::string> read_ordered_string(std::string_view& in) {
  std::string out;
  for (size_t i = 0; i + 1 < in.size(); ++i) {
    const auto c = static_cast<uint8_t>(in[i]);
    const auto next = static_cast<uint8_t>(in[i + 1]);
    if (c == 0x00 && next == 0x01) {
      in.remove_prefix(i + 2);
      return out;
    }
    if (c == 0x00 || c == 0xff) {
      if (next != (c == 0x00 ? 0xff : 0x00)) return std::nullopt;
      out += static_cast<char>(c);
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return std::nullopt;
}

// OrderedCode's WriteSignedNumIncreasing: the top L bits of an L-byte
// field are ones (zeros, for a negative number, whose bytes are inverted),
// the rest the value.
std::optional<int64_t> read_signed_num_increasing(std::string_view& in) {
  if (in.empty()) return std::nullopt;
  const bool negative = (static_cast<uint8_t>(in[0]) & 0x80) == 0;
  const uint8_t flip = negative ? 0xff : 0x00;
  auto byte = [&](size_t i) { return static_cast<uint8_t>(static_cast<uint8_t>(in[i]) ^ flip); };
  size_t length = 0;
  for (size_t i = 0; i < 2 && i < in.size(); ++i) {
    const uint8_t b = byte(i);
    const int ones = std::countl_one(b);
    length += static_cast<size_t>(ones);
    if (ones < 8) break;
  }
  if (length == 0 || length > 10 || in.size() < length) return std::nullopt;
  // The value's bits follow the L header bits; a value past 63 bits is no int64.
  uint64_t v = 0;
  for (size_t i = 0; i < length; ++i) {
    const size_t header = std::min<size_t>(8, length > 8 * i ? length - 8 * i : 0);
    const auto b = static_cast<uint8_t>(header == 8 ? 0 : byte(i) & (0xffu >> header));
    if (v > (UINT64_MAX >> 8)) return std::nullopt;
    v = (v << 8) | b;
  }
  if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  in.remove_prefix(length);
  const auto x = static_cast<int64_t>(v);
  return negative ? ~x : x;
}

}  // namespace

std::optional<SliceKey> decode_slice_key(std::string_view key) {
  std::string_view in = key;
  if (in.empty() || in[0] != '\0') return std::nullopt;
  in.remove_prefix(1);  // WriteNumIncreasing(0)
  SliceKey out;
  auto name = read_ordered_string(in);
  if (!name) return std::nullopt;
  out.name = std::move(*name);
  const auto rank = read_num_increasing(in);
  if (!rank || *rank > kMaxRank) return std::nullopt;
  for (uint64_t d = 0; d < *rank; ++d) {
    const auto start = read_signed_num_increasing(in);
    const auto length = start ? read_signed_num_increasing(in) : std::nullopt;
    if (!length) return std::nullopt;
    out.extents.emplace_back(*start, *length);
  }
  if (!in.empty()) return std::nullopt;
  return out;
}

// ---- probing -----------------------------------------------------------------

namespace {

// A BundleHeaderProto: fields 1 and 2 varints, 3 a message, nothing else.
bool looks_like_header(std::span<const std::byte> value) {
  uint64_t pos = 0;
  bool num_shards = false;
  while (pos < value.size()) {
    const auto tag = varint_at(value, pos, value.size(), 5);
    if (!tag) return false;
    const uint64_t field = *tag >> 3, wire = *tag & 7;
    if ((field == 1 || field == 2) && wire == 0) {
      if (!varint_at(value, pos, value.size(), 10)) return false;
      num_shards = num_shards || field == 1;
    } else if (field == 3 && wire == 2) {
      const auto length = varint_at(value, pos, value.size(), 5);
      if (!length || *length > value.size() - pos) return false;
      pos += *length;
    } else {
      return false;
    }
  }
  return num_shards;
}

// The first entry of a block's leading bytes: key "" and a header.
bool first_entry_is_header(std::span<const std::byte> bytes) {
  uint64_t pos = 0;
  const auto shared = varint_at(bytes, pos, bytes.size(), 5);
  const auto non_shared = shared ? varint_at(bytes, pos, bytes.size(), 5) : std::nullopt;
  const auto length = non_shared ? varint_at(bytes, pos, bytes.size(), 5) : std::nullopt;
  if (!length || *shared != 0 || *non_shared != 0 || *length == 0 || *length > 256 ||
      *length > bytes.size() - pos)
    return false;
  return looks_like_header(bytes.subspan(pos, *length));
}

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  if (head.size() < kFooterBytes + 8) return false;
  if (head.size() < 4096) {
    const auto tail = head.last(8);
    if (load_le<uint64_t>(tail) != kTableMagic) return false;
  }
  if (first_entry_is_header(head)) return true;
  // A snappy block: the length preamble, then a literal holding the entry.
  uint64_t pos = 0;
  if (!varint_at(head, pos, head.size(), 5) || pos >= head.size()) return false;
  const auto tag = static_cast<uint8_t>(head[pos++]);
  if ((tag & 3) != 0) return false;
  uint64_t literal = tag >> 2;
  if (literal >= 60) {
    const uint64_t extra = literal - 59;
    if (extra > 4 || pos + extra > head.size()) return false;
    literal = 0;
    for (uint64_t i = 0; i < extra; ++i) literal |= uint64_t{static_cast<uint8_t>(head[pos + i])} << (8 * i);
    pos += extra;
  }
  const uint64_t available = std::min<uint64_t>(literal + 1, head.size() - pos);
  return first_entry_is_header(head.subspan(pos, available));
}

// ---- the bundle --------------------------------------------------------------

namespace {

struct DataTypeInfo {
  uint64_t code;
  std::string_view name;
  std::optional<DType> dtype;  // none: DT_STRING or left out
};

constexpr uint64_t kDtString = 7;

// docs/formats.md, "DataType → numpy". The quantized types are their
// integers; DT_INT4/UINT4 (one element a byte, unlike modelfs's packed
// int4) and anything not listed are refused.
constexpr DataTypeInfo kDataTypes[] = {
    {1, "DT_FLOAT", DType::Float32},
    {2, "DT_DOUBLE", DType::Float64},
    {3, "DT_INT32", DType::Int32},
    {4, "DT_UINT8", DType::UInt8},
    {5, "DT_INT16", DType::Int16},
    {6, "DT_INT8", DType::Int8},
    {7, "DT_STRING", DType::String},
    {8, "DT_COMPLEX64", DType::Complex64},
    {9, "DT_INT64", DType::Int64},
    {10, "DT_BOOL", DType::Bool},
    {11, "DT_QINT8", DType::Int8},
    {12, "DT_QUINT8", DType::UInt8},
    {13, "DT_QINT32", DType::Int32},
    {14, "DT_BFLOAT16", DType::BFloat16},
    {15, "DT_QINT16", DType::Int16},
    {16, "DT_QUINT16", DType::UInt16},
    {17, "DT_UINT16", DType::UInt16},
    {18, "DT_COMPLEX128", DType::Complex128},
    {19, "DT_HALF", DType::Float16},
    {20, "DT_RESOURCE", std::nullopt},
    {21, "DT_VARIANT", std::nullopt},
    {22, "DT_UINT32", DType::UInt32},
    {23, "DT_UINT64", DType::UInt64},
    {24, "DT_FLOAT8_E5M2", DType::Float8E5M2},
    {25, "DT_FLOAT8_E4M3FN", DType::Float8E4M3FN},
    {26, "DT_FLOAT8_E4M3FNUZ", DType::Float8E4M3FNUZ},
    {28, "DT_FLOAT8_E5M2FNUZ", DType::Float8E5M2FNUZ},
};

const DataTypeInfo* data_type(uint64_t code) {
  for (const auto& info : kDataTypes)
    if (info.code == code) return &info;
  return nullptr;
}

struct Extent {
  int64_t start = 0;
  std::optional<int64_t> length;  // none: the whole dimension
};

// A BundleEntryProto, and where it was found.
struct Entry {
  std::string key;
  uint64_t at = 0;  // the value's offset in the .index (its block's, when snappy)
  uint64_t dtype = 0;
  std::vector<uint64_t> shape;
  int64_t shard_id = 0;
  int64_t offset = 0;
  int64_t size = 0;
  uint32_t crc32c = 0;
  std::vector<std::vector<Extent>> slices;
};

class BundleReader {
 public:
  explicit BundleReader(const ModelFile& model)
      : model_(model), mapped_(model.mapped), file_(mapped_->display_name()), context_{file_, kFormatName} {
    catalog_.format = kFormatName;
    catalog_.mtime = mapped_->mtime();
    catalog_.files.push_back(model_.path.filename().string());
  }

  Catalog read() {
    add_metadata_bytes(mapped_->size());
    read_table();
    if (!header_seen_) fail(file_, 0, "the table holds no header entry (key \"\")");
    finish();
    return std::move(catalog_);
  }

 private:
  [[noreturn]] void refuse(std::optional<uint64_t> at, const std::string& reason) const {
    fail(file_, at, reason);
  }

  void read_table() {
    const uint64_t size = mapped_->size();
    if (size < kFooterBytes)
      refuse(std::nullopt, "file is " + std::to_string(size) + " bytes, shorter than a table's footer");
    const Footer footer = parse_footer(mapped_->read(size - kFooterBytes, kFooterBytes), size, file_);
    auto block_at = [&](const BlockHandle& h) {
      return read_block(mapped_->read(h.offset, h.size + kTrailerBytes), h.offset, file_);
    };
    {
      // Checked as every block is; its entries (filters, none from TensorFlow) are not used.
      const Block meta = block_at(footer.metaindex);
      for_each_entry(meta.bytes, footer.metaindex.offset, file_, [](std::string_view, auto) {});
    }
    const Block index = block_at(footer.index);
    std::vector<std::pair<std::string, BlockHandle>> data_blocks;
    for_each_entry(index.bytes, footer.index.offset, file_, [&](std::string_view key, auto value) {
      uint64_t pos = 0;
      const auto offset = varint_at(value, pos, value.size(), 10);
      const auto length = offset ? varint_at(value, pos, value.size(), 10) : std::nullopt;
      if (!length || pos != value.size())
        refuse(footer.index.offset, "index block entry is not a block handle");
      if (!data_blocks.empty() && key <= data_blocks.back().first)
        refuse(footer.index.offset, "index block keys are out of order");
      const BlockHandle h{*offset, *length};
      const auto end = checked_add(h.size, kTrailerBytes);
      const uint64_t previous_end =
          data_blocks.empty() ? 0 : data_blocks.back().second.offset + data_blocks.back().second.size + 5;
      if (!end || !range_fits(h.offset, *end, size - kFooterBytes) || h.offset < previous_end)
        refuse(footer.index.offset, "data block (" + std::to_string(h.offset) + ", " +
                                        std::to_string(h.size) +
                                        " bytes) is not after the previous one and before the footer");
      if (h.size > kMaxBlockBytes)
        refuse(h.offset, "data block of " + std::to_string(h.size) + " bytes, over the " +
                             std::to_string(kMaxBlockBytes) + "-byte limit");
      data_blocks.emplace_back(std::string(key), h);
    });
    std::optional<std::string> previous;
    // Named, not structured bindings: a lambda below uses them (clang 14,
    // which builds the fuzzers, cannot capture a binding).
    for (const auto& data_block : data_blocks) {
      const std::string& separator = data_block.first;
      const BlockHandle& handle = data_block.second;
      const Block block = block_at(handle);
      for_each_entry(block.bytes, handle.offset, file_, [&](std::string_view key, auto value) {
        if (previous && key <= *previous)
          refuse(handle.offset, "keys out of order: " + in_quotes(key) + " after " + in_quotes(*previous));
        if (key > separator)
          refuse(handle.offset,
                 "key " + in_quotes(key) + " lies past its block's index key " + in_quotes(separator));
        const uint64_t at = block.compressed
                                ? handle.offset
                                : handle.offset + static_cast<uint64_t>(value.data() - block.bytes.data());
        if (!previous) {
          if (!key.empty()) refuse(at, "the first key is not the header's (\"\")");
          read_header(value, at);
        } else {
          read_entry(key, value, at);
        }
        previous = std::string(key);
      });
    }
  }

  int64_t as_int64(const protobuf::WireField& f) const {
    protobuf::expect_type(f, protobuf::WireType::Varint, "be a varint", context_);
    return static_cast<int64_t>(f.value);
  }

  void read_header(std::span<const std::byte> value, uint64_t at) {
    header_seen_ = true;
    const protobuf::WireMessage header(value, at, &context_);
    int64_t num_shards = 0, endianness = 0, producer = 0, min_consumer = 0;
    std::vector<int64_t> bad_consumers;
    header.scan([&](const protobuf::WireField& f) {
      if (f.number == 1) num_shards = as_int64(f);
      if (f.number == 2) endianness = as_int64(f);
      if (f.number == 3) {
        protobuf::expect_type(f, protobuf::WireType::Length, "be a VersionDef", context_);
        header.child(f).scan([&](const protobuf::WireField& v) {
          if (v.number == 1) producer = static_cast<int32_t>(as_int64(v));
          if (v.number == 2) min_consumer = static_cast<int32_t>(as_int64(v));
          if (v.number == 3) {
            std::vector<uint64_t> values;
            protobuf::append_varints(v, context_, values);
            for (auto b : values) bad_consumers.push_back(static_cast<int32_t>(b));
          }
        });
      }
    });
    if (endianness == 1)
      refuse(at,
             "bundle was written big-endian; modelfs serves tensor bytes as stored and reads only "
             "little-endian bundles");
    if (endianness != 0) refuse(at, "header's endianness is " + std::to_string(endianness));
    // CheckVersions(version, kTensorBundleVersion = 1, min producer 0).
    if (min_consumer > 1 || std::find(bad_consumers.begin(), bad_consumers.end(), 1) != bad_consumers.end())
      refuse(at, "bundle version (producer " + std::to_string(producer) + ", min_consumer " +
                     std::to_string(min_consumer) + ") is too new for a version 1 reader");
    if (producer < 0) refuse(at, "bundle producer version " + std::to_string(producer) + " is negative");
    if (num_shards < 0 || static_cast<uint64_t>(num_shards) > kMaxShards)
      refuse(at, "header says " + std::to_string(num_shards) + " shards (at most " +
                     std::to_string(kMaxShards) + ")");
    num_shards_ = num_shards;
    open_remote_shards();
    nlohmann::json version = {{"producer", producer}, {"min_consumer", min_consumer}};
    if (!bad_consumers.empty()) version["bad_consumers"] = bad_consumers;
    catalog_.metadata["bundle"] = {
        {"num_shards", num_shards}, {"endianness", "little"}, {"version", version}};
  }

  void read_entry(std::string_view key, std::span<const std::byte> value, uint64_t at) {
    const protobuf::WireMessage message(value, at, &context_);
    Entry e;
    e.key = std::string(key);
    e.at = at;
    bool has_dtype = false;
    message.scan([&](const protobuf::WireField& f) {
      switch (f.number) {
        case 1:
          e.dtype = static_cast<uint64_t>(as_int64(f));
          has_dtype = true;
          break;
        case 2:
          protobuf::expect_type(f, protobuf::WireType::Length, "be a TensorShapeProto", context_);
          e.shape.clear();
          message.child(f).scan([&](const protobuf::WireField& s) {
            if (s.number == 3 && as_int64(s) != 0)
              refuse(at, "tensor " + in_quotes(key) + " has an unknown rank");
            if (s.number != 2) return;
            protobuf::expect_type(s, protobuf::WireType::Length, "be a dimension", context_);
            int64_t dim = 0;
            message.child(f).child(s).scan([&](const protobuf::WireField& d) {
              if (d.number == 1) dim = as_int64(d);
            });
            if (dim < 0)
              refuse(at, "tensor " + in_quotes(key) + " has dimension " + std::to_string(dim) +
                             " (an unknown size is no stored tensor's)");
            if (e.shape.size() >= kMaxRank)
              refuse(at, "tensor " + in_quotes(key) + " has more than " + std::to_string(kMaxRank) +
                             " dimensions");
            e.shape.push_back(static_cast<uint64_t>(dim));
          });
          break;
        case 3:
          e.shard_id = static_cast<int32_t>(as_int64(f));
          break;
        case 4:
          e.offset = as_int64(f);
          break;
        case 5:
          e.size = as_int64(f);
          break;
        case 6:
          protobuf::expect_type(f, protobuf::WireType::Fixed32, "be a fixed32 CRC", context_);
          e.crc32c = static_cast<uint32_t>(f.value);
          break;
        case 7: {
          protobuf::expect_type(f, protobuf::WireType::Length, "be a TensorSliceProto", context_);
          check_budget();
          std::vector<Extent> slice;
          const auto slice_message = message.child(f);
          slice_message.scan([&](const protobuf::WireField& x) {
            if (x.number != 1) return;
            protobuf::expect_type(x, protobuf::WireType::Length, "be an extent", context_);
            Extent extent;
            slice_message.child(x).scan([&](const protobuf::WireField& v) {
              if (v.number == 1) extent.start = as_int64(v);
              if (v.number == 2) extent.length = as_int64(v);
            });
            if (slice.size() >= kMaxRank)
              refuse(at, "tensor " + in_quotes(key) + ": a slice of too many dimensions");
            slice.push_back(extent);
          });
          e.slices.push_back(std::move(slice));
          break;
        }
        default:
          break;
      }
    });
    if (!has_dtype) refuse(at, "tensor " + in_quotes(key) + " has no dtype");
    take(std::move(e));
  }

  // PREFIX.index names PREFIX.data-SSSSS-of-NNNNN.
  bool names_data_files() const {
    const std::string index_name = model_.path.filename().string();
    return index_name.ends_with(".index") && index_name.size() > 6;
  }
  std::string data_file_name(int64_t shard) const {
    const std::string index_name = model_.path.filename().string();
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, ".data-%05lld-of-%05lld", static_cast<long long>(shard),
                  static_cast<long long>(num_shards_));
    return index_name.substr(0, index_name.size() - 6) + suffix;
  }

  // The data file of `shard`, opened once, inside the index's folder.
  const std::shared_ptr<const MappedFile>& shard_file(const Entry& e, std::string& name) {
    if (e.shard_id < 0 || e.shard_id >= num_shards_)
      refuse(e.at, "tensor " + in_quotes(e.key) + " is in shard " + std::to_string(e.shard_id) +
                       " but the bundle has " + std::to_string(num_shards_));
    if (!names_data_files())
      refuse(std::nullopt, "the index's name does not end in .index, so its data files cannot be named");
    name = data_file_name(e.shard_id);
    auto found = shards_.find(e.shard_id);
    if (found != shards_.end()) return found->second;
    if (!folder_) folder_.emplace(ModelFolder::of_file(model_.path, kFormatName));
    auto opened = early_.take(*folder_, name);
    if (!opened)
      refuse(std::nullopt,
             "tensor " + in_quotes(e.key) + " is in data file " + name + ", which " + opened.reason);
    catalog_.files.push_back(name);
    return shards_.emplace(e.shard_id, std::move(opened.file)).first->second;
  }

  // A remote bundle's data files, opened side by side once the header has
  // said how many there are (ModelFolder::open_all): each open is a round
  // trip, and the entries name them in any order. shard_file takes them
  // from here, as it would open them, and says why one that failed did.
  void open_remote_shards() {
    if (!remote::is_url(model_.path.native()) || !names_data_files()) return;
    if (!folder_) folder_.emplace(ModelFolder::of_file(model_.path, kFormatName));
    std::vector<std::string> names;
    names.reserve(static_cast<size_t>(num_shards_));
    for (int64_t id = 0; id < num_shards_; ++id) names.push_back(data_file_name(id));
    early_.open(*folder_, std::move(names));
  }

  // The bytes of `e` in its data file, checked to lie inside it.
  ByteSpan data_of(const Entry& e, const std::string& what, std::string& name) {
    const auto& file = shard_file(e, name);
    if (e.offset < 0 || e.size < 0 ||
        !range_fits(static_cast<uint64_t>(e.offset), static_cast<uint64_t>(e.size), file->size()))
      refuse(e.at, what + ": bytes [" + std::to_string(e.offset) + ", +" + std::to_string(e.size) +
                       ") are not inside " + name + " (" + std::to_string(file->size()) + " bytes)");
    return ByteSpan::mapped(file, static_cast<uint64_t>(e.offset), static_cast<uint64_t>(e.size));
  }

  void add_crc_check(const std::string& what, ByteSpan bytes, uint32_t masked, uint64_t at,
                     std::optional<uint64_t> strings) {
    if (!model_.checks) return;
    model_.checks->push_back(
        {"masked CRC-32C of " + what, bytes.size(),
         [bytes, masked, at, what, strings, file = file_](const std::function<void(uint64_t)>& progress) {
           uint32_t crc = 0;
           if (strings) {
             crc = string_entry_crc(bytes.span(), *strings, file, at, what);
             progress(bytes.size());
           } else {
             constexpr uint64_t kChunk = 1 << 20;
             for (uint64_t done = 0; done < bytes.size(); done += kChunk) {
               const uint64_t n = std::min(kChunk, bytes.size() - done);
               crc = crc32c_extend(crc, bytes.subspan(done, n).span());
               progress(n);
             }
           }
           if (mask_crc(crc) != masked)
             fail(file, at, what + ": its bytes do not match the entry's CRC-32C (the data file is corrupt)");
         }});
  }

  // DT_STRING storage: varint64 lengths, the masked CRC-32C of the lengths
  // (each as 4 bytes LE, 8 when it passes 32 bits), then the strings. The
  // entry's CRC covers lengths (as CRC'd), those 4 bytes and the strings.
  // With `lengths`, also returns each length and where the strings start.
  static uint32_t string_entry_crc(std::span<const std::byte> bytes, uint64_t count, const std::string& file,
                                   uint64_t at, const std::string& what,
                                   std::vector<uint64_t>* lengths = nullptr, uint64_t* strings_at = nullptr) {
    if (count > bytes.size())
      fail(file, at,
           what + ": " + std::to_string(count) + " strings cannot fit in " + std::to_string(bytes.size()) +
               " bytes");
    if (lengths) lengths->reserve(count);
    uint32_t lengths_crc = 0;
    uint64_t pos = 0;
    Size total = 0;
    for (uint64_t i = 0; i < count; ++i) {
      if ((i & 0xffff) == 0) check_budget();
      const auto length = varint_at(bytes, pos, bytes.size(), 10);
      if (!length) fail(file, at, what + ": string lengths run past the tensor's bytes");
      if (*length <= UINT32_MAX) {
        const uint32_t l32 = static_cast<uint32_t>(*length);
        lengths_crc = crc32c_extend(lengths_crc, std::as_bytes(std::span(&l32, 1)));
      } else {
        lengths_crc = crc32c_extend(lengths_crc, std::as_bytes(std::span(&*length, 1)));
      }
      total += *length;
      if (lengths) lengths->push_back(*length);
    }
    if (bytes.size() - pos < 4) fail(file, at, what + ": no checksum after the string lengths");
    const auto stored = load_le<uint32_t>(bytes, pos);
    if (unmask_crc(stored) != lengths_crc)
      fail(file, at, what + ": the string lengths do not match their checksum");
    uint32_t crc = crc32c_extend(lengths_crc, bytes.subspan(pos, 4));
    pos += 4;
    if (!total.ok() || total.value() != bytes.size() - pos)
      fail(file, at,
           what + ": the strings' lengths add up to " +
               (total.ok() ? std::to_string(total.value()) : std::string("more than 2^64")) +
               " bytes but the entry leaves " + std::to_string(bytes.size() - pos));
    if (strings_at) *strings_at = pos;
    return crc32c_extend(crc, bytes.subspan(pos));
  }

  // Slice entries are kept until their tensor's entry (their keys, which
  // start with 0x00, sort before every other but the header's); every
  // other entry becomes its tensor at once.
  void take(Entry e) {
    check_budget();
    if (e.key[0] == '\0') {
      const auto slice = decode_slice_key(e.key);
      if (!slice)
        refuse(e.at, "key " + in_quotes(e.key) + " starts with 0x00 but is no encoded tensor slice");
      // A name's slices are adjacent: its encoding ends every one of them.
      slice_entries_.push_back(std::move(e));
      const size_t index = slice_entries_.size() - 1;
      if (!slice_ranges_.empty() && slice_ranges_.rbegin()->first == slice->name)
        slice_ranges_.rbegin()->second.second = index + 1;
      else if (!slice_ranges_.emplace(slice->name, std::make_pair(index, index + 1)).second)
        refuse(slice_entries_.back().at, "the slices of " + in_quotes(slice->name) + " are not adjacent");
      return;
    }
    const DataTypeInfo* info = data_type(e.dtype);
    if (info == nullptr)
      refuse(e.at, "tensor " + in_quotes(e.key) + " has unknown dtype " + std::to_string(e.dtype));
    if (!info->dtype) {
      left_out_.push_back({{"key", e.key}, {"dtype", info->name}});
      return;
    }
    const auto numel = checked_numel(e.shape);
    if (!numel) refuse(e.at, "tensor " + in_quotes(e.key) + ": its element count overflows");
    TensorSpec t;
    t.name = e.key;
    t.dtype = *info->dtype;
    t.shape = e.shape;
    auto strides = contiguous_strides(e.shape);
    if (!strides) refuse(e.at, "tensor " + in_quotes(e.key) + ": the strides of its shape pass 2^63");
    t.strides = std::move(*strides);
    t.extras["tf_dtype"] = info->name;
    const std::string what = "tensor " + in_quotes(e.key);
    if (!e.slices.empty()) {
      auto found = slice_ranges_.find(e.key);
      add_partitioned(t, e, *numel,
                      found == slice_ranges_.end() ? std::make_pair(size_t{0}, size_t{0}) : found->second);
      if (found != slice_ranges_.end()) slice_ranges_.erase(found);
    } else if (e.dtype == kDtString) {
      add_strings(t, e, *numel, what);
    } else {
      const Size nbytes = Size(*numel) * (dtype_bits(t.dtype) / 8);
      std::string data_name;
      t.bytes = data_of(e, what, data_name);
      if (!nbytes.ok() || nbytes.value() != t.bytes.size())
        refuse(e.at, what + " holds " + std::to_string(e.size) + " bytes but a " + std::string(info->name) +
                         " tensor of its shape needs " +
                         (nbytes.ok() ? std::to_string(nbytes.value()) : std::string("more than 2^64")));
      t.source = {data_name, static_cast<uint64_t>(e.offset)};
      add_crc_check(what, t.bytes, e.crc32c, e.at, std::nullopt);
      catalog_.add(t);
    }
  }

  void finish() {
    if (!slice_ranges_.empty())
      refuse(slice_entries_[slice_ranges_.begin()->second.first].at,
             "a slice of " + in_quotes(slice_ranges_.begin()->first) +
                 " is stored but no partitioned tensor of that name lists it");
    if (!left_out_.empty()) catalog_.metadata["left_out"] = std::move(left_out_);
  }

  void add_strings(TensorSpec& t, const Entry& e, uint64_t numel, const std::string& what) {
    std::string data_name;
    const ByteSpan bytes = data_of(e, what, data_name);
    std::vector<uint64_t> lengths;
    uint64_t strings_at = 0;
    const auto raw = bytes.span();
    string_entry_crc(raw, numel, file_, e.at, what, &lengths, &strings_at);
    uint64_t pos = strings_at;
    auto text = string_lines_.write(lengths.size(), [&](uint64_t i) {
      const std::string_view element = as_text(raw.subspan(pos, lengths[i]));
      pos += lengths[i];
      return element;
    });
    if (!text.lines) refuse(e.at, what + ": " + string_lines_.over_cap(text.length));
    check_budget();
    t.bytes = ByteSpan::owned(std::move(*text.lines));
    t.source = {data_name, std::nullopt};
    t.extras["text"] = kStringText;
    add_crc_check(what, bytes, e.crc32c, e.at, numel);
    catalog_.add(t);
  }

  void add_partitioned(TensorSpec& t, const Entry& e, uint64_t numel, std::pair<size_t, size_t> stored) {
    const std::string what = "partitioned tensor " + in_quotes(e.key);
    if (e.dtype == kDtString)
      refuse(e.at, what + " holds strings, which modelfs does not assemble from slices");
    const size_t rank = e.shape.size();
    const uint64_t element_bytes = dtype_bits(t.dtype) / 8;
    for (size_t s = 0; s < e.slices.size(); ++s)
      if (e.slices[s].size() != rank)
        refuse(e.at, what + ", slice " + std::to_string(s) + " has " + std::to_string(e.slices[s].size()) +
                         " dimensions, the tensor " + std::to_string(rank));
    // The listed slices in the order their keys sort (OrderedCode keeps
    // numeric order): (start, length) per dimension, length -1 for all.
    auto field = [&](size_t s, size_t d) {
      return std::make_pair(e.slices[s][d].start, e.slices[s][d].length.value_or(-1));
    };
    auto before = [&](size_t a, size_t b) {
      for (size_t d = 0; d < rank; ++d)
        if (field(a, d) != field(b, d)) return field(a, d) < field(b, d);
      return false;
    };
    std::vector<size_t> order(e.slices.size());
    for (size_t s = 0; s < order.size(); ++s) order[s] = s;
    std::sort(order.begin(), order.end(), before);
    const size_t stored_count = stored.second - stored.first;
    if (stored_count != e.slices.size())
      refuse(e.at, what + " lists " + std::to_string(e.slices.size()) + " slices but " +
                       std::to_string(stored_count) + " are stored");
    Size covered = 0;
    t.pieces.reserve(e.slices.size());
    for (size_t k = 0; k < order.size(); ++k) {
      check_budget();
      const size_t s = order[k];
      const auto& slice = e.slices[s];
      const std::string which = what + ", slice " + std::to_string(s);
      if (k > 0 && !before(order[k - 1], s)) refuse(e.at, which + " is listed twice");
      const Entry* entry = &slice_entries_[stored.first + k];
      const auto key = decode_slice_key(entry->key);  // decoded once already, when stored
      bool same = key && key->extents.size() == rank;
      for (size_t d = 0; same && d < rank; ++d) same = key->extents[d] == field(s, d);
      if (!same) refuse(e.at, which + " is listed but no entry stores it (or a stored slice is not listed)");
      std::vector<uint64_t> start, extent;
      Size volume = 1;
      for (size_t d = 0; d < rank; ++d) {
        const Extent& x = slice[d];
        const int64_t length = x.length.value_or(-1);
        if (x.start < 0 || length < -1 ||
            (length == -1
                 ? x.start != 0
                 : !range_fits(static_cast<uint64_t>(x.start), static_cast<uint64_t>(length), e.shape[d])))
          refuse(e.at, which + " reaches past the shape in dimension " + std::to_string(d));
        start.push_back(static_cast<uint64_t>(x.start));
        extent.push_back(length == -1 ? e.shape[d] : static_cast<uint64_t>(length));
        volume *= extent.back();
      }
      covered += volume;
      if (entry->dtype != e.dtype) refuse(entry->at, which + " is stored with another dtype");
      if (entry->shape != extent)
        refuse(entry->at, which + " is stored with a shape other than its extent's");
      std::string data_name;
      const ByteSpan bytes = data_of(*entry, which, data_name);
      const Size nbytes = volume * element_bytes;
      if (!nbytes.ok() || nbytes.value() != bytes.size())
        refuse(entry->at, which + " holds " + std::to_string(bytes.size()) + " bytes but its extent needs " +
                              (nbytes.ok() ? std::to_string(nbytes.value()) : std::string("more than 2^64")));
      add_crc_check(which, bytes, entry->crc32c, entry->at, std::nullopt);
      auto& piece = t.pieces.emplace_back();
      piece.bytes = bytes;
      piece.size = bytes.size();
      piece.start = std::move(start);
      piece.extent = std::move(extent);
      piece.source = {data_name, static_cast<uint64_t>(entry->offset)};
    }
    // Box pieces overlapping are refused by the catalog; with none
    // overlapping, covering every element is the volumes adding up.
    if (!covered.ok() || covered.value() != numel)
      refuse(e.at, what + ": its slices hold " +
                       (covered.ok() ? std::to_string(covered.value()) : std::string("more than 2^64")) +
                       " elements but the tensor has " + std::to_string(numel));
    t.extras["slices"] = e.slices.size();
    // The tensor as a whole is the index's entry; its bytes are the pieces'.
    t.source = {model_.path.filename().string(), std::nullopt};
    try {
      catalog_.add(t);
    } catch (const ModelError&) {
      throw;
    } catch (const std::exception& x) {
      refuse(e.at, what + ": " + x.what());
    }
  }

  const ModelFile& model_;
  std::shared_ptr<const MappedFile> mapped_;
  std::string file_;
  protobuf::WireContext context_;
  Catalog catalog_;
  bool header_seen_ = false;
  int64_t num_shards_ = 0;
  std::deque<Entry> slice_entries_;  // a deque: no copy of them all as it grows
  // By the full tensor's name: where its slices are in slice_entries_, in
  // key order, which is the order of their (start, length) per dimension.
  std::map<std::string, std::pair<size_t, size_t>> slice_ranges_;
  nlohmann::json left_out_ = nlohmann::json::array();
  std::optional<ModelFolder> folder_;
  std::map<int64_t, std::shared_ptr<const MappedFile>> shards_;
  EarlyOpens early_;          // open_remote_shards
  StringLines string_lines_;  // the bundle's string tensors' text
};

}  // namespace

Catalog open_file(const ModelFile& model) {
  BundleReader reader(model);
  Catalog catalog = reader.read();
  // A SavedModel's variables/ folder: say whether the graph is beside it.
  if (!remote::is_url(model.path.native())) {
    std::error_code ec;
    const auto folder = std::filesystem::absolute(model.path, ec).parent_path();
    catalog.metadata["saved_model"] =
        folder.filename() == "variables" &&
        std::filesystem::is_regular_file(folder.parent_path() / "saved_model.pb", ec);
  }
  return catalog;
}

namespace {

std::vector<std::filesystem::path> index_files_in(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec))
    if (entry.path().extension() == ".index" && entry.is_regular_file(ec)) found.push_back(entry.path());
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

bool probe_folder(const std::filesystem::path& folder) {
  std::error_code ec;
  return std::filesystem::is_regular_file(folder / "variables" / "variables.index", ec) ||
         !index_files_in(folder).empty();
}

Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks) {
  std::error_code ec;
  const auto saved = folder / "variables" / "variables.index";
  if (std::filesystem::is_regular_file(saved, ec)) return open_file(ModelFile::open(saved, checks));
  const auto indexes = index_files_in(folder);
  if (indexes.size() != 1) {
    std::string names;
    for (const auto& p : indexes) names += (names.empty() ? "" : ", ") + p.filename().string();
    throw ModelError(folder.string(), kFormatName, std::nullopt,
                     "folder holds " + std::to_string(indexes.size()) + " *.index files (" + names +
                         "); name the one to mount");
  }
  return open_file(ModelFile::open(indexes.front(), checks));
}

}  // namespace modelfs::tfckpt
