// SPDX-License-Identifier: Apache-2.0
#pragma once
// Opening a model: detect its format from the content (never the extension
// alone) and dispatch to the reader that turns it into a Catalog.
#include <filesystem>

#include "modelfs/api.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs {

// Opens MODEL, a file or a folder. Throws ModelError naming the file, the
// format, the offset and the reason when it is not a model modelfs can read.
// With `checks`, the format's integrity checks are added there (for
// check_model, check.hpp).
MODELFS_API Catalog open_model(const std::filesystem::path& model, IntegrityChecks* checks = nullptr);

}  // namespace modelfs
