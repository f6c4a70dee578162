// SPDX-License-Identifier: Apache-2.0
#pragma once
// The command line: modelfs's own options (taken out by fuse_opt_parse, the
// rest left for fuse_parse_cmdline), the usage text, and the checks of
// option combinations that need neither the model nor the mountpoint.
#include <fuse_lowlevel.h>
#include <fuse_opt.h>

#include <optional>
#include <string>
#include <vector>

#include "modelfs/remote_options.hpp"

namespace modelfs::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;
inline constexpr int kExitBadModel = 2;

// Readahead set on the mount when running as root: the kernel then sends
// 1 MiB requests (the most libfuse 3.14 offers), and the read-ahead thread
// reads further ahead (prefetcher.hpp). A larger window would make the
// reader's own readahead race the thread for the same pages
// (docs/performance.md, "Readahead").
inline constexpr unsigned kDefaultReadaheadKib = 1024;

// modelfs's options as fuse_opt_parse fills them (its strings strdup'd).
struct Options {
  char* model = nullptr;
  char* mountpoint = nullptr;  // as given; fuse_parse_cmdline takes it too
  int positional = 0;
  int list = 0;
  int info = 0;
  int check = 0;
  int json = 0;
  int flat = 0;
  int nonempty = 0;
  char* log_file = nullptr;
  int readahead_kb = -1;
  int xattr = 0;
  int noprefetch = 0;
  int max_parse_mb = 0;           // 0: the budget follows the model's metadata
  char* cache_dir = nullptr;      // remote models' cache (src/remote)
  char* cache_max = nullptr;      // its bound: N, NK, NM, NG or NT (binary units)
  int remote_timeout = 0;         // seconds; 0: the default (remote.hpp)
  int remote_parallel = -1;       // requests in flight at once; -1: the default (remote.hpp)
  char* remote_window = nullptr;  // bytes fetched ahead of a sequential reader
  int show_help = 0;
  int show_version = 0;
  int unmount = 0;             // -u MOUNTPOINT
  char* export_out = nullptr;  // --export OUT
  int export_float32 = 0;      // -o export=float32
  int force = 0;               // --force: --export may replace OUT
  int stats = 0;               // --stats MODEL
  int diff = 0;                // --diff A B (B is `mountpoint`)
  char* atol = nullptr;        // --atol X, with --diff
  char* rtol = nullptr;        // --rtol Y, with --diff
  // --rename s/A/B/, repeatable, in order (the command line's own vector:
  // fuse_opt fills fields by offset, so this struct holds only a pointer).
  std::vector<std::string>* renames = nullptr;

  bool query() const { return list || info || check; }
};

// The arguments and what both parsers allocate from them, freed together.
struct CommandLine {
  CommandLine(int argc, char** argv) : program(argv[0]), args(FUSE_ARGS_INIT(argc, argv)) {
    options.renames = &renames;
  }
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  const char* program;
  fuse_args args;
  Options options;
  std::vector<std::string> renames;
  fuse_cmdline_opts fuse{};  // filled by fuse_parse_cmdline, for a mount
};

// Takes modelfs's options out of `line.args`; false on a usage error
// (libfuse has said which).
bool parse_options(CommandLine& line);
// Reports a combination of options that makes no command (--json alone, two
// commands at once, a negative budget); false when there is one.
bool options_consistent(const Options& options);

// How remote models are fetched and cached, from -o cache_dir, cache_max,
// remote_timeout, remote_parallel and remote_window: what every command
// passes to open_model. nullopt (the error logged) when one is not a size.
std::optional<RemoteOptions> remote_options(const Options& options);

void print_usage(const char* program);
void print_version();

}  // namespace modelfs::cli
