// SPDX-License-Identifier: Apache-2.0
// What a URL names: the http(s) URL to request, how to authenticate, and
// the name to show. s3:// and hf:// are resolved through the environment
// their own tools use (docs/remote.md).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "modelfs/error.hpp"
#include "remote/remote.hpp"

namespace modelfs::remote {
namespace {

// The first of the variables `names` that is set and not empty, or `fallback`.
std::string env(std::initializer_list<const char*> names, std::string fallback = {}) {
  for (const char* name : names)
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return value;
  return fallback;
}

[[noreturn]] void refuse(std::string_view name, const std::string& why) {
  throw ModelError(display_url(name), "remote", std::nullopt, why);
}

// Characters a path segment may hold as they are; the rest percent-encoded.
std::string encode_path(std::string_view path, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : path) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

// The [profile] section of ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE).
std::map<std::string, std::string> aws_profile(const std::string& profile) {
  std::ifstream in(env({"AWS_SHARED_CREDENTIALS_FILE"}, env({"HOME"}, "/root") + "/.aws/credentials"));
  std::map<std::string, std::string> values;
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      inside = line == "[" + profile + "]";
      continue;
    }
    const auto eq = line.find('=');
    if (inside && eq != std::string::npos) values[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return values;
}

// The commit each hf://OWNER/REPO@REV was found at, so that every file of
// a model (the index, its shards) comes from the same commit.
std::mutex hub_lock;
std::map<std::string, std::string> hub_commits;

Target resolve_s3(std::string_view name) {
  const std::string_view rest = name.substr(5);
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == rest.size())
    refuse(name, "an S3 URL is s3://BUCKET/KEY");
  const std::string bucket(rest.substr(0, slash));
  const std::string key(rest.substr(slash + 1));
  const std::string region = env({"AWS_REGION", "AWS_DEFAULT_REGION"}, "us-east-1");
  Target t;
  t.display = display_url(name);
  std::string endpoint = env({"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"});
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  // A custom endpoint (MinIO, a local server) is addressed path-style; AWS
  // itself by the bucket's virtual host.
  t.url = endpoint.empty()
              ? "https://" + bucket + ".s3." + region + ".amazonaws.com/" + encode_path(key, true)
              : endpoint + "/" + encode_path(bucket, false) + "/" + encode_path(key, true);
  std::string id = env({"AWS_ACCESS_KEY_ID"});
  std::string secret = env({"AWS_SECRET_ACCESS_KEY"});
  std::string token = env({"AWS_SESSION_TOKEN"});
  if (id.empty() || secret.empty()) {
    auto values = aws_profile(env({"AWS_PROFILE"}, "default"));
    id = values["aws_access_key_id"];
    secret = values["aws_secret_access_key"];
    token = values["aws_session_token"];
  }
  if (!id.empty() && !secret.empty()) {
    t.sigv4 = "aws:amz:" + region + ":s3";
    t.userpwd = id + ":" + secret;
    // S3 wants the payload's hash signed; a GET has none to send.
    t.headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!token.empty()) t.headers.push_back("x-amz-security-token: " + token);
  }
  return t;
}

Target resolve_hub(std::string_view name) {
  // hf://OWNER/REPO[@REVISION][/PATH]
  std::string_view rest = name.substr(5);
  const auto first = rest.find('/');
  if (first == std::string_view::npos || first == 0)
    refuse(name, "a Hub URL is hf://OWNER/REPO[@REVISION]/PATH");
  const std::string owner(rest.substr(0, first));
  rest = rest.substr(first + 1);
  const auto second = rest.find('/');
  std::string repo(rest.substr(0, second));
  const std::string path(second == std::string_view::npos ? std::string_view() : rest.substr(second + 1));
  std::string revision = "main";
  if (const auto at = repo.find('@'); at != std::string::npos) {
    revision = repo.substr(at + 1);
    repo.resize(at);
  }
  if (repo.empty() || revision.empty()) refuse(name, "a Hub URL is hf://OWNER/REPO[@REVISION]/PATH");
  Target t;
  t.display = display_url(name);
  t.hub_repo_rev = owner + "/" + repo + "@" + revision;
  {
    std::lock_guard lock(hub_lock);
    if (auto it = hub_commits.find(t.hub_repo_rev); it != hub_commits.end()) revision = it->second;
  }
  std::string endpoint = env({"HF_ENDPOINT"}, "https://huggingface.co");
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  t.url = endpoint + "/" + encode_path(owner, false) + "/" + encode_path(repo, false) + "/resolve/" +
          encode_path(revision, false) + "/" + encode_path(path, true);
  std::string token = env({"HF_TOKEN"});
  if (token.empty()) {
    std::ifstream in(env({"HF_HOME"}, env({"HOME"}, "/root") + "/.cache/huggingface") + "/token");
    std::getline(in, token);
    token = trim(token);
  }
  if (!token.empty()) t.headers.push_back("Authorization: Bearer " + token);
  return t;
}

}  // namespace

bool is_url(std::string_view name) {
  return name.starts_with("http://") || name.starts_with("https://") || name.starts_with("s3://") ||
         name.starts_with("hf://");
}

std::string display_url(std::string_view url) {
  url = url.substr(0, std::min(url.find('?'), url.find('#')));
  // user:password@ in the authority
  if (const auto scheme = url.find("://"); scheme != std::string_view::npos) {
    const auto authority = scheme + 3;
    const auto end = std::min(url.find('/', authority), url.size());
    const auto at = url.substr(authority, end - authority).rfind('@');
    if (at != std::string_view::npos)
      return std::string(url.substr(0, authority)) + std::string(url.substr(authority + at + 1));
  }
  return std::string(url);
}

std::string parent_url(std::string_view url) {
  url = url.substr(0, std::min(url.find('?'), url.find('#')));
  const auto slash = url.rfind('/');
  return std::string(url.substr(0, slash == std::string_view::npos ? 0 : slash));
}

Target resolve(std::string_view name) {
  if (name.starts_with("s3://")) return resolve_s3(name);
  if (name.starts_with("hf://")) return resolve_hub(name);
  if (!is_url(name)) refuse(name, "not a URL modelfs reads (http://, https://, s3://, hf://)");
  Target t;
  t.url = std::string(name);
  t.display = display_url(name);
  return t;
}

// modelfs keeps its own copy of the model's name.
void hide_url_secrets(int argc, char** argv, const char* model) {
  const std::string shown = display_url(model);  // parts of it dropped: never longer
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], model) != 0) continue;
    const size_t length = std::strlen(argv[i]);
    std::memcpy(argv[i], shown.data(), shown.size());
    std::memset(argv[i] + shown.size(), ' ', length - shown.size());
  }
}

std::optional<uint64_t> parse_size(std::string_view text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  std::string_view unit(end, static_cast<size_t>(text.data() + text.size() - end));
  int shift = 0;
  if (!unit.empty()) {
    const char upper = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    const auto at = std::string_view("KMGT").find(upper);
    if (at == std::string_view::npos) return std::nullopt;
    shift = 10 * static_cast<int>(at + 1);
    unit.remove_prefix(1);
    if (unit != "" && unit != "B" && unit != "iB") return std::nullopt;
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

void pin_hub_commit(const std::string& repo_rev, const std::string& commit) {
  std::lock_guard lock(hub_lock);
  hub_commits.emplace(repo_rev, commit);
}

}  // namespace modelfs::remote
