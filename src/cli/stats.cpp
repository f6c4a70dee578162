// SPDX-License-Identifier: Apache-2.0
// `modelfs --stats [--json] MODEL` (commands.hpp).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "cli/tensor_values.hpp"
#include "io/terminal_text.hpp"
#include "modelfs/error.hpp"
#include "tree/npy.hpp"

namespace modelfs::cli {
namespace {

// The width the table keeps to.
constexpr size_t kTableColumns = 80;
// The numbers line's columns, right-aligned: four values (%.4g takes at
// most 11 characters, "-1.234e-308"), then three counts.
constexpr size_t kValueColumns = 12;
constexpr size_t kCountColumns = 10;
constexpr size_t kShapeColumns = 24;

std::string shape_text(std::span<const uint64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The elements of a tensor with no .npy (its shape's product; 0 when it passes 64 bits).
uint64_t element_count(const TensorValues& v) {
  if (v.npy != nullptr) return v.count;
  uint64_t n = 1;
  for (const uint64_t d : v.tensor->shape)
    if (__builtin_mul_overflow(n, d, &n)) return 0;
  return n;
}

nlohmann::ordered_json number_or_null(const StatsAccumulator& s, double value) {
  return s.finite == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(value);
}

void fill_fields(nlohmann::ordered_json& row, const StatsAccumulator& s) {
  row["min"] = number_or_null(s, s.min);
  row["max"] = number_or_null(s, s.max);
  row["mean"] = number_or_null(s, s.mean);
  row["std"] = number_or_null(s, s.std_dev());
  row["nan"] = s.nan;
  row["inf"] = s.inf;
  row["zeros"] = s.zeros;
}

std::string right(const std::string& text, size_t width) {
  const size_t used = display_width(text);
  return (used < width ? std::string(width - used, ' ') : std::string()) + text;
}

std::string numbers_line(const StatsAccumulator& s) {
  auto value = [&](double x) { return number_text(s.finite == 0 ? std::nullopt : std::optional(x)); };
  const std::array<std::string, 7> cells{value(s.min),           value(s.max),          value(s.mean),
                                         value(s.std_dev()),     std::to_string(s.nan), std::to_string(s.inf),
                                         std::to_string(s.zeros)};
  std::string line;
  for (size_t c = 0; c < cells.size(); ++c) line += right(cells[c], c < 4 ? kValueColumns : kCountColumns);
  return line;
}

// Why a tensor's statistics are left out (ReadBound): in the table (within
// its width), in the JSON.
constexpr const char* kPastTheBoundShort = "left out: past the bound on the values read for the model";
constexpr const char* kPastTheBound =
    "left out: reading it would pass the bound on the values read for the whole model (1 GiB, or 1024 times "
    "what the model stores, as for the export)";

// The export's bound on the whole model (kViewBound, npy.hpp), kept on
// what --stats reads: the values of views that do not only repeat them
// (overlapping strides) may be a thousand times what a model stores, so
// a few KB could ask for reading terabytes. Tensors are admitted in file
// order while the total stays within it.
class ReadBound {
 public:
  explicit ReadBound(const Tree& tree) {
    for (const Tensor& t : tree.tensors()) {
      if (t.pieces.empty()) stored_ += t.bytes.size();
      for (const Piece& p : t.pieces) stored_ += p.bytes.size();
    }
  }
  bool admit(uint64_t bytes) {
    const Size total = read_ + bytes;
    if (!total.ok() || !stored_.ok() || !kViewBound.allows(total.value(), stored_.value())) return false;
    read_ = total;
    return true;
  }

 private:
  Size stored_ = 0, read_ = 0;
};

void print_stats_table(const std::vector<TensorValues>& values, const std::vector<StatsAccumulator>& stats,
                       const std::vector<bool>& left_out, const StatsAccumulator& total, uint64_t total_count,
                       std::ostream& out) {
  // Each tensor takes two lines: what it is (name, dtype, shape, count),
  // then its numbers under the headings of the second header line.
  struct Row {
    std::string name, dtype, shape, count;
  };
  std::vector<Row> rows;
  rows.reserve(values.size() + 1);
  rows.push_back({"NAME", "DTYPE", "SHAPE", "COUNT"});
  for (const auto& v : values)
    rows.push_back({printable(v.tensor->name), std::string(v.tensor->dtype_name()),
                    fit_width(shape_text(v.tensor->shape), kShapeColumns), std::to_string(element_count(v))});
  std::array<size_t, 4> width{};
  for (const auto& row : rows) {
    width[0] = std::max(width[0], display_width(row.name));
    width[1] = std::max(width[1], display_width(row.dtype));
    width[2] = std::max(width[2], display_width(row.shape));
    width[3] = std::max(width[3], display_width(row.count));
  }
  // Names are cut (as --list cuts them) so that the line fits.
  const size_t rest = width[1] + width[2] + width[3] + 6;
  width[0] = std::min(width[0], rest + 16 < kTableColumns ? kTableColumns - rest : size_t{16});
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const std::string name = fit_width(row.name, width[0]);
    out << name << std::string(width[0] - display_width(name) + 2, ' ') << row.dtype
        << std::string(width[1] - display_width(row.dtype) + 2, ' ') << row.shape
        << std::string(width[2] - display_width(row.shape) + 2, ' ') << right(row.count, width[3]) << "\n";
    if (r == 0) {
      const char* headings[] = {"MIN", "MAX", "MEAN", "STD", "NAN", "INF", "ZEROS"};
      for (size_t c = 0; c < 7; ++c) out << right(headings[c], c < 4 ? kValueColumns : kCountColumns);
      out << "\n";
    } else if (left_out[r - 1]) {
      out << "  " << kPastTheBoundShort << "\n";
    } else {
      out << numbers_line(stats[r - 1]) << "\n";
    }
  }
  out << "\n"
      << "total: " << values.size() << " tensors, " << total_count << " values\n"
      << numbers_line(total) << "\n";
}

}  // namespace

int stats_command(const Options& options, Budget& budget) {
  if (options.positional > 1) {
    spdlog::error("--stats takes one MODEL: modelfs --stats [--json] MODEL");
    return kExitUsage;
  }
  try {
    const OpenModel model = open_for_values(options.model, budget, *remote_options(options));
    const Tree& tree = *model.tree;
    const std::vector<TensorValues> values = tensor_values(tree);

    std::vector<ValuePiece> pieces;
    uint64_t total_bytes = 0;
    ReadBound bound(tree);
    std::vector<bool> left_out(values.size(), false);
    for (size_t i = 0; i < values.size(); ++i) {
      const auto& v = values[i];
      if (v.npy == nullptr) continue;
      // Where the .npy only repeats values, its distinct ones are read.
      const uint64_t reads = v.reads();
      if (!bound.admit(reads * v.element_bytes)) {
        left_out[i] = true;
        continue;
      }
      total_bytes += reads * v.element_bytes;
      add_value_pieces(pieces, i, reads);
    }
    std::vector<StatsAccumulator> partial(pieces.size());
    run_pieces(pieces, "stats", total_bytes, [&](size_t p, std::atomic<uint64_t>& done) {
      const ValuePiece& piece = pieces[p];
      const TensorValues& v = values[piece.item];
      ValueReader reader(tree);
      std::vector<double> buffer(chunk_buffer_size(piece.count, v.components));
      for (uint64_t at = 0; at < piece.count; at += kChunkElements) {
        const uint64_t n = std::min(kChunkElements, piece.count - at);
        reader.read_distinct(v, piece.first + at, n, buffer);
        partial[p].add(std::span(buffer).first(n * v.components));
        done += n * v.element_bytes;
      }
    });

    std::vector<StatsAccumulator> stats(values.size());
    StatsAccumulator total;
    uint64_t total_count = 0;
    for (size_t p = 0; p < pieces.size(); ++p) stats[pieces[p].item].merge(partial[p]);
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i].repeats) stats[i].repeat(values[i].repeats->repeats);
      total.merge(stats[i]);
      total_count += element_count(values[i]);
    }

    if (!options.json) {
      print_stats_table(values, stats, left_out, total, total_count, std::cout);
      return kExitOk;
    }
    nlohmann::ordered_json doc;
    auto& list = doc["tensors"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < values.size(); ++i) {
      const Tensor& t = *values[i].tensor;
      nlohmann::ordered_json row;
      row["name"] = t.name;
      row["dtype"] = t.dtype_name();
      row["shape"] = std::vector<uint64_t>(t.shape.begin(), t.shape.end());
      row["count"] = element_count(values[i]);
      if (values[i].npy == nullptr || left_out[i]) {
        for (const char* key : {"min", "max", "mean", "std", "nan", "inf", "zeros"}) row[key] = nullptr;
        if (left_out[i]) row["left_out"] = kPastTheBound;
      } else {
        fill_fields(row, stats[i]);
      }
      list.push_back(std::move(row));
    }
    auto& sum = doc["total"];
    sum["tensors"] = values.size();
    sum["count"] = total_count;
    fill_fields(sum, total);
    std::cout << json_for_terminal(doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)) << "\n";
    return kExitOk;
  } catch (const std::runtime_error& e) {
    // A ModelError (a fault of the model, a remote read that failed) or a
    // short read of the tree.
    spdlog::error("{}", printable(e.what()));
    return kExitBadModel;
  }
}

}  // namespace modelfs::cli
