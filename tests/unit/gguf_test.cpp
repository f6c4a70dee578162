// SPDX-License-Identifier: Apache-2.0
// The GGUF reader: hand-made corrupt files by parsing stage (header,
// key-values, alignment, tensor infos, data section), each refused with a
// ModelError naming "gguf" and the offset of the bad field; and good files
// with every key-value type, every ggml type, versions 1 to 3.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <set>

#include "formats/gguf.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using test::TempDir;

enum : uint32_t { kU8, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64 };

// GGUF bytes written field by field, as the spec lays them out.
class Gguf {
 public:
  explicit Gguf(uint32_t version = 3, std::string_view magic = "GGUF") : wide_(version >= 2) {
    raw(magic);
    u32(version);
  }
  // Header with counts.
  static Gguf with_counts(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    Gguf g(version);
    g.count(tensors).count(kvs);
    return g;
  }

  Gguf& raw(std::string_view bytes) {
    bytes_.append(bytes);
    return *this;
  }
  template <typename T>
  Gguf& le(T value) {
    char buf[sizeof(T)];
    std::memcpy(buf, &value, sizeof(T));
    bytes_.append(buf, sizeof(T));
    return *this;
  }
  Gguf& u8(uint8_t v) { return le(v); }
  Gguf& u32(uint32_t v) { return le(v); }
  Gguf& u64(uint64_t v) { return le(v); }
  // A count or length: u32 in v1, u64 after.
  Gguf& count(uint64_t n) { return wide_ ? u64(n) : u32(static_cast<uint32_t>(n)); }
  Gguf& str(std::string_view s) { return count(s.size()).raw(s); }
  Gguf& key(std::string_view k, uint32_t type) { return str(k).u32(type); }
  Gguf& array(std::string_view k, uint32_t element_type, uint64_t n) {
    return key(k, kArray).u32(element_type).count(n);
  }
  Gguf& info(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) count(d);
    return u32(type).u64(offset);
  }
  Gguf& pad(uint64_t alignment) {
    while (bytes_.size() % alignment) bytes_.push_back('\0');
    return *this;
  }
  Gguf& zeros(size_t n) {
    bytes_.append(n, '\0');
    return *this;
  }
  uint64_t size() const { return bytes_.size(); }
  const std::string& bytes() const { return bytes_; }

 private:
  bool wide_;
  std::string bytes_;
};

gguf::File parse_bytes(const TempDir& dir, const std::string& bytes) {
  auto path = dir.write("model.gguf", bytes);
  return gguf::parse(MappedFile::open(path), "model.gguf");
}

struct BadFile {
  std::string what;
  std::string bytes;
  std::string reason;  // a substring of the message
  uint64_t offset;
};

std::vector<BadFile> bad_files() {
  std::vector<BadFile> cases;
  auto add = [&](std::string what, const Gguf& g, std::string reason, uint64_t offset) {
    cases.push_back({std::move(what), g.bytes(), std::move(reason), offset});
  };
  constexpr uint64_t kAfterCounts = 24;  // magic, version, two u64 counts

  // header
  cases.push_back({"too short", "GGUF\x03", "too short", 0});
  add("bad magic", Gguf(3, "GGUX").count(0).count(0), "not a GGUF file", 0);
  add("version 0", Gguf(0).count(0).count(0), "version 0 is not one", 4);
  add("future version", Gguf(4).count(0).count(0), "version 4 is not one", 4);
  add("big-endian version", Gguf(0x03000000).count(0).count(0),
      "big-endian GGUF file (version 3 written big-endian)", 4);
  // "FUGG" with a little-endian version: GGUF's pre-release draft, not GGUF.
  add("reversed magic, little-endian version", Gguf(1, "FUGG").count(0).count(0),
      "not GGUF but a pre-release draft of it (magic \"FUGG\", version 1 little-endian", 0);
  add("reversed magic, version 3", Gguf(3, "FUGG").count(0).count(0), "pre-release draft", 0);
  add("reversed magic, big-endian version", Gguf(0x03000000, "FUGG").count(0).count(0),
      "big-endian GGUF file (version 3 written big-endian, magic \"FUGG\")", 0);
  cases.push_back({"reversed magic, no version", "FUGG\x01", "too short", 0});
  add("tensor count cannot fit", Gguf::with_counts(uint64_t{1} << 60, 0), "tensor count", 8);
  add("key-value count cannot fit", Gguf::with_counts(0, 1000), "key-value count 1000 cannot fit", 16);
  add("negative tensor count", Gguf::with_counts(~uint64_t{0}, 0), "cannot fit", 8);
  add("counts fit alone, not together", Gguf::with_counts(1, 1).zeros(24), "cannot fit", 8);
  add("tensor infos cannot fit after the key-values",
      Gguf::with_counts(1, 1).key("k", kString).str(std::string(40, 'x')).zeros(10),
      "tensor count 1 cannot fit in the 10 bytes", 8);
  add("truncated counts", Gguf(3).u32(0), "tensor count needs 8 bytes", 8);

  // key-values
  add("key longer than the file", Gguf::with_counts(0, 1).count(1000).zeros(20),
      "key is 1000 bytes long, more than the 20", kAfterCounts);
  add("empty key", Gguf::with_counts(0, 1).key("", kU8).u8(1).zeros(8), "empty key", kAfterCounts);
  {
    Gguf g = Gguf::with_counts(0, 2);
    g.key("a.b", kU8).u8(1);
    const uint64_t at = g.size();
    g.key("a.b", kU8).u8(2);
    add("duplicate key", g, "duplicate key \"a.b\"", at);
  }
  {
    Gguf g = Gguf::with_counts(0, 1);
    g.str("k");
    const uint64_t at = g.size();
    g.u32(13).zeros(8);
    add("unknown value type", g, "value type of \"k\" 13 is not a GGUF value type", at);
  }
  {
    Gguf g = Gguf::with_counts(0, 1);
    g.key("k", kArray);
    const uint64_t at = g.size();
    g.u32(99).count(0);
    add("unknown array element type", g, "array element type 99", at);
  }
  {
    Gguf g = Gguf::with_counts(0, 1);
    g.key("k", kArray).u32(kU32);
    const uint64_t at = g.size();
    g.count(uint64_t{1} << 40).zeros(16);
    add("array length cannot fit", g, "array length 1099511627776 cannot fit", at);
  }
  {
    Gguf g = Gguf::with_counts(0, 1);
    g.key("k", kArray).u32(kString);
    const uint64_t at = g.size();
    g.count(3).str("a").zeros(4);
    add("string array longer than the file", g, "array length 3 cannot fit", at);
  }
  {
    Gguf g = Gguf::with_counts(0, 1);
    g.key("k", kArray);
    uint64_t at = 0;
    for (int depth = 0; depth < gguf::kMaxArrayDepth; ++depth) {
      at = g.size();
      g.u32(kArray).count(1);
    }
    g.u32(kU8).count(0);
    add("arrays nested too deep", g, "nest deeper than", at);
  }
  {
    Gguf g = Gguf::with_counts(0, 1);
    g.key("k", kString);
    const uint64_t at = g.size();
    g.count(1 << 20).raw("short");
    add("string value longer than the file", g, "string value is 1048576 bytes long", at);
  }
  {
    Gguf g = Gguf::with_counts(0, 1);
    g.key("k", kBool);
    const uint64_t at = g.size();
    g.u8(2).zeros(20);
    add("bool neither 0 nor 1", g, "bool value is 2", at);
  }
  add("truncated value", Gguf::with_counts(0, 1).key("k", kU64).u32(0).zeros(1),
      "uint64 value needs 8 bytes but only 5 remain", 24 + 8 + 1 + 4);

  // alignment
  add("alignment not a uint32", Gguf::with_counts(0, 1).key("general.alignment", kU64).u64(64),
      "general.alignment is a uint64, not a uint32", kAfterCounts);
  add("alignment zero", Gguf::with_counts(0, 1).key("general.alignment", kU32).u32(0),
      "general.alignment 0 is not a power of two", kAfterCounts);
  add("alignment not a power of two", Gguf::with_counts(0, 1).key("general.alignment", kU32).u32(48),
      "general.alignment 48 is not a power of two", kAfterCounts);

  // tensor infos
  add("tensor name longer than the file", Gguf::with_counts(1, 0).count(500).zeros(16),
      "tensor name is 500 bytes long", kAfterCounts);
  {
    Gguf g = Gguf::with_counts(2, 0);
    g.info("w", {8}, 0, 0);
    const uint64_t at = g.size();
    g.info("w", {8}, 0, 32).pad(32).zeros(64);
    add("duplicate tensor name", g, "duplicate tensor name \"w\"", at);
  }
  add("too many dimensions", Gguf::with_counts(1, 0).info("w", {1, 1, 1, 1, 1}, 0, 0).pad(32).zeros(4),
      "5 dimensions, more than the 4", kAfterCounts + 9);
  add("negative dimension", Gguf::with_counts(1, 0).info("w", {uint64_t{1} << 63}, 0, 0).pad(32),
      "is negative", kAfterCounts + 13);
  add("unknown tensor type id", Gguf::with_counts(1, 0).info("w", {4}, 43, 0).pad(32).zeros(16),
      "unknown ggml type id 43", kAfterCounts + 9 + 4 + 8);
  add("removed tensor type id", Gguf::with_counts(1, 0).info("w", {32}, 4, 0).pad(32).zeros(64),
      "ggml type id 4 (q4_2) was removed", kAfterCounts + 9 + 4 + 8);
  add("ne[0] not a multiple of the block size",
      Gguf::with_counts(1, 0).info("w", {48, 2}, 2, 0).pad(32).zeros(64),
      "ne[0] = 48 is not a multiple of q4_0's block size 32", kAfterCounts + 9);
  add("byte size overflows",
      Gguf::with_counts(1, 0).info("w", {uint64_t{1} << 33, uint64_t{1} << 33}, 0, 0).pad(32),
      "byte size of the dimensions overflows", kAfterCounts + 9);
  add("element count overflows for a block type",
      Gguf::with_counts(1, 0)
          .info("w", {uint64_t{1} << 40, uint64_t{1} << 20, uint64_t{1} << 10}, 19, 0)
          .pad(32),
      "overflows", kAfterCounts + 9);
  add("truncated tensor info", Gguf::with_counts(1, 0).str("w").u32(1).count(4).u32(0).u32(0),
      "tensor offset needs 8 bytes but only 4 remain", kAfterCounts + 9 + 4 + 8 + 4);

  // data section
  const uint64_t offset_field = kAfterCounts + 9 + 4 + 8 + 4;  // one info "w" with one dim
  add("misaligned tensor offset", Gguf::with_counts(1, 0).info("w", {4}, 0, 4).pad(32).zeros(64),
      "offset 4 is not a multiple of the alignment 32", offset_field);
  add("misaligned for a custom alignment",
      Gguf::with_counts(1, 1).key("general.alignment", kU32).u32(64).info("w", {4}, 0, 32).pad(64).zeros(128),
      "offset 32 is not a multiple of the alignment 64", offset_field + 8 + 17 + 4 + 4);
  add("tensor past the end of the file", Gguf::with_counts(1, 0).info("w", {16}, 0, 0).pad(32).zeros(63),
      "64 bytes at data offset 0 run past the end of the file", offset_field);
  add("out-of-range offset", Gguf::with_counts(1, 0).info("w", {1}, 0, uint64_t{1} << 62).pad(32).zeros(4),
      "run past the end", offset_field);
  add("offset that overflows with the size",
      Gguf::with_counts(1, 0).info("w", {32}, 0, ~uint64_t{31}).pad(32).zeros(4), "run past the end",
      offset_field);
  {
    Gguf g = Gguf::with_counts(2, 0);
    g.info("a", {16}, 0, 0);
    const uint64_t at = g.size() + 9 + 4 + 8 + 4;
    g.info("b", {8}, 0, 32).pad(32).zeros(64);
    add("overlapping tensors", g, "tensor \"b\": bytes [32, 64) overlap tensor \"a\"'s [0, 64)", at);
  }
  add("data section past the end of the file", Gguf::with_counts(1, 0).info("w", {0}, 0, 0),
      "data section starts at byte 64", 57);
  return cases;
}

TEST(Gguf, CorruptFilesAreRefusedWithFormatOffsetAndReason) {
  TempDir dir;
  for (const auto& bad : bad_files()) {
    SCOPED_TRACE(bad.what);
    try {
      parse_bytes(dir, bad.bytes);
      ADD_FAILURE() << "accepted: " << bad.what;
    } catch (const ModelError& e) {
      EXPECT_EQ(e.format(), "gguf");
      EXPECT_NE(e.reason().find(bad.reason), std::string::npos) << e.what();
      ASSERT_TRUE(e.offset().has_value()) << e.what();
      EXPECT_EQ(*e.offset(), bad.offset) << e.what();
      EXPECT_EQ(e.file(), (dir.path() / "model.gguf").string());
    }
  }
}

TEST(Gguf, CorruptFilesAreRefusedThroughDetectionToo) {
  TempDir dir;
  for (const auto& bad : bad_files()) {
    if (bad.bytes.size() < 4 || bad.what == "bad magic") continue;  // not GGUF to the probe
    SCOPED_TRACE(bad.what);
    EXPECT_THROW(open_model(dir.write("model.gguf", bad.bytes)), ModelError);
  }
}

// Every key-value type, in the given version's widths.
Gguf every_kv_file(uint32_t version) {
  Gguf g(version);
  g.count(0).count(17);
  g.key("u8", kU8).u8(200);
  g.key("i8", kI8).le<int8_t>(-100);
  g.key("u16", kU16).le<uint16_t>(60000);
  g.key("i16", kI16).le<int16_t>(-30000);
  g.key("u32", kU32).u32(4000000000u);
  g.key("i32", kI32).le<int32_t>(-2000000000);
  g.key("f32", kF32).le<float>(1e-5f);
  g.key("yes", kBool).u8(1);
  g.key("no", kBool).u8(0);
  g.key("s", kString).str("hello");
  g.key("u64", kU64).u64(std::numeric_limits<uint64_t>::max());
  g.key("i64", kI64).le<int64_t>(std::numeric_limits<int64_t>::min());
  g.key("f64", kF64).le<double>(-2.5);
  g.array("tokens", kString, 3).str("<s>").str("").str("\xe2\x96\x81the");
  g.array("scores", kF32, 2).le<float>(0.5f).le<float>(-1.0f);
  g.array("nested", kArray, 2)
      .u32(kI16)
      .count(1)
      .le<int16_t>(-1)
      .u32(kArray)
      .count(1)
      .u32(kBool)
      .count(1)
      .u8(1);
  g.key("bad_utf8", kString).str("\xff\xfe");
  return g;
}

class GgufVersions : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufVersions, EveryKeyValueTypeTyped) {
  TempDir dir;
  auto file = parse_bytes(dir, every_kv_file(GetParam()).bytes());
  EXPECT_EQ(file.version, GetParam());
  EXPECT_TRUE(file.tensors.empty());
  const auto& kv = file.kv;
  EXPECT_EQ(kv["u8"], 200);
  EXPECT_EQ(kv["i8"], -100);
  EXPECT_EQ(kv["u16"], 60000);
  EXPECT_EQ(kv["i16"], -30000);
  EXPECT_EQ(kv["u32"], 4000000000u);
  EXPECT_EQ(kv["i32"], -2000000000);
  EXPECT_EQ(kv["f32"].get<double>(), 1e-5);  // shortest form of the float32
  EXPECT_EQ(kv["yes"], true);
  EXPECT_EQ(kv["no"], false);
  EXPECT_TRUE(kv["yes"].is_boolean());
  EXPECT_EQ(kv["s"], "hello");
  EXPECT_EQ(kv["u64"].get<uint64_t>(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(kv["i64"].get<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(kv["f64"], -2.5);
  EXPECT_EQ(kv["tokens"], nlohmann::json::parse(R"(["<s>", "", "\u2581the"])"));
  EXPECT_EQ(kv["scores"], nlohmann::json::parse("[0.5, -1.0]"));
  EXPECT_EQ(kv["nested"], nlohmann::json::parse("[[-1], [[true]]]"));
  EXPECT_EQ(file.kv_types["u8"], "uint8");
  EXPECT_EQ(file.kv_types["f32"], "float32");
  EXPECT_EQ(file.kv_types["yes"], "bool");
  EXPECT_EQ(file.kv_types["tokens"], "array[string]");
  EXPECT_EQ(file.kv_types["nested"], "array[array]");
  EXPECT_EQ(file.kv_types["f64"], "float64");
  // Invalid UTF-8 is kept as bytes and replaced only when dumped.
  EXPECT_EQ(kv["bad_utf8"].get<std::string>(), "\xff\xfe");
  EXPECT_NO_THROW(file.kv.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  auto header = file.header_json();
  EXPECT_EQ(header["kv_count"], 17);
  EXPECT_EQ(header["alignment"], 32);
  // No tensors: no padding, the data section is empty at the end of the infos.
  EXPECT_EQ(header["data_offset"], every_kv_file(GetParam()).size());
}

TEST_P(GgufVersions, EveryGgmlTypeAsATensor) {
  Gguf g(GetParam());
  const auto types = ggml_types();
  g.count(types.size()).count(1).key("general.alignment", kU32).u32(64);
  std::vector<uint64_t> offsets;
  uint64_t offset = 0;
  for (const auto& type : types) {
    // ne = [2 blocks, 3]: shape [3, 2 * block_size]
    g.info(std::string("t.") + std::string(type.name), {2 * type.block_size, 3}, type.id, offset);
    offsets.push_back(offset);
    offset += (2 * type.type_size * 3 + 63) / 64 * 64;
  }
  g.pad(64);
  const uint64_t data_start = g.size();
  for (size_t i = 0; i < offset; ++i) g.u8(static_cast<uint8_t>(i * 7));
  TempDir dir;
  auto path = dir.write("model.gguf", g.bytes());
  auto mapped = MappedFile::open(path);
  auto file = gguf::parse(mapped, "model.gguf");
  EXPECT_EQ(file.alignment, 64u);
  EXPECT_EQ(file.data_offset, data_start);
  ASSERT_EQ(file.tensors.size(), types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    const auto& type = types[i];
    const auto& t = file.tensors[i];
    SCOPED_TRACE(std::string(type.name));
    EXPECT_EQ(t.name, "t." + std::string(type.name));
    EXPECT_EQ(test::vec(t.shape), (std::vector<uint64_t>{3, 2 * type.block_size}));
    EXPECT_EQ(test::vec(t.strides), (std::vector<int64_t>{2 * static_cast<int64_t>(type.block_size), 1}));
    if (type.plain) {
      EXPECT_EQ(t.dtype, *type.plain);
      EXPECT_EQ(type.block_size, 1u);
      EXPECT_EQ(type.type_size * 8, dtype_bits(*type.plain));
    } else {
      EXPECT_EQ(t.dtype, DType::GgmlBlock);
    }
    // Every tensor points at its type's entry (the sidecar prints its id,
    // name and sizes from it).
    EXPECT_EQ(t.ggml, &type);
    // The bytes are the mapping itself, never a copy.
    EXPECT_EQ(t.bytes.mapped_file(), mapped.get());
    EXPECT_EQ(t.bytes.data(), mapped->unchecked_data() + data_start + offsets[i]);
    EXPECT_EQ(t.bytes.size(), 2u * type.type_size * 3);
    EXPECT_EQ(t.source.offset, data_start + offsets[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Versions, GgufVersions, ::testing::Values(1u, 2u, 3u));

TEST(Gguf, TypeTableNamesAreUniqueAndCanonicalForPlainTypes) {
  std::set<std::string_view> names;
  for (const auto& type : ggml_types()) {
    EXPECT_TRUE(names.insert(type.name).second) << type.name;
    EXPECT_EQ(ggml_type(type.id), &type);
    EXPECT_GT(type.block_size, 0u);
  }
  EXPECT_EQ(ggml_type(12)->name, "q4_k");
  EXPECT_EQ(ggml_type(23)->name, "iq4_xs");
  EXPECT_EQ(ggml_type(39)->name, "mxfp4");
  EXPECT_EQ(*ggml_type(30)->plain, DType::BFloat16);
  EXPECT_EQ(ggml_type(4), nullptr);
  EXPECT_EQ(ggml_type(43), nullptr);
}

TEST(Gguf, EmptyTensorsOverlapNothingAndGapsAreAllowed) {
  Gguf g = Gguf::with_counts(3, 0);
  g.info("b", {8}, 0, 64).info("a", {8}, 0, 0).info("empty", {0, 4}, 0, 0).pad(32).zeros(96);
  TempDir dir;
  auto file = parse_bytes(dir, g.bytes());
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors[0].name, "b");  // info order, not offset order
  EXPECT_EQ(file.tensors[2].shape, (std::vector<uint64_t>{4, 0}));
  EXPECT_EQ(file.tensors[2].bytes.size(), 0u);
}

TEST(Gguf, OpenModelDetectsGgufAndFillsTheCatalog) {
  Gguf g = Gguf::with_counts(1, 1);
  g.key("general.architecture", kString).str("llama").info("tok.w", {4, 2}, 1, 0).pad(32).zeros(16);
  TempDir dir;
  auto catalog = open_model(dir.write("m.gguf", g.bytes()));
  EXPECT_EQ(catalog.format, "gguf");
  EXPECT_EQ(catalog.files, std::vector<std::string>{"m.gguf"});
  EXPECT_EQ(catalog.metadata["kv"]["general.architecture"], "llama");
  EXPECT_EQ(catalog.metadata["kv_types"]["general.architecture"], "string");
  EXPECT_EQ(catalog.metadata["gguf"]["version"], 3);
  ASSERT_EQ(catalog.tensors().size(), 1u);
  EXPECT_EQ(catalog.tensors()[0].dtype_name(), "float16");
  EXPECT_EQ(test::vec(catalog.tensors()[0].shape), (std::vector<uint64_t>{2, 4}));
  EXPECT_FALSE(catalog.metadata.contains("split_files"));
}

TEST(Gguf, SplitCountWithoutASplitNameIsRefused) {
  Gguf g = Gguf::with_counts(0, 2);
  g.key("split.count", kU16).le<uint16_t>(2).key("split.no", kU16).le<uint16_t>(0);
  TempDir dir;
  try {
    open_model(dir.write("model.gguf", g.bytes()));
    ADD_FAILURE() << "accepted";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.format(), "gguf");
    EXPECT_NE(e.reason().find("<name>-00001-of-00002.gguf"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace modelfs
