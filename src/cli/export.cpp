// SPDX-License-Identifier: Apache-2.0
// `modelfs --export OUT.safetensors MODEL` (commands.hpp).
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "io/budget_charge.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/tree.hpp"

namespace modelfs::cli {
namespace {

// Bytes asked of the tree at a time: large enough that a write is cheap
// next to its bytes, small enough that the copied rest of a window over
// many tiny tensors stays small.
constexpr uint64_t kChunk = 8 << 20;

// Writes all of `iov` (advancing it past partial writes); false on an error
// (errno set).
bool write_all(int fd, iovec* iov, size_t count) {
  while (count > 0) {
    const ssize_t n = ::writev(fd, iov, static_cast<int>(std::min<size_t>(count, IOV_MAX)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    auto left = static_cast<size_t>(n);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

// The temporary file while it is written: removed on every way out but the
// rename (a failure, an exception, SIGINT, SIGTERM or SIGHUP), so that no
// partial export is left beside OUT.
class Temporary {
 public:
  explicit Temporary(std::string path) : path_(std::move(path)) {
    signal_path_ = path_.c_str();
    for (size_t i = 0; i < kSignals.size(); ++i) {
      struct sigaction action {};
      action.sa_handler = on_signal;
      sigemptyset(&action.sa_mask);
      ::sigaction(kSignals[i], &action, &previous_[i]);
    }
  }
  ~Temporary() {
    if (fd >= 0) ::close(fd);
    if (!kept_) ::unlink(path_.c_str());
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
    signal_path_ = nullptr;
  }
  Temporary(const Temporary&) = delete;
  Temporary& operator=(const Temporary&) = delete;

  const std::string& path() const { return path_; }
  // Renamed over `out`: nothing left to remove.
  void kept() { kept_ = true; }

  int fd = -1;

 private:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGHUP};
  // The handler may only unlink and end the process as the signal would have.
  static void on_signal(int signal) {
    if (const char* path = signal_path_) ::unlink(path);
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
  static inline const char* volatile signal_path_ = nullptr;

  std::string path_;
  bool kept_ = false;
  std::array<struct sigaction, 3> previous_{};
};

// What the export left out, on stderr: the count and the first few names.
void warn_left_out(const Tree& tree, const std::string& out) {
  const auto report_ino = tree.resolve(".modelfs/export.json");
  if (!report_ino) return;
  const auto report = nlohmann::json::parse(tree.content(*tree.node(*report_ino)), nullptr, false);
  if (!report.is_object()) return;
  const auto& left_out = report["left_out"];
  if (!left_out.is_object() || left_out.empty()) return;
  std::string names;
  size_t shown = 0;
  for (const auto& [name, why] : left_out.items()) {
    if (shown++ == 3) {
      names += ", ...";
      break;
    }
    names += (names.empty() ? "" : ", ") + name + " (" + why.get<std::string>() + ")";
  }
  spdlog::warn(
      "{}: {} tensor(s) left out: {}; -o export=float32 writes converted values where modelfs has them", out,
      left_out.size(), names);
}

}  // namespace

int export_command(const Options& options, Budget& budget) {
  const std::string out = options.export_out;
  std::error_code ec;
  if (!options.force &&
      std::filesystem::symlink_status(out, ec).type() != std::filesystem::file_type::not_found) {
    spdlog::error("{} exists; give --force to replace it", out);
    return kExitUsage;
  }
  std::unique_ptr<const Tree> tree;
  try {
    tree = Tree::build(open_model(options.model, {.budget = &budget, .remote = *remote_options(options)}),
                       {.budget = &budget, .export_float32 = options.export_float32 != 0});
  } catch (const ModelError& e) {
    spdlog::error("{}", e.what());
    return kExitBadModel;
  }
  const auto ino = tree->resolve(".modelfs/model.safetensors");
  if (!ino) {
    spdlog::error("{}: no export file (its header would be too large; see .modelfs/export.json)",
                  options.model);
    return kExitBadModel;
  }
  const Node& file = *tree->node(*ino);

  Temporary temporary(out + ".tmp");
  temporary.fd = ::open(temporary.path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (temporary.fd < 0) {
    spdlog::error("{}: {}", temporary.path(), std::strerror(errno));
    return kExitUsage;
  }
  // Says what failed (errno says why); the temporary file goes with `temporary`.
  auto fail = [&](const std::string& what) {
    spdlog::error("{}: {}", what, std::strerror(errno));
    return kExitUsage;
  };
  std::vector<iovec> iov(IOV_MAX);
  std::string scratch;
  try {
    ProgressBar bar(::isatty(STDERR_FILENO) != 0, "exporting");
    for (uint64_t offset = 0; offset < file.size;) {
      const uint64_t length = std::min(kChunk, file.size - offset);
      // Throws ModelError when the model's bytes cannot be had (a remote
      // model's server failing, a computed view refusing).
      const size_t count = tree->read(file, offset, length, iov, scratch);
      uint64_t got = 0;
      for (size_t i = 0; i < count; ++i) got += iov[i].iov_len;
      if (got != length) {
        errno = EIO;
        return fail(temporary.path() + ": the tree gave a short read");
      }
      if (!write_all(temporary.fd, iov.data(), count)) {
        // The held iovecs point into the model's mapping: a fault there
        // means the model file shrank under the export.
        if (errno == EFAULT) {
          spdlog::error("{}: the model file shrank or changed while it was exported", options.model);
          return kExitBadModel;
        }
        return fail(temporary.path() + ": write");
      }
      offset += length;
      bar.update(offset, file.size);
    }
  } catch (const ModelError& e) {
    spdlog::error("{}", e.what());
    return kExitBadModel;
  }
  if (::close(std::exchange(temporary.fd, -1)) != 0) return fail(temporary.path() + ": close");
  if (::rename(temporary.path().c_str(), out.c_str()) != 0) return fail(temporary.path() + " -> " + out);
  temporary.kept();
  warn_left_out(*tree, out);
  return kExitOk;
}

}  // namespace modelfs::cli
