// SPDX-License-Identifier: Apache-2.0
#include "formats/model_folder.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"
#include "remote/remote.hpp"

namespace modelfs {
namespace fs = std::filesystem;
namespace {

bool is_dotdot_free(const fs::path& p) { return std::find(p.begin(), p.end(), "..") == p.end(); }

fs::path resolved_folder(const fs::path& folder, const fs::path& named, const std::string& format) {
  std::error_code ec;
  fs::path absolute = fs::absolute(folder, ec);
  if (!ec) absolute = fs::canonical(absolute, ec);
  if (ec)
    throw ModelError(named.string(), format, std::nullopt,
                     "cannot resolve the model's folder: " + ec.message());
  return absolute;
}

// models--ORG--NAME (datasets--, spaces--): a repository of the hub cache.
bool is_hub_repository(const fs::path& folder) {
  const std::string name = folder.filename().string();
  for (std::string_view kind : {"models--", "datasets--", "spaces--"})
    if (name.size() > kind.size() && name.starts_with(kind)) return true;
  return false;
}

// A descriptor closed when it goes out of scope, unless released.
class Descriptor {
 public:
  explicit Descriptor(int fd = -1) : fd_(fd) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() { reset(-1); }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_;
};

constexpr int kReadFlags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;

// `name` opened for reading beneath `dir`: the kernel refuses every step
// out of it (a "..", an absolute link) with EXDEV, and links into /proc's
// descriptors. -1 with errno set (ENOSYS where the kernel lacks openat2).
int open_beneath(int dir, const std::string& name) {
  open_how how{};
  how.flags = kReadFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  // EAGAIN: a rename raced the lookup and the kernel could not be sure it
  // stayed beneath; asking again is how it wants to be answered.
  for (int attempt = 0;; ++attempt) {
    const long fd = ::syscall(SYS_openat2, dir, name.c_str(), &how, sizeof how);
    if (fd >= 0) return static_cast<int>(fd);
    if ((errno != EAGAIN && errno != EINTR) || attempt == 16) return -1;
  }
}

// The path of what descriptor `fd` refers to, as the kernel keeps it: the
// file itself, whatever names led to it.
std::optional<fs::path> path_of(int fd) {
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  std::vector<char> buffer(256);
  for (;;) {
    const ssize_t n = ::readlink(link.c_str(), buffer.data(), buffer.size());
    if (n < 0) return std::nullopt;
    if (static_cast<size_t>(n) < buffer.size())
      return fs::path(std::string(buffer.data(), static_cast<size_t>(n)));
    buffer.resize(buffer.size() * 2);
  }
}

std::string errno_text(int error) { return std::strerror(error); }

}  // namespace

ModelFolder::ModelFolder(fs::path folder, fs::path named, bool remote, const std::string& format)
    : folder_(std::move(folder)), named_(std::move(named)), remote_(remote) {
  if (remote_) return;
  // REPO/snapshots/REV, or a folder below it (a model in a subfolder of
  // the repository links to ../../../blobs/HASH).
  fs::path base = folder_;
  for (fs::path at = folder_; at.has_relative_path(); at = at.parent_path()) {
    const fs::path snapshots = at.parent_path();
    if (snapshots.filename() == "snapshots" && is_hub_repository(snapshots.parent_path())) {
      base = snapshots.parent_path();
      hub_blobs_ = base / "blobs";
      below_base_ = folder_.lexically_relative(base);
      break;
    }
  }
  const int fd = ::open(base.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw ModelError(named_.empty() ? "." : named_.string(), format, std::nullopt,
                     "cannot open the model's folder " + base.string() + ": " + errno_text(errno));
  base_ = std::shared_ptr<const int>(new int(fd), [](const int* p) {
    ::close(*p);
    delete p;
  });
}

ModelFolder ModelFolder::of_file(const fs::path& model, const std::string& format) {
  if (remote::is_url(model.native())) {
    std::string url = remote::parent_url(model.native());
    return ModelFolder(url, url, true, format);
  }
  std::error_code ec;
  const fs::path absolute = fs::absolute(model, ec);
  if (ec)
    throw ModelError(model.string(), format, std::nullopt,
                     "cannot resolve the model's folder: " + ec.message());
  return ModelFolder(resolved_folder(absolute.parent_path(), model, format), model.parent_path(), false,
                     format);
}

ModelFolder ModelFolder::at(const fs::path& folder, const std::string& format) {
  if (remote::is_url(folder.native())) {
    std::string url = folder.native();
    while (url.ends_with('/')) url.pop_back();
    return ModelFolder(url, url, true, format);
  }
  const fs::path here = folder.empty() ? fs::path(".") : folder;
  return ModelFolder(resolved_folder(here, here, format), folder, false, format);
}

bool ModelFolder::holds(const fs::path& real) const {
  // The folder itself (".") is inside; opening it is refused as a folder.
  const fs::path inside = real.lexically_relative(folder_);
  if (!inside.empty() && !inside.is_absolute() && is_dotdot_free(inside)) return true;
  return !hub_blobs_.empty() && real.parent_path() == hub_blobs_;
}

ModelFolder::Opened ModelFolder::open(std::string_view name) const {
  auto refuse = [](Problem problem, std::string reason) {
    return Opened{problem, nullptr, std::move(reason)};
  };
  if (name.empty()) return refuse(Problem::NotAName, "is empty");
  // Checked before a path is made of it: the system would read the name
  // as a C string and stop at the NUL.
  if (name.find('\0') != std::string_view::npos) return refuse(Problem::NotAName, "contains a NUL byte");
  const fs::path relative(name);
  if (relative.is_absolute())
    return refuse(Problem::NotAName, "is absolute; it must be relative to the model's folder");
  if (!is_dotdot_free(relative))
    return refuse(Problem::NotAName, "contains \"..\"; it must stay inside the model's folder");
  if (!remote_) return open_local(std::string(name));
  if (name.find_first_of("?#%\\") != std::string_view::npos)
    return refuse(Problem::NotAName, "contains '?', '#', '%' or '\\', which a URL reads as more than a name");
  try {
    return Opened{Problem::None, remote::open(folder_.native() + "/" + std::string(name)), {}};
  } catch (const ModelError& e) {
    return refuse(Problem::Unresolvable, "cannot be opened: " + e.reason());
  }
}

std::vector<ModelFolder::Opened> ModelFolder::open_all(const std::vector<std::string>& names,
                                                       uint64_t head_bytes, uint64_t tail_bytes) const {
  std::vector<Opened> opened(names.size());
  if (!remote_) {
    // In order, up to the first that fails (where the caller stops).
    for (size_t i = 0; i < names.size(); ++i) {
      const bool failed = i > 0 && !opened[i - 1];
      opened[i] =
          failed ? Opened{Problem::Unresolvable, nullptr, "was not opened: a file before it could not be"}
                 : open(names[i]);
    }
    return opened;
  }
  // A name that cannot be opened stops the opening of more (a hostile set
  // naming 99 999 missing files costs a few requests, not all of them);
  // those left are opened in order up to the first that fails, as open()
  // one by one would, and the rest are left unopened for the caller, which
  // stops at that first failure.
  std::vector<char> tried(names.size(), 0);
  std::atomic<bool> stop{false};
  remote::in_parallel(names.size(), [&](size_t i) {
    if (stop.load(std::memory_order_relaxed)) return;
    tried[i] = 1;
    opened[i] = open(names[i]);
    if (!opened[i]) {
      stop = true;
      return;
    }
    const MappedFile& file = *opened[i].file;
    // Taken through the checked read only for its fetch of a remote file's
    // blocks: the reader reads them again.
    try {
      const uint64_t head = std::min(head_bytes, file.size()), tail = std::min(tail_bytes, file.size());
      if (head > 0) file.read(0, head);
      if (tail > 0) file.read(file.size() - tail, tail);
    } catch (const ModelError&) {
      // The reader's own read of these bytes fetches them again or says why not.
    }
  });
  bool failed = false;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!tried[i] && !failed) opened[i] = open(names[i]);
    if (!tried[i] && failed)
      opened[i] = Opened{Problem::Unresolvable, nullptr, "was not opened: a file before it could not be"};
    failed = failed || !opened[i];
  }
  return opened;
}

void EarlyOpens::open(const ModelFolder& folder, std::vector<std::string> names) {
  if (names.size() < 2) return;  // nothing to open side by side
  auto opened = folder.open_all(names, 0);
  for (size_t i = 0; i < names.size(); ++i)
    if (opened[i]) opened_.emplace(std::move(names[i]), std::move(opened[i]));
}

ModelFolder::Opened EarlyOpens::take(const ModelFolder& folder, const std::string& name) {
  auto early = opened_.find(name);
  if (early == opened_.end()) return folder.open(name);
  ModelFolder::Opened opened = std::move(early->second);
  opened_.erase(early);
  return opened;
}

ModelFolder::Opened ModelFolder::open_local(const std::string& name) const {
  auto refuse = [](Problem problem, std::string reason) {
    return Opened{problem, nullptr, std::move(reason)};
  };
  const std::string beneath = (below_base_ / name).string();
  Descriptor fd(open_beneath(*base_, beneath));
  // Without openat2, or for a link the kernel would not follow beneath the
  // folder (an absolute one, even to a file inside): a bare reference,
  // which opens nothing for reading, checked by the path of what it refers
  // to and then reopened through itself.
  const bool bare = !fd && (errno == ENOSYS || errno == EXDEV);
  if (bare) fd.reset(::openat(*base_, beneath.c_str(), O_PATH | O_CLOEXEC));
  if (!fd) {
    const int error = errno;
    return refuse(error == ENOENT ? Problem::Missing : Problem::Unresolvable,
                  "cannot be opened: " + errno_text(error));
  }
  // Beneath the hub repository is not yet inside: the model's folder and
  // the repository's blobs/ are.
  if (bare || !hub_blobs_.empty()) {
    const auto real = path_of(fd.get());
    if (!real) {
      const int error = errno;
      return refuse(Problem::Unresolvable, "cannot be checked: /proc/self/fd: " + errno_text(error));
    }
    if (!holds(*real))
      return refuse(Problem::Outside,
                    "resolves to " + real->string() + ", outside the model's folder " + folder_.string());
  }
  if (bare) {
    fd.reset(::open(("/proc/self/fd/" + std::to_string(fd.get())).c_str(), kReadFlags));
    if (!fd) {
      const int error = errno;
      return refuse(Problem::Unresolvable, "cannot be opened: " + errno_text(error));
    }
  }
  try {
    return Opened{Problem::None, MappedFile::open_descriptor(fd.release(), named_ / name), {}};
  } catch (const ModelError& e) {
    return refuse(Problem::NotAFile, e.reason());
  }
}

}  // namespace modelfs
