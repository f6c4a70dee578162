// SPDX-License-Identifier: Apache-2.0
#pragma once
// Remote models: a model named by URL (http://, https://, s3://, hf://) is
// a sparse local cache file, mapped read-only like any model file. Its
// blocks are fetched by range requests when MappedFile::ensure asks for
// them (docs/remote.md).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace modelfs {

class MappedFile;

namespace remote {

// True for a name modelfs reads as a URL rather than a path.
bool is_url(std::string_view name);

// The URL as messages, sidecars and mount tables show it: without its
// query string or fragment (where signed URLs keep their secrets) and
// without user:password@.
std::string display_url(std::string_view url);

// What a request needs: the http(s) URL, how to authenticate, and the name
// to show. Secrets live only here and in the requests libcurl makes.
struct Target {
  std::string url;                   // http(s), what is requested first
  std::string display;               // for messages (display_url of what the user named)
  std::string sigv4;                 // CURLOPT_AWS_SIGV4 provider string, or empty
  std::string userpwd;               // the SigV4 key pair, secret
  std::vector<std::string> headers;  // secret headers (a token)
  std::string hub_repo_rev;          // "OWNER/REPO@REV" of an hf:// URL, for pinning its commit
};

// Resolves a URL as the user gave it (hf:// and s3:// through their
// environment). Throws ModelError for a URL modelfs cannot read.
Target resolve(std::string_view name);

// Makes later hf:// URLs of OWNER/REPO@REV resolve to `commit` (the one
// the first file was found at).
void pin_hub_commit(const std::string& repo_rev, const std::string& commit);

// Where the cache lives; set once by the program before any model opens.
struct CacheOptions {
  std::filesystem::path dir;  // empty: $XDG_CACHE_HOME/modelfs or ~/.cache/modelfs
  // The most bytes this daemon's remote objects keep in the cache; 0: no
  // bound. Least recently used blocks are evicted (docs/remote.md).
  uint64_t max_bytes = 0;
  // How long one request may take, connecting and transferring, before it is
  // cut (and tried again, four tries in all; a read waits at most four).
  unsigned timeout_seconds = 20;
  // The most range requests of this daemon in flight at once (each on a
  // connection of its own), and the most bytes fetched ahead of one
  // sequential reader (docs/remote.md, "Fetching").
  unsigned parallel = 16;
  uint64_t window_bytes = uint64_t{64} << 20;
};
void set_cache_options(CacheOptions options);

// The fetch threads are the program's to stop: the library registers no
// fork or exit handler in the process that links it.
//
// Waits until no fetch is queued or running, then ends the fetch threads; a
// later fetch starts them afresh. Called before a fork whose child goes on
// reading (the mount's daemonizing): a child has none of its parent's
// threads, and would wait on fetches no thread of its own runs.
void stop_fetch_threads();

// Held by the program's main for its life: its end cuts every transfer at
// its next progress callback, fails the fetches left and joins the fetch
// threads, so that none runs while the process's statics are destroyed.
class FetchThreadsOwner {
 public:
  FetchThreadsOwner() = default;
  ~FetchThreadsOwner();
  FetchThreadsOwner(const FetchThreadsOwner&) = delete;
  FetchThreadsOwner& operator=(const FetchThreadsOwner&) = delete;
};

// A scope held on one thread's stack for a stretch of its work (the two
// below keep thread-local state): never copied or moved.
struct ThreadScope {
  ThreadScope() = default;
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;
};

// Held by a FUSE read around its ensure() calls and its reply: the blocks
// it made present are pinned (never evicted) until the reply has copied
// them, and only inside such a scope may blocks be evicted (a reader's
// parse at mount keeps spans of the mapping for longer than a call).
class ReadScope : ThreadScope {
 public:
  ReadScope();
  ~ReadScope();
};

// While one lives on a thread, what that thread fetches outside a FUSE read
// (a model's header, index or pickles, before mounting) is counted, and on
// a terminal shown on one line of stderr once past 1 MiB ("fetching
// metadata of URL: N MiB"), ended when the last scope ends.
class FetchProgress : ThreadScope {
 public:
  FetchProgress();
  ~FetchProgress();
};

// Opens the object at `name` (a URL): asks the server its size and
// identity, and maps its cache file. Throws ModelError (exit 2 at mount)
// when the server refuses, lacks it, or ignores Range.
std::shared_ptr<const MappedFile> open(std::string_view name);

// Runs task(0) ... task(count - 1), up to CacheOptions::parallel of them at
// once on threads of their own, and returns when all have: what many
// remote files need first (their headers) is fetched side by side. The
// first exception a task threw is rethrown; the others are dropped.
void in_parallel(size_t count, const std::function<void(size_t)>& task);

// While one lives on a thread, what it reads in order outside a FUSE read
// (--check, --export) is fetched ahead with the parallel window, as a
// FUSE reader's is; metadata parsing keeps fetching only what it reads.
class StreamScope : ThreadScope {
 public:
  StreamScope();
  ~StreamScope();
};

// The bytes this process has fetched from servers into the cache so far
// (every object, every thread): --check and --export show the rate.
uint64_t fetched_bytes();

// A size as -o cache_max takes it: "N", "NK", "NM", "NG", "NT" (binary
// units, an optional "iB" or "B"); nullopt when it is none.
std::optional<uint64_t> parse_size(std::string_view text);

// Blanks the query string and user:password@ of `model` where it appears
// in the program's arguments (/proc/PID/cmdline shows them to every user).
void hide_url_secrets(int argc, char** argv, const char* model);

// The folder URL a remote model file lies in, and a name resolved in it.
std::string parent_url(std::string_view url);

}  // namespace remote
}  // namespace modelfs
