// SPDX-License-Identifier: Apache-2.0
#pragma once
// Commands and checks of the command line kept out of main.cpp: `-u`,
// `--check` (text or JSON), and the reason a non-root user cannot open the
// FUSE device.
#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

#include "modelfs/catalog.hpp"
#include "modelfs/error.hpp"

namespace modelfs::cli {

// A progress line on stderr when it is a terminal and the work passes
// 64 MiB, redrawn at most a few times a second ("LABEL [###   ] 40% ...").
class ProgressBar {
 public:
  ProgressBar(bool enabled, const char* label) : enabled_(enabled), label_(label) {}
  void update(uint64_t done, uint64_t total);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

 private:
  bool enabled_;
  const char* label_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

// `modelfs -u MOUNTPOINT`: runs `fusermount3 -u MOUNTPOINT` in this
// process's place; returns (1) only when it cannot be run.
int unmount_command(const std::string& mountpoint);

// `modelfs --check [--json] MODEL` once the model is open: verifies it
// (modelfs/check.hpp), prints the summary or, with `json`, one JSON object
// (tensors checked, bytes read, checks passed, the first fault); 0 or 2.
int check_command(const std::string& model, const Catalog& catalog, bool json, std::ostream& out);
// `--check --json` of a model that cannot even be opened: the JSON object
// with nothing checked and the fault.
void print_check_fault(const std::string& model, const ModelError& fault, std::ostream& out);

// Empty when this user may open /dev/fuse (or is root, or it is missing:
// checked elsewhere); otherwise the error with what to do about it.
std::string fuse_device_problem();

}  // namespace modelfs::cli
