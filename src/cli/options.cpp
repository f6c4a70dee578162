// SPDX-License-Identifier: Apache-2.0
#include "cli/options.hpp"

#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string_view>
#include <utility>

#include "modelfs/version.hpp"
#include "remote/remote.hpp"

namespace modelfs::cli {
namespace {

#define MODELFS_OPT(templ, field, value) \
  fuse_opt { templ, offsetof(Options, field), value }

// Options the processor takes (repeatable ones).
constexpr int kKeyRename = 1;

const fuse_opt kOptions[] = {
    MODELFS_OPT("--list", list, 1),
    MODELFS_OPT("--info", info, 1),
    MODELFS_OPT("--check", check, 1),
    MODELFS_OPT("--json", json, 1),
    MODELFS_OPT("flat", flat, 1),
    MODELFS_OPT("nonempty", nonempty, 1),
    MODELFS_OPT("log_file=%s", log_file, 0),
    MODELFS_OPT("readahead_kb=%d", readahead_kb, 0),
    MODELFS_OPT("xattr", xattr, 1),
    MODELFS_OPT("noprefetch", noprefetch, 1),
    MODELFS_OPT("max_parse_mb=%d", max_parse_mb, 0),
    MODELFS_OPT("cache_dir=%s", cache_dir, 0),
    MODELFS_OPT("cache_max=%s", cache_max, 0),
    MODELFS_OPT("remote_timeout=%d", remote_timeout, 0),
    MODELFS_OPT("remote_parallel=%d", remote_parallel, 0),
    MODELFS_OPT("remote_window=%s", remote_window, 0),
    MODELFS_OPT("--export %s", export_out, 0),
    MODELFS_OPT("--export=%s", export_out, 0),
    MODELFS_OPT("export=float32", export_float32, 1),
    MODELFS_OPT("--force", force, 1),
    MODELFS_OPT("--stats", stats, 1),
    MODELFS_OPT("--diff", diff, 1),
    MODELFS_OPT("--atol %s", atol, 0),
    MODELFS_OPT("--atol=%s", atol, 0),
    MODELFS_OPT("--rtol %s", rtol, 0),
    MODELFS_OPT("--rtol=%s", rtol, 0),
    FUSE_OPT_KEY("--rename %s", kKeyRename),
    FUSE_OPT_KEY("--rename=%s", kKeyRename),
    MODELFS_OPT("-h", show_help, 1),
    MODELFS_OPT("--help", show_help, 1),
    MODELFS_OPT("-V", show_version, 1),
    MODELFS_OPT("--version", show_version, 1),
    MODELFS_OPT("-u", unmount, 1),
    MODELFS_OPT("--unmount", unmount, 1),
    FUSE_OPT_END,
};

// Called for what kOptions does not take: the first positional argument is
// the model (ours); the second, the mountpoint, stays in the argument list
// for fuse_parse_cmdline, as does every other option.
int option_processor(void* data, const char* arg, int key, fuse_args*) {
  auto& config = *static_cast<Options*>(data);
  if (key == kKeyRename) {
    // fuse_opt hands "--rename=VALUE", or "--rename" and the next argument
    // joined.
    const std::string_view option = arg;
    config.renames->emplace_back(option.substr(option.starts_with("--rename=") ? 9 : 8));
    return 0;
  }
  if (key != FUSE_OPT_KEY_NONOPT) return 1;
  if (config.positional++ == 0) {
    config.model = ::strdup(arg);
    return 0;
  }
  if (config.positional == 2) config.mountpoint = ::strdup(arg);
  return 1;
}

}  // namespace

CommandLine::~CommandLine() {
  fuse_opt_free_args(&args);
  std::free(options.model);
  std::free(options.mountpoint);
  std::free(options.log_file);
  std::free(options.export_out);
  std::free(options.cache_dir);
  std::free(options.cache_max);
  std::free(options.remote_window);
  std::free(options.atol);
  std::free(options.rtol);
  std::free(fuse.mountpoint);
}

bool parse_options(CommandLine& line) {
  return fuse_opt_parse(&line.args, &line.options, kOptions, option_processor) == 0;
}

bool options_consistent(const Options& options) {
  const std::pair<bool, const char*> faults[] = {
      {options.json && !options.query() && !options.stats && !options.diff,
       "--json goes with --list, --info or --check (or --stats, --diff)"},
      {options.list + options.info + options.check + options.stats + options.diff > 1,
       "--list, --info, --check, --stats and --diff are separate commands; give one"},
      {!options.diff && (options.atol != nullptr || options.rtol != nullptr || !options.renames->empty()),
       "--atol, --rtol and --rename go with --diff"},
      {options.max_parse_mb < 0, "-o max_parse_mb must be a positive number of MiB"},
      {options.remote_timeout < 0, "-o remote_timeout takes a number of seconds"},
      {options.remote_parallel == 0 || options.remote_parallel < -1 || options.remote_parallel > 256,
       "-o remote_parallel takes a number of requests from 1 to 256"},
      {options.force && options.export_out == nullptr, "--force goes with --export"},
      {options.export_out != nullptr &&
           (options.query() || options.stats || options.diff || options.json || options.positional > 1),
       "--export takes only OUT and MODEL: modelfs --export OUT.safetensors MODEL"},
  };
  for (const auto& [fault, message] : faults) {
    if (fault) {
      spdlog::error("{}", message);
      return false;
    }
  }
  return true;
}

void print_usage(const char* program) {
  std::cout << "usage: " << program << " [options] MODEL MOUNTPOINT\n"
            << "       " << program << " --list [--json] MODEL\n"
            << "       " << program << " --info [--json] MODEL\n"
            << "       " << program << " --check [--json] MODEL\n"
            << "       " << program << " --stats [--json] MODEL\n"
            << "       " << program << " --diff [--json] [--atol X] [--rtol Y] [--rename s/A/B/]... A B\n"
            << "       " << program << " --export OUT.safetensors [--force] MODEL\n"
            << "       " << program << " -u MOUNTPOINT\n"
            << "       " << program << " --version | --help\n"
            << "\n"
            << "Mounts a machine-learning model file read-only: every tensor a file of its raw\n"
            << "bytes, with a JSON sidecar (P.json) and a NumPy view (P.npy) beside it.\n"
            << "MODEL: a .safetensors file (or a sharded checkpoint's folder or index JSON),\n"
            << "a .gguf file (or a split set's member or folder), a legacy GGML file\n"
            << "(whisper.cpp, rwkv.cpp, old llama.cpp), an .onnx file, a torch.save\n"
            << "file (.pt .pth .bin .ckpt, ZIP or legacy; or a sharded .bin index), or a\n"
            << "TorchScript archive, a .pt2 archive (torch.export.save, AOTInductor), a\n"
            << "NumPy .npy or .npz, an HDF5 .h5 or Keras .keras file, a TensorFlow checkpoint\n"
            << "(its .index, a SavedModel folder or its variables/), a TensorFlow.js\n"
            << "model.json, a .tflite, an ExecuTorch .pte or .ptd, an OpenVINO .xml, or a\n"
            << "torch.distributed.checkpoint folder (or its .metadata).\n"
            << "Also a llamafile (the GGUF stored in its ZIP) or a NeMo .nemo archive (a tar).\n"
            << "PaddlePaddle: a .pdmodel or fluid __model__ program (its .pdiparams, __params__\n"
            << "or per-var files beside it), or a .pdparams state dict.\n"
            << "MODEL may be a URL: http(s)://..., s3://BUCKET/KEY, hf://OWNER/REPO[@REV]/PATH.\n"
            << "\n"
            << "modelfs options:\n"
            << "    --list                 print the tensor table (name, dtype, shape, bytes)\n"
            << "    --info                 print the model's format, files, size and metadata\n"
            << "    --json                 with --list, --info, --check, --stats or --diff:\n"
            << "                           print JSON\n"
            << "    --check                verify the whole model without mounting: every\n"
            << "                           offset and length, every byte readable, overlaps,\n"
            << "                           the format's checksums; exit 0, or 2 at the first fault\n"
            << "    --stats                per tensor: count, min, max, mean, std of the finite\n"
            << "                           values (as its .npy holds them), NaN, inf and zeros\n"
            << "    --diff                 compare models A and B (any formats) tensor by tensor:\n"
            << "                           identical, equal, close, different, mismatch (shape),\n"
            << "                           only_a, only_b; exit 0 when all are identical, equal\n"
            << "                           or close, 1 otherwise, 2 when a model cannot be read\n"
            << "    --atol X, --rtol Y     with --diff: close is |a-b| <= X + Y*|b| (default 0)\n"
            << "    --rename s/A/B/[g]     with --diff, repeatable: rewrite A's tensor names\n"
            << "                           (a regular expression; \\1 and & in B) before matching\n"
            << "    --export OUT           write the model as one safetensors file (the mount's\n"
            << "                           .modelfs/model.safetensors) to OUT without mounting\n"
            << "    --force                with --export: replace OUT if it exists\n"
            << "    -o export=float32      the export also holds the tensors safetensors has no\n"
            << "                           type for (GGUF blocks, int4, quantized), as float32\n"
            << "    -u, --unmount          unmount MOUNTPOINT (runs fusermount3 -u MOUNTPOINT)\n"
            << "    -o flat                keep tensor names whole, as files at the root\n"
            << "    -o nonempty            allow mounting over a non-empty folder\n"
            << "    -o log_file=PATH       after detaching, log here instead of syslog\n"
            << "    -o readahead_kb=N      readahead of the mount (root only; default "
            << kDefaultReadaheadKib << ", 0 keeps the kernel's)\n"
            << "    -o xattr               serve user.modelfs.dtype and user.modelfs.shape as\n"
            << "                           extended attributes (off: ls -l is faster)\n"
            << "    -o noprefetch          do not read ahead of sequential readers from a\n"
            << "                           thread of the daemon's own\n"
            << "    -o max_parse_mb=N      memory reading the model may take, in MiB (default:\n"
            << "                           64 plus 8 bytes per byte of the model's metadata)\n"
            << "    -o cache_dir=PATH      remote models' block cache (default:\n"
            << "                           $XDG_CACHE_HOME/modelfs, or ~/.cache/modelfs)\n"
            << "    -o cache_max=SIZE      evict least recently used cached blocks past SIZE\n"
            << "                           (bytes, or K, M, G, T)\n"
            << "    -o remote_timeout=N    seconds a remote request may take to connect or stall\n"
            << "                           (default 20)\n"
            << "    -o remote_parallel=N   range requests of a remote model in flight at once\n"
            << "                           (default 16)\n"
            << "    -o remote_window=SIZE  most bytes fetched ahead of a sequential reader\n"
            << "                           (bytes, or K, M, G; default 64M; 0: none)\n"
            << "\n"
            << "FUSE options:\n"
            << "    -h   --help            print help\n"
            << "    -V   --version         print version\n"
            << "    -d   -o debug          enable debug output (implies -f)\n"
            << "    -f                     foreground operation\n"
            << "    -s                     serve every request on one thread (default: reads\n"
            << "                           side by side, the rest on one thread)\n"
            << "    -o max_threads=N       at most N threads serving requests (default 10)\n";
  std::cout.flush();
  fuse_lowlevel_help();
  std::cout << "\nExit status: 0 ok, 1 usage or mount error, 2 the model cannot be read.\n"
            << "Unmount with: fusermount3 -u MOUNTPOINT (or modelfs -u MOUNTPOINT)\n";
}

std::optional<RemoteOptions> remote_options(const Options& options) {
  RemoteOptions remote;
  if (options.cache_dir != nullptr) {
    std::error_code cache_ec;
    remote.dir = std::filesystem::absolute(options.cache_dir, cache_ec);
  }
  if (options.cache_max != nullptr) {
    const auto bound = remote::parse_size(options.cache_max);
    if (!bound || *bound == 0) {
      spdlog::error("-o cache_max takes a size: N bytes, or with K, M, G or T (KiB ... TiB)");
      return std::nullopt;
    }
    remote.max_bytes = *bound;
  }
  if (options.remote_timeout > 0) remote.timeout_seconds = static_cast<unsigned>(options.remote_timeout);
  if (options.remote_parallel > 0) remote.parallel = static_cast<unsigned>(options.remote_parallel);
  if (options.remote_window != nullptr) {
    const auto window = remote::parse_size(options.remote_window);
    if (!window || *window > (uint64_t{1} << 40)) {
      spdlog::error("-o remote_window takes a size: N bytes, or with K, M, G or T (KiB ... TiB), at most 1T");
      return std::nullopt;
    }
    remote.window_bytes = *window;
  }
  return remote;
}

void print_version() {
  std::cout << "modelfs " << MODELFS_VERSION << " (libfuse " << fuse_pkgversion() << ")\n";
}

}  // namespace modelfs::cli
