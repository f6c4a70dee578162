// SPDX-License-Identifier: Apache-2.0
#pragma once
// The HTTP side of a remote object (blocks.cpp): libcurl requests with the
// options every request shares, the probe that pins the version mounted,
// and the body callback that writes a range's bytes into the cache file
// (with each block's checksum) once the answer is the pinned version's.
#include <curl/curl.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "remote/remote.hpp"

namespace modelfs::remote {

constexpr int kAttempts = 4;

// Set by set_cache_options before any object opens.
extern CacheOptions cache_options;
// Set once, as the process exits (FetchPool::stop_at_exit): every transfer
// ends at its next progress callback and no fetch starts or retries.
extern std::atomic<bool> process_ending;

// What a response said: libcurl's code, the status, and from its headers
// (the last response's, after redirects; the Hub's commit from whichever
// response carried it).
struct Response {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string etag;
  std::string last_modified;
  std::string content_range;
  std::string commit;
  std::string error;  // set by the body callback when it refused the body
  // The bytes a 206 must carry (the range asked for): one whose
  // Content-Length claims other is cut at its headers, not waited out.
  uint64_t expect_length = 0;
  long current_status = 0;  // of the response whose headers are coming
  std::optional<uint64_t> content_length;
};

// The start of the error of a 206 whose length is not the range's.
constexpr std::string_view kClaimsLength = "the server's answer claims ";

// What the first request learns, and what pins the version mounted: the
// Hub's commit for an hf:// URL the Hub named one for, else the ETag, else
// (a server without ETags) Last-Modified with the size. Every later answer
// must carry the same validator, or its bytes are refused (pinned_by).
struct Identity {
  uint64_t size = 0;
  std::string etag;
  std::string last_modified;  // the validator only when there is no ETag
  std::string commit;         // the Hub's, when it pins the object
  std::string url;            // pinned: redirects resolved, or the Hub's commit
  timespec mtime{};
  // Sent with every range so that a server which honours it refuses (412)
  // rather than answers from another version: If-Match with a strong ETag,
  // If-Unmodified-Since with Last-Modified when there is no ETag; none for a
  // Hub commit (the URL itself is immutable) or a weak ETag (If-Match
  // compares strongly, so a weak one would always fail). If-Range is never
  // sent: a server whose object changed would answer it with 200 and the
  // whole other version.
  std::string precondition;
};

// What a body callback keeps: the probe's uses the first three fields.
struct Body {
  CURL* handle = nullptr;
  Response* response = nullptr;
  uint64_t received = 0;
  int fd = -1;
  uint64_t offset = 0, length = 0;
  const Identity* id = nullptr;
  bool checked = false;
  uint32_t* crcs = nullptr;  // a checksum per block of the range, of the bytes received
};

// One handle a thread, reset for each request: its connections are kept.
CURL* thread_handle();
// Requests `range` of `url` on `c` with the options every request shares
// (protocols, redirects, the deadline, auth) and `precondition` (a header
// line, or empty), the body going to `write`.
void perform(CURL* c, const Target& target, const std::string& url, const std::string& range,
             const std::string& precondition, Response& response, curl_write_callback write, void* body);
// Whether a failed request may be tried again.
bool transient(const Response& r);
void back_off(int attempt);
// Why a request failed: libcurl's words, or the status's.
std::string failure_text(const Response& r);
[[noreturn]] void refuse(const Target& target, const std::string& why);
// Empty when `r` carries the validator `id` was pinned by; else why its
// bytes cannot be taken as the mounted object's.
std::string pinned_by(const Identity& id, const Response& r);
// The first request (byte 0): the object's size and the version pinned.
Identity probe(const Target& target);
// The body callback of a range request (Body): writes the bytes asked for
// into the cache file once the headers show the pinned version's answer.
size_t range_body(char* data, size_t size, size_t count, void* user);

}  // namespace modelfs::remote
