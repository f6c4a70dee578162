// SPDX-License-Identifier: Apache-2.0
// The block cache's record header and the checks of its folder and files
// (src/remote/cache_object.hpp). Oracle: the format as documented there.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "remote/cache_object.hpp"

namespace modelfs::remote::cache {
namespace {

const std::string kKey = "0123456789abcdef0123456789abcdef01234567";

std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST(CacheRecord, HeaderRoundTrips) {
  const std::string header = make_header(kKey, 12345);
  ASSERT_EQ(header.size(), kHeaderBytes);
  EXPECT_EQ(header.substr(0, 8), "MODELFSb");
  const auto parsed = parse_header(bytes_of(header));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->key, kKey);
  EXPECT_EQ(parsed->object_size, 12345u);
}

TEST(CacheRecord, ForeignOrDamagedHeadersAreNotOurs) {
  const std::string good = make_header(kKey, 12345);
  EXPECT_FALSE(parse_header(bytes_of(good.substr(0, 63))));
  EXPECT_FALSE(parse_header(bytes_of(std::string(64, '\1'))));  // version 1: a byte a block, no header
  for (size_t at : {0u, 8u, 12u, 23u, 24u, 63u}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x40);
    EXPECT_FALSE(parse_header(bytes_of(bad))) << at;
  }
  EXPECT_FALSE(parse_header(bytes_of(make_header(kKey, kMaxObjectBytes + 1))));
}

TEST(CacheRecord, ChecksumIsCrc32c) {
  // RFC 3720's check value for "123456789".
  EXPECT_EQ(checksum(0, bytes_of("123456789")), 0xe3069283u);
  EXPECT_EQ(checksum(checksum(0, bytes_of("1234")), bytes_of("56789")), 0xe3069283u);
}

class CacheFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("modelfs-cache-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(CacheFolder, MadeForTheUserAloneAndRefusedWhenOpen) {
  const int fd = open_folder(dir_ / "a" / "b");
  ::close(fd);
  EXPECT_EQ(std::filesystem::status(dir_ / "a").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);
  ::chmod((dir_ / "a" / "b").c_str(), 0770);
  EXPECT_THROW(open_folder(dir_ / "a" / "b"), Refused);
}

TEST_F(CacheFolder, LinksAreNeverFollowed) {
  const int dir_fd = open_folder(dir_);
  std::ofstream(dir_ / "victim") << "kept";
  std::filesystem::create_symlink(dir_ / "victim", dir_ / "k.data");
  EXPECT_THROW(open_file(dir_fd, "k.data"), Refused);
  std::filesystem::create_hard_link(dir_ / "victim", dir_ / "k.blocks");
  EXPECT_THROW(open_file(dir_fd, "k.blocks"), Refused);
  const int fd = open_file(dir_fd, "new.data");
  EXPECT_GE(fd, 0);
  ::close(fd);
  ::close(dir_fd);
  std::ifstream in(dir_ / "victim");
  std::string text;
  in >> text;
  EXPECT_EQ(text, "kept");
}

TEST_F(CacheFolder, PresentBlocksAreReadFromTheMarks) {
  const int dir_fd = open_folder(dir_);
  const int fd = open_file(dir_fd, kKey + ".blocks");
  const uint64_t size = 10 * kBlockBytes + 5;
  prepare_record(fd, kKey, size);
  for (uint64_t b : {0u, 7u, 10u}) {
    const Mark mark{1, 0};
    ASSERT_EQ(::pwrite(fd, &mark, sizeof mark, static_cast<off_t>(kHeaderBytes + b * sizeof(Mark))), 8);
  }
  std::vector<uint64_t> seen;
  for_each_present(fd, block_count(size), [&](uint64_t b) { seen.push_back(b); });
  EXPECT_EQ(seen, (std::vector<uint64_t>{0, 7, 10}));
  EXPECT_THROW(prepare_record(fd, kKey, size + 1), Refused);  // another object's record
  ::close(fd);
  ::close(dir_fd);
}

}  // namespace
}  // namespace modelfs::remote::cache
