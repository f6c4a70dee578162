// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one rule for files a model names: the shards of a weight_map
// (safetensors and torch .bin indexes), ONNX external data, the other
// members of a GGUF split set. Each must be a relative path without NUL or
// "..", and, once realpath has resolved every symbolic link in it, lie
// inside the model's folder (realpath'd too). A model from the internet
// must not make modelfs serve /etc/shadow or a key beside it through a link
// (`link.safetensors -> ../outside/secret.safetensors`). Links that stay
// inside the folder are followed.
//
// One place besides the folder is inside: the Hugging Face hub cache keeps
// a repository as models--ORG--NAME/{blobs,snapshots/REV}/, every file of a
// snapshot a link to ../../blobs/HASH. When the model's folder is (in) a
// snapshot of such a repository, that repository's blobs/ folder counts as
// inside: files directly in it, which are only that repository's own files.
//
// The files the user names (the model, or a folder) are the user's choice
// and are not checked.
//
// A remote model's folder is its URL's folder: a name is resolved by the
// same rules (relative, no ".."), and may not hold '?', '#', '%' or '\',
// which a URL would read as something else; it then names the URL below
// the folder, which the server answers for.
#include <filesystem>
#include <string>
#include <string_view>

namespace modelfs {

class ModelFolder {
 public:
  // The folder holding the model file `model`, or the folder `folder`,
  // resolved with realpath. Throws ModelError (naming `model` or `folder`
  // and `format`) when it cannot be resolved.
  static ModelFolder of_file(const std::filesystem::path& model, const std::string& format);
  static ModelFolder at(const std::filesystem::path& folder, const std::string& format);

  enum class Problem {
    None,
    NotAName,      // empty, a NUL, absolute, or a ".." component
    Unresolvable,  // realpath failed: missing, a dangling link, a loop, no permission
    Outside,       // resolves outside the folder
  };
  struct Resolved {
    Problem problem = Problem::None;
    std::filesystem::path path;  // the file's realpath, when problem is None
    // Why, worded to follow the quoted name: "is absolute; it must be
    // relative to the model's folder", "resolves to /x, outside the
    // model's folder /m", "cannot be opened: No such file or directory".
    std::string reason;
    explicit operator bool() const { return problem == Problem::None; }
  };
  // `name` as the model gives it, relative to the folder.
  Resolved resolve(std::string_view name) const;

  const std::filesystem::path& path() const noexcept { return folder_; }
  // The hub cache's blobs/ folder that also counts as inside, or empty.
  const std::filesystem::path& hub_blobs() const noexcept { return hub_blobs_; }

 private:
  ModelFolder(std::filesystem::path folder, bool remote);
  std::filesystem::path folder_;
  bool remote_;  // folder_ is a URL
  std::filesystem::path hub_blobs_;  // the hub cache repository's blobs/, or empty
};

}  // namespace modelfs
