// SPDX-License-Identifier: Apache-2.0
// The TensorFlow checkpoint reader: CRC-32C and its masking against known
// vectors, SSTable blocks and footers refused rule by rule (restart arrays
// and shared prefixes that lie, varints past the block, bad trailers,
// snappy lengths past the limit), slice keys decoded, and whole bundles
// written here opened and refused.
#include <gtest/gtest.h>

#include <snappy.h>

#include <cstring>

#include "formats/tfckpt.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using test::pb_bytes;
using test::pb_fixed32;
using test::pb_uint;
using test::pb_varint;
using test::TempDir;

std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string le32(uint32_t v) {
  std::string out(4, '\0');
  std::memcpy(out.data(), &v, 4);
  return out;
}

// A block of (key, value) entries, a restart every `interval`, keys
// prefix-compressed in between.
std::string block(const std::vector<std::pair<std::string, std::string>>& entries, size_t interval = 16) {
  std::string out, last;
  std::vector<uint32_t> restarts;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [key, value] = entries[i];
    size_t shared = 0;
    if (i % interval == 0) {
      restarts.push_back(static_cast<uint32_t>(out.size()));
    } else {
      while (shared < std::min(key.size(), last.size()) && key[shared] == last[shared]) ++shared;
    }
    out += pb_varint(shared) + pb_varint(key.size() - shared) + pb_varint(value.size());
    out += key.substr(shared) + value;
    last = key;
  }
  if (restarts.empty()) restarts.push_back(0);
  for (auto r : restarts) out += le32(r);
  return out + le32(static_cast<uint32_t>(restarts.size()));
}

std::string trailer(const std::string& contents, char type) {
  std::string both = contents + type;
  return std::string(1, type) + le32(tfckpt::mask_crc(tfckpt::crc32c(bytes_of(both))));
}

std::vector<std::pair<std::string, std::string>> entries_of(const std::string& contents) {
  std::vector<std::pair<std::string, std::string>> out;
  tfckpt::for_each_entry(bytes_of(contents), 0, "t.index", [&](std::string_view k, auto v) {
    out.emplace_back(std::string(k), std::string(reinterpret_cast<const char*>(v.data()), v.size()));
  });
  return out;
}

void expect_refused(const std::string& contents, const std::string& words) {
  try {
    entries_of(contents);
    FAIL() << "accepted; expected: " << words;
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("tensorflow checkpoint"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(TfckptCrc, KnownVectorsAndMasking) {
  // RFC 3720 B.4 and the "123456789" check value.
  EXPECT_EQ(tfckpt::crc32c(bytes_of("123456789")), 0xe3069283U);
  EXPECT_EQ(tfckpt::crc32c(bytes_of(std::string(32, '\0'))), 0x8a9136aaU);
  EXPECT_EQ(tfckpt::crc32c(bytes_of(std::string(32, '\xff'))), 0x62a8ab43U);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += static_cast<char>(i);
  EXPECT_EQ(tfckpt::crc32c(bytes_of(ascending)), 0x46dd794eU);
  // Extending is the CRC of the concatenation, whatever the split.
  const std::string text = "a longer text that crosses the eight-byte words of the fast path";
  for (size_t split = 0; split <= text.size(); ++split)
    EXPECT_EQ(
        tfckpt::crc32c_extend(tfckpt::crc32c(bytes_of(text.substr(0, split))), bytes_of(text.substr(split))),
        tfckpt::crc32c(bytes_of(text)));
  // LevelDB's masking: rotate right by 15, add the constant; unmask undoes it.
  EXPECT_EQ(tfckpt::mask_crc(0), 0xa282ead8U);
  EXPECT_EQ(tfckpt::mask_crc(0xe3069283U), ((0xe3069283U >> 15) | (0xe3069283U << 17)) + 0xa282ead8U);
  for (uint32_t v : {0U, 1U, 0xe3069283U, 0xffffffffU}) EXPECT_EQ(tfckpt::unmask_crc(tfckpt::mask_crc(v)), v);
}

TEST(TfckptBlock, PrefixCompressedKeysAndRestarts) {
  std::vector<std::pair<std::string, std::string>> entries;
  for (int i = 0; i < 40; ++i)
    entries.emplace_back("layer/" + std::to_string(100 + i) + "/kernel", "v" + std::to_string(i));
  EXPECT_EQ(entries_of(block(entries)), entries);
  EXPECT_EQ(entries_of(block(entries, 1)), entries);
  EXPECT_TRUE(entries_of(block({})).empty());
}

TEST(TfckptBlock, RefusesLyingRestartsAndPrefixes) {
  const std::vector<std::pair<std::string, std::string>> entries = {{"abc", "1"}, {"abd", "2"}, {"abe", "3"}};
  const std::string good = block(entries, 2);  // restarts at entries 0 and 2
  // A restart count the block cannot hold.
  std::string bad = good;
  bad.replace(bad.size() - 4, 4, le32(1000));
  expect_refused(bad, "restart points");
  bad.replace(bad.size() - 4, 4, le32(0));
  expect_refused(bad, "restart points");
  expect_refused("ab", "no restart count");
  // A restart offset inside an entry.
  bad = good;
  bad.replace(bad.size() - 8, 4, le32(3));
  expect_refused(bad, "not the start of an entry");
  // A restart offset past the entries.
  bad.replace(bad.size() - 8, 4, le32(200));
  expect_refused(bad, "not the start of an entry");
  // The first restart not at 0.
  bad = good;
  bad.replace(bad.size() - 12, 4, le32(1));
  expect_refused(bad, "first restart point");
  // A shared prefix longer than the previous key.
  std::string entry =
      pb_varint(0) + pb_varint(2) + pb_varint(0) + "ab" + pb_varint(5) + pb_varint(0) + pb_varint(0);
  expect_refused(entry + le32(0) + le32(1), "shares 5 bytes");
  // A restart point whose key shares a prefix.
  entry = pb_varint(0) + pb_varint(2) + pb_varint(0) + "ab";
  const std::string second = pb_varint(1) + pb_varint(1) + pb_varint(0) + "c";
  expect_refused(entry + second + le32(0) + le32(static_cast<uint32_t>(entry.size())) + le32(2),
                 "shares a prefix");
  // Varints and lengths past the entries.
  expect_refused(std::string("\x80\x80", 2) + le32(0) + le32(1), "run past");
  expect_refused(pb_varint(0) + pb_varint(50) + pb_varint(0) + "ab" + le32(0) + le32(1), "run past");
  expect_refused(pb_varint(0) + pb_varint(0) + pb_varint(1u << 31) + le32(0) + le32(1), "run past");
}

TEST(TfckptBlock, TrailerTypeChecksumAndSnappyLength) {
  const std::string contents = block({{"k", "v"}});
  const std::string good = contents + trailer(contents, 0);
  EXPECT_EQ(tfckpt::read_block(bytes_of(good), 0, "t.index").bytes.size(), contents.size());
  std::string bad = good;
  bad[0] ^= 1;
  EXPECT_THROW(tfckpt::read_block(bytes_of(bad), 0, "t.index"), ModelError);
  const std::string zstd = contents + trailer(contents, 2);
  try {
    tfckpt::read_block(bytes_of(zstd), 0, "t.index");
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("compression type 2"), std::string::npos) << e.what();
  }
  // Snappy: round trip, then a preamble claiming 4 GiB.
  std::string compressed;
  snappy::Compress(contents.data(), contents.size(), &compressed);
  const std::string snappy_block = compressed + trailer(compressed, 1);
  const auto block_read = tfckpt::read_block(bytes_of(snappy_block), 0, "t.index");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(block_read.bytes.data()), block_read.bytes.size()),
            contents);
  const std::string lying = pb_varint(0xffffffffULL) + compressed.substr(1);
  try {
    tfckpt::read_block(bytes_of(lying + trailer(lying, 1)), 0, "t.index");
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
}

TEST(TfckptFooter, MagicAndHandles) {
  std::string footer = (pb_varint(0) + pb_varint(10) + pb_varint(15) + pb_varint(10));
  footer.resize(40, '\0');
  footer += le32(0x8b80fb57U) + le32(0xdb477524U);
  const auto f = tfckpt::parse_footer(bytes_of(footer), 30 + 48, "t.index");
  EXPECT_EQ(f.index.offset, 15U);
  EXPECT_EQ(f.metaindex.size, 10U);
  // A block that runs into the footer, and a wrong magic.
  EXPECT_THROW(tfckpt::parse_footer(bytes_of(footer), 29 + 48, "t.index"), ModelError);
  std::string bad = footer;
  bad[47] ^= 1;
  EXPECT_THROW(tfckpt::parse_footer(bytes_of(bad), 30 + 48, "t.index"), ModelError);
}

TEST(TfckptSliceKey, DecodesEncodedNamesAndExtents) {
  // EncodeTensorNameSlice("a\0b", [0, 2) x full, [-3? no]: start 100, length 70000).
  std::string key("\x00", 1);
  key += std::string(
             "a\x00\xff"
             "b\xff\x00",
             6) +
         std::string("\x00\x01", 2);  // "a\0b\xff" escaped
  key += std::string("\x01\x02", 2);  // rank 2
  key += "\x80";                      // start 0
  key += "\x82";                      // length 2
  key += std::string("\xc0\x64", 2);  // start 100
  key += "\x7f";                      // length -1
  const auto slice = tfckpt::decode_slice_key(key);
  ASSERT_TRUE(slice);
  EXPECT_EQ(slice->name, std::string("a\x00"
                                     "b\xff",
                                     4));
  ASSERT_EQ(slice->extents.size(), 2U);
  EXPECT_EQ(slice->extents[0], (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_EQ(slice->extents[1], (std::pair<int64_t, int64_t>{100, -1}));
  // Three-byte value: 70000 needs 17 bits, length 3 (header 0xe0).
  std::string three = std::string("\x00", 1) + "w" + std::string("\x00\x01", 2) + std::string("\x01\x01", 2) +
                      "\x80" + std::string("\xe1\x11\x70", 3);
  const auto s3 = tfckpt::decode_slice_key(three);
  ASSERT_TRUE(s3);
  EXPECT_EQ(s3->extents[0].second, 70000);
  // Trailing bytes, a missing terminator, a rank with too few extents.
  EXPECT_FALSE(tfckpt::decode_slice_key(key + "x"));
  EXPECT_FALSE(
      tfckpt::decode_slice_key(std::string("\x00"
                                           "abc",
                                           4)));
  EXPECT_FALSE(tfckpt::decode_slice_key(key.substr(0, key.size() - 1)));
  EXPECT_FALSE(tfckpt::decode_slice_key("plain"));
}

// A whole bundle: one raw data block, the metaindex and index, the footer.
std::string index_bytes(const std::vector<std::pair<std::string, std::string>>& entries) {
  const std::string data = block(entries);
  std::string out = data + trailer(data, 0);
  const std::string meta = block({});
  const uint64_t meta_at = out.size();
  out += meta + trailer(meta, 0);
  const std::string last = entries.empty() ? std::string() : entries.back().first;
  const std::string index = block({{last, pb_varint(0) + pb_varint(data.size())}}, 1);
  const uint64_t index_at = out.size();
  out += index + trailer(index, 0);
  std::string footer =
      pb_varint(meta_at) + pb_varint(meta.size()) + pb_varint(index_at) + pb_varint(index.size());
  footer.resize(40, '\0');
  return out + footer + le32(0x8b80fb57U) + le32(0xdb477524U);
}

std::string header(uint64_t shards = 1) { return pb_uint(1, shards) + pb_bytes(3, pb_uint(1, 1)); }
std::string entry(uint64_t dtype, std::vector<uint64_t> shape, uint64_t offset, uint64_t size,
                  uint32_t crc = 0) {
  std::string dims;
  for (auto d : shape) dims += pb_bytes(2, pb_uint(1, d));
  return pb_uint(1, dtype) + pb_bytes(2, dims) + pb_uint(4, offset) + pb_uint(5, size) + pb_fixed32(6, crc);
}

TEST(TfckptBundle, OpensAndProbes) {
  TempDir dir;
  const std::string data(24, '\x01');
  const auto index = dir.write(
      "m.index", index_bytes({{"", header()}, {"a", entry(1, {2, 2}, 0, 16)}, {"b", entry(9, {1}, 16, 8)}}));
  dir.write("m.data-00000-of-00001", data);
  const Catalog catalog = open_model(index);
  ASSERT_EQ(catalog.tensors().size(), 2U);
  EXPECT_EQ(catalog.tensors()[0].name, "a");
  EXPECT_EQ(catalog.tensors()[1].dtype, DType::Int64);
  EXPECT_EQ(catalog.metadata["bundle"]["num_shards"], 1);
  const std::string bytes = index_bytes({{"", header()}});
  EXPECT_TRUE(tfckpt::probe_file(bytes_of(bytes)));
  EXPECT_FALSE(tfckpt::probe_file(bytes_of(bytes.substr(1))));
}

void expect_open_refused(const std::vector<std::pair<std::string, std::string>>& entries,
                         const std::string& words, const std::string& data = std::string(16, '\0')) {
  TempDir dir;
  const auto index = dir.write("m.index", index_bytes(entries));
  dir.write("m.data-00000-of-00001", data);
  try {
    // The reader itself: detection would not take a table without a header.
    tfckpt::open_file(ModelFile::open(index));
    FAIL() << "accepted; expected: " << words;
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("tensorflow checkpoint"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(TfckptBundle, Refusals) {
  expect_open_refused({{"a", entry(1, {1}, 0, 4)}}, "header");
  expect_open_refused({{"", header()}, {"a", entry(1, {8}, 0, 32)}}, "not inside");
  expect_open_refused({{"", header()}, {"a", entry(1, {3}, 0, 16)}}, "needs 12");
  expect_open_refused({{"", header()}, {"a", entry(99, {1}, 0, 4)}}, "unknown dtype 99");
  expect_open_refused({{"", header(0)}, {"a", entry(1, {1}, 0, 4)}}, "shard 0");
  expect_open_refused({{"", pb_uint(1, 1) + pb_uint(2, 1)}, {"a", entry(1, {1}, 0, 4)}}, "big-endian");
  expect_open_refused(
      {{"", header()}, {"a", pb_uint(1, 1) + pb_bytes(2, pb_bytes(2, pb_uint(1, ~uint64_t{0})))}},
      "dimension -1");
  // A slice stored under a key no partitioned tensor lists.
  std::string slice_key(
      "\x00"
      "w\x00\x01\x01\x01\x80\x82",
      8);
  expect_open_refused({{"", header()}, {slice_key, entry(1, {2}, 0, 8)}}, "no partitioned tensor");
  // Strings whose lengths run past the entry.
  expect_open_refused({{"", header()}, {"s", entry(7, {2}, 0, 4)}}, "\"s\"",
                      std::string("\x05\x05\x00\x00", 4));
}

}  // namespace
}  // namespace modelfs
