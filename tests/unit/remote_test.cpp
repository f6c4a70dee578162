// SPDX-License-Identifier: Apache-2.0
// What a URL names: the name shown (no secrets), the request it becomes,
// and the files a remote model may name beside it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "formats/model_folder.hpp"
#include "modelfs/error.hpp"
#include "remote/block_table.hpp"
#include "remote/remote.hpp"

namespace modelfs {
namespace {

// Sets environment variables for one test, restoring them after.
class Env {
 public:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~Env() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(RemoteUrl, KnowsUrlsFromPaths) {
  EXPECT_TRUE(remote::is_url("https://h/m.safetensors"));
  EXPECT_TRUE(remote::is_url("http://h/m"));
  EXPECT_TRUE(remote::is_url("s3://b/k"));
  EXPECT_TRUE(remote::is_url("hf://o/r/p"));
  EXPECT_FALSE(remote::is_url("model.safetensors"));
  EXPECT_FALSE(remote::is_url("./https://x"));
  EXPECT_FALSE(remote::is_url("ftp://h/m"));
}

TEST(RemoteUrl, DisplayDropsQueryFragmentAndUserinfo) {
  EXPECT_EQ(remote::display_url("https://h/m.gguf?X-Amz-Signature=abc&t=1"), "https://h/m.gguf");
  EXPECT_EQ(remote::display_url("https://h/m.gguf#frag"), "https://h/m.gguf");
  EXPECT_EQ(remote::display_url("https://user:pass@h:8080/m.gguf"), "https://h:8080/m.gguf");
  EXPECT_EQ(remote::display_url("https://h/a@b/m.gguf"), "https://h/a@b/m.gguf");  // '@' in the path stays
}

TEST(RemoteUrl, ParentIsTheFolderWithoutQuery) {
  EXPECT_EQ(remote::parent_url("https://h/a/b/index.json?sig=1"), "https://h/a/b");
  EXPECT_EQ(remote::parent_url("s3://bucket/key.bin"), "s3://bucket");
}

TEST(RemoteUrl, S3IsPathStyleOnACustomEndpointAndSigned) {
  Env env;
  env.set("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/");
  env.set("AWS_ENDPOINT_URL_S3", nullptr);
  env.set("AWS_REGION", "eu-west-3");
  env.set("AWS_ACCESS_KEY_ID", "AKID");
  env.set("AWS_SECRET_ACCESS_KEY", "SECRET");
  env.set("AWS_SESSION_TOKEN", "TOKEN");
  const auto t = remote::resolve("s3://bucket/dir/model 1.safetensors");
  EXPECT_EQ(t.url, "http://127.0.0.1:9000/bucket/dir/model%201.safetensors");
  EXPECT_EQ(t.sigv4, "aws:amz:eu-west-3:s3");
  EXPECT_EQ(t.userpwd, "AKID:SECRET");
  EXPECT_EQ(t.display, "s3://bucket/dir/model 1.safetensors");
  EXPECT_NE(std::find(t.headers.begin(), t.headers.end(), "x-amz-security-token: TOKEN"), t.headers.end());
}

TEST(RemoteUrl, S3OnAwsIsVirtualHostedAndAnonymousWithoutKeys) {
  Env env;
  env.set("AWS_ENDPOINT_URL", nullptr);
  env.set("AWS_ENDPOINT_URL_S3", nullptr);
  env.set("AWS_REGION", "us-west-2");
  env.set("AWS_ACCESS_KEY_ID", nullptr);
  env.set("AWS_SECRET_ACCESS_KEY", nullptr);
  env.set("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent");
  const auto t = remote::resolve("s3://bucket/k.gguf");
  EXPECT_EQ(t.url, "https://bucket.s3.us-west-2.amazonaws.com/k.gguf");
  EXPECT_TRUE(t.sigv4.empty());
  EXPECT_THROW(remote::resolve("s3://bucket"), ModelError);
}

TEST(RemoteUrl, HubResolvesRevisionAndToken) {
  Env env;
  env.set("HF_ENDPOINT", "http://mirror.local/");
  env.set("HF_TOKEN", "hf_x");
  auto t = remote::resolve("hf://org/repo@v1.0/sub/model.safetensors");
  EXPECT_EQ(t.url, "http://mirror.local/org/repo/resolve/v1.0/sub/model.safetensors");
  EXPECT_EQ(t.hub_repo_rev, "org/repo@v1.0");
  EXPECT_EQ(t.headers, std::vector<std::string>{"Authorization: Bearer hf_x"});
  t = remote::resolve("hf://org/other/model.gguf");
  EXPECT_EQ(t.url, "http://mirror.local/org/other/resolve/main/model.gguf");
  // Once a commit is pinned, later files of that revision come from it.
  remote::pin_hub_commit("org/pinned@main", "abc123");
  EXPECT_EQ(remote::resolve("hf://org/pinned/shard.safetensors").url,
            "http://mirror.local/org/pinned/resolve/abc123/shard.safetensors");
  EXPECT_THROW(remote::resolve("hf://org"), ModelError);
}

TEST(RemoteCache, SizesInBinaryUnits) {
  EXPECT_EQ(remote::parse_size("4096"), 4096u);
  EXPECT_EQ(remote::parse_size("8M"), 8u << 20);
  EXPECT_EQ(remote::parse_size("2GiB"), uint64_t{2} << 30);
  EXPECT_EQ(remote::parse_size("1t"), uint64_t{1} << 40);
  for (const char* bad : {"", "M", "8X", "8MB2", "-1", "99999999999T"})
    EXPECT_FALSE(remote::parse_size(bad)) << bad;
}

TEST(RemoteFolder, NamesStayInsideTheUrlsFolder) {
  // Refused by name, before anything is asked of a server.
  const auto folder = ModelFolder::of_file("https://h/ckpt/model.safetensors.index.json?sig=1", "index");
  EXPECT_EQ(folder.path().native(), "https://h/ckpt");
  for (const char* bad : {"../secret.bin", "/etc/passwd", "a/../../b", "x?y", "x#y", "%2e%2e/x", "a\\b", ""})
    EXPECT_EQ(folder.open(bad).problem, ModelFolder::Problem::NotAName) << bad;
}

// The per-block bookkeeping grows with the blocks touched, not with the
// object's size: a server's claim of 16 TiB costs the chunk pointers.
TEST(RemoteBlocks, ASixteenTiBClaimCostsOnlyItsChunkPointers) {
  using Table = remote::BlockTable;
  const uint64_t blocks = uint64_t{1} << 26;  // 16 TiB in 256 KiB blocks
  Table table(blocks);
  const uint64_t pointers = blocks / Table::kChunkBlocks * sizeof(void*);
  EXPECT_EQ(table.allocated_bytes(), pointers);
  EXPECT_LE(pointers, 128u << 10);
  EXPECT_EQ(table.find(12345), nullptr);
  int chunks = 0;
  table.for_each_chunk([&](uint64_t, uint64_t, const Table::Entry*) { ++chunks; });
  EXPECT_EQ(chunks, 0);

  table.at(12345).pins.fetch_add(1);
  table.at(blocks - 1).used.store(7);
  EXPECT_EQ(table.allocated_bytes(), pointers + 2 * Table::kChunkBlocks * sizeof(Table::Entry));
  ASSERT_NE(table.find(12345), nullptr);
  EXPECT_EQ(table.find(12345)->pins.load(), 1u);
  ASSERT_NE(table.find(12346), nullptr);  // the same chunk, never touched itself: zero
  EXPECT_EQ(table.find(12346)->pins.load(), 0u);
  EXPECT_FALSE(table.find(12346)->in_flight);
  EXPECT_EQ(table.find(12345 + Table::kChunkBlocks), nullptr);
  EXPECT_EQ(table.find(blocks - 1)->used.load(), 7u);

  std::vector<std::pair<uint64_t, uint64_t>> seen;
  table.for_each_chunk([&](uint64_t first, uint64_t count, const Table::Entry* entries) {
    seen.emplace_back(first, count);
    if (first <= 12345 && 12345 < first + count) EXPECT_EQ(entries[12345 - first].pins.load(), 1u);
  });
  const std::vector<std::pair<uint64_t, uint64_t>> want{
      {12345 / Table::kChunkBlocks * Table::kChunkBlocks, Table::kChunkBlocks},
      {blocks - Table::kChunkBlocks, Table::kChunkBlocks}};
  EXPECT_EQ(seen, want);
}

TEST(RemoteBlocks, TheLastChunkEndsWithTheObject) {
  remote::BlockTable table(remote::BlockTable::kChunkBlocks + 5);
  table.at(remote::BlockTable::kChunkBlocks + 4).in_flight = true;
  std::vector<std::pair<uint64_t, uint64_t>> seen;
  table.for_each_chunk([&](uint64_t first, uint64_t count, const remote::BlockTable::Entry* entries) {
    seen.emplace_back(first, count);
    EXPECT_TRUE(entries[4].in_flight);
  });
  EXPECT_EQ(seen, (std::vector<std::pair<uint64_t, uint64_t>>{{remote::BlockTable::kChunkBlocks, 5}}));
}

TEST(RemoteBlocks, ThreadsFirstTouchingAChunkShareItsEntries) {
  remote::BlockTable table(uint64_t{1} << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (uint64_t b = 0; b < 64; ++b) table.at(500'000 + b).pins.fetch_add(1);
    });
  for (auto& thread : threads) thread.join();
  uint64_t pins = 0;
  int chunks = 0;
  table.for_each_chunk([&](uint64_t, uint64_t count, const remote::BlockTable::Entry* entries) {
    ++chunks;
    for (uint64_t i = 0; i < count; ++i) pins += entries[i].pins.load();
  });
  EXPECT_EQ(pins, 8u * 64);
  EXPECT_EQ(chunks, 1);  // 500000..500063 lie in one chunk
}

}  // namespace
}  // namespace modelfs
