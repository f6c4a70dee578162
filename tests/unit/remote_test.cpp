// SPDX-License-Identifier: Apache-2.0
// What a URL names: the name shown (no secrets), the request it becomes,
// and the files a remote model may name beside it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "modelfs/error.hpp"
#include "modelfs/model_folder.hpp"
#include "modelfs/remote.hpp"

namespace modelfs {
namespace {

// Sets environment variables for one test, restoring them after.
class Env {
 public:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~Env() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
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

}  // namespace
}  // namespace modelfs
