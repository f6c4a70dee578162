// SPDX-License-Identifier: Apache-2.0
// The libfuse3 low-level operations over an immutable Tree.
//
// Conventions (after libfuse's passthrough_hp.cc and squashfuse's ll.c):
// the inode number is the index of a Node in the tree's table; every
// request gets exactly one reply; errno is produced at the point of failure;
// nothing is thrown across the C boundary (each callback catches and answers
// EIO with a log line). The tree never changes after mounting, so entries
// and attributes are cached by the kernel for as long as it likes and file
// pages are kept between opens.
#include "fuse/fuse_server.hpp"

#include "fuse/loop.hpp"
#include "fuse/prefetcher.hpp"
#include "fuse/replies.hpp"
#include "fuse/threads.hpp"
#include "io/json_text.hpp"
#include "remote/remote.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace modelfs {
namespace {

struct Context {
  const Tree* tree;
  uid_t uid;
  gid_t gid;
  bool xattrs;             // serve user.modelfs.* (-o xattr)
  Prefetcher* prefetcher;  // null: -o noprefetch
  // Set at INIT when the kernel can skip OPEN/RELEASE and OPENDIR/
  // RELEASEDIR: then the first open answers ENOSYS and the kernel stops
  // asking, defaulting to what modelfs would answer anyway (keep the page
  // cache, cache listings). Walking a tree saves two round trips a folder.
  std::atomic<bool> skip_open{false};
  std::atomic<bool> skip_opendir{false};
};

// Requests only read it; INIT, the one writer, reaches it through its own
// userdata pointer before any request is served.
const Context& context(fuse_req_t req) { return *static_cast<const Context*>(fuse_req_userdata(req)); }

// What requests answer about nodes (replies.hpp), as this mount's owner.
struct stat attributes_of(const Context& ctx, uint64_t ino, const Node& node) {
  return attributes_of(*ctx.tree, {ctx.uid, ctx.gid}, ino, node);
}

fuse_entry_param entry_of(const Context& ctx, uint64_t ino, const Node& node) {
  return entry_of(*ctx.tree, {ctx.uid, ctx.gid}, ino, node);
}

// Runs a callback body; any exception becomes EIO and a log line, since
// nothing may unwind into libfuse's C code.
template <typename Body>
void guarded(fuse_req_t req, const char* op, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", op, e.what());
    fuse_reply_err(req, EIO);
  } catch (...) {
    spdlog::error("{}: unknown exception", op);
    fuse_reply_err(req, EIO);
  }
}

void op_init(void* userdata, fuse_conn_info* conn) {
  auto& ctx = *static_cast<Context*>(userdata);
  // Splice sends each reply through a pipe, which costs more than one copy
  // from the mapping (docs/performance.md, "No splice"): writev of iovecs.
  conn->want &= ~static_cast<unsigned>(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  // Lookups and readdirs of different folders need no serialisation here.
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  // ls -l on a big folder: names and attributes in one round trip.
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  // Nothing ever changes, so the kernel need not re-check mtimes.
  conn->want &= ~static_cast<unsigned>(FUSE_CAP_AUTO_INVAL_DATA);
  // Opens need no answer of ours: the mount is read-only at the kernel,
  // and without OPEN the kernel keeps the page cache and caches listings.
  if (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) {
    conn->want |= FUSE_CAP_NO_OPEN_SUPPORT;
    ctx.skip_open = true;
  }
  if (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) {
    conn->want |= FUSE_CAP_NO_OPENDIR_SUPPORT;
    ctx.skip_opendir = true;
  }
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  guarded(req, "lookup", [&] {
    const auto& ctx = context(req);
    if (ctx.tree->node(parent) == nullptr) return (void)fuse_reply_err(req, ENOENT);
    auto ino = ctx.tree->lookup(parent, name);
    if (!ino) {
      // A negative entry with a timeout: the kernel remembers the absence.
      fuse_entry_param none{};
      none.entry_timeout = kCacheTimeout;
      return (void)fuse_reply_entry(req, &none);
    }
    auto entry = entry_of(ctx, *ino, *ctx.tree->node(*ino));
    fuse_reply_entry(req, &entry);
  });
}

void op_forget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }

void op_forget_multi(fuse_req_t req, size_t, fuse_forget_data*) { fuse_reply_none(req); }

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  guarded(req, "getattr", [&] {
    const auto& ctx = context(req);
    const Node* node = ctx.tree->node(ino);
    if (node == nullptr) return (void)fuse_reply_err(req, ENOENT);
    auto st = attributes_of(ctx, ino, *node);
    fuse_reply_attr(req, &st, kCacheTimeout);
  });
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guarded(req, "opendir", [&] {
    if (context(req).skip_opendir) return (void)fuse_reply_err(req, ENOSYS);
    const Node* node = context(req).tree->node(ino);
    if (node == nullptr) return (void)fuse_reply_err(req, ENOENT);
    if (node->kind != NodeKind::Directory) return (void)fuse_reply_err(req, ENOTDIR);
    if ((fi->flags & O_ACCMODE) != O_RDONLY) return (void)fuse_reply_err(req, EROFS);
    fi->cache_readdir = 1;  // listings never change
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
  });
}

// READDIR and READDIRPLUS. Entries are ".", "..", then the children in name
// order; the offset of an entry is its position plus one, so a listing
// resumes where it stopped.
template <bool Plus>
void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info*) {
  guarded(req, Plus ? "readdirplus" : "readdir", [&] {
    const auto& ctx = context(req);
    const Node* dir = ctx.tree->node(ino);
    if (dir == nullptr) return (void)fuse_reply_err(req, ENOENT);
    if (dir->kind != NodeKind::Directory) return (void)fuse_reply_err(req, ENOTDIR);
    // Reused by this thread's listings and never initialised: each reply
    // sends only what was just written, and pages never written are never
    // touched (the kernel asks for 64 KiB; a small folder's listing fills a page).
    thread_local std::unique_ptr<char[]> buffer;
    thread_local size_t capacity = 0;
    if (capacity < size) {
      buffer = std::make_unique_for_overwrite<char[]>(size);
      capacity = size;
    }
    const size_t used =
        fill_listing(*ctx.tree, ino, *dir, offset, buffer.get(), size,
                     [&](char* at, size_t room, const ListingEntry& entry, const Node& node) {
                       if constexpr (Plus) {
                         // The kernel takes no lookup reference for "." and "..", and forget
                         // is a no-op here anyway: inodes live as long as the mount.
                         fuse_entry_param attributes = entry_of(ctx, entry.ino, node);
                         return fuse_add_direntry_plus(req, at, room, entry.name, &attributes, entry.next);
                       } else {
                         struct stat st = listing_attributes(entry.ino, node);
                         return fuse_add_direntry(req, at, room, entry.name, &st, entry.next);
                       }
                     });
    fuse_reply_buf(req, buffer.get(), used);
  });
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guarded(req, "open", [&] {
    if (context(req).skip_open) return (void)fuse_reply_err(req, ENOSYS);
    const Node* node = context(req).tree->node(ino);
    if (node == nullptr) return (void)fuse_reply_err(req, ENOENT);
    if (node->kind == NodeKind::Directory) return (void)fuse_reply_err(req, EISDIR);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) return (void)fuse_reply_err(req, EROFS);
    fi->keep_cache = 1;  // pages read once stay valid: the bytes never change
    fi->noflush = 1;     // nothing to flush on close
    fuse_reply_open(req, fi);
  });
}

// Failed reads: the first few logged, then a count every few seconds. A
// truncated model or a server gone fails every read, and 32 readers would
// write thousands of lines; a foreground daemon whose stderr nobody drains
// would then block every worker on the log.
void log_failed_read(const std::string& line) {
  constexpr uint64_t kLogged = 5;
  constexpr auto kCountEvery = std::chrono::seconds(10);
  static std::mutex lock;
  static uint64_t logged = 0, unlogged = 0;
  static std::chrono::steady_clock::time_point counted{};
  std::unique_lock guard(lock);
  const auto now = std::chrono::steady_clock::now();
  if (logged < kLogged) {
    const bool last = ++logged == kLogged;
    if (last) counted = now;
    guard.unlock();
    spdlog::error("{}{}", line, last ? " (more failed reads are counted, not logged)" : "");
    return;
  }
  ++unlogged;
  if (now - counted < kCountEvery) return;
  const uint64_t count = std::exchange(unlogged, 0);
  counted = now;
  guard.unlock();
  spdlog::error("{} more failed reads (not logged one by one), the last: {}", count, line);
}

std::string read_name(const Node& node) {
  return node.tensor ? std::string(node.tensor->name) : std::string("a document");
}

void warn_failed_read(const Node& node, uint64_t offset, int error) {
  log_failed_read(
      fmt::format("read of {} at offset {} failed ({}); the reader got EIO. Was the model file "
                  "(a remote model's: its cache file) truncated or changed under the mount?",
                  read_name(node), offset, std::strerror(error)));
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info*) {
  guarded(req, "read", [&] {
    const Node* node = context(req).tree->node(ino);
    if (node == nullptr) return (void)fuse_reply_err(req, ENOENT);
    if (node->kind != NodeKind::File) return (void)fuse_reply_err(req, EISDIR);
    if (offset < 0) return (void)fuse_reply_err(req, EINVAL);
    const uint64_t start = static_cast<uint64_t>(offset);
    if (start >= node->size) return (void)fuse_reply_buf(req, nullptr, 0);
    const uint64_t length = std::min<uint64_t>(size, node->size - start);
    // A read of the export file may span thousands of tiny tensors, and
    // FUSE takes a short read only at the end of a file: the tree copies
    // what does not fit in these iovecs into the scratch (libfuse adds its
    // header to them, hence one less than IOV_MAX). Per thread: 16 KiB, and
    // the scratch grows to the largest request (max_read) at most.
    thread_local std::array<iovec, IOV_MAX - 1> iov{};
    thread_local std::string scratch;  // a sidecar printed, computed bytes, the copied rest
    // `req` is gone once answered.
    Prefetcher* const prefetcher = context(req).prefetcher;
    const pid_t reader = fuse_req_ctx(req)->pid;
    // The kernel copies straight from the mapping: no intermediate buffer.
    // If the model file shrank under the mount, that copy faults in the
    // kernel (EFAULT here, never SIGBUS in the daemon) and the kernel answers
    // the reader EIO: an error, never wrong bytes.
    int error = 0;
    try {
      error = context(req).tree->serve(*node, start, length, iov, scratch, [req](std::span<const iovec> v) {
        return fuse_reply_iov(req, v.data(), static_cast<int>(v.size()));
      });
    } catch (const std::exception& e) {
      // Why it failed (a remote fetch says what the server did).
      log_failed_read(fmt::format("read of {} at offset {} failed: {}; the reader got EIO", read_name(*node),
                                  start, e.what()));
      return (void)fuse_reply_err(req, EIO);
    }
    if (error < 0) return warn_failed_read(*node, start, -error);
    if (prefetcher != nullptr) prefetcher->note_read(ino, start, length, reader);
  });
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  guarded(req, "statfs", [&] {
    const auto& tree = *context(req).tree;
    struct statvfs st {};
    st.f_bsize = 4096;
    st.f_frsize = 4096;
    st.f_blocks = (tree.total_bytes() + 4095) / 4096;
    st.f_files = tree.node_count();
    st.f_namemax = 255;
    st.f_flag = ST_RDONLY;
    fuse_reply_statfs(req, &st);
  });
}

// user.modelfs.dtype and user.modelfs.shape, on tensor files and .npy views.
std::vector<std::pair<std::string, std::string>> xattrs_of(const Tree& tree, const Node& node) {
  if (node.tensor == nullptr || (node.role != FileRole::TensorData && node.role != FileRole::NpyView))
    return {};
  std::string shape;
  append_json_array(shape, node.tensor->shape);
  // A .npy of converted values holds numpy's type, not the stored one.
  const auto& npy = tree.npy_of(*node.tensor);
  const std::string_view dtype =
      node.role == FileRole::NpyView && npy ? dtype_name(npy->dtype) : node.tensor->dtype_name();
  return {{"user.modelfs.dtype", std::string(dtype)}, {"user.modelfs.shape", shape}};
}

void reply_xattr_value(fuse_req_t req, const std::string& value, size_t size) {
  if (size == 0) return (void)fuse_reply_xattr(req, value.size());
  if (size < value.size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, value.data(), value.size());
}

// Without -o xattr, getxattr answers ENOSYS: the kernel then stops asking.
// `ls -l` asks two attributes of every file (security.selinux,
// system.posix_acl_access); those round trips would be most of an `ls -lR`
// (docs/performance.md, "Extended attributes off by default"). listxattr
// answers an empty list instead (ENOSYS there would be ENOTSUP to callers:
// `tar --xattrs` warned once per file and `getfattr -d` failed); `ls -l`
// never lists attributes, so that costs it nothing.
void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  guarded(req, "getxattr", [&] {
    if (!context(req).xattrs) return (void)fuse_reply_err(req, ENOSYS);
    const Node* node = context(req).tree->node(ino);
    if (node == nullptr) return (void)fuse_reply_err(req, ENOENT);
    for (const auto& [key, value] : xattrs_of(*context(req).tree, *node))
      if (key == name) return reply_xattr_value(req, value, size);
    fuse_reply_err(req, ENODATA);
  });
}

void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  guarded(req, "listxattr", [&] {
    const Node* node = context(req).tree->node(ino);
    if (node == nullptr) return (void)fuse_reply_err(req, ENOENT);
    std::string names;
    if (context(req).xattrs)
      for (const auto& [key, value] : xattrs_of(*context(req).tree, *node)) names.append(key).push_back('\0');
    reply_xattr_value(req, names, size);
  });
}

// Answers `Error` whatever the operation's other arguments: 0 for the
// releases, EROFS for every operation that would change the tree.
template <int Error, typename... Ignored>
void answer(fuse_req_t req, Ignored...) {
  fuse_reply_err(req, Error);
}

fuse_lowlevel_ops make_operations() {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.forget = op_forget;
  ops.forget_multi = op_forget_multi;
  ops.getattr = op_getattr;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir<false>;
  ops.readdirplus = op_readdir<true>;
  ops.releasedir = answer<0>;
  ops.open = op_open;
  ops.read = op_read;
  ops.release = answer<0>;
  ops.statfs = op_statfs;
  ops.getxattr = op_getxattr;
  ops.listxattr = op_listxattr;
  ops.setattr = answer<EROFS>;
  ops.mknod = answer<EROFS>;
  ops.mkdir = answer<EROFS>;
  ops.unlink = answer<EROFS>;
  ops.rmdir = answer<EROFS>;
  ops.symlink = answer<EROFS>;
  ops.rename = answer<EROFS>;
  ops.link = answer<EROFS>;
  ops.write = answer<EROFS>;
  ops.create = answer<EROFS>;
  ops.setxattr = answer<EROFS>;
  ops.removexattr = answer<EROFS>;
  ops.fallocate = answer<EROFS>;
  ops.copy_file_range = answer<EROFS>;
  return ops;
}

// Raises the readahead of the mount's backing device. It must happen after
// the kernel has processed the INIT reply (which lowers readahead to what the
// daemon offered), so this runs on its own thread and first stats the mount
// root: that stat returns only once INIT is done and the loop is serving.
void raise_readahead(const std::string& mountpoint, unsigned kib) {
  struct stat st {};
  if (::stat(mountpoint.c_str(), &st) != 0) return;
  const std::string sysfs =
      fmt::format("/sys/class/bdi/{}:{}/read_ahead_kb", major(st.st_dev), minor(st.st_dev));
  std::ofstream out(sysfs);
  out << kib << "\n";
  out.flush();
  if (!out)
    spdlog::info("could not raise readahead to {} KiB through {} (needs root)", kib, sysfs);
  else
    spdlog::debug("readahead of {} set to {} KiB", mountpoint, kib);
}

}  // namespace

int serve(const Tree& tree, fuse_args& args, const ServeOptions& options) {
  Context ctx{&tree, ::getuid(), ::getgid(), options.xattrs, nullptr};
  const fuse_lowlevel_ops ops = make_operations();
  fuse_session* session = fuse_session_new(&args, &ops, sizeof(ops), &ctx);
  if (session == nullptr) return 1;
  if (fuse_set_signal_handlers(session) != 0) {
    fuse_session_destroy(session);
    return 1;
  }
  if (fuse_session_mount(session, options.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(session);
    fuse_session_destroy(session);
    return 1;
  }
  if (options.on_mounted) options.on_mounted();
  // Daemonizing forks, and the daemon goes on reading: the fetch threads
  // opening a remote model started end first (the library registers no fork
  // handler), and start afresh in the daemon as reads come.
  if (!options.foreground) remote::stop_fetch_threads();
  fuse_daemonize(options.foreground ? 1 : 0);
  if (!options.foreground && options.on_daemonized) options.on_daemonized();

  std::thread readahead;
  if (options.readahead_kb > 0) {
    try {
      readahead = thread_without_exit_signals([mountpoint = options.mountpoint, kib = options.readahead_kb] {
        raise_readahead(mountpoint, kib);
      });
    } catch (const std::system_error& e) {
      spdlog::info("readahead left as it is: {}", e.what());
    }
  }

  std::optional<Prefetcher> prefetcher;
  if (options.prefetch) ctx.prefetcher = &prefetcher.emplace(tree, options.mountpoint);

  // -s: libfuse's own single-threaded loop; otherwise loop.hpp's.
  const int status =
      options.single_thread ? fuse_session_loop(session) : serve_session(session, options.max_threads);
  fuse_session_unmount(session);
  prefetcher.reset();
  if (readahead.joinable()) readahead.join();
  fuse_remove_signal_handlers(session);
  fuse_session_destroy(session);
  // The loop returns the signal number when a signal ended it, and an
  // errno when the device failed; a connection the kernel already tore
  // down (unmounted while requests were in flight) is a clean end too.
  if (status < 0 && status != -ENODEV && status != -ECONNABORTED && status != -ENOTCONN) {
    spdlog::error("the FUSE session ended with an error: {}", std::strerror(-status));
    return 1;
  }
  return 0;
}

}  // namespace modelfs
