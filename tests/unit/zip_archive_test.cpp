// SPDX-License-Identifier: Apache-2.0
// The ZIP directory reader: PyTorch's layout (data descriptors, alignment
// padding, forced ZIP64), stored, deflated and bzip2 members (decompressed
// by libzip), a nested archive, truncated or corrupt directories refused
// with ModelError, and --check's second reading of the archive by libzip.
#include <gtest/gtest.h>
#include <zip.h>
#include <zlib.h>

#include <fstream>
#include <iterator>

#include "io/budget_charge.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/error.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using test::TempDir;
using test::zip_bytes;
using test::ZipEntry;
using test::ZipLayout;

ZipArchive open_bytes(const TempDir& dir, const std::string& bytes) {
  return ZipArchive::open(MappedFile::open(dir.write("a.zip", bytes)), "ZIP archive");
}

std::string text(const ByteSpan& span) { return std::string(span.view()); }

const std::vector<ZipEntry> kEntries = {
    {"archive/data.pkl", "pickle bytes", 0},
    {"archive/data/0", std::string(100, '\x07'), 0},
    {"archive/data/1", "", 0},
    {"archive/version", "3\n", 0},
};

void expect_entries(const ZipArchive& zip, uint64_t alignment) {
  ASSERT_EQ(zip.members().size(), kEntries.size());
  for (const auto& e : kEntries) {
    const ZipMember* m = zip.find(e.name);
    ASSERT_NE(m, nullptr) << e.name;
    EXPECT_EQ(m->uncompressed_size, e.data.size());
    EXPECT_EQ(m->compressed_size, e.data.size());
    EXPECT_TRUE(m->stored());
    if (alignment) EXPECT_EQ(m->data_offset % alignment, 0u) << e.name;
    EXPECT_EQ(text(zip.contents(*m)), e.data);
    EXPECT_NE(zip.contents(*m).mapped_file(), nullptr) << "stored bytes are served in place";
  }
  EXPECT_EQ(zip.find("archive/missing"), nullptr);
}

TEST(ZipArchive, PyTorchLayoutWithDataDescriptorsAndAlignment) {
  TempDir dir;
  expect_entries(open_bytes(dir, zip_bytes(kEntries)), 64);
}

TEST(ZipArchive, PlainLayoutWithoutDescriptorsOrPadding) {
  TempDir dir;
  expect_entries(open_bytes(dir, zip_bytes(kEntries, {false, false, 0})), 0);
}

TEST(ZipArchive, Zip64RecordsAndExtraFields) {
  TempDir dir;
  auto bytes = zip_bytes(kEntries, {true, true, 64});
  expect_entries(open_bytes(dir, bytes), 64);
}

TEST(ZipArchive, CrcIsRecordedButNeverRequired) {
  TempDir dir;
  auto zip = open_bytes(dir, zip_bytes({{"a/version", "3\n", 0}}));
  EXPECT_NE(zip.find("a/version")->crc32, 0u);
}

TEST(ZipArchive, DeflatedMemberIsInflatedIntoOwnedBytes) {
  TempDir dir;
  std::string big(200'000, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 % 251);
  auto zip = open_bytes(dir, zip_bytes({{"a/code.py", big, 8}, {"a/data/0", "abcd", 0}}));
  const ZipMember* m = zip.find("a/code.py");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->method, ZipArchive::kDeflated);
  auto bytes = zip.contents(*m);
  EXPECT_EQ(bytes.mapped_file(), nullptr);
  EXPECT_EQ(text(bytes), big);
  EXPECT_EQ(text(zip.contents(*zip.find("a/data/0"))), "abcd");
}

// A raw deflate stream made by zlib's own compressor (Huffman-coded
// blocks, back references), not by the test's writer of stored blocks.
std::string zlib_deflate(const std::string& data, int level = 9) {
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, level, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&stream, data.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

std::string compressible_text() {
  std::string content(50'000, 'a');
  for (size_t i = 0; i < content.size(); i += 3) content[i] = 'b';
  for (size_t i = 0; i < content.size(); i += 1000) content[i] = static_cast<char>('0' + i % 10);
  return content;
}

TEST(ZipArchive, MemberCompressedByZlib) {
  TempDir dir;
  const std::string content = compressible_text();
  const std::string stream = zlib_deflate(content);
  ASSERT_LT(stream.size(), content.size() / 10) << "zlib compressed it for real";
  auto zip = open_bytes(dir, zip_bytes({{"m/code.py", content, 8, stream}, {"m/data/0", "abcd", 0}}));
  const ZipMember* m = zip.find("m/code.py");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->method, ZipArchive::kDeflated);
  EXPECT_EQ(m->compressed_size, stream.size());
  EXPECT_EQ(text(zip.contents(*m)), content);
  EXPECT_EQ(text(zip.contents(*zip.find("m/data/0"))), "abcd");
}

TEST(ZipArchive, EmptyDeflatedMember) {
  TempDir dir;
  auto zip = open_bytes(dir, zip_bytes({{"m/empty", "", 8, zlib_deflate("")}}));
  EXPECT_EQ(text(zip.contents(*zip.find("m/empty"))), "");
}

void expect_inflate_refused(const ZipEntry& entry, const std::string& why_part) {
  TempDir dir;
  auto zip = open_bytes(dir, zip_bytes({entry}));
  try {
    zip.contents(*zip.find(entry.name));
    FAIL() << "inflated a bad member (" << why_part << ")";
  } catch (const ModelError& e) {
    EXPECT_NE(e.reason().find("cannot inflate"), std::string::npos) << e.what();
    EXPECT_NE(e.reason().find(why_part), std::string::npos) << e.what();
  }
}

TEST(ZipArchive, BadDeflateStreamsAreRefused) {
  const std::string content = compressible_text();
  const std::string stream = zlib_deflate(content);
  // Cut short: the member's bytes end inside the stream.
  expect_inflate_refused({"m/a", content, 8, stream.substr(0, stream.size() / 2)},
                         "ends before the deflate stream does");
  // The stream holds more than the directory's size.
  expect_inflate_refused({"m/a", content.substr(0, 100), 8, stream}, "more bytes than its size");
  // ... or less.
  expect_inflate_refused({"m/a", content + "tail", 8, stream}, "fewer than its size");
  // Right size, wrong bytes: the CRC catches it.
  expect_inflate_refused({"m/a", content, 8, stream, 0x12345678u}, "CRC-32 is");
  // Not deflate at all (block type 3 is reserved): zlib's Z_DATA_ERROR, as
  // libzip reports it.
  expect_inflate_refused({"m/a", "abc", 8, std::string("\xff\xff\xff\xff", 4)}, "data error");
  // No bytes at all for a non-empty member.
  expect_inflate_refused({"m/a", "x", 8, std::string()}, "ends before");
}

TEST(ZipArchive, ImpossibleInflatedSizeIsRefusedBeforeAllocating) {
  TempDir dir;
  // 10 bytes of deflate cannot make 1 MB: refused on the sizes alone.
  auto zip = open_bytes(dir, zip_bytes({{"m/bomb", std::string(1'000'000, 'x'), 8, std::string(10, '\0')}}));
  try {
    zip.contents(*zip.find("m/bomb"));
    FAIL() << "accepted an impossible size";
  } catch (const ModelError& e) {
    EXPECT_NE(e.reason().find("cannot make 1000000"), std::string::npos) << e.what();
  }
  // A real stream near the limit still inflates.
  const std::string zeros(2'000'000, '\0');
  auto dense = open_bytes(dir, zip_bytes({{"m/zeros", zeros, 8, zlib_deflate(zeros)}}));
  EXPECT_EQ(text(dense.contents(*dense.find("m/zeros"))), zeros);
}

TEST(ZipArchive, NestedArchiveReadInPlace) {
  TempDir dir;
  const std::string inner = zip_bytes(kEntries);
  const std::string outer_bytes =
      zip_bytes({{"serialized_exported_program.json", "{}", 0}, {"serialized_state_dict.pt", inner, 0}},
                {false, false, 0});
  auto outer = open_bytes(dir, outer_bytes);
  const ZipMember* member = outer.find("serialized_state_dict.pt");
  ASSERT_NE(member, nullptr);
  auto nested = outer.nested(*member);
  EXPECT_EQ(nested.base(), outer.file_offset(*member));
  expect_entries(nested, 64);
  // Offsets in the nested archive are its own; file offsets add its base.
  const ZipMember* data = nested.find("archive/data/0");
  EXPECT_EQ(outer_bytes.substr(nested.file_offset(*data), 100), std::string(100, '\x07'));
}

TEST(ZipArchive, CompressedMemberCannotBeOpenedAsNestedArchive) {
  TempDir dir;
  auto outer = open_bytes(dir, zip_bytes({{"inner.zip", zip_bytes(kEntries), 8}}));
  EXPECT_THROW(outer.nested(*outer.find("inner.zip")), ModelError);
}

void expect_refused(const std::string& bytes, const std::string& why_part) {
  TempDir dir;
  try {
    open_bytes(dir, bytes);
    FAIL() << "accepted a bad archive (" << why_part << ")";
  } catch (const ModelError& e) {
    EXPECT_NE(e.reason().find(why_part), std::string::npos) << e.what();
  }
}

TEST(ZipArchive, RefusesTruncatedAndCorruptDirectories) {
  const std::string good = zip_bytes(kEntries);
  const std::string good64 = zip_bytes(kEntries, {true, true, 64});
  const size_t end = good.size() - 22;
  const size_t directory = good.rfind(std::string("PK\x01\x02", 4), end);
  const size_t first_directory = good.find(std::string("PK\x01\x02", 4));
  ASSERT_NE(directory, std::string::npos);

  expect_refused("", "too short");
  expect_refused(std::string(100, 'x'), "no end-of-central-directory");
  expect_refused(good.substr(0, good.size() - 10), "no end-of-central-directory");
  expect_refused(good.substr(first_directory), "outside the archive");

  std::string bad = good;
  bad[directory] = 'X';
  expect_refused(bad, "central directory header signature");

  bad = good;  // entry count larger than the directory can hold
  bad[end + 10] = '\x7f';
  expect_refused(bad, "cannot fit");

  bad = good;  // directory offset past the end record
  bad[end + 16 + 3] = '\x7f';
  expect_refused(bad, "outside the archive");

  bad = good;  // local header offset of the first member points at garbage
  bad[first_directory + 42] = '\x05';
  expect_refused(bad, "local header signature");

  bad = good;  // first member's stored size made huge
  bad[first_directory + 20 + 3] = '\x10';
  bad[first_directory + 24 + 3] = '\x10';
  expect_refused(bad, "run into the central directory");

  bad = good64;  // ZIP64 locator pointing past the archive
  const size_t locator = good64.size() - 22 - 20;
  bad[locator + 8 + 6] = '\x7f';
  expect_refused(bad, "ZIP64 end record offset");

  bad = good64;  // ZIP64 end record with a broken signature
  const size_t record = good64.rfind(std::string("PK\x06\x06", 4));
  bad[record] = 'X';
  expect_refused(bad, "ZIP64 end-of-central-directory signature");

  bad = good64;  // ZIP64 extra field cut short: its size says 4, not 24
  const size_t extra = good64.find(std::string("\x01\x00\x18\x00", 4), first_directory);
  ASSERT_NE(extra, std::string::npos);
  bad[extra + 2] = '\x04';
  expect_refused(bad, "");
}

TEST(ZipArchive, RefusesDuplicateNames) {
  expect_refused(zip_bytes({{"a/x", "1", 0}, {"a/x", "2", 0}}), "appears twice");
}

TEST(ZipArchive, RefusesRangeOutsideTheFile) {
  TempDir dir;
  auto file = MappedFile::open(dir.write("a.zip", zip_bytes(kEntries)));
  EXPECT_THROW(ZipArchive::open(file, 10, file->size(), "ZIP archive"), ModelError);
}

}  // namespace
}  // namespace modelfs

namespace modelfs {
namespace {

// What members inflate to is charged to the model's budget while they are
// held, all of them together: each within the per-member limit, the total not.
TEST(ZipArchive, InflatedMembersTogetherAreBoundByTheBudget) {
  TempDir dir;
  const std::string content = compressible_text();  // 50 000 bytes
  const std::string stream = zlib_deflate(content);
  auto zip = open_bytes(
      dir,
      zip_bytes({{"m/a", content, 8, stream}, {"m/b", content, 8, stream}, {"m/c", content, 8, stream}}));
  Budget budget(120'000);  // room for two members, not three
  BudgetScope scope(budget);
  const ByteSpan a = zip.contents(*zip.find("m/a"));
  const ByteSpan b = zip.contents(*zip.find("m/b"));
  EXPECT_EQ(a.view(), content);  // views: a copy would be charged too
  EXPECT_EQ(b.view(), content);
  try {
    (void)zip.contents(*zip.find("m/c"));
    FAIL() << "a third member inflated past the budget";
  } catch (const ModelError& e) {
    EXPECT_NE(e.reason().find("inflating m/c"), std::string::npos) << e.reason();
    EXPECT_NE(e.reason().find("max_parse_mb"), std::string::npos) << e.reason();
  }
}

}  // namespace
}  // namespace modelfs

namespace modelfs {
namespace {

void run_checks(const ZipArchive& zip) {
  for (const auto& check : zip.crc_checks()) check.run([](uint64_t) {});
}

void expect_check_fails(const ZipArchive& zip, const std::string& why_part) {
  try {
    run_checks(zip);
    FAIL() << "--check passed a bad archive (" << why_part << ")";
  } catch (const ModelError& e) {
    EXPECT_NE(e.reason().find(why_part), std::string::npos) << e.what();
  }
}

// An archive written by libzip (an independent writer): `compressed` members
// with `method`, `stored` ones stored.
std::string libzip_written(const TempDir& dir,
                           const std::vector<std::pair<std::string, std::string>>& compressed, int method,
                           const std::vector<std::pair<std::string, std::string>>& stored = {}) {
  const auto path = dir.path() / "written.zip";
  int error = 0;
  zip_t* za = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  EXPECT_NE(za, nullptr) << error;
  auto add = [&](const std::string& name, const std::string& data, int how) {
    zip_source_t* source = zip_source_buffer(za, data.data(), data.size(), 0);
    const zip_int64_t index = zip_file_add(za, name.c_str(), source, ZIP_FL_ENC_UTF_8);
    EXPECT_GE(index, 0) << zip_strerror(za);
    EXPECT_EQ(zip_set_file_compression(za, static_cast<zip_uint64_t>(index), how, 9), 0);
  };
  for (const auto& [name, data] : compressed) add(name, data, method);
  for (const auto& [name, data] : stored) add(name, data, ZIP_CM_STORE);
  EXPECT_EQ(zip_close(za), 0);
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ZipArchive, Bzip2MembersAreDecompressedByLibzip) {
  ASSERT_TRUE(zip_compression_method_supported(ZIP_CM_BZIP2, 0)) << "Debian's libzip reads bzip2";
  TempDir dir;
  const std::string content = compressible_text();
  auto zip = open_bytes(dir, libzip_written(dir, {{"m/code.py", content}, {"m/empty", ""}}, ZIP_CM_BZIP2,
                                            {{"m/data/0", "abcd"}}));
  const ZipMember* m = zip.find("m/code.py");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->method, ZipArchive::kBzip2);
  EXPECT_LT(m->compressed_size, content.size() / 10);
  const ByteSpan bytes = zip.contents(*m);
  EXPECT_EQ(bytes.mapped_file(), nullptr);
  EXPECT_EQ(text(bytes), content);
  EXPECT_EQ(text(zip.contents(*zip.find("m/empty"))), "");
  EXPECT_EQ(text(zip.contents(*zip.find("m/data/0"))), "abcd");
  run_checks(zip);
}

TEST(ZipArchive, Bzip2MemberGivingMoreOrLessThanItsSizeIsRefused) {
  TempDir dir;
  const std::string content = compressible_text();
  const std::string good = libzip_written(dir, {{"m/a", content}}, ZIP_CM_BZIP2);
  const size_t central = good.rfind(std::string("PK\x01\x02", 4));
  ASSERT_NE(central, std::string::npos);
  auto with_size = [&](uint32_t size) {
    std::string bad = good;
    std::memcpy(bad.data() + central + 24, &size, 4);  // the central uncompressed size
    return bad;
  };
  auto refused = [&](const std::string& bytes, const std::string& why_part) {
    TempDir other;
    auto zip = open_bytes(other, bytes);
    try {
      zip.contents(*zip.find("m/a"));
      FAIL() << "decompressed a lying member (" << why_part << ")";
    } catch (const ModelError& e) {
      EXPECT_NE(e.reason().find(why_part), std::string::npos) << e.what();
    }
  };
  refused(with_size(static_cast<uint32_t>(content.size() - 1)), "more bytes than its size");
  refused(with_size(static_cast<uint32_t>(content.size() + 5)), "fewer than its size");
  // A bzip2 member's claimed size is not bounded by a ratio (bzip2 makes
  // 45 MB of zeros from 50 bytes): only the member limit and the budget.
  refused(with_size(0xFFFF0000u), "over the limit");
}

TEST(ZipArchive, MethodsLibzipCannotReadAreRefusedByName) {
  TempDir dir;
  // Python's zipfile.ZIP_LZMA writes method 14; Debian 12's libzip reads
  // neither it nor xz (95).
  for (uint16_t method : {uint16_t{14}, uint16_t{95}, uint16_t{99}}) {
    if (zip_compression_method_supported(method, 0)) continue;
    auto zip = open_bytes(dir, zip_bytes({{"m/a", "abc", method, std::string("xyz")}}));
    try {
      zip.contents(*zip.find("m/a"));
      FAIL() << "method " << method;
    } catch (const ModelError& e) {
      EXPECT_NE(e.reason().find("is not supported (libzip here reads stored, deflate"), std::string::npos)
          << e.what();
    }
    // --check says the same of the member (its own check, after libzip's
    // reading of the directory).
    const auto checks = zip.crc_checks();
    ASSERT_EQ(checks.size(), 2u);
    try {
      checks[1].run([](uint64_t) {});
      FAIL() << "method " << method << " passed --check";
    } catch (const ModelError& e) {
      EXPECT_NE(e.reason().find("is not supported"), std::string::npos) << e.what();
    }
  }
}

TEST(ZipArchive, CheckReadsEveryLayoutAgainThroughLibzip) {
  for (const ZipLayout& layout : {ZipLayout{}, ZipLayout{false, false, 0}, ZipLayout{true, true, 64}}) {
    TempDir dir;
    auto zip = open_bytes(dir, zip_bytes(kEntries, layout));
    const auto checks = zip.crc_checks();
    EXPECT_EQ(checks.size(), kEntries.size() + 1);
    uint64_t read = 0;
    for (const auto& check : checks) check.run([&](uint64_t n) { read += n; });
    EXPECT_EQ(read, 100u + 12u + 2u);
  }
  TempDir dir;
  const std::string content = compressible_text();
  run_checks(open_bytes(dir, zip_bytes({{"m/a", content, 8, zlib_deflate(content)}, {"m/b", "x", 0}})));
}

TEST(ZipArchive, CheckFindsWhatLibzipReadsDifferently) {
  TempDir dir;
  // A stored member whose bytes do not match the directory's CRC-32.
  expect_check_fails(open_bytes(dir, zip_bytes({{"m/a", "abcd", 0, std::nullopt, 0x12345678u}})),
                     "CRC-32 is");
  // A local header naming another member than the directory does: our
  // reader takes names from the directory alone; ZIP_CHECKCONS compares.
  std::string bytes = zip_bytes({{"m/a", "abcd", 0}, {"m/b", "efgh", 0}}, {false, false, 0});
  const size_t local = bytes.find(std::string("PK\x03\x04", 4));
  ASSERT_EQ(bytes.substr(local + 30, 3), "m/a");
  bytes[local + 32] = 'z';
  auto zip = open_bytes(dir, bytes);
  EXPECT_EQ(text(zip.contents(*zip.find("m/a"))), "abcd") << "served from the directory's reading";
  expect_check_fails(zip, "libzip finds the archive inconsistent");
}

}  // namespace
}  // namespace modelfs
