// SPDX-License-Identifier: Apache-2.0
#pragma once
// Opening a model: detect its format from the content (never the extension
// alone) and dispatch to the reader that turns it into a Catalog.
#include <filesystem>

#include "modelfs/api.hpp"
#include "modelfs/catalog.hpp"
#include "modelfs/remote_options.hpp"

namespace modelfs {

class Budget;

struct OpenOptions {
  // What reading the model may take (budget.hpp); the caller's, so that it
  // can bound Tree::build with the same one. Null: a budget of the default
  // limit, made for this call.
  Budget* budget = nullptr;
  // Where the format's integrity checks are added (for check_model,
  // check.hpp); null: none.
  IntegrityChecks* checks = nullptr;
  // How a remote model's files are fetched and cached; each keeps a copy.
  RemoteOptions remote;
};
// Opens MODEL, a file or a folder. Throws ModelError naming the file, the
// format, the offset and the reason when it is not a model modelfs can read.
MODELFS_API Catalog open_model(const std::filesystem::path& model, const OpenOptions& options);
// The same with default remote options.
MODELFS_API Catalog open_model(const std::filesystem::path& model, IntegrityChecks* checks = nullptr);

}  // namespace modelfs
