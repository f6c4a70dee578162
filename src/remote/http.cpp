// SPDX-License-Identifier: Apache-2.0
// HTTP requests of remote objects (http.hpp).
#include "remote/http.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "modelfs/error.hpp"
#include "remote/cache_object.hpp"

namespace modelfs::remote {

CacheOptions cache_options;
std::atomic<bool> process_ending{false};

namespace {

using cache::kBlockBytes;
using cache::kMaxObjectBytes;
constexpr size_t kMaxHeaderValue = 1024;
std::once_flag curl_ready;

int end_when_the_process_does(void*, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return process_ending.load(std::memory_order_relaxed) ? 1 : 0;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* response = static_cast<Response*>(user);
  const std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) {
    // A new response (after a redirect): its own headers only.
    response->etag.clear();
    response->last_modified.clear();
    response->content_range.clear();
    response->content_length.reset();
    const auto space = line.find(' ');
    response->current_status = 0;
    if (space != std::string_view::npos)
      std::from_chars(line.data() + space + 1, line.data() + line.size(), response->current_status);
    return line.size();
  }
  if (line == "\r\n" || line == "\n") {
    if (response->current_status == 206 && response->expect_length != 0 && response->content_length &&
        *response->content_length != response->expect_length) {
      response->error = std::string(kClaimsLength) + std::to_string(*response->content_length) +
                        " bytes (Content-Length) for a range of " + std::to_string(response->expect_length) +
                        "; it does not serve byte ranges as HTTP says";
      return 0;  // ends the transfer here
    }
    return line.size();
  }
  const auto colon = line.find(':');
  if (colon == std::string_view::npos) return line.size();
  const std::string name = lower(line.substr(0, colon));
  std::string_view value = line.substr(colon + 1);
  value.remove_prefix(std::min(value.find_first_not_of(" \t"), value.size()));
  value = value.substr(0, value.find_last_not_of("\r\n ") + 1);
  if (value.size() > kMaxHeaderValue) return line.size();  // not one we could use
  if (name == "etag")
    response->etag = value;
  else if (name == "last-modified")
    response->last_modified = value;
  else if (name == "content-range")
    response->content_range = value;
  else if (name == "x-repo-commit")
    response->commit = value;
  else if (name == "content-length") {
    uint64_t length = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
    if (ec == std::errc() && end == value.data() + value.size())
      response->content_length = length;
    else if (ec == std::errc::result_out_of_range)
      response->content_length = UINT64_MAX;
  }
  return line.size();
}

// "bytes FIRST-LAST/TOTAL" (TOTAL may be "*"); false when malformed.
bool parse_content_range(std::string_view v, uint64_t& first, uint64_t& last, uint64_t& total) {
  if (!v.starts_with("bytes ")) return false;
  v.remove_prefix(6);
  auto number = [&](uint64_t& out, char stop) {
    const auto end = v.find(stop);
    if (end == std::string_view::npos && stop != '\0') return false;
    const auto text = v.substr(0, end);
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (ec != std::errc() || p != text.data() + text.size() || text.empty()) return false;
    v.remove_prefix(end == std::string_view::npos ? v.size() : end + 1);
    return true;
  };
  if (v.starts_with("*/")) {
    v.remove_prefix(2);
    first = last = 0;
    return number(total, '\0');
  }
  return number(first, '-') && number(last, '/') && number(total, '\0') && first <= last && last < total;
}

struct Headers {
  curl_slist* list = nullptr;
  void add(const std::string& h) {
    if (curl_slist* grown = curl_slist_append(list, h.c_str())) list = grown;
  }
  ~Headers() { curl_slist_free_all(list); }
};

// The most of an error page (or of the probe's one byte) read before the
// transfer is cut: a hostile server's endless body is never waited out.
constexpr uint64_t kMaxDiscardedBytes = 64 << 10;

size_t probe_body(char*, size_t size, size_t count, void* user) {
  auto* body = static_cast<Body*>(user);
  long status = 0;
  curl_easy_getinfo(body->handle, CURLINFO_RESPONSE_CODE, &status);
  // A whole object where one byte was asked for: stop it here.
  if (status == 200) {
    body->response->error = "ignores Range";
    return 0;
  }
  body->received += uint64_t(size) * count;
  if (body->received > (status == 206 ? 1 : kMaxDiscardedBytes)) {
    body->response->error = "sent more than was asked";
    return 0;
  }
  return size * count;
}

}  // namespace

CURL* thread_handle() {
  std::call_once(curl_ready, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  thread_local std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy(curl_easy_init(), curl_easy_cleanup);
  if (easy == nullptr) throw std::runtime_error("libcurl cannot make a handle");
  curl_easy_reset(easy.get());
  return easy.get();
}

void perform(CURL* c, const Target& target, const std::string& url, const std::string& range,
             const std::string& precondition, Response& response, curl_write_callback write, void* body) {
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  // One deadline for the whole request (resolving, connecting, redirects,
  // the body): a server that trickles is cut as surely as one that stalls.
  const long deadline_ms = static_cast<long>(std::max(1u, cache_options.timeout_seconds)) * 1000;
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, deadline_ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, deadline_ms);
  curl_easy_setopt(c, CURLOPT_FILETIME, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "modelfs");
  curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  if (!target.sigv4.empty()) {
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, target.sigv4.c_str());
    curl_easy_setopt(c, CURLOPT_USERPWD, target.userpwd.c_str());
  }
  Headers headers;
  for (const auto& h : target.headers) headers.add(h);
  if (!precondition.empty()) headers.add(precondition);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.list);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &response);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, end_when_the_process_does);
  response.code = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
}

bool transient(const Response& r) {
  if (r.status >= 500 || r.status == 429 || r.status == 408) return true;
  switch (r.code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

void back_off(int attempt) { std::this_thread::sleep_for(std::chrono::milliseconds(250) * (1 << attempt)); }

std::string failure_text(const Response& r) {
  if (r.code != CURLE_OK && r.status < 400) return curl_easy_strerror(r.code);
  switch (r.status) {
    case 401:
      return "HTTP 401 Unauthorized (credentials missing or refused)";
    case 403:
      return "HTTP 403 Forbidden (credentials missing or refused)";
    case 404:
      return "HTTP 404 Not Found";
    case 410:
      return "HTTP 410 Gone";
    case 412:
      return "HTTP 412 Precondition Failed: the object changed on the server since it was mounted";
    case 416:
      return "HTTP 416 Range Not Satisfiable";
    default:
      return "HTTP " + std::to_string(r.status);
  }
}

[[noreturn]] void refuse(const Target& target, const std::string& why) {
  throw ModelError(target.display, "remote", std::nullopt, why);
}

std::string pinned_by(const Identity& id, const Response& r) {
  auto shown = [](const std::string& v) { return v.empty() ? std::string("none") : v.substr(0, 80); };
  if (!id.commit.empty()) {
    if (r.commit != id.commit)
      return "the Hub's answer names commit " + shown(r.commit) + ", not the mounted " + id.commit;
    if (!id.etag.empty() && !r.etag.empty() && r.etag != id.etag)
      return "the object changed on the server since it was mounted (ETag " + shown(r.etag) + ", mounted " +
             id.etag + ")";
    return {};
  }
  if (!id.etag.empty()) {
    if (r.etag.empty())
      return "the server's answer carries no ETag (the mounted object's is " + id.etag +
             "): its bytes may be another version's";
    if (r.etag != id.etag)
      return "the object changed on the server since it was mounted (ETag " + shown(r.etag) + ", mounted " +
             id.etag + ")";
    return {};
  }
  if (r.last_modified != id.last_modified)
    return "the object changed on the server since it was mounted (Last-Modified " + shown(r.last_modified) +
           ", mounted " + id.last_modified + ")";
  return {};
}

Identity probe(const Target& target) {
  for (int attempt = 0;; ++attempt) {
    CURL* c = thread_handle();
    Response response;
    response.expect_length = 1;
    Body body{c, &response};
    perform(c, target, target.url, "0-0", "", response, probe_body, &body);
    const long status = response.status;
    if (response.error.starts_with(kClaimsLength)) refuse(target, response.error);
    if (status == 206 && response.error == "sent more than was asked")
      refuse(target,
             "the server sent more than the one byte asked for; it does not serve byte ranges "
             "as HTTP says");
    if (status == 200 || response.error == "ignores Range")
      refuse(target,
             "the server ignores Range requests (it answered 200 with the whole object to a "
             "request for one byte); modelfs mounts only from servers that serve byte ranges");
    if (response.code == CURLE_OK && status == 206) {
      uint64_t first = 0, last = 0, total = 0;
      if (!parse_content_range(response.content_range, first, last, total) || first != 0 || last != 0)
        refuse(target, "the server's Content-Range for bytes 0-0 is malformed");
      if (total > kMaxObjectBytes)
        refuse(target, "the server claims " + std::to_string(total) + " bytes, more than modelfs maps");
      Identity id;
      id.size = total;
      id.etag = response.etag;
      id.last_modified = response.last_modified;
      if (!id.etag.empty() && !id.etag.starts_with("W/"))
        id.precondition = "If-Match: " + id.etag;
      else if (id.etag.empty() && !id.last_modified.empty())
        id.precondition = "If-Unmodified-Since: " + id.last_modified;
      char* effective = nullptr;
      curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &effective);
      id.url = effective != nullptr ? effective : target.url;
      curl_off_t filetime = -1;
      curl_easy_getinfo(c, CURLINFO_FILETIME_T, &filetime);
      if (filetime > 0) id.mtime.tv_sec = static_cast<time_t>(filetime);
      if (!target.hub_repo_rev.empty()) {
        // The Hub's redirect target is signed and expires: the commit is
        // what is pinned, and every later file of the model is read from it.
        if (!response.commit.empty()) {
          pin_hub_commit(target.hub_repo_rev, response.commit);
          id.url = resolve(target.display).url;
          id.commit = response.commit;
          id.precondition.clear();
        } else {
          id.url = target.url;
        }
      }
      if (id.commit.empty() && id.etag.empty() && id.last_modified.empty())
        refuse(target,
               "the server names no version of the object (no ETag, no Last-Modified): modelfs could "
               "not tell its bytes from those of a changed object, and mounts only what it can pin");
      return id;
    }
    if (response.code == CURLE_OK && status == 416)
      refuse(target, "is empty (" + failure_text(response) + ")");
    if (attempt + 1 < kAttempts && transient(response)) {
      back_off(attempt);
      continue;
    }
    refuse(target, "cannot be fetched: " + failure_text(response));
  }
}

size_t range_body(char* data, size_t size, size_t count, void* user) {
  auto* body = static_cast<Body*>(user);
  const uint64_t n = uint64_t(size) * count;
  if (!body->checked) {
    // The headers are in: only the bytes asked for, of this object, are written.
    long status = 0;
    curl_easy_getinfo(body->handle, CURLINFO_RESPONSE_CODE, &status);
    if (status != 206) {
      if (status == 200) body->response->error = "the server ignores Range now (answered 200)";
      // Other statuses' bodies (an error page) are discarded, up to a bound.
      body->received += n;
      return status == 200 || body->received > kMaxDiscardedBytes ? 0 : n;
    }
    // The headers are whole when the body begins: the answer must be the
    // pinned version's before a byte of it reaches the cache.
    if (std::string why = pinned_by(*body->id, *body->response); !why.empty()) {
      body->response->error = std::move(why);
      return 0;
    }
    uint64_t first = 0, last = 0, total = 0;
    if (!parse_content_range(body->response->content_range, first, last, total) || first != body->offset ||
        last != body->offset + body->length - 1 || total != body->id->size) {
      body->response->error = "the server answered another range than asked (Content-Range: " +
                              body->response->content_range.substr(0, 100) + ")";
      return 0;
    }
    body->checked = true;
  }
  if (n > body->length - body->received) {
    body->response->error = "the server's body is longer than the range asked for";
    return 0;
  }
  for (uint64_t done = 0; done < n;) {
    const ssize_t wrote =
        ::pwrite(body->fd, data + done, n - done, static_cast<off_t>(body->offset + body->received + done));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      body->response->error = std::string("cannot write the cache file: ") + std::strerror(errno);
      return 0;
    }
    done += static_cast<uint64_t>(wrote);
  }
  // The checksums are of the bytes as they came, not as read back.
  for (uint64_t done = 0; done < n;) {
    const uint64_t at = body->received + done;
    const uint64_t take = std::min(n - done, kBlockBytes - at % kBlockBytes);
    uint32_t& crc = body->crcs[at / kBlockBytes];
    crc = cache::checksum(crc, std::as_bytes(std::span(data + done, take)));
    done += take;
  }
  body->received += n;
  return n;
}

}  // namespace modelfs::remote
