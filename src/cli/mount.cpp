// SPDX-License-Identifier: Apache-2.0
// `modelfs [options] MODEL MOUNTPOINT`: the checks that give the common
// mistakes a message saying what to do, then the tree, the mount options and
// the serving loop.
#include <fcntl.h>
#include <grp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "cli/logging.hpp"
#include "cli/options.hpp"
#include "fuse/fuse_server.hpp"
#include "io/budget_charge.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/tree.hpp"
#include "modelfs/version.hpp"
#include "remote/remote.hpp"

namespace modelfs::cli {
namespace {

// mountinfo writes space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(std::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && std::isdigit(static_cast<unsigned char>(field[i + 1])) &&
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

// The model served at `path` (an absolute, resolved path) when the topmost
// mount there is modelfs; nothing when it is another filesystem, none is
// listed or /proc cannot be read.
std::optional<std::string> modelfs_at(const std::string& path) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::optional<std::string> found;
  std::string line;
  while (std::getline(mountinfo, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPEROPTIONS
    std::istringstream fields(line);
    std::vector<std::string> parts;
    for (std::string part; fields >> part;) parts.push_back(part);
    const auto dash = std::find(parts.begin(), parts.end(), "-");
    if (parts.size() < 5 || dash == parts.end() || parts.end() - dash < 3) continue;
    // Later lines are mounted later, so on top of earlier ones.
    if (unescape_mountinfo(parts[4]) != path) continue;
    found.reset();
    if (unescape_mountinfo(*(dash + 1)) == "fuse.modelfs") found = unescape_mountinfo(*(dash + 2));
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
  const auto model = modelfs_at(absolute.string());
  const std::string whose =
      model ? "the modelfs daemon serving " + *model + " there" : "the FUSE daemon serving it";
  spdlog::error(
      "{}: {} has exited (Transport endpoint is not connected); unmount it with: "
      "fusermount3 -u {}",
      mountpoint, whose, mountpoint);
}

// "/dev/fd/N": the descriptor N of /dev/fuse, already mounted by whoever
// opened it (a CSI plugin handing the mount to a daemon it did not start),
// which libfuse serves without mounting (fuse_session_mount). -1 otherwise.
int fuse_fd_of(const std::string& mountpoint) {
  constexpr std::string_view kPrefix = "/dev/fd/";
  if (!mountpoint.starts_with(kPrefix) || mountpoint.size() == kPrefix.size() ||
      mountpoint.size() > kPrefix.size() + 9)
    return -1;
  int fd = 0;
  for (const char c : mountpoint.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return -1;
    fd = fd * 10 + (c - '0');
  }
  return fd;
}

// The descriptor is open and is the FUSE device (10:229), not a file a
// mistaken /dev/fd path names.
bool check_fuse_fd(const std::string& mountpoint, int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    spdlog::error("{}: mountpoint: descriptor {} is not open: {}", mountpoint, fd, std::strerror(errno));
    return false;
  }
  if (!S_ISCHR(st.st_mode) || major(st.st_rdev) != 10 || minor(st.st_rdev) != 229) {
    spdlog::error(
        "{}: mountpoint: descriptor {} is not /dev/fuse (give a mounted /dev/fuse descriptor, or a folder)",
        mountpoint, fd);
    return false;
  }
  return true;
}

// Checks the mountpoint before the model is read or anything mounted, so the
// common mistakes get a message that says what to do. A folder that is
// itself a mount root (a container's volume, a tmpfs) is a mountpoint like
// any other; only modelfs already there is refused (a mount whose daemon
// has died, mount_command has refused already).
bool check_mountpoint(const std::string& mountpoint, bool allow_nonempty) {
  if (const int fd = fuse_fd_of(mountpoint); fd >= 0) return check_fuse_fd(mountpoint, fd);
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
    if (const auto model = modelfs_at(mountpoint)) {
      spdlog::error(
          "{}: modelfs is already mounted there (serving {}); unmount it first: "
          "fusermount3 -u {}",
          mountpoint, *model, mountpoint);
      return false;
    }
  }
  if (!allow_nonempty) {
    std::error_code ec;
    const bool empty = std::filesystem::is_empty(mountpoint, ec);
    if (ec) {
      spdlog::error("{}: mountpoint: {}", mountpoint, ec.message());
      return false;
    }
    if (!empty) {
      spdlog::error(
          "{}: mountpoint is not empty (its files would be hidden); use an empty "
          "folder, or -o nonempty",
          mountpoint);
      return false;
    }
  }
  return true;
}

bool on_path(const char* program) {
  const char* path = std::getenv("PATH");
  const std::string_view dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0, end = 0; end != std::string_view::npos; start = end + 1) {
    end = dirs.find(':', start);
    const std::string candidate = std::string(dirs.substr(start, end - start)) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

// True when this user may open /dev/fuse (or is root, or it is missing:
// checked elsewhere); otherwise says what to do about it.
bool fuse_device_usable() {
  if (::geteuid() == 0) return true;
  const int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return true;
  }
  if (errno != EACCES && errno != EPERM) return true;
  const std::string why = std::strerror(errno);
  struct stat st {};
  std::string owner = "root";
  unsigned mode = 0;
  if (::stat("/dev/fuse", &st) == 0) {
    mode = st.st_mode & 07777;
    if (const group* g = ::getgrgid(st.st_gid)) owner = g->gr_name;
  }
  char octal[8];
  std::snprintf(octal, sizeof octal, "%04o", mode);
  std::string hint = "cannot open /dev/fuse: " + why + " (mode " + octal + ", group " + owner + "). ";
  if (owner != "root" && (mode & 0060) == 0060)
    hint += "Members of the group " + owner + " may use FUSE: sudo usermod -aG " + owner +
            " \"$USER\", then log in again";
  else
    hint +=
        "Only root may use FUSE here: let users in as Debian does (sudo chmod 0666 /dev/fuse), "
        "or through a group (sudo groupadd -f fuse; sudo chgrp fuse /dev/fuse; sudo chmod 0660 "
        "/dev/fuse; sudo usermod -aG fuse \"$USER\"; a udev rule keeps it after a reboot)";
  spdlog::error("{}", hint);
  return false;
}

// FUSE itself must be there: the device, and for non-root users the
// setuid helper that mounts on their behalf.
bool check_fuse_available() {
  if (::access("/dev/fuse", F_OK) != 0) {
    spdlog::error(
        "FUSE is not available: /dev/fuse is missing (load the module with "
        "'sudo modprobe fuse'; in a container, pass the device: --device /dev/fuse)");
    return false;
  }
  if (::geteuid() != 0 && !on_path("fusermount3")) {
    spdlog::error(
        "FUSE is not installed: fusermount3 not found; install it with: "
        "sudo apt-get install fuse3");
    return false;
  }
  return fuse_device_usable();
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

}  // namespace

int mount_command(CommandLine& line, Budget& budget) {
  const Options& options = line.options;
  // Before libfuse resolves the mountpoint, which fails on a mount whose
  // daemon has died without saying what to do about it.
  if (options.mountpoint != nullptr && daemon_gone(options.mountpoint)) {
    report_daemon_gone(options.mountpoint);
    return kExitUsage;
  }
  if (fuse_parse_cmdline(&line.args, &line.fuse) != 0) return kExitUsage;
  if (line.fuse.max_threads == 0) {
    spdlog::error("-o max_threads must be at least 1");
    return kExitUsage;
  }
  // Options of libfuse's multi-threaded loop, which modelfs does not use.
  if (line.fuse.clone_fd != 0 || line.fuse.max_idle_threads != UINT_MAX) {
    spdlog::error(
        "-o {}: modelfs serves with a loop of its own (up to max_threads threads), "
        "so libfuse's clone_fd and max_idle_threads do not apply",
        line.fuse.clone_fd != 0 ? "clone_fd" : "max_idle_threads");
    return kExitUsage;
  }
  if (line.fuse.mountpoint == nullptr) {
    spdlog::error("no mountpoint given (usage: {} [options] MODEL MOUNTPOINT)", line.program);
    return kExitUsage;
  }
  if (options.positional > 2) {
    spdlog::error("too many arguments (usage: {} [options] MODEL MOUNTPOINT)", line.program);
    return kExitUsage;
  }
  const auto level = line.fuse.debug ? LogLevel::Debug : LogLevel::Warning;
  if (line.fuse.debug) log_to_stderr(level);
  const std::string mountpoint = line.fuse.mountpoint;
  if (!check_mountpoint(mountpoint, options.nonempty) || !check_fuse_available()) return kExitUsage;

  std::unique_ptr<const Tree> tree;
  try {
    tree = Tree::build(
        open_model(options.model, {.budget = &budget, .remote = *remote_options(options)}),
        {.budget = &budget, .flat = options.flat != 0, .export_float32 = options.export_float32 != 0});
  } catch (const ModelError& e) {
    spdlog::error("{}", e.what());
    return kExitBadModel;
  }
  // The mount is read-only at the kernel too, the kernel enforces the 0444
  // and 0555 modes, and `mount` shows the model it serves.
  std::error_code ec;
  const std::string source = remote::is_url(options.model)
                                 ? remote::display_url(options.model)
                                 : std::filesystem::absolute(options.model, ec).lexically_normal().string();
  const std::string mount_options[] = {"-oro", "-odefault_permissions", "-osubtype=modelfs",
                                       "-ofsname=" + escape_fuse_option(source)};
  for (const auto& option : mount_options) fuse_opt_add_arg(&line.args, option.c_str());

  const std::string log_file =
      options.log_file ? std::filesystem::absolute(options.log_file, ec).string() : std::string();
  // A log file is asked for: it gets the daemon's life story, not only warnings.
  const auto file_level = line.fuse.debug ? LogLevel::Debug : LogLevel::Info;
  if (!log_file.empty() && !line.fuse.foreground && !log_to_file(log_file, file_level)) {
    spdlog::error("{}: cannot open the log file", log_file);
    return kExitUsage;
  }

  ServeOptions serve;
  serve.mountpoint = mountpoint;
  // A mount made by someone else has no path here: nothing to raise the
  // readahead of, nor to read ahead through.
  const bool handed_over = fuse_fd_of(mountpoint) >= 0;
  serve.foreground = line.fuse.foreground != 0;
  serve.single_thread = line.fuse.singlethread != 0;
  serve.xattrs = options.xattr != 0;
  serve.prefetch = options.noprefetch == 0 && !handed_over;
  serve.max_threads = line.fuse.max_threads;
  if (handed_over) {
    serve.readahead_kb = 0;
  } else if (::geteuid() == 0) {
    serve.readahead_kb =
        options.readahead_kb >= 0 ? static_cast<unsigned>(options.readahead_kb) : kDefaultReadaheadKib;
  } else if (options.readahead_kb >= 0) {
    spdlog::warn(
        "-o readahead_kb={} is ignored: only root may set a mount's readahead (the "
        "kernel's 128 KiB stays)",
        options.readahead_kb);
  }
  const size_t tensors = tree->tensors().size();
  serve.on_mounted = [&] {
    // Said to a person at a terminal; scripts and mount(8) get silence.
    if (!line.fuse.foreground && ::isatty(STDERR_FILENO))
      std::cerr << "modelfs: mounted " << options.model << " (" << tree->catalog().format << ", " << tensors
                << " tensors) at " << mountpoint << "\nmodelfs: unmount with: fusermount3 -u " << mountpoint
                << "\n";
  };
  serve.on_daemonized = [&] {
    if (log_file.empty()) log_to_syslog(level);
    spdlog::info("modelfs {} serving {} ({} tensors) at {}, pid {}", MODELFS_VERSION, source, tensors,
                 mountpoint, ::getpid());
  };
  const int status = modelfs::serve(*tree, line.args, serve);
  spdlog::info("unmounted {}", mountpoint);
  return status;
}

}  // namespace modelfs::cli
