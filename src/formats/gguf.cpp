// SPDX-License-Identifier: Apache-2.0
#include "formats/gguf.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "formats/ggml_tensor.hpp"
#include "formats/model_folder.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"
#include "modelfs/json_release.hpp"
#include "remote/remote.hpp"

namespace modelfs::gguf {
namespace {

constexpr std::string_view kFormat = "gguf";
// Room reserved up front for a count read from the file: past this, vectors
// grow only as items are actually read, so a hostile count that fits the
// remaining bytes still cannot make one huge allocation.
constexpr uint64_t kReserveLimit = 1 << 16;
constexpr std::string_view kMagic = "GGUF";
// The magic byte-reversed. GGUF's development branch, before the format's
// release, wrote its magic as the integer 0x47475546 little-endian, so its
// draft files begin "FUGG" (with a little-endian version); proposals since
// (never adopted) would mark big-endian files so. Neither is GGUF.
constexpr std::string_view kReversedMagic = "FUGG";

struct RemovedType {
  uint32_t id;
  std::string_view name;
};
constexpr RemovedType kRemovedTypes[] = {
    {4, "q4_2"},      {5, "q4_3"},        {31, "q4_0_4_4"},   {32, "q4_0_4_8"},
    {33, "q4_0_8_8"}, {36, "iq4_nl_4_4"}, {37, "iq4_nl_4_8"}, {38, "iq4_nl_8_8"},
};

// Metadata value types (docs/formats.md, "GGUF metadata values"), indexed by their id.
enum ValueType : uint32_t {
  kUInt8,
  kInt8,
  kUInt16,
  kInt16,
  kUInt32,
  kInt32,
  kFloat32,
  kBool,
  kString,
  kArray,
  kUInt64,
  kInt64,
  kFloat64,
  kValueTypeCount
};

struct ValueTypeInfo {
  std::string_view name;
  uint32_t fixed_size;  // 0 for strings and arrays
};
constexpr std::array<ValueTypeInfo, kValueTypeCount> kValueTypes{{
    {"uint8", 1},
    {"int8", 1},
    {"uint16", 2},
    {"int16", 2},
    {"uint32", 4},
    {"int32", 4},
    {"float32", 4},
    {"bool", 1},
    {"string", 0},
    {"array", 0},
    {"uint64", 8},
    {"int64", 8},
    {"float64", 8},
}};

// A float32 as the double with its shortest round-trip decimal form, so
// metadata shows 1e-05 rather than 9.999999747378752e-06 and converting the
// JSON number back to float32 gives the stored bits.
nlohmann::json float32_json(float value) {
  if (!std::isfinite(value)) return nullptr;
  char text[64];
  auto written = std::to_chars(text, text + sizeof text, value);
  double shortest = 0;
  auto read = std::from_chars(text, written.ptr, shortest);  // locale-independent, unlike strtod
  if (written.ec != std::errc() || read.ec != std::errc()) return static_cast<double>(value);
  return shortest;
}

// A tensor info read, before its bytes are checked against the others'.
struct TensorInfo {
  TensorSpec tensor;
  uint64_t offset_at;  // where its offset field is
  uint64_t offset;     // relative to the data section
  uint64_t nbytes;
};

class Parser {
 public:
  // The GGUF occupies [base, base + length) of `file` (all of it, or a
  // stored member of a llamafile's ZIP): offsets inside it, the data
  // section's alignment among them, count from `base`.
  Parser(std::shared_ptr<const MappedFile> file, const std::string& name, uint64_t base, uint64_t length)
      : file_(std::move(file)),
        name_(name),
        base_(base),
        length_(length),
        reader_(reader_of(*file_, base, length)) {}

  File parse() {
    read_header();
    read_key_values();
    read_alignment();
    std::vector<TensorInfo> infos = read_tensor_infos();
    locate_data(infos.size());
    check_tensor_bytes(infos);
    out_.tensors.reserve(infos.size());
    for (auto& info : infos) {
      info.tensor.bytes = ByteSpan::mapped(file_, base_ + out_.data_offset + info.offset, info.nbytes);
      info.tensor.source = {name_, base_ + out_.data_offset + info.offset};
      out_.tensors.push_back(std::move(info.tensor));
    }
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(uint64_t at, const std::string& reason) const {
    throw ModelError(file_->display_name(), std::string(kFormat), at, reason);
  }
  // A whole file is read through its mapping; a part of one, through the
  // span of it (made present as it is taken, like the whole).
  static ByteReader reader_of(const MappedFile& file, uint64_t base, uint64_t length) {
    if (base == 0 && length == file.size()) return ByteReader(file, std::string(kFormat));
    return ByteReader(file.unchecked_bytes().subspan(base, length), file.display_name(), std::string(kFormat),
                      base);
  }
  // `at` counted from the GGUF's first byte.
  [[noreturn]] void fail_within(uint64_t at, const std::string& reason) const { fail(base_ + at, reason); }

  // A count, dimension or length: u32 in v1, u64 after.
  uint64_t read_width(std::string_view what) { return wide_ ? reader_.u64(what) : reader_.u32(what); }
  uint64_t width_bytes() const { return wide_ ? 8 : 4; }

  // `count` items of at least `min_bytes` each must fit in what remains:
  // checked before anything is allocated for them.
  void require_room(uint64_t at, uint64_t count, uint64_t min_bytes, const std::string& what) {
    auto needed = checked_mul(count, min_bytes);
    if (!needed || *needed > reader_.remaining())
      fail(at, what + " " + std::to_string(count) + " cannot fit in the " +
                   std::to_string(reader_.remaining()) + " bytes that remain");
  }

  std::string read_string(std::string_view what) {
    const uint64_t at = reader_.file_offset();
    const uint64_t length = read_width(what);
    if (length > reader_.remaining())
      fail(at, std::string(what) + " is " + std::to_string(length) + " bytes long, more than the " +
                   std::to_string(reader_.remaining()) + " bytes that remain");
    return std::string(reader_.take_string(length, what));
  }

  void read_header() {
    if (length_ < 8)
      fail_within(0, "file is " + std::to_string(length_) + " bytes, too short for the magic and version");
    const auto magic = reader_.take_string(4, "magic");
    const bool reversed = magic == kReversedMagic;
    if (magic != kMagic && !reversed) fail_within(0, "not a GGUF file (magic is not \"GGUF\")");
    const uint32_t version = reader_.u32("version");
    // A big-endian file's small version number reads as a multiple of 65536.
    if (version != 0 && (version & 0xFFFF) == 0) {
      const uint32_t swapped = (version >> 24) | ((version >> 8) & 0xFF00);
      fail_within(reversed ? 0 : 4,
                  "big-endian GGUF file (version " + std::to_string(swapped) + " written big-endian" +
                      (reversed ? ", magic \"FUGG\"" : "") +
                      "): modelfs serves tensor bytes as stored and reads only little-endian GGUF");
    }
    if (reversed)
      fail_within(
          0, "not GGUF but a pre-release draft of it (magic \"FUGG\", version " + std::to_string(version) +
                 " little-endian: written before the format's release fixed the magic bytes as \"GGUF\"); "
                 "modelfs reads released GGUF, versions " +
                 std::to_string(kMinVersion) + " to " + std::to_string(kMaxVersion));
    if (version < kMinVersion || version > kMaxVersion)
      fail_within(4, "GGUF version " + std::to_string(version) + " is not one modelfs reads (" +
                         std::to_string(kMinVersion) + " to " + std::to_string(kMaxVersion) + ")");
    out_.version = version;
    wide_ = version >= 2;

    tensor_count_at_ = reader_.file_offset();
    tensor_count_ = read_width("tensor count");
    const uint64_t kv_count_at = reader_.file_offset();
    kv_count_ = read_width("key-value count");
    // The smallest key-value: an empty-length key, a type, a one-byte value;
    // the smallest tensor info: an empty name, n_dims, type, offset.
    const uint64_t min_kv = width_bytes() + 4 + 1;
    const uint64_t min_info = width_bytes() + 4 + 4 + 8;
    require_room(kv_count_at, kv_count_, min_kv, "key-value count");
    require_room(tensor_count_at_, tensor_count_, min_info, "tensor count");
    auto both = checked_add(*checked_mul(kv_count_, min_kv), *checked_mul(tensor_count_, min_info));
    if (!both || *both > reader_.remaining())
      fail(tensor_count_at_, std::to_string(kv_count_) + " key-values and " + std::to_string(tensor_count_) +
                                 " tensor infos cannot fit in the " + std::to_string(reader_.remaining()) +
                                 " bytes that remain");
  }

  uint32_t read_value_type(std::string_view what) {
    const uint64_t at = reader_.file_offset();
    const uint32_t type = reader_.u32(what);
    if (type >= kValueTypeCount)
      fail(at, std::string(what) + " " + std::to_string(type) + " is not a GGUF value type (0 to " +
                   std::to_string(kValueTypeCount - 1) + ")");
    return type;
  }

  nlohmann::json read_scalar(uint32_t type) {
    switch (type) {
      case kUInt8:
        return reader_.u8("uint8 value");
      case kInt8:
        return reader_.read_le<int8_t>("int8 value");
      case kUInt16:
        return reader_.u16("uint16 value");
      case kInt16:
        return reader_.read_le<int16_t>("int16 value");
      case kUInt32:
        return reader_.u32("uint32 value");
      case kInt32:
        return reader_.read_le<int32_t>("int32 value");
      case kFloat32:
        return float32_json(reader_.read_le<float>("float32 value"));
      case kUInt64:
        return reader_.u64("uint64 value");
      case kInt64:
        return reader_.read_le<int64_t>("int64 value");
      case kFloat64:
        return reader_.read_le<double>("float64 value");
      case kBool: {
        const uint64_t at = reader_.file_offset();
        const uint8_t byte = reader_.u8("bool value");
        if (byte > 1) fail(at, "bool value is " + std::to_string(byte) + ", not 0 or 1");
        return byte == 1;
      }
      default:
        return read_string("string value");
    }
  }

  // A value of `type`; `type_name` receives its name ("array[string]").
  // Recursion is bounded by kMaxArrayDepth.
  nlohmann::json read_value(uint32_t type, int depth, std::string& type_name) {
    if (type != kArray) {
      type_name = kValueTypes[type].name;
      return read_scalar(type);
    }
    const uint64_t at = reader_.file_offset();
    const uint32_t element_type = read_value_type("array element type");
    if (element_type == kArray && depth + 1 >= kMaxArrayDepth)
      fail(at, "arrays nest deeper than " + std::to_string(kMaxArrayDepth) + " levels");
    const uint64_t count_at = reader_.file_offset();
    const uint64_t count = read_width("array length");
    const uint64_t min_element = element_type == kString  ? width_bytes()
                                 : element_type == kArray ? 4 + width_bytes()
                                                          : kValueTypes[element_type].fixed_size;
    require_room(count_at, count, min_element, "array length");
    // Each element becomes a JSON value of 16 bytes (and a string's text):
    // a one-byte element in the file costs sixteen here.
    add_metadata_bytes(count * min_element);
    metadata_counted_ += count * min_element;
    type_name = "array[" + std::string(kValueTypes[element_type].name) + "]";
    nlohmann::json array = nlohmann::json::array();
    const JsonReleaser release(array);  // refused half-read, unwound without a copy of its slots
    array.get_ref<nlohmann::json::array_t&>().reserve(std::min<uint64_t>(count, kReserveLimit));
    std::string element_name;
    for (uint64_t i = 0; i < count; ++i) array.push_back(read_value(element_type, depth + 1, element_name));
    return array;
  }

  void read_key_values() {
    for (uint64_t i = 0; i < kv_count_; ++i) {
      const uint64_t at = reader_.file_offset();
      std::string key = read_string("key");
      if (key.empty()) fail(at, "key-value " + std::to_string(i) + " has an empty key");
      if (key.size() > kMaxNameBytes)
        fail(at, "key of " + std::to_string(key.size()) + " bytes exceeds the limit of " +
                     std::to_string(kMaxNameBytes));
      if (out_.kv.contains(key)) fail(at, "duplicate key \"" + key + "\"");
      const uint32_t type = read_value_type("value type of \"" + key + "\"");
      std::string type_name;
      nlohmann::json value = read_value(type, 0, type_name);
      if (key == "general.alignment") alignment_at_ = at;
      out_.kv_types[key] = type_name;
      out_.kv[key] = std::move(value);
      count_metadata(at);
    }
  }

  void read_alignment() {
    auto it = out_.kv.find("general.alignment");
    if (it == out_.kv.end()) return;
    const auto type = out_.kv_types["general.alignment"].get<std::string>();
    if (type != "uint32") fail(alignment_at_, "general.alignment is a " + type + ", not a uint32");
    const uint64_t alignment = it->get<uint64_t>();
    if (alignment == 0 || !std::has_single_bit(alignment))
      fail(alignment_at_, "general.alignment " + std::to_string(alignment) + " is not a power of two");
    out_.alignment = alignment;
  }

  std::vector<TensorInfo> read_tensor_infos() {
    // Checked again now that the key-values have taken their bytes.
    require_room(tensor_count_at_, tensor_count_, width_bytes() + 4 + 4 + 8, "tensor count");
    std::vector<TensorInfo> infos;
    infos.reserve(std::min<uint64_t>(tensor_count_, kReserveLimit));
    std::unordered_set<std::string> names;
    for (uint64_t i = 0; i < tensor_count_; ++i) {
      TensorInfo info;
      const uint64_t info_at = reader_.file_offset();
      TensorSpec& t = info.tensor;
      t.name = read_string("tensor name");
      if (t.name.size() > kMaxNameBytes)
        fail(info_at, "tensor name of " + std::to_string(t.name.size()) + " bytes exceeds the limit of " +
                          std::to_string(kMaxNameBytes));
      if (!names.insert(t.name).second) fail(info_at, "duplicate tensor name \"" + t.name + "\"");
      count_metadata(info_at);
      const std::string quote = "tensor \"" + t.name + "\": ";

      const uint64_t dims_at = reader_.file_offset();
      const uint32_t n_dims = reader_.u32("n_dims");
      if (n_dims > kMaxDims)
        fail(dims_at, quote + std::to_string(n_dims) + " dimensions, more than the " +
                          std::to_string(kMaxDims) + " ggml allows");
      std::vector<uint64_t> ne(n_dims);
      for (auto& dim : ne) {
        const uint64_t dim_at = reader_.file_offset();
        dim = read_width("dimension");
        if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          fail(dim_at, quote + "dimension " + std::to_string(dim) + " is negative as ggml's int64");
      }

      const uint64_t type_at = reader_.file_offset();
      const uint32_t type_id = reader_.u32("ggml type");
      const GgmlType* type = ggml_type(type_id);
      if (type == nullptr) {
        std::string why = "unknown ggml type id " + std::to_string(type_id);
        for (const auto& removed : kRemovedTypes)
          if (removed.id == type_id)
            why = "ggml type id " + std::to_string(type_id) + " (" + std::string(removed.name) +
                  ") was removed from GGUF";
        fail(type_at, quote + why);
      }
      info.offset_at = reader_.file_offset();
      info.offset = reader_.u64("tensor offset");

      const ggml::Described described = ggml::describe(t, *type, ne);
      if (!described.refusal.empty()) fail(dims_at, quote + described.refusal);
      info.nbytes = described.nbytes;
      infos.push_back(std::move(info));
    }
    return infos;
  }

  void locate_data(size_t tensor_count) {
    const uint64_t infos_end = reader_.position();
    // ggml pads to the alignment only before a data section that exists.
    if (tensor_count == 0) {
      out_.data_offset = infos_end;
      return;
    }
    auto padded = checked_add(infos_end, out_.alignment - 1);
    if (!padded) fail_within(infos_end, "data section start overflows");
    out_.data_offset = *padded / out_.alignment * out_.alignment;
    if (out_.data_offset > length_)
      fail_within(infos_end, "data section starts at byte " + std::to_string(out_.data_offset) +
                                 ", past the end of the file (" + std::to_string(length_) + " bytes)");
  }

  void check_tensor_bytes(const std::vector<TensorInfo>& infos) const {
    const uint64_t data_bytes = length_ - out_.data_offset;
    for (const auto& info : infos) {
      const std::string quote = "tensor \"" + info.tensor.name + "\": ";
      if (info.offset % out_.alignment != 0)
        fail(info.offset_at, quote + "offset " + std::to_string(info.offset) +
                                 " is not a multiple of the alignment " + std::to_string(out_.alignment));
      if (!range_fits(info.offset, info.nbytes, data_bytes))
        fail(info.offset_at, quote + std::to_string(info.nbytes) + " bytes at data offset " +
                                 std::to_string(info.offset) + " run past the end of the file (" +
                                 std::to_string(data_bytes) + " bytes of data from byte " +
                                 std::to_string(out_.data_offset) + ")");
    }
    // Tensors holding bytes, by offset: each must start at or after the end
    // of the one before. Empty tensors own no bytes and overlap nothing.
    std::vector<const TensorInfo*> by_offset;
    for (const auto& info : infos)
      if (info.nbytes > 0) by_offset.push_back(&info);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const TensorInfo& before = *by_offset[i - 1];
      const TensorInfo& info = *by_offset[i];
      if (info.offset < before.offset + before.nbytes)
        fail(info.offset_at, "tensor \"" + info.tensor.name + "\": bytes [" + std::to_string(info.offset) +
                                 ", " + std::to_string(info.offset + info.nbytes) + ") overlap tensor \"" +
                                 before.tensor.name + "\"'s [" + std::to_string(before.offset) + ", " +
                                 std::to_string(before.offset + before.nbytes) +
                                 ") (offsets relative to the data section)");
    }
  }

  std::shared_ptr<const MappedFile> file_;
  std::string name_;
  uint64_t base_;
  uint64_t length_;
  ByteReader reader_;
  File out_;
  bool wide_ = true;
  // The budget grows with the header as it is read (key-values, tensor
  // infos); an array's elements are counted ahead of reading them.
  void count_metadata(uint64_t from) {
    const uint64_t read = reader_.file_offset() - from;
    add_metadata_bytes(read > metadata_counted_ ? read - metadata_counted_ : 0);
    metadata_counted_ = 0;
  }
  uint64_t metadata_counted_ = 0;  // bytes an array of the current key-value counted ahead
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
  uint64_t tensor_count_at_ = 0;
  uint64_t alignment_at_ = 0;  // where the key general.alignment is
  // A parser refused midway lets its key-values go without the scratch
  // nlohmann's destructor takes (json_release.hpp).
  const JsonReleaser<nlohmann::json> release_kv_{out_.kv}, release_kv_types_{out_.kv_types};
};

// ---- split sets -----------------------------------------------------------

// "<prefix>-00002-of-00003.gguf": numbers 1-based, five digits as llama.cpp
// writes them.
struct SplitName {
  std::string prefix;
  uint64_t number;
  uint64_t count;
};

std::optional<uint64_t> five_digits(std::string_view text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.size() != 5 || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<SplitName> parse_split_name(const std::string& file_name) {
  constexpr std::string_view suffix = ".gguf";
  constexpr size_t tail = 1 + 5 + 4 + 5;  // "-NNNNN-of-MMMMM"
  if (file_name.size() <= tail + suffix.size() || !file_name.ends_with(suffix)) return std::nullopt;
  std::string_view stem(file_name.data(), file_name.size() - suffix.size());
  std::string_view end = stem.substr(stem.size() - tail);
  if (end[0] != '-' || end.substr(6, 4) != "-of-") return std::nullopt;
  auto number = five_digits(end.substr(1, 5));
  auto count = five_digits(end.substr(10, 5));
  if (!number || !count || *number == 0 || *number > *count) return std::nullopt;
  return SplitName{std::string(stem.substr(0, stem.size() - tail)), *number, *count};
}

std::string split_file_name(const std::string& prefix, uint64_t number, uint64_t count) {
  char digits[64];
  std::snprintf(digits, sizeof digits, "-%05llu-of-%05llu.gguf", static_cast<unsigned long long>(number),
                static_cast<unsigned long long>(count));
  return prefix + digits;
}

// A split set or a file of one refused as a whole (no offset).
[[noreturn]] void refuse(const std::string& file, const std::string& reason) {
  throw ModelError(file, std::string(kFormat), std::nullopt, reason);
}

// An integer key-value, if present; refused when present but not an integer.
std::optional<uint64_t> integer_kv(const File& file, const std::string& key, const std::string& file_name) {
  auto it = file.kv.find(key);
  if (it == file.kv.end()) return std::nullopt;
  const bool negative = it->is_number_integer() && !it->is_number_unsigned() && it->get<int64_t>() < 0;
  if (!it->is_number_integer() || negative)
    refuse(file_name, key + " holds " + it->dump() + ", not a non-negative integer");
  return it->get<uint64_t>();
}

// The catalog of a single file or of a split set's first: its tensors and
// its metadata.
// The key-values are moved into the catalog, not copied: a copy of two
// million strings doubled what reading them took.
Catalog catalog_of(File& first, const std::string& first_name, std::shared_ptr<const MappedFile> mapped) {
  Catalog catalog;
  catalog.format = std::string(kFormat);
  catalog.mtime = mapped->mtime();
  catalog.files.push_back(first_name);
  catalog.metadata["gguf"] = first.header_json();
  catalog.metadata["kv"] = std::move(first.kv);
  catalog.metadata["kv_types"] = std::move(first.kv_types);
  for (const auto& tensor : first.tensors) catalog.add(tensor);
  return catalog;
}

// The whole set `split` belongs to, from the folder holding it. Members
// other than `named` (the one the user named, if any) are opened inside
// the folder (model_folder.hpp) and read from what was opened.
Catalog open_split(const std::filesystem::path& folder, const SplitName& split,
                   std::shared_ptr<remote::Session> remote, const std::string& named = {},
                   std::shared_ptr<const MappedFile> named_mapped = nullptr) {
  const std::string set_file = (folder / split_file_name(split.prefix, 1, split.count)).string();
  const ModelFolder model_folder = ModelFolder::at(folder, std::string(kFormat), std::move(remote));
  Catalog catalog;
  nlohmann::json others = nlohmann::json::array();
  std::unordered_map<std::string, std::string> file_of_tensor;
  std::optional<uint64_t> total_expected;
  std::string total_expected_in;
  // Every other member opened first, side by side for a remote set, with
  // the first block, where a GGUF header begins, of each.
  std::vector<std::string> others_names;
  for (uint64_t number = 1; number <= split.count; ++number)
    if (std::string name = split_file_name(split.prefix, number, split.count); name != named)
      others_names.push_back(std::move(name));
  auto opened = model_folder.open_all(others_names, 256 << 10);
  size_t next_opened = 0;
  for (uint64_t number = 1; number <= split.count; ++number) {
    const std::string name = split_file_name(split.prefix, number, split.count);
    // The member the user named is mapped already.
    std::shared_ptr<const MappedFile> mapped = name == named ? named_mapped : nullptr;
    if (!mapped) {
      auto member = std::move(opened[next_opened++]);
      if (member.problem == ModelFolder::Problem::Missing)
        refuse(set_file, "split set of " + std::to_string(split.count) + " files is incomplete: " + name +
                             " is missing");
      if (!member) refuse(set_file, "split set member " + name + " " + member.reason);
      mapped = std::move(member.file);
    }
    File file = parse(mapped, name);
    const std::string display = mapped->display_name();

    auto count = integer_kv(file, "split.count", display);
    auto index = integer_kv(file, "split.no", display);
    if (!count || *count != split.count)
      refuse(display, "split.count is " + (count ? std::to_string(*count) : "absent") +
                          " but the file name says the set has " + std::to_string(split.count) + " files");
    if (!index || *index != number - 1)
      refuse(display, "split.no is " + (index ? std::to_string(*index) : "absent") +
                          " but the file name says it is file " + std::to_string(number) + " (split.no " +
                          std::to_string(number - 1) + ")");
    if (auto total = integer_kv(file, "split.tensors.count", display)) {
      if (total_expected && *total != *total_expected)
        refuse(display, "split.tensors.count is " + std::to_string(*total) + " but " + total_expected_in +
                            " says " + std::to_string(*total_expected));
      total_expected = *total;
      total_expected_in = name;
    }

    for (auto& tensor : file.tensors) {
      auto [it, fresh] = file_of_tensor.emplace(tensor.name, name);
      if (!fresh)
        throw ModelError(display, std::string(kFormat), tensor.source.offset,
                         "tensor \"" + tensor.name + "\" is also stored in " + it->second);
    }
    if (number == 1) {
      catalog = catalog_of(file, name, mapped);
      continue;
    }
    catalog.files.push_back(name);
    others.push_back({{"file", name},
                      {"gguf", file.header_json()},
                      {"kv", std::move(file.kv)},
                      {"kv_types", std::move(file.kv_types)}});
    for (const auto& tensor : file.tensors) catalog.add(tensor);
  }
  if (total_expected && *total_expected != catalog.tensors().size())
    refuse(set_file, "split.tensors.count is " + std::to_string(*total_expected) + " but the " +
                         std::to_string(split.count) + " files hold " +
                         std::to_string(catalog.tensors().size()) + " tensors");
  catalog.metadata["split_files"] = std::move(others);
  return catalog;
}

// First files of split sets in `folder`, sorted.
std::vector<std::filesystem::path> split_sets_in(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    auto split = parse_split_name(entry.path().filename().string());
    if (split && split->number == 1 && entry.is_regular_file(ec)) found.push_back(entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

nlohmann::json File::header_json() const {
  return {{"version", version},
          {"alignment", alignment},
          {"tensor_count", tensors.size()},
          {"kv_count", kv.size()},
          {"data_offset", data_offset}};
}

File parse(std::shared_ptr<const MappedFile> file, const std::string& name) {
  const uint64_t size = file->size();
  return Parser(std::move(file), name, 0, size).parse();
}

File parse(std::shared_ptr<const MappedFile> file, const std::string& name, uint64_t base, uint64_t length) {
  if (!range_fits(base, length, file->size()))
    throw ModelError(file->display_name(), std::string(kFormat), base,
                     "GGUF range runs past the end of the file");
  return Parser(std::move(file), name, base, length).parse();
}

bool probe_file(std::span<const std::byte> head) {
  if (head.size() < 4) return false;
  std::string_view magic(reinterpret_cast<const char*>(head.data()), 4);
  return magic == kMagic || magic == kReversedMagic;
}

bool probe_folder(const std::filesystem::path& folder) { return !split_sets_in(folder).empty(); }

Catalog open_folder(const std::filesystem::path& model, IntegrityChecks*) {
  auto sets = split_sets_in(model);
  if (sets.size() != 1) {
    std::string names;
    for (const auto& p : sets) names += " " + p.filename().string();
    throw ModelError(model.string(), "gguf split set", std::nullopt,
                     "folder holds " + std::to_string(sets.size()) + " split sets (first files:" + names +
                         "); name the one to mount");
  }
  auto split = parse_split_name(sets.front().filename().string());
  // A "set" of one file may lack the split.* keys: mount it as a file.
  if (split->count == 1) return open_file(ModelFile::open(sets.front()));
  return open_split(model, *split, nullptr);
}

Catalog open_file(const ModelFile& model) {
  const auto& mapped = model.mapped;
  const std::string name = model.path.filename().string();
  File file = parse(mapped, name);
  auto count = integer_kv(file, "split.count", mapped->display_name());
  if (!count || *count <= 1) return catalog_of(file, name, mapped);

  auto split = parse_split_name(name);
  if (!split)
    refuse(mapped->display_name(), "split.count says the model is split into " + std::to_string(*count) +
                                       " files, but its name does not follow " +
                                       split_file_name("<name>", 1, *count) +
                                       ", so the other files cannot be found");
  if (split->count != *count)
    refuse(mapped->display_name(), "split.count is " + std::to_string(*count) + " but the file name says " +
                                       std::to_string(split->count));
  return open_split(model.path.parent_path(), *split, model.remote, name, mapped);
}

}  // namespace modelfs::gguf
