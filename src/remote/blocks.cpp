// SPDX-License-Identifier: Apache-2.0
// A remote object served from a sparse cache file: HTTP range requests
// (libcurl) fill its blocks when MappedFile::ensure asks for them.
//
// The cache file CACHE/KEY.data has the object's size and holds the blocks
// fetched so far; CACHE/KEY.blocks is its record (cache_object.hpp): a mark
// per block, set with the block's checksum once its bytes are written
// whole. KEY is the SHA-1 of the record's version, the URL and the object's
// identity (ETag and size), so a changed object gets a new cache and two
// daemons serving one object share one. They may fetch the same block at once: each writes the
// same bytes, whole, before marking it. A block this daemon did not fetch
// is served only once its bytes match its checksum (Blocks::trusted).
#include <curl/curl.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <ranges>
#include <thread>

#include "io/sha1.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"
#include "remote/block_table.hpp"
#include "remote/cache_object.hpp"
#include "remote/fetch_pool.hpp"
#include "remote/http.hpp"
#include "remote/read_window.hpp"
#include "remote/remote.hpp"

namespace modelfs::remote {
namespace {

using cache::kBlockBytes;
using cache::lock_record;
// The window of a sequential reader starts at this, then doubles
// (read_window.hpp) up to -o remote_window.
constexpr uint64_t kInitialWindow = uint64_t{1} << 20;
// The largest piece one request of the window asks for (8 MiB): a window
// is split into at least as many pieces as requests may be in flight.
constexpr uint64_t kMaxPieceBlocks = 32;

std::filesystem::path cache_dir() {
  if (!cache_options.dir.empty()) return cache_options.dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/')
    return std::filesystem::path(xdg) / "modelfs";
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr && *home ? home : "/root") / ".cache" / "modelfs";
}

}  // namespace

void set_cache_options(CacheOptions options) { cache_options = std::move(options); }

void stop_fetch_threads() { FetchPool::stop(); }

FetchThreadsOwner::~FetchThreadsOwner() { FetchPool::stop_at_exit(); }

// The blocks a FUSE read pinned (ReadScope), released after its reply.
struct Pin {
  Blocks* blocks;
  uint64_t first, last;
};
thread_local bool in_read_scope = false;
thread_local std::vector<Pin> read_pins;
// --check and --export reading in order (StreamScope).
thread_local int stream_scopes = 0;

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
  try {
    cache::prepare_record(record_fd_, key, id_.size);
    if (const auto cut = cache::prepare_data(data_fd_, record_fd_, id_.size))
      spdlog::warn(
          "{}: the cache file {}.data was cut to {} of {} bytes; the blocks it lost are fetched again",
          target_.display, key, *cut, id_.size);
  } catch (const cache::Refused& e) {
    throw ModelError(target_.display, "remote", std::nullopt,
                     "cache " + cache_dir().string() + ": " + e.what());
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
  const uint32_t crc = __atomic_load_n(&marks_[block].crc, __ATOMIC_ACQUIRE);
  const cache::Check check = cache::check_block(write_fd_, block, id_.size, crc);
  if (check == cache::Check::kMatch) {
    entry.trusted.store(true, std::memory_order_release);
    return true;
  }
  const uint64_t offset = block * kBlockBytes;
  const uint64_t length = cache::block_length(block, id_.size);
  std::lock_guard guard(lock_);
  // Unless a fetch of this daemon marked it again meanwhile.
  if (present(block) && !entry.trusted.load(std::memory_order_acquire)) {
    set_present(block, false);
    cached_bytes.fetch_sub(length);
    log_failure(target_.display + ": cached bytes " + std::to_string(offset) + "-" +
                std::to_string(offset + length - 1) + " " +
                (check == cache::Check::kMissing
                     ? "are missing from the cache file (it was cut)"
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

std::shared_ptr<const MappedFile> open(std::string_view name) {
  Target target = resolve(name);
  Identity id = probe(target);
  if (id.size == 0) refuse(target, "is empty");
  return Blocks::map(std::move(target), std::move(id));
}

}  // namespace modelfs::remote

namespace modelfs {}  // namespace modelfs
