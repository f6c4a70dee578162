// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one rule for files a model names: the shards of a weight_map
// (safetensors and torch .bin indexes), ONNX external data, the other
// members of a GGUF split set. Each must be a relative path without NUL or
// "..", and, once every symbolic link in it is followed, lie inside the
// model's folder (realpath'd). A model from the internet must not make
// modelfs serve /etc/shadow or a key beside it through a link
// (`link.safetensors -> ../outside/secret.safetensors`). Links that stay
// inside the folder are followed.
//
// What is checked is what is read: open() opens the name once, relative to
// a descriptor of the folder, with openat2's RESOLVE_BENEATH (the kernel
// refuses any step out of the folder), and maps that descriptor. Where the
// kernel lacks openat2, or refuses a link for being absolute, the name is
// opened as a bare reference (O_PATH, nothing read) and the descriptor's own
// path (/proc/self/fd) is checked, then reopened through the descriptor. A
// name is never looked up a second time, so a link swapped in after the
// check cannot be what is served.
//
// One place besides the folder is inside: the Hugging Face hub cache keeps
// a repository as models--ORG--NAME/{blobs,snapshots/REV}/, every file of a
// snapshot a link to ../../blobs/HASH. When the model's folder is (in) a
// snapshot of such a repository, names are resolved beneath the repository,
// and what they open must lie inside the model's folder or directly in that
// repository's blobs/ folder (which holds only that repository's files).
//
// The files the user names (the model, or a folder) are the user's choice
// and are not checked.
//
// A remote model's folder is its URL's folder: a name is checked by the
// same rules (relative, no ".."), and may not hold '?', '#', '%' or '\',
// which a URL would read as something else; it then names the URL below
// the folder, which the server answers for.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace modelfs {

class MappedFile;

class ModelFolder {
 public:
  // The folder holding the model file `model`, or the folder `folder`,
  // resolved with realpath and opened. Throws ModelError (naming `model` or
  // `folder` and `format`) when it cannot be. An empty `folder` is ".".
  static ModelFolder of_file(const std::filesystem::path& model, const std::string& format);
  static ModelFolder at(const std::filesystem::path& folder, const std::string& format);

  enum class Problem {
    None,
    NotAName,      // empty, a NUL, absolute, or a ".." component
    Missing,       // no such file, or a link to none
    Unresolvable,  // cannot be opened otherwise: a link loop, no permission, a server's refusal
    Outside,       // leads outside the folder
    NotAFile,      // not a regular file (a FIFO, a folder), or cannot be mapped
  };
  struct Opened {
    Problem problem = Problem::None;
    std::shared_ptr<const MappedFile> file;  // mapped, when problem is None
    // Why, worded to follow the quoted name: "is absolute; it must be
    // relative to the model's folder", "resolves to /x, outside the
    // model's folder /m", "cannot be opened: No such file or directory".
    std::string reason;
    explicit operator bool() const { return problem == Problem::None; }
  };
  // Opens and maps `name` as the model gives it, relative to the folder.
  // The mapping's display name is the folder as the user named it, then
  // `name`.
  Opened open(std::string_view name) const;
  // open() of each of `names`, in order. For a remote folder they are
  // opened side by side (remote::in_parallel), and the first `head_bytes`
  // and last `tail_bytes` of each opened file fetched with it: what the
  // caller's reader parses first, so that N files cost about
  // N / remote_parallel round trips, not N. A fetch that fails is left for
  // the reader's own, which reports it.
  std::vector<Opened> open_all(const std::vector<std::string>& names, uint64_t head_bytes,
                               uint64_t tail_bytes = 0) const;

  const std::filesystem::path& path() const noexcept { return folder_; }
  // The hub cache's blobs/ folder that also counts as inside, or empty.
  const std::filesystem::path& hub_blobs() const noexcept { return hub_blobs_; }

 private:
  ModelFolder(std::filesystem::path folder, std::filesystem::path named, bool remote,
              const std::string& format);
  Opened open_local(const std::string& name) const;
  bool holds(const std::filesystem::path& real) const;
  std::filesystem::path folder_;     // realpath'd, or a URL
  std::filesystem::path named_;      // the folder as the user named it, for messages
  bool remote_;                      // folder_ is a URL
  std::filesystem::path hub_blobs_;  // the hub cache repository's blobs/, or empty
  // What names are resolved beneath: the folder, or the hub repository
  // holding it, with the way from there down to the folder.
  std::shared_ptr<const int> base_;
  std::filesystem::path below_base_;
};

// Files a reader will name as it reads, opened side by side as soon as it
// knows their names (ModelFolder::open_all: one round trip for many remote
// files, not one each). take() then gives each once, as open() would have;
// a name not opened early, or opened and since taken, is opened then. A
// file that failed early fails again in take(), which says why.
class EarlyOpens {
 public:
  void open(const ModelFolder& folder, std::vector<std::string> names);
  ModelFolder::Opened take(const ModelFolder& folder, const std::string& name);

 private:
  std::map<std::string, ModelFolder::Opened, std::less<>> opened_;
};

}  // namespace modelfs
