// SPDX-License-Identifier: Apache-2.0
// modelfs: mount a model file as a read-only tensor tree, or answer one of
// the commands that need no mount (the forms: print_usage, options.cpp).
// Exit status: 0 success; 1 usage, mountpoint or FUSE failure; 2 the model
// cannot be read (the message names file, format, offset and reason).
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>

#include "cli/commands.hpp"
#include "cli/logging.hpp"
#include "cli/options.hpp"
#include "cli/sigbus_guard.hpp"
#include "io/terminal_text.hpp"
#include "modelfs/budget.hpp"
#include "remote/remote.hpp"

namespace {

using namespace modelfs::cli;

// A model of thousands of files (TensorFlow checkpoint shards, TF.js
// shards, a DCP checkpoint's files) keeps one descriptor open per file it
// maps; the usual soft limit of 1024 refused the 1016th. The soft limit is
// raised to the hard one, which the system sets and modelfs cannot pass.
// The program's choice, not the library's: a program that links
// libmodelfs keeps its own limits.
void raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);  // left as it was when refused
}

// glibc keeps memory a program frees: a block above its mmap threshold
// is given back at once, but the threshold rises to the size of each such
// block freed (up to 32 MiB), after which growing buffers (a lexer's
// token, a printed document, a table doubling) leave every earlier size
// behind in the heap; and each thread that allocates gets an arena of its
// own, holding its freed memory apart. The budget bounds what is in use;
// these settings keep what the process holds close to it (the program's
// choice: libmodelfs sets no allocator option for its host).
void bound_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 256 << 10);  // fixed: no longer raised by frees
  mallopt(M_TRIM_THRESHOLD, 1 << 20);    // the heap's free top given back past 1 MiB
  mallopt(M_ARENA_MAX, 2);               // the FUSE workers share two arenas
}

int run(int argc, char** argv) {
  bound_freed_memory();
  raise_open_file_limit();
  // The program's own process-wide hook (the library installs none): a
  // model cut under the mount fails the read that faults, not the daemon.
  install_sigbus_guard();
  // Ends the remote fetch threads when the program does, before its statics
  // are destroyed (the library registers no exit handler).
  const modelfs::remote::FetchThreadsOwner fetch_threads;
  modelfs::log_to_stderr(modelfs::LogLevel::Warning);
  modelfs::route_libfuse_logs();
  CommandLine line(argc, argv);
  const Options& options = line.options;
  if (!parse_options(line)) return kExitUsage;
  if (options.show_help) {
    print_usage(line.program);
    return kExitOk;
  }
  if (options.show_version) {
    print_version();
    return kExitOk;
  }
  if (options.unmount) {
    if (options.positional != 1 || line.args.argc > 1) {
      spdlog::error("-u takes the mountpoint alone: {} -u MOUNTPOINT", line.program);
      return kExitUsage;
    }
    return unmount_command(options.model);
  }
  if (!options_consistent(options)) return kExitUsage;
  // One budget for reading the model and building its tree.
  modelfs::Budget budget(options.max_parse_mb > 0
                             ? std::optional<uint64_t>(uint64_t(options.max_parse_mb) << 20)
                             : std::nullopt);
  if (options.model == nullptr) {
    std::cerr << "usage: " << line.program << " [options] MODEL MOUNTPOINT (see --help)\n";
    return kExitUsage;
  }
  // Remote models: where their blocks are cached, how long a request may
  // take (passed to open_model by each command); a URL's secrets leave the
  // process's command line.
  if (!remote_options(options)) return kExitUsage;
  if (modelfs::remote::is_url(options.model)) modelfs::remote::hide_url_secrets(argc, argv, options.model);
  if (options.diff && options.mountpoint != nullptr && modelfs::remote::is_url(options.mountpoint))
    modelfs::remote::hide_url_secrets(argc, argv, options.mountpoint);

  if (options.stats) return stats_command(options, budget);
  if (options.diff) return diff_command(options, budget);

  if (options.export_out != nullptr) return export_command(options, budget);
  return options.query() ? query_command(options, budget) : mount_command(line, budget);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "modelfs: " << modelfs::printable(e.what()) << "\n";
    return kExitUsage;
  }
}
