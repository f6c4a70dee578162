// SPDX-License-Identifier: Apache-2.0
// modelfs: mount a model file as a read-only tensor tree.
//
//   modelfs [options] MODEL MOUNTPOINT
//   modelfs --list [--json] MODEL
//   modelfs --info [--json] MODEL
//   modelfs --check [--json] MODEL
//   modelfs -u MOUNTPOINT
//   modelfs --version | --help
//
// Exit status: 0 success; 1 usage, mountpoint or FUSE failure; 2 the model
// cannot be read (the message names file, format, offset and reason).
#include <dirent.h>
#include <fuse_lowlevel.h>
#include <fuse_opt.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "list.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/check.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/remote.hpp"
#include "modelfs/terminal_text.hpp"
#include "fuse/fuse_server.hpp"
#include "logging.hpp"
#include "modelfs/tree.hpp"
#include "modelfs/version.hpp"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 1;
constexpr int kExitBadModel = 2;
// Readahead set on the mount when running as root: the kernel then sends
// 1 MiB requests (the most libfuse 3.14 offers), and the read-ahead thread
// reads further ahead (prefetcher.hpp). A larger window would make the
// reader's own readahead race the thread for the same pages
// (docs/performance.md, "Readahead").
constexpr unsigned kDefaultReadaheadKib = 1024;

struct Config {
  char* model = nullptr;
  char* mountpoint = nullptr;  // as given; fuse_parse_cmdline takes it too
  int positional = 0;
  int list = 0;
  int info = 0;
  int check = 0;
  int json = 0;
  int flat = 0;
  int nonempty = 0;
  char* log_file = nullptr;
  int readahead_kb = -1;
  int xattr = 0;
  int noprefetch = 0;
  int max_parse_mb = 0;  // 0: the budget follows the model's metadata
  char* cache_dir = nullptr;  // remote models' cache (src/remote)
  char* cache_max = nullptr;  // its bound: N, NK, NM, NG or NT (binary units)
  int remote_timeout = 0;     // seconds; 0: the default (remote.hpp)
  int show_help = 0;
  int show_version = 0;
  int unmount = 0;  // -u MOUNTPOINT
};

enum Key { kKeyHelp, kKeyVersion, kKeyUnmount };

#define MODELFS_OPT(templ, field, value) \
  fuse_opt { templ, offsetof(Config, field), value }

// FUSE_OPT_KEY, with the offset's type spelled out (its -1U widens silently).
#define MODELFS_KEY(templ, key) \
  fuse_opt { templ, static_cast<unsigned long>(-1U), key }

const fuse_opt kOptions[] = {
    MODELFS_OPT("--list", list, 1),
    MODELFS_OPT("--info", info, 1),
    MODELFS_OPT("--check", check, 1),
    MODELFS_OPT("--json", json, 1),
    MODELFS_OPT("flat", flat, 1),
    MODELFS_OPT("nonempty", nonempty, 1),
    MODELFS_OPT("log_file=%s", log_file, 0),
    MODELFS_OPT("readahead_kb=%d", readahead_kb, 0),
    MODELFS_OPT("xattr", xattr, 1),
    MODELFS_OPT("noprefetch", noprefetch, 1),
    MODELFS_OPT("max_parse_mb=%d", max_parse_mb, 0),
    MODELFS_OPT("cache_dir=%s", cache_dir, 0),
    MODELFS_OPT("cache_max=%s", cache_max, 0),
    MODELFS_OPT("remote_timeout=%d", remote_timeout, 0),
    MODELFS_KEY("-h", kKeyHelp),
    MODELFS_KEY("--help", kKeyHelp),
    MODELFS_KEY("-V", kKeyVersion),
    MODELFS_KEY("--version", kKeyVersion),
    MODELFS_KEY("-u", kKeyUnmount),
    MODELFS_KEY("--unmount", kKeyUnmount),
    FUSE_OPT_END,
};

// The first positional argument is the model (ours); the second, the
// mountpoint, stays in the argument list for fuse_parse_cmdline.
int option_processor(void* data, const char* arg, int key, fuse_args*) {
  auto& config = *static_cast<Config*>(data);
  switch (key) {
    case kKeyHelp:
      config.show_help = 1;
      return 0;
    case kKeyVersion:
      config.show_version = 1;
      return 0;
    case kKeyUnmount:
      config.unmount = 1;
      return 0;
    case FUSE_OPT_KEY_NONOPT:
      if (config.positional++ == 0) {
        config.model = ::strdup(arg);
        return 0;
      }
      if (config.positional == 2) config.mountpoint = ::strdup(arg);
      return 1;
    default:
      return 1;
  }
}

void print_usage(const char* program) {
  std::cout << "usage: " << program << " [options] MODEL MOUNTPOINT\n"
            << "       " << program << " --list [--json] MODEL\n"
            << "       " << program << " --info [--json] MODEL\n"
            << "       " << program << " --check [--json] MODEL\n"
            << "       " << program << " -u MOUNTPOINT\n"
            << "       " << program << " --version | --help\n"
            << "\n"
            << "Mounts a machine-learning model file read-only: every tensor a file of its raw\n"
            << "bytes, with a JSON sidecar (P.json) and a NumPy view (P.npy) beside it.\n"
            << "MODEL: a .safetensors file (or a sharded checkpoint's folder or index JSON),\n"
            << "a .gguf file (or a split set's member or folder), an .onnx file, a torch.save\n"
            << "file (.pt .pth .bin .ckpt, ZIP or legacy; or a sharded .bin index), or a\n"
            << "TorchScript archive, or a .pt2 archive (torch.export.save, AOTInductor).\n"
            << "MODEL may be a URL: http(s)://..., s3://BUCKET/KEY, hf://OWNER/REPO[@REV]/PATH.\n"
            << "\n"
            << "modelfs options:\n"
            << "    --list                 print the tensor table (name, dtype, shape, bytes)\n"
            << "    --info                 print the model's format, files, size and metadata\n"
            << "    --json                 with --list, --info or --check: print JSON\n"
            << "    --check                verify the whole model without mounting: every\n"
            << "                           offset and length, every byte readable, overlaps,\n"
            << "                           the format's checksums; exit 0, or 2 at the first fault\n"
            << "    -u, --unmount          unmount MOUNTPOINT (runs fusermount3 -u MOUNTPOINT)\n"
            << "    -o flat                keep tensor names whole, as files at the root\n"
            << "    -o nonempty            allow mounting over a non-empty folder\n"
            << "    -o log_file=PATH       after detaching, log here instead of syslog\n"
            << "    -o readahead_kb=N      readahead of the mount (root only; default "
            << kDefaultReadaheadKib << ", 0 keeps the kernel's)\n"
            << "    -o xattr               serve user.modelfs.dtype and user.modelfs.shape as\n"
            << "                           extended attributes (off: ls -l is faster)\n"
            << "    -o noprefetch          do not read ahead of sequential readers from a\n"
            << "                           thread of the daemon's own\n"
            << "    -o max_parse_mb=N      memory reading the model may take, in MiB (default:\n"
            << "                           64 plus 8 bytes per byte of the model's metadata)\n"
            << "    -o cache_dir=PATH      remote models' block cache (default:\n"
            << "                           $XDG_CACHE_HOME/modelfs, or ~/.cache/modelfs)\n"
            << "    -o cache_max=SIZE      evict least recently used cached blocks past SIZE\n"
            << "                           (bytes, or K, M, G, T)\n"
            << "    -o remote_timeout=N    seconds a remote request may take to connect or stall\n"
            << "                           (default 20)\n"
            << "\n"
            << "FUSE options:\n"
            << "    -h   --help            print help\n"
            << "    -V   --version         print version\n"
            << "    -d   -o debug          enable debug output (implies -f)\n"
            << "    -f                     foreground operation\n"
            << "    -s                     serve requests on one thread (default: libfuse's\n"
            << "                           pool of threads)\n"
            << "    -o max_threads=N       at most N threads (default 10)\n";
  std::cout.flush();
  fuse_lowlevel_help();
  std::cout << "\nExit status: 0 ok, 1 usage or mount error, 2 the model cannot be read.\n"
            << "Unmount with: fusermount3 -u MOUNTPOINT (or modelfs -u MOUNTPOINT)\n";
}

// A mount at the mountpoint, as /proc/self/mountinfo lists it.
struct MountEntry {
  std::string type;    // "fuse.modelfs", "tmpfs", ...
  std::string source;  // for modelfs, the model it serves
};

// mountinfo writes space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(std::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() &&
        std::isdigit(static_cast<unsigned char>(field[i + 1])) &&
        std::isdigit(static_cast<unsigned char>(field[i + 2])) &&
        std::isdigit(static_cast<unsigned char>(field[i + 3]))) {
      out += static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 + (field[i + 3] - '0'));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

// The topmost mount whose mount point is `path` (an absolute, resolved
// path), or nothing when none is listed or /proc cannot be read.
std::optional<MountEntry> mount_at(const std::string& path) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::optional<MountEntry> found;
  std::string line;
  while (std::getline(mountinfo, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPEROPTIONS
    std::istringstream fields(line);
    std::vector<std::string> parts;
    for (std::string part; fields >> part;) parts.push_back(part);
    const auto dash = std::find(parts.begin(), parts.end(), "-");
    if (parts.size() < 5 || dash == parts.end() || parts.end() - dash < 3) continue;
    // Later lines are mounted later, so on top of earlier ones.
    if (unescape_mountinfo(parts[4]) == path)
      found = MountEntry{unescape_mountinfo(*(dash + 1)), unescape_mountinfo(*(dash + 2))};
  }
  return found;
}

// A FUSE mount whose daemon is gone: the kernel answers ENOTCONN. stat()
// alone does not show it at the mount's root, whose attributes the kernel
// keeps (modelfs's are cached forever); statfs() always asks the daemon.
bool daemon_gone(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOTCONN) return true;
  struct statfs fs {};
  return ::statfs(path.c_str(), &fs) != 0 && errno == ENOTCONN;
}

void report_daemon_gone(const std::string& mountpoint) {
  std::error_code ec;
  // Not realpath: it could stop at the dead mount. "mnt/" is listed as "mnt".
  auto absolute = std::filesystem::absolute(mountpoint, ec).lexically_normal();
  if (!absolute.has_filename() && absolute.has_relative_path()) absolute = absolute.parent_path();
  const auto mount = mount_at(absolute.string());
  const std::string whose = mount && mount->type == "fuse.modelfs"
                                ? "the modelfs daemon serving " + mount->source + " there"
                                : "the FUSE daemon serving it";
  spdlog::error("{}: {} has exited (Transport endpoint is not connected); unmount it with: "
                "fusermount3 -u {}",
                mountpoint, whose, mountpoint);
}

// Checks the mountpoint before anything is parsed or mounted, so the common
// mistakes get a message that says what to do. A folder that is itself a
// mount root (a container's volume, a tmpfs) is a mountpoint like any
// other; only modelfs already there, or a mount whose daemon has died, is
// refused.
bool check_mountpoint(const std::string& mountpoint, bool allow_nonempty) {
  if (daemon_gone(mountpoint)) {
    report_daemon_gone(mountpoint);
    return false;
  }
  struct stat st {};
  if (::stat(mountpoint.c_str(), &st) != 0) {
    spdlog::error("{}: mountpoint: {}", mountpoint, std::strerror(errno));
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    spdlog::error("{}: mountpoint is not a directory", mountpoint);
    return false;
  }
  struct stat parent {};
  const std::string up = mountpoint + "/..";
  if (::stat(up.c_str(), &parent) == 0 && parent.st_dev != st.st_dev && mountpoint != "/") {
    if (const auto mount = mount_at(mountpoint); mount && mount->type == "fuse.modelfs") {
      spdlog::error("{}: modelfs is already mounted there (serving {}); unmount it first: "
                    "fusermount3 -u {}",
                    mountpoint, mount->source, mountpoint);
      return false;
    }
  }
  if (!allow_nonempty) {
    DIR* dir = ::opendir(mountpoint.c_str());
    if (dir == nullptr) {
      spdlog::error("{}: mountpoint: {}", mountpoint, std::strerror(errno));
      return false;
    }
    bool empty = true;
    while (dirent* entry = ::readdir(dir))
      if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) empty = false;
    ::closedir(dir);
    if (!empty) {
      spdlog::error("{}: mountpoint is not empty (its files would be hidden); use an empty "
                    "folder, or -o nonempty",
                    mountpoint);
      return false;
    }
  }
  return true;
}

bool on_path(const char* program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

// FUSE itself must be there: the device, and for non-root users the
// setuid helper that mounts on their behalf.
bool check_fuse_available() {
  if (::access("/dev/fuse", F_OK) != 0) {
    spdlog::error("FUSE is not available: /dev/fuse is missing (load the module with "
                  "'sudo modprobe fuse'; in a container, pass the device: --device /dev/fuse)");
    return false;
  }
  if (::geteuid() != 0 && !on_path("fusermount3")) {
    spdlog::error("FUSE is not installed: fusermount3 not found; install it with: "
                  "sudo apt-get install fuse3");
    return false;
  }
  if (const std::string problem = modelfs::cli::fuse_device_problem(); !problem.empty()) {
    spdlog::error("{}", problem);
    return false;
  }
  return true;
}

// fuse_opt splits -o lists at commas; a backslash keeps one literal.
std::string escape_fuse_option(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

struct ArgsGuard {
  fuse_args args;
  Config* config;
  fuse_cmdline_opts* cmdline;
  ~ArgsGuard() {
    fuse_opt_free_args(&args);
    std::free(config->model);
    std::free(config->mountpoint);
    std::free(config->log_file);
    std::free(cmdline->mountpoint);
  }
};

int run(int argc, char** argv) {
  modelfs::log_to_stderr(modelfs::LogLevel::Warning);
  modelfs::route_libfuse_logs();
  Config config;
  fuse_cmdline_opts cmdline{};
  ArgsGuard guard{FUSE_ARGS_INIT(argc, argv), &config, &cmdline};
  fuse_args& args = guard.args;

  if (fuse_opt_parse(&args, &config, kOptions, option_processor) != 0) return kExitUsage;
  if (config.show_help) {
    print_usage(argv[0]);
    return kExitOk;
  }
  if (config.show_version) {
    std::cout << "modelfs " << MODELFS_VERSION << " (libfuse " << fuse_pkgversion() << ")\n";
    return kExitOk;
  }
  if (config.unmount) {
    if (config.positional != 1 || args.argc > 1) {
      spdlog::error("-u takes the mountpoint alone: {} -u MOUNTPOINT", argv[0]);
      return kExitUsage;
    }
    return modelfs::cli::unmount_command(config.model);
  }
  if (config.json && !config.list && !config.info && !config.check) {
    spdlog::error("--json goes with --list, --info or --check");
    return kExitUsage;
  }
  if (config.list + config.info + config.check > 1) {
    spdlog::error("--list, --info and --check are separate commands; give one");
    return kExitUsage;
  }
  if (config.max_parse_mb < 0) {
    spdlog::error("-o max_parse_mb must be a positive number of MiB");
    return kExitUsage;
  }
  // One budget for reading the model and building its tree.
  modelfs::Budget budget(config.max_parse_mb > 0
                             ? std::optional<uint64_t>(uint64_t(config.max_parse_mb) << 20)
                             : std::nullopt);
  if (config.model == nullptr) {
    std::cerr << "usage: " << argv[0] << " [options] MODEL MOUNTPOINT (see --help)\n";
    return kExitUsage;
  }

  modelfs::remote::CacheOptions cache;
  if (config.cache_dir != nullptr) {
    std::error_code cache_ec;
    cache.dir = std::filesystem::absolute(config.cache_dir, cache_ec);
  }
  if (config.cache_max != nullptr) {
    const auto bound = modelfs::remote::parse_size(config.cache_max);
    if (!bound || *bound == 0) {
      spdlog::error("-o cache_max takes a size: N bytes, or with K, M, G or T (KiB ... TiB)");
      return kExitUsage;
    }
    cache.max_bytes = *bound;
  }
  if (config.remote_timeout < 0) {
    spdlog::error("-o remote_timeout takes a number of seconds");
    return kExitUsage;
  }
  if (config.remote_timeout > 0) cache.timeout_seconds = static_cast<unsigned>(config.remote_timeout);
  modelfs::remote::set_cache_options(cache);
  if (modelfs::remote::is_url(config.model)) modelfs::remote::hide_url_secrets(argc, argv, config.model);

  if (config.list || config.info || config.check) {
    if (config.positional > 1) {
      spdlog::error("{} takes only MODEL, not a mountpoint",
                    config.list ? "--list" : config.info ? "--info" : "--check");
      return kExitUsage;
    }
    try {
      auto catalog = [&] {
        modelfs::BudgetScope scope(budget);
        return modelfs::open_model(config.model);
      }();
      if (config.check)
        return modelfs::cli::check_command(config.model, catalog, config.json != 0, std::cout);
      if (config.info)
        modelfs::cli::print_info(catalog, config.json != 0, std::cout);
      else if (config.json)
        modelfs::cli::print_json(catalog, std::cout);
      else
        modelfs::cli::print_table(catalog, std::cout);
      return kExitOk;
    } catch (const modelfs::ModelError& e) {
      if (config.check && config.json) modelfs::cli::print_check_fault(config.model, e, std::cout);
      spdlog::error("{}", e.what());
      return kExitBadModel;
    }
  }

  // Before libfuse resolves the mountpoint, which fails on a mount whose
  // daemon has died without saying what to do about it.
  if (config.mountpoint != nullptr && daemon_gone(config.mountpoint)) {
    report_daemon_gone(config.mountpoint);
    return kExitUsage;
  }
  if (fuse_parse_cmdline(&args, &cmdline) != 0) return kExitUsage;
  if (cmdline.max_threads == 0) {
    spdlog::error("-o max_threads must be at least 1");
    return kExitUsage;
  }
  if (cmdline.mountpoint == nullptr) {
    spdlog::error("no mountpoint given (usage: {} [options] MODEL MOUNTPOINT)", argv[0]);
    return kExitUsage;
  }
  if (config.positional > 2) {
    spdlog::error("too many arguments (usage: {} [options] MODEL MOUNTPOINT)", argv[0]);
    return kExitUsage;
  }
  const auto level = cmdline.debug ? modelfs::LogLevel::Debug : modelfs::LogLevel::Warning;
  if (cmdline.debug) modelfs::log_to_stderr(level);
  const std::string mountpoint = cmdline.mountpoint;
  if (!check_mountpoint(mountpoint, config.nonempty) || !check_fuse_available()) return kExitUsage;

  std::unique_ptr<const modelfs::Tree> tree;
  try {
    modelfs::BudgetScope scope(budget);
    auto catalog = modelfs::open_model(config.model);
    // A mount never verifies (that is --check's work): a torch.save archive's
    // checks, one per record, would be held for the life of the mount.
    std::vector<modelfs::IntegrityCheck>().swap(catalog.integrity_checks);
    tree = modelfs::Tree::build(std::move(catalog), {.flat = config.flat != 0});
  } catch (const modelfs::ModelError& e) {
    spdlog::error("{}", e.what());
    return kExitBadModel;
  }
  // Parsing and building free a lot of short-lived memory (the header's JSON
  // DOM, the index being assembled); hand it back to the system, or the
  // daemon keeps it as anonymous RSS for the life of the mount.
  ::malloc_trim(0);

  // The mount is read-only at the kernel too, the kernel enforces the 0444
  // and 0555 modes, and `mount` shows the model it serves.
  std::error_code ec;
  const std::string source = modelfs::remote::is_url(config.model)
                                 ? modelfs::remote::display_url(config.model)
                                 : std::filesystem::absolute(config.model, ec).lexically_normal().string();
  const std::string mount_options[] = {"-oro", "-odefault_permissions", "-osubtype=modelfs",
                                       "-ofsname=" + escape_fuse_option(source)};
  for (const auto& option : mount_options)
    fuse_opt_add_arg(&args, option.c_str());

  const std::string log_file =
      config.log_file ? std::filesystem::absolute(config.log_file, ec).string() : std::string();
  // A log file is asked for: it gets the daemon's life story, not only warnings.
  const auto file_level = cmdline.debug ? modelfs::LogLevel::Debug : modelfs::LogLevel::Info;
  if (!log_file.empty() && !cmdline.foreground && !modelfs::log_to_file(log_file, file_level)) {
    spdlog::error("{}: cannot open the log file", log_file);
    return kExitUsage;
  }

  modelfs::ServeOptions serve;
  serve.mountpoint = mountpoint;
  serve.foreground = cmdline.foreground != 0;
  serve.single_thread = cmdline.singlethread != 0;
  serve.xattrs = config.xattr != 0;
  serve.prefetch = config.noprefetch == 0;
  serve.max_threads = cmdline.max_threads;
  serve.clone_fd = cmdline.clone_fd != 0;
  if (cmdline.max_idle_threads != UINT_MAX) serve.max_idle_threads = cmdline.max_idle_threads;
  serve.readahead_kb = config.readahead_kb >= 0 ? static_cast<unsigned>(config.readahead_kb)
                       : ::geteuid() == 0      ? kDefaultReadaheadKib
                                               : 0;
  if (config.readahead_kb >= 0 && ::geteuid() != 0) {
    spdlog::warn("-o readahead_kb={} is ignored: only root may set a mount's readahead (the "
                 "kernel's 128 KiB stays)",
                 config.readahead_kb);
    serve.readahead_kb = 0;
  }
  const size_t tensors = tree->tensors().size();
  serve.on_mounted = [&] {
    // Said to a person at a terminal; scripts and mount(8) get silence.
    if (!cmdline.foreground && ::isatty(STDERR_FILENO))
      std::cerr << "modelfs: mounted " << config.model << " (" << tree->catalog().format << ", "
                << tensors << " tensors) at " << mountpoint
                << "\nmodelfs: unmount with: fusermount3 -u " << mountpoint << "\n";
  };
  serve.on_daemonized = [&] {
    if (log_file.empty()) modelfs::log_to_syslog(level);
    spdlog::info("modelfs {} serving {} ({} tensors) at {}, pid {}", MODELFS_VERSION, source,
                 tensors, mountpoint, ::getpid());
  };
  const int status = modelfs::serve(*tree, args, serve);
  spdlog::info("unmounted {}", mountpoint);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  // One malloc arena for every thread: the serving threads allocate only
  // libfuse's small per-request blocks, which their thread caches recycle,
  // so an arena each would only keep pages resident for that.
  ::mallopt(M_ARENA_MAX, 1);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "modelfs: " << modelfs::printable(e.what()) << "\n";
    return kExitUsage;
  }
}
