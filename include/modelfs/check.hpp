// SPDX-License-Identifier: Apache-2.0
#pragma once
// `modelfs --check MODEL`: everything a format lets us verify without
// mounting. Opening a model already checks every offset and length against
// the file; the check then
//   - refuses tensors whose bytes overlap where the format forbids sharing,
//   - reads every tensor byte with pread (an I/O error becomes a ModelError
//     instead of a SIGBUS through the mapping),
//   - runs the format's own integrity checks (open_model's `checks`:
//     CRC-32 of ZIP members, checksums of external data, ...).
// The first fault is thrown as a ModelError naming file, format and offset.
#include <cstdint>
#include <functional>

#include "modelfs/api.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs {

struct CheckSummary {
  uint64_t tensors = 0;
  uint64_t bytes_read = 0;
  uint64_t integrity_checks = 0;
};

// `progress(done, total)` is called as bytes are read (total = tensor bytes
// plus the bytes the integrity checks read).
MODELFS_API CheckSummary check_model(const Catalog& catalog, const IntegrityChecks& checks,
                                     const std::function<void(uint64_t done, uint64_t total)>& progress);
// The same, counting into `summary` as it goes, so that after a fault it
// holds what was checked before it: tensors whose bytes were all read back
// (those with no bytes in a file at the start), bytes read, integrity
// checks passed. `--check --json` reports it.
MODELFS_API void check_model(const Catalog& catalog, const IntegrityChecks& checks,
                             const std::function<void(uint64_t done, uint64_t total)>& progress,
                             CheckSummary& summary);

}  // namespace modelfs
