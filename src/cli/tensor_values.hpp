// SPDX-License-Identifier: Apache-2.0
#pragma once
// What `--stats` and `--diff` share: a tensor's numbers read from its .npy
// view in the tree (widened, dequantized: the tree's conversions, not a
// second set), a bounded chunk at a time, as doubles; the accumulators of
// the two commands, in double; a pool of threads over pieces of the tensors.
//
// The one place the commands use the tree: Tree::build, resolve, read,
// parts and npy_of.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelfs/budget.hpp"
#include "modelfs/remote_options.hpp"
#include "modelfs/tree.hpp"

namespace modelfs::cli {

// Elements converted at a time: the doubles of one chunk (512 KiB) and its
// bytes stay in a core's cache between the read and the passes over them.
inline constexpr uint64_t kChunkElements = uint64_t{1} << 16;
// The values buffer of a piece of `count` elements: a chunk, or the piece
// when it is smaller (a model of 50 000 scalars made and zeroed a chunk's
// 512 KiB for each, most of --stats' time).
inline size_t chunk_buffer_size(uint64_t count, unsigned components) {
  return static_cast<size_t>(std::min(kChunkElements, count)) * components;
}
// Elements one task of the pool takes: a large tensor is shared among the
// threads, a small one is one task.
inline constexpr uint64_t kPieceElements = kChunkElements * 64;

// A model opened for reading its values: its tree (the catalog's tensors,
// their raw files and .npy views).
struct OpenModel {
  std::string path;
  std::unique_ptr<const Tree> tree;
};
// Opens `path` (a file or a URL) and builds its tree within `budget`;
// throws ModelError. A URL is fetched with `remote`.
OpenModel open_for_values(const std::string& path, Budget& budget, const RemoteOptions& remote);

// Where a tensor's .npy only repeats values (a broadcast view, whose
// repeated dimensions have stride 0; a tensor of pieces never written,
// all zeros), the values that stand for all of them: `distinct` elements
// of the .npy, in runs of `run` consecutive ones, each standing for
// `repeats` values. Statistics of the tensor are theirs, counts scaled.
struct Repeats {
  uint64_t distinct = 0;
  uint64_t run = 1;
  uint64_t repeats = 1;
  // Run k starts at the element whose index's digits over `outer` (C
  // order) times `steps` give.
  std::vector<uint64_t> outer, steps;
  // The .npy element of distinct value `i`.
  uint64_t position(uint64_t i) const;
  bool operator==(const Repeats&) const = default;
};

// True for a tensor of pieces none of which was written (an HDF5
// dataset of its fill value): its bytes are all zeros.
bool never_written(const Tensor& tensor);

// One tensor's numbers as its .npy holds them.
struct TensorValues {
  const Tensor* tensor = nullptr;
  const Node* raw = nullptr;     // its raw file (the stored bytes)
  const Node* npy = nullptr;     // its .npy view; null when there is none (strings)
  uint64_t body = 0;             // where the .npy's values start (after its header)
  uint64_t count = 0;            // elements
  DType dtype = DType::Float32;  // the .npy's element type
  unsigned element_bytes = 0;
  unsigned components = 1;         // 2 for complex: real and imaginary parts, as numpy's .view(float)
  bool fortran = false;            // the .npy holds the values in Fortran order
  std::optional<Repeats> repeats;  // when its .npy only repeats values
  // Elements read for its statistics: the distinct ones, or all.
  uint64_t reads() const { return repeats ? repeats->distinct : count; }
};
// Every tensor of the tree, in file order.
std::vector<TensorValues> tensor_values(const Tree& tree);

// Reads the values of elements [first, first + n) of `values` (in the
// .npy's order) into `out` (n * components doubles), through `tree.read`
// (remote bytes fetched, mapped bytes read under the guard); throws
// ModelError when they cannot be had.
class ValueReader {
 public:
  explicit ValueReader(const Tree& tree) : tree_(tree) {}
  void read(const TensorValues& values, uint64_t first, uint64_t n, std::span<double> out);
  // The values of reads [first, first + n) of `values` (TensorValues::reads:
  // its distinct values where it repeats them, otherwise its elements).
  void read_distinct(const TensorValues& values, uint64_t first, uint64_t n, std::span<double> out);
  // Elements [first, first + n) in C order, where the .npy holds Fortran
  // order: gathered element by element.
  void read_c_order(const TensorValues& values, uint64_t first, uint64_t n, std::span<double> out);
  // True when bytes [offset, offset + length) of the two files are the same.
  static bool same_bytes(const Tree& a, const Node& file_a, const Tree& b, const Node& file_b);

 private:
  // Bytes [offset, offset + length) of `file` into `bytes_`.
  void read_bytes(const Node& file, uint64_t offset, uint64_t length);

  const Tree& tree_;
  std::vector<iovec> iov_ = std::vector<iovec>(16);
  std::string scratch_;
  std::vector<std::byte> bytes_;
};

// Values of one dtype as doubles: `count` elements of `element_bytes` each
// (complex: two components each).
void to_doubles(DType dtype, const std::byte* bytes, uint64_t count, double* out);

// The --stats fields of a run of values: counts of NaN, infinities and
// zeros, and over the finite values their extremes, mean and population
// variance (Chan's merge of per-chunk means and squared deviations).
struct StatsAccumulator {
  uint64_t values = 0, nan = 0, inf = 0, zeros = 0, finite = 0;  // counts
  double min = 0, max = 0, mean = 0;                             // over the finite values
  double m2 = 0;                                                 // sum of squared deviations from the mean

  void add(std::span<const double> chunk);
  void merge(const StatsAccumulator& other);
  // The statistics of these values each repeated `times` times: counts
  // and squared deviations scaled; extremes and mean the same.
  void repeat(uint64_t times);
  double std_dev() const;
};

// The --diff fields of pairs of values (a from A, b from B): over the pairs
// where both are finite, the largest |a-b|, sums for the RMSE, the relative
// error sum((a-b)^2)/sum(b^2) and the cosine; pairs outside the tolerance
// |a-b| <= atol + rtol*|b|; NaN and infinity positions compared apart.
struct DiffAccumulator {
  uint64_t pairs = 0;
  uint64_t finite = 0;        // pairs where both are finite
  uint64_t unequal = 0;       // pairs not equal (NaN matches NaN, an infinity itself)
  uint64_t not_close = 0;     // pairs outside the tolerance, NaN and infinity mismatches among them
  uint64_t nan_mismatch = 0;  // one NaN, the other not
  uint64_t inf_mismatch = 0;  // an infinity on one side, not the same infinity on the other
  double max_abs = 0;
  double sum_sq_diff = 0;
  double sum_aa = 0;
  double sum_bb = 0;
  double sum_ab = 0;

  void add(std::span<const double> a, std::span<const double> b, double atol, double rtol);
  void merge(const DiffAccumulator& other);
  // These pairs each repeated `times` times: counts and sums scaled.
  void repeat(uint64_t times);
  double rmse() const;
  // None where undefined (B all zeros against a nonzero A; a zero vector).
  std::optional<double> nmse() const;
  std::optional<double> cosine() const;
};

// Runs work(i) for i in [0, count) on every CPU (a pool of threads taking
// the next index); `progress` is called on the calling thread a few times
// a second until all are done. The first exception thrown by a task is
// rethrown once every thread has stopped (the rest skip their work).
void run_pool(size_t count, const std::function<void(size_t)>& work, const std::function<void()>& progress);

// A task of run_pieces: values [first, first + count) of item `item` (a
// tensor, a pair of tensors), accumulated apart and merged in item order,
// so that the sums are the same whatever thread took which.
struct ValuePiece {
  size_t item;
  uint64_t first, count;
};
// Appends the pieces (at most kPieceElements values each) of `count`
// values of `item`.
void add_value_pieces(std::vector<ValuePiece>& pieces, size_t item, uint64_t count);
// Runs work(k, done) for each piece k on the pool, `done` counting the
// bytes read, which a progress bar (`label`) shows against `total_bytes`.
void run_pieces(std::span<const ValuePiece> pieces, const char* label, uint64_t total_bytes,
                const std::function<void(size_t k, std::atomic<uint64_t>& done)>& work);

// A sed-like `s/A/B/` (or `s/A/B/g`; any delimiter after the s) for
// --rename: A an ECMAScript regular expression, B with \1..\9 and & for
// groups. Throws std::invalid_argument (its message says why).
struct Rename {
  std::regex pattern;
  std::string replacement;  // in std::regex_replace's syntax
  bool global = false;
  static Rename parse(std::string_view text);
  std::string apply(const std::string& name) const;
};

// A number for the table: %.4g, or "-" for none.
std::string number_text(std::optional<double> value);

}  // namespace modelfs::cli
