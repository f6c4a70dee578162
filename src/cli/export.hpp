// SPDX-License-Identifier: Apache-2.0
#pragma once
// `modelfs --export OUT.safetensors MODEL`: the mount's
// .modelfs/model.safetensors written to OUT without mounting, byte for
// byte, streamed from the tree (no copy of the model in memory).
#include <string>

#include "modelfs/budget.hpp"

namespace modelfs::cli {

struct ExportRequest {
  std::string model;
  std::string out;
  bool float32 = false;  // -o export=float32
  bool force = false;    // --force: replace an existing OUT
};

// Writes OUT.tmp beside OUT, then renames it over OUT, so OUT is never a
// partial file; refuses an existing OUT unless `force`. A progress bar on
// stderr when it is a terminal and the file passes 64 MiB. Returns the exit
// status: 0, 1 (OUT cannot be written, or exists), 2 (the model cannot be
// read).
int export_command(const ExportRequest& request, Budget& budget);

}  // namespace modelfs::cli
