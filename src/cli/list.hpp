// SPDX-License-Identifier: Apache-2.0
#pragma once
// `modelfs --list [--json] MODEL`: the tensor table without mounting.
#include <ostream>

#include "modelfs/catalog.hpp"

namespace modelfs::cli {

// Aligned columns (name, dtype, shape, bytes) and a summary line; names
// longer than 80 columns are cut with an ellipsis.
void print_table(const Catalog& catalog, std::ostream& out);
// {"format", "files", "tensors": [{"name", "dtype", "shape", "nbytes", "source"}]}
void print_json(const Catalog& catalog, std::ostream& out);

// Model-level facts: format, files, tensor count and bytes, metadata.
void print_info(const Catalog& catalog, bool json, std::ostream& out);

}  // namespace modelfs::cli
