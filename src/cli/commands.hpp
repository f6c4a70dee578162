// SPDX-License-Identifier: Apache-2.0
#pragma once
// The commands of the command line, each returning the exit status: `-u`
// and the query commands `--list`, `--info` and `--check` (commands.cpp),
// `--export` (export.cpp) and the mount (mount.cpp).
#include <chrono>
#include <cstdint>
#include <string>

#include "cli/options.hpp"
#include "modelfs/budget.hpp"

namespace modelfs::cli {

// A progress line on stderr when it is a terminal and the work passes
// 64 MiB, redrawn at most a few times a second ("LABEL [###   ] 40% ...").
class ProgressBar {
 public:
  ProgressBar(bool enabled, const char* label);
  void update(uint64_t done, uint64_t total);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

 private:
  bool enabled_;
  const char* label_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
  // What servers had sent this process when the bar began (remote models).
  uint64_t fetched_at_start_ = 0;
  std::chrono::steady_clock::time_point start_{};
};

// `modelfs -u MOUNTPOINT`: runs `fusermount3 -u MOUNTPOINT` in this
// process's place; returns (1) only when it cannot be run.
int unmount_command(const std::string& mountpoint);

// `modelfs --list|--info|--check [--json] MODEL`: opens the model within
// `budget` and prints the table, the model's facts or the check's result.
int query_command(const Options& options, Budget& budget);

// `modelfs --export OUT.safetensors MODEL`: the mount's
// .modelfs/model.safetensors written to OUT without mounting, byte for byte,
// streamed from the tree (no copy of the model in memory). Writes OUT.tmp
// beside OUT, then renames it over OUT, so OUT is never a partial file;
// refuses an existing OUT unless --force. Returns 0, 1 (OUT cannot be
// written, or exists) or 2 (the model cannot be read).
int export_command(const Options& options, Budget& budget);

// `modelfs --stats [--json] MODEL` (stats.cpp): per tensor, in file order,
// its element count and, over its finite values as its .npy holds them,
// min, max, mean and population std, with counts of NaN, infinities and
// zeros; then the whole model's. Returns 0, 1 (usage) or 2.
int stats_command(const Options& options, Budget& budget);

// `modelfs --diff [--json] [--atol X] [--rtol Y] [--rename s/A/B/]... A B`
// (diff.cpp): the tensors of A and B matched by name, each identical,
// equal, close, different, mismatch, only_a or only_b, with its error
// figures. Returns 0 (all identical, equal or close), 1 (others, or a usage
// error) or 2 (a model cannot be read).
int diff_command(const Options& options, Budget& budget);

// `modelfs [options] MODEL MOUNTPOINT`: checks the mountpoint and FUSE,
// builds the tree within `budget`, mounts it and serves until unmounted.
int mount_command(CommandLine& line, Budget& budget);

}  // namespace modelfs::cli
