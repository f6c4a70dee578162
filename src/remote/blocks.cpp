// SPDX-License-Identifier: Apache-2.0
// A remote object served from a sparse cache file: HTTP range requests
// (libcurl) fill its blocks when MappedFile::ensure asks for them.
//
// The cache file CACHE/KEY.data has the object's size and holds the blocks
// fetched so far; CACHE/KEY.blocks is its record (cache_object.hpp): a mark
// per block, set with the block's checksum once its bytes are written
// whole. KEY is the SHA-1 of the URL and the object's identity (ETag and
// size), so a changed object gets a new cache and two daemons serving one
// object share one. They may fetch the same block at once: each writes the
// same bytes, whole, before marking it. A block this daemon did not fetch
// is served only once its bytes match its checksum (Blocks::trusted).
#include <curl/curl.h>
#include <fcntl.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <ranges>
#include <thread>

#include "block_table.hpp"
#include "cache_object.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"
#include "modelfs/remote.hpp"
#include "modelfs/sha1.hpp"
#include "read_window.hpp"

namespace modelfs::remote {
namespace {

using cache::kBlockBytes;
using cache::kMaxObjectBytes;
using cache::lock_record;
// The window of a sequential reader starts at this, then doubles
// (read_window.hpp) up to -o remote_window.
constexpr uint64_t kInitialWindow = uint64_t{1} << 20;
// The largest piece one request of the window asks for (8 MiB): a window
// is split into at least as many pieces as requests may be in flight.
constexpr uint64_t kMaxPieceBlocks = 32;
constexpr int kAttempts = 4;
constexpr size_t kMaxHeaderValue = 1024;

std::once_flag curl_ready;
CacheOptions cache_options;
// Set once, as the process exits (FetchPool::stop_at_exit): every transfer
// ends at its next progress callback and no fetch starts or retries.
std::atomic<bool> process_ending{false};

int end_when_the_process_does(void*, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return process_ending.load(std::memory_order_relaxed) ? 1 : 0;
}

std::filesystem::path cache_dir() {
  if (!cache_options.dir.empty()) return cache_options.dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/')
    return std::filesystem::path(xdg) / "modelfs";
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr && *home ? home : "/root") / ".cache" / "modelfs";
}

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

// One handle a thread, reset for each request: its connections are kept.
CURL* thread_handle() {
  std::call_once(curl_ready, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  thread_local std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy(curl_easy_init(), curl_easy_cleanup);
  if (easy == nullptr) throw std::runtime_error("libcurl cannot make a handle");
  curl_easy_reset(easy.get());
  return easy.get();
}

struct Headers {
  curl_slist* list = nullptr;
  void add(const std::string& h) {
    if (curl_slist* grown = curl_slist_append(list, h.c_str())) list = grown;
  }
  ~Headers() { curl_slist_free_all(list); }
};

// Requests `range` of `url` on `c` with the options every request shares
// (protocols, redirects, the deadline, auth) and `precondition` (a header
// line, or empty), the body going to `write`.
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

// Why a request failed: libcurl's words, or the status's.
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

// Empty when `r` carries the validator `id` was pinned by; else why its
// bytes cannot be taken as the mounted object's.
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

// The most of an error page (or of the probe's one byte) read before the
// transfer is cut: a hostile server's endless body is never waited out.
constexpr uint64_t kMaxDiscardedBytes = 64 << 10;

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

}  // namespace

void set_cache_options(CacheOptions options) { cache_options = std::move(options); }

// The blocks a FUSE read pinned (ReadScope), released after its reply.
struct Pin {
  Blocks* blocks;
  uint64_t first, last;
};
thread_local bool in_read_scope = false;
thread_local std::vector<Pin> read_pins;
// --check and --export reading in order (StreamScope).
thread_local int stream_scopes = 0;

// The threads that make the window's requests and the pieces of a long run
// a reader waits for, each on a connection of its own (thread_handle): at
// most CacheOptions::parallel, started when a job finds none idle, never
// ended while the process runs on. A job never waits on another, so none
// can wait on a queued one.
//
// At exit (an atexit handler, so before the destructors of the globals a
// job uses) every transfer is cut at its next progress callback, the jobs
// left fail at once, and the threads are joined: no thread of ours runs
// while the process's statics are destroyed.
//
// A fork (the mount's fuse_daemonize, the HDF5 reader's sandbox) copies the
// pool but none of its threads: a child would wait on a condition variable
// whose waiters it does not have, on blocks marked in flight by jobs that
// never run there, and would hold the threads' connections and handles with
// nothing left to reach them. So a fork first waits until no job is queued
// or running, then ends the threads (each closes its handle on the way out)
// and holds the lock across the fork; both sides start threads afresh as
// jobs come.
class FetchPool {
 public:
  static FetchPool& get() {
    static std::once_flag registered;
    std::call_once(registered, [] {
      pool_ = new FetchPool;
      ::pthread_atfork([] { pool_->stop_for_fork(); }, [] { pool_->lock_.unlock(); },
                       [] { pool_->lock_.unlock(); });
      std::atexit([] { pool_->stop_at_exit(); });
    });
    return *pool_;
  }
  // False when no thread runs jobs (none could be started): the caller
  // runs `job` itself.
  bool submit(std::function<void()> job, bool urgent) {
    std::lock_guard guard(lock_);
    if (stopping_ && process_ending.load()) return false;
    if (jobs_.size() >= idle_ && threads_.size() < std::max(1u, cache_options.parallel)) start();
    if (threads_.empty()) return false;
    if (urgent)
      jobs_.push_front(std::move(job));
    else
      jobs_.push_back(std::move(job));
    wake_.notify_one();
    return true;
  }

 private:
  void start() {
    // The signals that end the daemon are for the threads that serve it.
    sigset_t all, previous;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &previous);
    try {
      threads_.emplace_back([this] { run(); });
    } catch (const std::system_error& e) {
      spdlog::debug("no more remote fetch threads: {}", e.what());
    }
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }
  void run() {
    ::pthread_setname_np(::pthread_self(), "remote-fetch");
    in_pool_thread = true;
    std::unique_lock guard(lock_);
    for (;;) {
      ++idle_;
      wake_.wait(guard, [&] { return !jobs_.empty() || stopping_; });
      --idle_;
      if (jobs_.empty()) return;  // stopping
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      ++running_;
      guard.unlock();
      job();
      job = nullptr;  // what it holds is released outside the lock
      guard.lock();
      if (--running_ == 0 && jobs_.empty()) quiet_.notify_all();
    }
  }
  // Before a fork: until no job is queued or running, then every thread
  // joined; returns holding the lock, which each side of the fork releases.
  void stop_for_fork() {
    std::unique_lock guard(lock_);
    quiet_.wait(guard, [&] { return jobs_.empty() && running_ == 0; });
    end_threads(guard);
    guard.lock();
    stopping_ = false;
    guard.release();
  }
  void stop_at_exit() {
    if (in_pool_thread) return;  // a job that exits cannot join itself
    process_ending.store(true);
    std::unique_lock guard(lock_);
    end_threads(guard);
  }
  // Every thread told to stop once the queue is empty, and joined outside
  // the lock (`guard` is released).
  void end_threads(std::unique_lock<std::mutex>& guard) {
    stopping_ = true;
    wake_.notify_all();
    std::vector<std::thread> ending = std::move(threads_);
    threads_.clear();
    guard.unlock();
    for (std::thread& t : ending) t.join();
  }
  static inline FetchPool* pool_ = nullptr;
  static inline thread_local bool in_pool_thread = false;
  std::mutex lock_;
  std::condition_variable wake_;
  std::condition_variable quiet_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  size_t running_ = 0;
  bool stopping_ = false;
};

// The pieces a reader waits for, fetched by the pool and by itself.
struct Batch {
  std::mutex lock;
  std::condition_variable done;
  size_t left = 0;
  std::exception_ptr failure;
  void finish(std::exception_ptr e) {
    std::lock_guard guard(lock);
    if (e && !failure) failure = std::move(e);
    if (--left == 0) done.notify_all();
  }
};

// Neighbouring blocks, one request.
struct Piece {
  uint64_t first, count;
};

// Every open remote object of this daemon, for eviction, and the bytes of
// theirs the cache holds.
std::mutex open_lock;
std::vector<Blocks*> open_objects;
std::atomic<uint64_t> cached_bytes{0};
std::atomic<uint64_t> fetched_total{0};
std::atomic<uint64_t> use_clock{0};
std::mutex evicting;

class Blocks final : public MappedFile::Fetcher, public std::enable_shared_from_this<Blocks> {
 public:
  Blocks(Target target, Identity id)
      : target_(std::move(target)),
        id_(std::move(id)),
        streams_(kInitialWindow, cache_options.window_bytes) {}
  ~Blocks() {
    if (const uint64_t unlogged = failures_unlogged_.load(); unlogged > 0)
      spdlog::error("{}: {} more failures (not logged one by one)", target_.display, unlogged);
    if (write_fd_ >= 0) ::close(write_fd_);
    {
      std::lock_guard guard(open_lock);
      std::erase(open_objects, this);
    }
    if (record_ != nullptr) ::munmap(record_, record_bytes_);
    if (record_fd_ >= 0) ::close(record_fd_);
  }
  void unpin(uint64_t first, uint64_t last) {
    for (uint64_t b = first; b <= last; ++b) table_->at(b).pins.fetch_sub(1, std::memory_order_seq_cst);
  }
  // Evicts this object's least recently used unpinned blocks used before
  // `before`, while this daemon's cached bytes exceed `limit`.
  void evict_older_than(uint64_t before, uint64_t limit);
  // The oldest use among this object's present, unpinned blocks.
  uint64_t oldest_use() const;

  // The object as a mapped file, over its cache (created when missing).
  static std::shared_ptr<const MappedFile> map(Target target, Identity id);
  void ensure(uint64_t offset, uint64_t length);
  void make_present(uint64_t offset, uint64_t length) override { ensure(offset, length); }

 private:
  bool present(uint64_t block) const { return __atomic_load_n(&marks_[block].state, __ATOMIC_ACQUIRE) != 0; }
  void set_present(uint64_t block, bool present) {
    __atomic_store_n(&marks_[block].state, present ? 1u : 0u, __ATOMIC_SEQ_CST);
  }
  // Whether `block` may be served from the cache: present, and fetched by
  // this daemon or its bytes match the checksum of its mark. One that does
  // not is dropped from the record (and fetched again by the read).
  bool trusted(uint64_t block);
  void attach(MappedFile& file);
  // Under the record's flock: its header written or checked, both files
  // sized, the blocks a cut .data lost dropped.
  void prepare_files(const std::string& key);
  uint64_t count_present();
  void fetch(uint64_t first_block, uint64_t blocks, bool log);
  // Marks blocks written whole, with the checksums of their bytes.
  void mark(uint64_t first_block, uint64_t blocks, const uint32_t* crcs);
  // Logs a failure of this object: the first few, then a count now and then.
  void log_failure(const std::string& line);
  // Claims the blocks of `ahead` nobody has or fetches (lock_ held), as
  // pieces for the pool.
  std::vector<Piece> claim_ahead(ReadWindow::Ahead ahead);
  // Hands claimed pieces to the pool; each clears its claim when done.
  void fetch_ahead(std::vector<Piece> pieces);
  void fetch_claimed(Piece piece, bool log, bool evict);
  // Fetches the runs of `mine` (claimed), long ones in pieces side by side.
  void fetch_runs(const std::vector<uint64_t>& mine);

  Target target_;
  Identity id_;
  int data_fd_ = -1;   // the MappedFile's descriptor (it closes it)
  int write_fd_ = -1;  // this object's own, for fetches that outlive the MappedFile
  int record_fd_ = -1;
  void* record_ = nullptr;  // the record mapped, and its marks after the header
  uint64_t record_bytes_ = 0;
  cache::Mark* marks_ = nullptr;
  uint64_t blocks_ = 0;
  std::mutex lock_;
  std::condition_variable fetched_;
  // Each touched block's claim by a fetch (under lock_), pins and last use
  // (with a bounded cache: readers pinning it, use_clock). Every block
  // present in the record has its chunk allocated (count_present, ensure),
  // so eviction looks at allocated chunks only.
  std::unique_ptr<BlockTable> table_;
  // The blocks of the last fetch that failed, failed again at once by the
  // next read of them within a second (under lock_): the kernel reads a page
  // again when its readahead failed, which would otherwise wait out a second
  // round of tries.
  uint64_t failed_first_ = 1, failed_last_ = 0;
  std::chrono::steady_clock::time_point failed_until_{};
  std::string failed_why_;  // the last failed fetch's reason (under lock_)
  std::atomic<uint64_t> failures_logged_{0};
  std::atomic<uint64_t> failures_unlogged_{0};
  std::atomic<int64_t> last_count_logged_{0};  // steady clock, seconds
  // The sequential readers followed, and how far ahead of each the window
  // has fetched (under window_lock_).
  std::mutex window_lock_;
  ReadStreams streams_;
};

ReadScope::ReadScope() { in_read_scope = true; }  // pins only with a bound (ensure)

uint64_t fetched_bytes() { return fetched_total.load(std::memory_order_relaxed); }

StreamScope::StreamScope() { ++stream_scopes; }
StreamScope::~StreamScope() { --stream_scopes; }

void in_parallel(size_t count, const std::function<void(size_t)>& task) {
  const size_t threads = std::min<size_t>(count, std::max(1u, cache_options.parallel));
  std::atomic<size_t> next{0};
  std::mutex lock;
  std::exception_ptr failure;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < count;) {
      try {
        task(i);
      } catch (...) {
        std::lock_guard guard(lock);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  // Threads of their own, not the pool's: a task's fetches may wait on
  // pool jobs.
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // fewer at once; this thread does the rest
    }
  }
  work();
  for (auto& helper : helpers) helper.join();
  if (failure) std::rethrow_exception(failure);
}

ReadScope::~ReadScope() {
  for (const Pin& pin : read_pins) pin.blocks->unpin(pin.first, pin.last);
  read_pins.clear();
  in_read_scope = false;
}

uint64_t Blocks::oldest_use() const {
  uint64_t oldest = UINT64_MAX;
  table_->for_each_chunk([&](uint64_t first, uint64_t count, const BlockTable::Entry* entries) {
    for (uint64_t i = 0; i < count; ++i)
      if (present(first + i) && entries[i].pins.load(std::memory_order_relaxed) == 0)
        oldest = std::min(oldest, entries[i].used.load(std::memory_order_relaxed));
  });
  return oldest;
}

void Blocks::evict_older_than(uint64_t before, uint64_t limit) {
  // Only an object no other daemon maps may lose blocks: this daemon holds
  // a read lock on its record for the life of the mount, and evicts only
  // when it can turn that into a write lock (atomically, both ways).
  if (lock_record(record_fd_, F_OFD_SETLK, F_WRLCK) != 0) return;
  std::unique_lock guard(lock_);
  bool stop = false;
  table_->for_each_chunk([&](uint64_t first, uint64_t count, const BlockTable::Entry* entries) {
    for (uint64_t i = 0; i < count && !stop && cached_bytes.load() > limit; ++i) {
      const uint64_t b = first + i;
      const BlockTable::Entry& entry = entries[i];
      if (!present(b) || entry.in_flight || entry.used.load(std::memory_order_relaxed) > before) continue;
      // A reader pins, then looks at the record; here the record is cleared,
      // then the pins looked at: one of the two sees the other.
      set_present(b, false);
      if (entry.pins.load(std::memory_order_seq_cst) != 0) {
        set_present(b, true);
        continue;
      }
      const uint64_t length = std::min(kBlockBytes, id_.size - b * kBlockBytes);
      if (::fallocate(data_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      static_cast<off_t>(b * kBlockBytes), static_cast<off_t>(length)) != 0) {
        // Not evicted (a file system without holes): the bytes are intact.
        set_present(b, true);
        stop = true;
        break;
      }
      cached_bytes.fetch_sub(length);
      table_->at(b).trusted.store(false, std::memory_order_release);
    }
  });
  guard.unlock();
  lock_record(record_fd_, F_OFD_SETLK, F_RDLCK);
}

// Brings this daemon's cached bytes back under the bound, oldest blocks
// first, object by object.
void evict_to_bound() {
  const uint64_t limit = cache_options.max_bytes;
  if (limit == 0 || cached_bytes.load() <= limit) return;
  std::unique_lock busy(evicting, std::try_to_lock);
  if (!busy) return;  // another thread is at it
  std::lock_guard guard(open_lock);
  for (int round = 0; round < 64 && cached_bytes.load() > limit; ++round) {
    Blocks* victim = nullptr;
    uint64_t oldest = UINT64_MAX;
    for (Blocks* blocks : open_objects)
      if (const uint64_t use = blocks->oldest_use(); use < oldest) {
        oldest = use;
        victim = blocks;
      }
    if (victim == nullptr) return;
    // Everything this object last used within the oldest quarter of the
    // clock since its oldest block goes in one pass.
    const uint64_t now = use_clock.load();
    victim->evict_older_than(oldest + (now - oldest) / 4, limit);
    if (victim->oldest_use() == oldest) return;  // nothing could go (shared, pinned)
  }
}

std::shared_ptr<const MappedFile> Blocks::map(Target target, Identity id) {
  auto blocks = std::make_shared<Blocks>(std::move(target), std::move(id));
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = blocks->target_.display;
  blocks->attach(*file);
  file->remote_ = blocks;
  file->fetcher_ = blocks.get();
  MappedFile::register_remote(file.get());
  std::lock_guard guard(open_lock);
  open_objects.push_back(blocks.get());
  return file;
}

void Blocks::attach(MappedFile& file) {
  const auto dir = cache_dir();
  auto fail_cache = [&](const std::string& what) {
    throw ModelError(target_.display, "remote", std::nullopt, "cache " + dir.string() + ": " + what);
  };
  auto fail_errno = [&](const std::string& what) { fail_cache(what + ": " + std::strerror(errno)); };
  Sha1 sha;
  // An object pinned by Last-Modified (no ETag) is keyed by it too; the
  // record's version too, so that no record of another format is opened.
  const std::string version =
      id_.etag.empty() && !id_.last_modified.empty() ? "last-modified " + id_.last_modified : id_.etag;
  const std::string key_text = "record " + std::to_string(cache::kVersion) + "\n" + target_.display + "\n" +
                               version + "\n" + std::to_string(id_.size);
  sha.update(std::as_bytes(std::span(key_text.data(), key_text.size())));
  const std::string key = sha.hex_digest();
  blocks_ = cache::block_count(id_.size);
  record_bytes_ = cache::record_bytes(id_.size);
  table_ = std::make_unique<BlockTable>(blocks_);
  int dir_fd = -1;
  try {
    dir_fd = cache::open_folder(dir);
    cache::remove_unmounted_objects(dir_fd, key, cache_options.max_bytes);
    data_fd_ = cache::open_file(dir_fd, key + ".data");
    file.fd_ = data_fd_;
    record_fd_ = cache::open_file(dir_fd, key + ".blocks");
  } catch (const cache::Refused& e) {
    if (dir_fd >= 0) ::close(dir_fd);
    fail_cache(e.what());
  }
  ::close(dir_fd);
  write_fd_ = ::fcntl(data_fd_, F_DUPFD_CLOEXEC, 0);
  if (write_fd_ < 0) fail_errno("cannot open " + key + ".data");
  // Sized under the lock, by whichever daemon comes first; never shrunk or
  // cleared by a second, which may be filling it.
  if (::flock(record_fd_, LOCK_EX) != 0) fail_errno("cannot lock");
  try {
    prepare_files(key);
  } catch (...) {
    ::flock(record_fd_, LOCK_UN);
    throw;
  }
  ::flock(record_fd_, LOCK_UN);
  // Held for the life of the mount: a daemon evicts only blocks of objects
  // no other daemon holds (evict_older_than). Waits while one evicts.
  while (lock_record(record_fd_, F_OFD_SETLKW, F_RDLCK) != 0)
    if (errno != EINTR) fail_errno("cannot lock the block record");
  void* record = ::mmap(nullptr, record_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, record_fd_, 0);
  if (record == MAP_FAILED) fail_errno("cannot map the block record");
  record_ = record;
  marks_ = reinterpret_cast<cache::Mark*>(static_cast<std::byte*>(record) + cache::kHeaderBytes);
  cached_bytes.fetch_add(count_present());
  file.size_ = id_.size;
  file.mtime_ = id_.mtime;
  if (id_.size > 0) {
    void* mapping = ::mmap(nullptr, id_.size, PROT_READ, MAP_SHARED, data_fd_, 0);
    if (mapping == MAP_FAILED) fail_errno("cannot map the cache file");
    file.data_ = static_cast<const std::byte*>(mapping);
  }
}

void Blocks::prepare_files(const std::string& key) {
  auto fail = [&](const std::string& what) {
    throw ModelError(target_.display, "remote", std::nullopt, "cache " + cache_dir().string() + ": " + what);
  };
  auto fail_errno = [&](const std::string& what) { fail(what + ": " + std::strerror(errno)); };
  struct stat st {};
  if (::fstat(record_fd_, &st) != 0) fail_errno("cannot read " + key + ".blocks");
  if (st.st_size == 0) {
    const std::string header = cache::make_header(key, id_.size);
    if (::pwrite(record_fd_, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size()))
      fail_errno("cannot write " + key + ".blocks");
  } else {
    std::byte header[cache::kHeaderBytes];
    const bool whole = ::pread(record_fd_, header, sizeof header, 0) == static_cast<ssize_t>(sizeof header);
    const auto parsed = whole ? cache::parse_header(header) : std::nullopt;
    if (!parsed || parsed->key != key || parsed->object_size != id_.size ||
        static_cast<uint64_t>(st.st_size) > record_bytes_)
      fail(key + ".blocks is not the block record modelfs wrote for this object (remove it)");
  }
  if (static_cast<uint64_t>(st.st_size) != record_bytes_ &&
      ::ftruncate(record_fd_, static_cast<off_t>(record_bytes_)) != 0)
    fail_errno("cannot size the cache files");
  if (::fstat(data_fd_, &st) != 0) fail_errno("cannot read " + key + ".data");
  const auto data_size = static_cast<uint64_t>(st.st_size);
  if (data_size == id_.size) return;
  // A .data cut since its blocks were marked (by hand, a full disk, a
  // crash): the blocks it lost, whole or in part, are fetched again.
  if (data_size < id_.size) {
    const cache::Mark absent{0, 0};
    cache::for_each_present(record_fd_, blocks_, [&](uint64_t b) {
      if (b * kBlockBytes + cache::block_length(b, id_.size) > data_size)
        (void)::pwrite(record_fd_, &absent, sizeof absent,
                       static_cast<off_t>(cache::kHeaderBytes + b * sizeof(cache::Mark)));
    });
  }
  if (::ftruncate(data_fd_, static_cast<off_t>(id_.size)) != 0) {
    if (errno == EFBIG)
      fail_errno("its file system cannot hold a sparse file of the object's " + std::to_string(id_.size) +
                 " bytes (-o cache_dir= on one that can)");
    fail_errno("cannot size the cache files");
  }
}

// The bytes of the blocks an earlier run left present, their chunks of the
// table allocated.
uint64_t Blocks::count_present() {
  uint64_t cached = 0;
  cache::for_each_present(record_fd_, blocks_, [&](uint64_t b) {
    table_->at(b);
    cached += cache::block_length(b, id_.size);
  });
  return cached;
}

bool Blocks::trusted(uint64_t block) {
  if (!present(block)) return false;
  BlockTable::Entry& entry = table_->at(block);
  if (entry.trusted.load(std::memory_order_acquire)) return true;
  const uint32_t want = __atomic_load_n(&marks_[block].crc, __ATOMIC_ACQUIRE);
  const uint64_t offset = block * kBlockBytes;
  const uint64_t length = cache::block_length(block, id_.size);
  // Read, not through the mapping: a file cut meanwhile gives a short read
  // here, not SIGBUS.
  thread_local std::unique_ptr<std::byte[]> buffer;
  constexpr uint64_t kBuffer = 64 << 10;
  if (!buffer) buffer = std::make_unique_for_overwrite<std::byte[]>(kBuffer);
  uint32_t crc = 0;
  uint64_t done = 0;
  while (done < length) {
    const ssize_t got =
        ::pread(write_fd_, buffer.get(), std::min(kBuffer, length - done), static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    crc = cache::checksum(crc, {buffer.get(), static_cast<size_t>(got)});
    done += static_cast<uint64_t>(got);
  }
  if (done == length && crc == want) {
    entry.trusted.store(true, std::memory_order_release);
    return true;
  }
  std::lock_guard guard(lock_);
  // Unless a fetch of this daemon marked it again meanwhile.
  if (present(block) && !entry.trusted.load(std::memory_order_acquire)) {
    set_present(block, false);
    cached_bytes.fetch_sub(length);
    log_failure(target_.display + ": cached bytes " + std::to_string(offset) + "-" +
                std::to_string(offset + length - 1) + " " +
                (done < length ? "are missing from the cache file (it was cut)"
                               : "do not match the checksum stored when they were fetched") +
                "; fetching them again");
  }
  return false;
}

void Blocks::log_failure(const std::string& line) {
  // Enough to see what failed; a reader failing every read (thousands) then
  // gets a count every few seconds, never a line each.
  constexpr uint64_t kLogged = 5;
  constexpr int64_t kCountEvery = 10;
  if (failures_logged_.fetch_add(1, std::memory_order_relaxed) < kLogged) {
    spdlog::error("{}", line);
    return;
  }
  const uint64_t unlogged = failures_unlogged_.fetch_add(1, std::memory_order_relaxed) + 1;
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
  int64_t last = last_count_logged_.load(std::memory_order_relaxed);
  if (last == 0) {  // the first not logged starts the wait for a count
    last_count_logged_.compare_exchange_strong(last, now);
    return;
  }
  if (now - last < kCountEvery || !last_count_logged_.compare_exchange_strong(last, now)) return;
  failures_unlogged_.fetch_sub(unlogged, std::memory_order_relaxed);
  spdlog::error("{}: {} more failures like the above (not logged one by one), the last: {}", target_.display,
                unlogged, line);
}

void Blocks::ensure(uint64_t offset, uint64_t length) {
  if (offset >= id_.size || length == 0) return;
  length = std::min(length, id_.size - offset);
  const uint64_t first = offset / kBlockBytes;
  const uint64_t last = (offset + length - 1) / kBlockBytes;
  const bool bounded = cache_options.max_bytes != 0;
  if (bounded) {
    const uint64_t now = use_clock.fetch_add(1, std::memory_order_relaxed);
    for (uint64_t b = first; b <= last; ++b) table_->at(b).used.store(now, std::memory_order_relaxed);
    // Pinned before the record is read (see evict_older_than), until the
    // reply has copied the bytes.
    if (in_read_scope) {
      for (uint64_t b = first; b <= last; ++b) table_->at(b).pins.fetch_add(1, std::memory_order_seq_cst);
      read_pins.push_back({this, first, last});
    }
  }
  // The window follows FUSE readers, --check and --export; a parser reading
  // a header in order is no reader of the tensors after it.
  ReadWindow::Ahead ahead;
  if (in_read_scope || stream_scopes > 0) {
    std::lock_guard window(window_lock_);
    ahead = streams_.on_read(offset, offset + length, id_.size);
  }
  bool all = true;
  for (uint64_t b = first; b <= last; ++b)
    if (!trusted(b)) all = false;
  if (all) {
    if (!ahead.empty()) {
      std::unique_lock guard(lock_);
      auto pieces = claim_ahead(ahead);
      guard.unlock();
      fetch_ahead(std::move(pieces));
    }
    return;
  }

  std::unique_lock guard(lock_);
  // The blocks last waited for: one that another thread's fetch left missing
  // fails this read too (its fetch took its tries), so waiting never adds a
  // second round of tries to a read's time.
  std::vector<uint64_t> awaited;
  for (;;) {
    // Claim the missing blocks nobody fetches; wait for those others do.
    std::vector<uint64_t> mine, theirs;
    std::optional<uint64_t> failed;
    for (uint64_t b = first; b <= last && !failed; ++b) {
      if (present(b)) continue;
      BlockTable::Entry& entry = table_->at(b);
      if (entry.in_flight) {
        theirs.push_back(b);
      } else if (std::ranges::binary_search(awaited, b) ||
                 (failed_first_ <= b && b <= failed_last_ &&
                  std::chrono::steady_clock::now() < failed_until_)) {
        failed = b;
      } else {
        entry.in_flight = true;
        mine.push_back(b);
      }
    }
    if (failed) {
      failed_until_ = {};  // once: a reader's own next read tries the server again
      for (uint64_t b : mine) table_->at(b).in_flight = false;
      throw ModelError(target_.display, "remote", *failed * kBlockBytes,
                       "cannot fetch bytes from " + std::to_string(*failed * kBlockBytes) +
                           ": the fetch another read made of them failed" +
                           (failed_why_.empty() ? std::string() : " (" + failed_why_ + ")"));
    }
    // The window's blocks go to the pool while this read fetches or waits
    // for its own.
    std::vector<Piece> pieces;
    if (!ahead.empty()) {
      pieces = claim_ahead(ahead);
      ahead = {};
    }
    if (!pieces.empty()) {
      guard.unlock();
      fetch_ahead(std::move(pieces));
      guard.lock();
    }
    if (mine.empty() && theirs.empty()) {
      // All present: those another daemon marked meanwhile are checked too.
      guard.unlock();
      bool all_trusted = true;
      for (uint64_t b = first; b <= last; ++b)
        if (!trusted(b)) all_trusted = false;
      if (all_trusted) return;
      guard.lock();
      continue;
    }
    if (mine.empty()) {
      awaited = std::move(theirs);
      fetched_.wait(guard);
      continue;
    }
    guard.unlock();
    std::exception_ptr failure;
    try {
      fetch_runs(mine);
    } catch (...) {
      failure = std::current_exception();
    }
    guard.lock();
    for (uint64_t b : mine) table_->at(b).in_flight = false;
    fetched_.notify_all();
    if (failure) {
      failed_first_ = mine.front();
      failed_last_ = mine.back();
      failed_until_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      std::rethrow_exception(failure);
    }
    if (bounded && in_read_scope) {
      guard.unlock();
      evict_to_bound();
      guard.lock();
    }
  }
}

std::vector<Piece> Blocks::claim_ahead(ReadWindow::Ahead ahead) {
  std::vector<Piece> pieces;
  if (ahead.empty()) return pieces;
  const uint64_t from = ahead.from / kBlockBytes;
  const uint64_t to = std::min(blocks_, (ahead.to + kBlockBytes - 1) / kBlockBytes);
  // As many pieces as requests may be in flight, none over the most.
  const uint64_t parallel = std::max(1u, cache_options.parallel);
  const uint64_t piece_blocks =
      std::clamp<uint64_t>((to - std::min(to, from) + parallel - 1) / parallel, 1, kMaxPieceBlocks);
  for (uint64_t b = from; b < to; ++b) {
    if (present(b)) continue;
    BlockTable::Entry& entry = table_->at(b);
    if (entry.in_flight) continue;
    entry.in_flight = true;
    if (!pieces.empty() && pieces.back().first + pieces.back().count == b &&
        pieces.back().count < piece_blocks)
      ++pieces.back().count;
    else
      pieces.push_back({b, 1});
  }
  return pieces;
}

void Blocks::fetch_ahead(std::vector<Piece> pieces) {
  const bool log = in_read_scope;
  const bool evict = in_read_scope && cache_options.max_bytes != 0;
  for (const Piece& piece : pieces) {
    auto self = shared_from_this();
    if (!FetchPool::get().submit([self, piece, log, evict] { self->fetch_claimed(piece, log, evict); },
                                 false))
      fetch_claimed(piece, log, evict);
  }
}

// A piece of the window: its claim cleared when done, fetched or not. A
// failure fails the readers waiting for it (their fetch took its tries),
// and, for a second, those who come for it next (the kernel's retry).
void Blocks::fetch_claimed(Piece piece, bool log, bool evict) {
  // Another daemon sharing the cache may have fetched some meanwhile.
  uint64_t first = piece.first, count = piece.count;
  while (count > 0 && present(first)) ++first, --count;
  while (count > 0 && present(first + count - 1)) --count;
  std::string why;
  if (count > 0) {
    try {
      fetch(first, count, log);
      if (cache_options.max_bytes != 0) {
        // Fetched for a reader about to read them: as recent as its read.
        const uint64_t now = use_clock.fetch_add(1, std::memory_order_relaxed);
        for (uint64_t b = first; b < first + count; ++b)
          table_->at(b).used.store(now, std::memory_order_relaxed);
      }
    } catch (const ModelError& e) {
      why = e.reason();
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  {
    std::lock_guard guard(lock_);
    for (uint64_t b = piece.first; b < piece.first + piece.count; ++b) table_->at(b).in_flight = false;
    if (!why.empty()) {
      failed_first_ = piece.first;
      failed_last_ = piece.first + piece.count - 1;
      failed_until_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      failed_why_ = std::move(why);
    }
  }
  fetched_.notify_all();
  if (evict) evict_to_bound();
}

namespace {
void count_fetched(const std::string& display, uint64_t bytes);
}  // namespace

void Blocks::fetch_runs(const std::vector<uint64_t>& mine) {
  // Runs of neighbouring blocks, split into as many pieces as requests may
  // be in flight (none over the most); this thread fetches the first, the
  // pool the others, side by side.
  const uint64_t parallel = std::max(1u, cache_options.parallel);
  const uint64_t piece_blocks =
      std::clamp<uint64_t>((mine.size() + parallel - 1) / parallel, 1, kMaxPieceBlocks);
  std::vector<Piece> pieces;
  for (uint64_t b : mine)
    if (!pieces.empty() && pieces.back().first + pieces.back().count == b &&
        pieces.back().count < piece_blocks)
      ++pieces.back().count;
    else
      pieces.push_back({b, 1});
  const bool log = in_read_scope;
  auto batch = std::make_shared<Batch>();
  batch->left = pieces.size() - 1;
  std::exception_ptr own;
  size_t inline_from = pieces.size();
  for (size_t i = 1; i < pieces.size(); ++i) {
    auto self = shared_from_this();
    const Piece piece = pieces[i];
    const bool queued = FetchPool::get().submit(
        [self, piece, log, batch] {
          std::exception_ptr e;
          try {
            self->fetch(piece.first, piece.count, log);
          } catch (...) {
            e = std::current_exception();
          }
          batch->finish(e);
        },
        true);
    if (!queued) {
      inline_from = i;
      break;
    }
  }
  // No pool (no thread could be started): the rest on this thread.
  for (size_t i = inline_from; i < pieces.size(); ++i) {
    try {
      fetch(pieces[i].first, pieces[i].count, log);
    } catch (...) {
      if (!own) own = std::current_exception();
    }
    batch->finish(nullptr);
  }
  try {
    fetch(pieces[0].first, pieces[0].count, log);
  } catch (...) {
    if (!own) own = std::current_exception();
  }
  std::unique_lock guard(batch->lock);
  batch->done.wait(guard, [&] { return batch->left == 0; });
  if (own) std::rethrow_exception(own);
  if (batch->failure) std::rethrow_exception(batch->failure);
  // What the pool fetched for this thread counts toward its progress line
  // (mark() counted this thread's own piece).
  for (size_t i = 1; i < inline_from; ++i) {
    const uint64_t offset = pieces[i].first * kBlockBytes;
    count_fetched(target_.display, std::min(pieces[i].count * kBlockBytes, id_.size - offset));
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

namespace {

// The progress of what this thread fetches before mounting (FetchProgress).
struct Progress {
  int scopes = 0;
  uint64_t bytes = 0;
  bool drawn = false;
  std::chrono::steady_clock::time_point last{};
};
thread_local Progress progress;
constexpr uint64_t kProgressAfter = uint64_t{1} << 20;

void count_fetched(const std::string& display, uint64_t bytes) {
  if (progress.scopes == 0 || in_read_scope) return;
  progress.bytes += bytes;
  if (progress.bytes < kProgressAfter || ::isatty(STDERR_FILENO) == 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (progress.drawn && now - progress.last < std::chrono::milliseconds(200)) return;
  progress.last = now;
  progress.drawn = true;
  std::fprintf(stderr, "\rfetching metadata of %s: %.1f MiB", display.c_str(),
               static_cast<double>(progress.bytes) / (1 << 20));
  std::fflush(stderr);
}

}  // namespace

FetchProgress::FetchProgress() { ++progress.scopes; }

FetchProgress::~FetchProgress() {
  if (--progress.scopes > 0) return;
  if (progress.drawn) std::fputs("\n", stderr);
  progress = {};
}

// Marks blocks whose bytes are written whole, for this daemon and any other
// sharing the cache.
void Blocks::mark(uint64_t first_block, uint64_t blocks, const uint32_t* crcs) {
  if (blocks == 0) return;
  for (uint64_t b = first_block; b < first_block + blocks; ++b) {
    // The checksum before the mark: whoever sees the mark sees it.
    __atomic_store_n(&marks_[b].crc, crcs[b - first_block], __ATOMIC_SEQ_CST);
    table_->at(b).trusted.store(true, std::memory_order_release);
    set_present(b, true);
  }
  const uint64_t offset = first_block * kBlockBytes;
  const uint64_t length = std::min(blocks * kBlockBytes, id_.size - offset);
  cached_bytes.fetch_add(length);
  fetched_total.fetch_add(length, std::memory_order_relaxed);
  count_fetched(target_.display, length);
}

// Each try has the deadline (perform), so a run's fetch takes at most
// kAttempts deadlines and the backoff between them. A try cut after the
// bytes of some blocks came whole keeps those (they passed the version's
// check), and the next asks only for the rest: a slow but steady link
// still gets a long run in over its tries.
void Blocks::fetch(uint64_t first_block, uint64_t blocks, bool log) {
  std::vector<uint32_t> crcs;
  for (int attempt = 0;; ++attempt) {
    crcs.assign(blocks, 0);
    const uint64_t offset = first_block * kBlockBytes;
    const uint64_t length = std::min(blocks * kBlockBytes, id_.size - offset);
    const std::string range = std::to_string(offset) + "-" + std::to_string(offset + length - 1);
    if (process_ending.load(std::memory_order_relaxed))
      throw ModelError(target_.display, "remote", offset,
                       "cannot fetch bytes " + range + ": modelfs is exiting");
    CURL* c = thread_handle();
    Response response;
    response.expect_length = length;
    Body body{c, &response, 0, write_fd_, offset, length, &id_, false, crcs.data()};
    perform(c, target_, id_.url, range, id_.precondition, response, range_body, &body);
    std::string why = response.error;
    if (response.code == CURLE_OK && response.status == 206 && why.empty()) {
      if (body.received == length) break;
      why = "the server sent " + std::to_string(body.received) + " of " + std::to_string(length) + " bytes";
    }
    // A short body may be a connection cut, tried again like a reset, a
    // 5xx or the deadline. Another version, a wrong range or a 200 never
    // is: those bytes are not the mounted object's.
    const bool short_body = why.starts_with("the server sent ");
    const bool refused = !why.empty() && !short_body;
    if (!refused && body.checked) {
      if (body.received == length) break;  // all came, the connection closed after
      const uint64_t whole = body.received / kBlockBytes;
      mark(first_block, whole, crcs.data());
      first_block += whole;
      blocks -= whole;
    }
    const bool ending = process_ending.load(std::memory_order_relaxed);
    if (!refused && !ending && attempt + 1 < kAttempts && (short_body || transient(response))) {
      back_off(attempt);
      continue;
    }
    if (why.empty()) why = failure_text(response);
    // A FUSE read's failure is logged here (the reader sees only EIO); at
    // mount the error is the one line modelfs exits with.
    if (log && !ending) log_failure(target_.display + ": cannot fetch bytes " + range + ": " + why);
    throw ModelError(target_.display, "remote", offset, "cannot fetch bytes " + range + ": " + why);
  }
  mark(first_block, blocks, crcs.data());
}

BlockTable::BlockTable(uint64_t blocks)
    : blocks_(blocks),
      chunk_count_((blocks + kChunkBlocks - 1) / kChunkBlocks),
      chunks_(std::make_unique<std::atomic<Entry*>[]>(chunk_count_)) {}

BlockTable::~BlockTable() {
  for (uint64_t c = 0; c < chunk_count_; ++c) delete[] chunks_[c].load(std::memory_order_relaxed);
}

BlockTable::Entry& BlockTable::at(uint64_t block) {
  std::atomic<Entry*>& slot = chunks_[block / kChunkBlocks];
  Entry* chunk = slot.load(std::memory_order_acquire);
  if (chunk == nullptr) {
    // Two threads may touch a new chunk at once: one allocation wins.
    auto* made = new Entry[kChunkBlocks];
    if (slot.compare_exchange_strong(chunk, made, std::memory_order_acq_rel)) {
      chunk = made;
      allocated_chunks_.fetch_add(1, std::memory_order_relaxed);
    } else {
      delete[] made;
    }
  }
  return chunk[block % kChunkBlocks];
}

const BlockTable::Entry* BlockTable::find(uint64_t block) const {
  const Entry* chunk = chunks_[block / kChunkBlocks].load(std::memory_order_acquire);
  return chunk == nullptr ? nullptr : chunk + block % kChunkBlocks;
}

uint64_t BlockTable::allocated_bytes() const {
  return chunk_count_ * sizeof(std::atomic<Entry*>) +
         allocated_chunks_.load(std::memory_order_relaxed) * kChunkBlocks * sizeof(Entry);
}

std::shared_ptr<const MappedFile> open(std::string_view name) {
  Target target = resolve(name);
  Identity id = probe(target);
  if (id.size == 0) refuse(target, "is empty");
  return Blocks::map(std::move(target), std::move(id));
}

}  // namespace modelfs::remote

namespace modelfs {}  // namespace modelfs
