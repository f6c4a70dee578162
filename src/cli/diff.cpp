// SPDX-License-Identifier: Apache-2.0
// `modelfs --diff [--json] [--atol X] [--rtol Y] [--rename s/A/B/]... A B`
// (commands.hpp).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "cli/tensor_values.hpp"
#include "io/terminal_text.hpp"
#include "modelfs/error.hpp"

namespace modelfs::cli {
namespace {

enum class Status { Identical, Equal, Close, Different, Mismatch, OnlyA, OnlyB };
constexpr const char* kStatusNames[] = {"identical", "equal",  "close", "different",
                                        "mismatch",  "only_a", "only_b"};

// Exit status as cmp(1) and diff(1): 0 the same, 1 different, 2 trouble.
constexpr int kExitDifferent = 1;

constexpr size_t kTableColumns = 80;
constexpr size_t kStatusColumns = 9;
constexpr size_t kNumberColumns = 10;

struct Pair {
  std::string name;  // A's name after --rename (B's, when both have it)
  const TensorValues* a = nullptr;
  const TensorValues* b = nullptr;
  Status status = Status::Different;
  bool compared = false;  // its values were compared (or its bytes found identical)
  DiffAccumulator diff;
};

std::string shape_text(std::span<const uint64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool same_shape(const Tensor& a, const Tensor& b) { return std::ranges::equal(a.shape, b.shape); }

// A tolerance: a finite number, zero or more.
std::optional<double> tolerance(const char* text, const char* option) {
  if (text == nullptr) return 0.0;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(value) || value < 0) {
    spdlog::error("{} takes a number, zero or more (as 1e-5)", option);
    return std::nullopt;
  }
  return value;
}

nlohmann::ordered_json optional_json(std::optional<double> value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

std::string right(const std::string& text, size_t width) {
  const size_t used = display_width(text);
  return (used < width ? std::string(width - used, ' ') : std::string()) + text;
}

std::string cosine_text(std::optional<double> value) {
  if (!value) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", *value);
  return buf;
}

void print_diff_table(const std::vector<Pair>& pairs, std::ostream& out) {
  // The numbers take four columns at the right; the name what is left.
  const size_t name_columns = kTableColumns - kStatusColumns - 2 - 4 * kNumberColumns - 4;
  out << std::string("STATUS") + std::string(kStatusColumns - 6 + 2, ' ') << "NAME"
      << std::string(name_columns - 4, ' ') << right("MAX_ABS", kNumberColumns + 1)
      << right("RMSE", kNumberColumns + 1) << right("NMSE", kNumberColumns + 1)
      << right("COSINE", kNumberColumns + 1) << "\n";
  for (const Pair& p : pairs) {
    const std::string status = kStatusNames[static_cast<int>(p.status)];
    const std::string name = fit_width(printable(p.name), name_columns);
    std::string line = status + std::string(kStatusColumns - status.size() + 2, ' ') + name +
                       std::string(name_columns - display_width(name), ' ');
    if (p.compared) {
      line += right(number_text(p.diff.max_abs), kNumberColumns + 1) +
              right(number_text(p.diff.rmse()), kNumberColumns + 1) +
              right(number_text(p.diff.nmse()), kNumberColumns + 1) +
              right(cosine_text(p.diff.cosine()), kNumberColumns + 1);
    } else if (p.status == Status::Mismatch) {
      const std::string shapes = shape_text(p.a->tensor->shape) + " vs " + shape_text(p.b->tensor->shape);
      line += "  " + fit_width(shapes, 4 * kNumberColumns + 2);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

// A's tensors paired with B's by name (A's after --rename): A's in file
// order, then B's left over, in its order.
std::vector<Pair> match_pairs(const std::vector<TensorValues>& values_a,
                              const std::vector<TensorValues>& values_b, const std::vector<Rename>& renames) {
  std::unordered_map<std::string_view, size_t> in_b;
  for (size_t i = 0; i < values_b.size(); ++i) in_b.emplace(values_b[i].tensor->name, i);
  std::vector<bool> matched(values_b.size());
  std::vector<Pair> pairs;
  pairs.reserve(values_a.size() + values_b.size());
  for (const auto& a : values_a) {
    std::string name(a.tensor->name);
    for (const auto& rename : renames) name = rename.apply(name);
    Pair& p = pairs.emplace_back();
    p.a = &a;
    const auto it = in_b.find(name);
    if (it != in_b.end() && !matched[it->second]) {
      matched[it->second] = true;
      p.b = &values_b[it->second];
    }
    p.status = p.b == nullptr ? Status::OnlyA : Status::Different;
    p.name = std::move(name);
  }
  for (size_t i = 0; i < values_b.size(); ++i)
    if (!matched[i]) {
      Pair& p = pairs.emplace_back();
      p.name = values_b[i].tensor->name;
      p.b = &values_b[i];
      p.status = Status::OnlyB;
    }
  return pairs;
}

// The pairs whose values can be compared (in both, of one shape), and
// among them those found identical: the same dtype, shape and strides and
// the same stored bytes, with no conversion. Returns the comparable ones.
std::vector<size_t> find_identical(std::vector<Pair>& pairs, const Tree& tree_a, const Tree& tree_b) {
  std::vector<size_t> to_compare;
  for (size_t i = 0; i < pairs.size(); ++i) {
    Pair& p = pairs[i];
    if (p.a == nullptr || p.b == nullptr) continue;
    if (!same_shape(*p.a->tensor, *p.b->tensor) || p.a->components != p.b->components) {
      p.status = Status::Mismatch;
      continue;
    }
    to_compare.push_back(i);
  }
  uint64_t total_bytes = 0;
  for (const size_t i : to_compare) total_bytes += pairs[i].a->tensor->nbytes() * 2;
  std::atomic<uint64_t> done{0};
  ProgressBar bar(::isatty(STDERR_FILENO) != 0, "diff");
  run_pool(
      to_compare.size(),
      [&](size_t k) {
        Pair& p = pairs[to_compare[k]];
        const Tensor &ta = *p.a->tensor, &tb = *p.b->tensor;
        if (ta.dtype_name() == tb.dtype_name() && std::ranges::equal(ta.strides, tb.strides) &&
            p.a->raw != nullptr && p.b->raw != nullptr &&
            // Two tensors never written are zeros of one size: not read.
            ((never_written(ta) && never_written(tb)) ||
             ValueReader::same_bytes(tree_a, *p.a->raw, tree_b, *p.b->raw))) {
          p.status = Status::Identical;
          p.compared = true;
        }
        done += ta.nbytes() * 2;
      },
      [&] { bar.update(done, total_bytes); });
  return to_compare;
}

// The values a pair's sides repeat alike (the same Repeats): then their
// distinct values are compared, each pair of them standing for `repeats`.
const Repeats* shared_repeats(const Pair& p) {
  return p.a->repeats && p.b->repeats && *p.a->repeats == *p.b->repeats ? &*p.a->repeats : nullptr;
}

// Compares the values of the pairs of `to_compare` not found identical,
// in pieces merged in order, and sets their status.
void compare_values(std::vector<Pair>& pairs, std::span<const size_t> to_compare, const Tree& tree_a,
                    const Tree& tree_b, double atol, double rtol) {
  std::vector<ValuePiece> pieces;
  uint64_t value_bytes = 0;
  for (const size_t i : to_compare) {
    const Pair& p = pairs[i];
    if (p.status == Status::Identical || p.a->npy == nullptr || p.b->npy == nullptr) continue;
    const Repeats* repeats = shared_repeats(p);
    const uint64_t count = repeats != nullptr ? repeats->distinct : p.a->count;
    value_bytes += count * (p.a->element_bytes + p.b->element_bytes);
    add_value_pieces(pieces, i, count);
    if (count == 0) pieces.push_back({i, 0, 0});
  }
  std::vector<DiffAccumulator> partial(pieces.size());
  run_pieces(pieces, "diff", value_bytes, [&](size_t k, std::atomic<uint64_t>& done) {
    const ValuePiece& piece = pieces[k];
    const Pair& p = pairs[piece.item];
    const TensorValues &a = *p.a, &b = *p.b;
    ValueReader reader_a(tree_a), reader_b(tree_b);
    std::vector<double> buffer_a(chunk_buffer_size(piece.count, a.components)),
        buffer_b(chunk_buffer_size(piece.count, b.components));
    // Both in the same order: as stored when their orders agree, else
    // C order; only the distinct values where both repeat them alike
    // (neither is then in Fortran order).
    const bool distinct = shared_repeats(p) != nullptr;
    const bool gather = a.fortran != b.fortran;
    const auto read = [&](ValueReader& reader, const TensorValues& v, uint64_t first, uint64_t n,
                          std::span<double> out) {
      if (distinct)
        reader.read_distinct(v, first, n, out);
      else if (gather && v.fortran)
        reader.read_c_order(v, first, n, out);
      else
        reader.read(v, first, n, out);
    };
    for (uint64_t at = 0; at < piece.count; at += kChunkElements) {
      const uint64_t n = std::min(kChunkElements, piece.count - at);
      read(reader_a, a, piece.first + at, n, buffer_a);
      read(reader_b, b, piece.first + at, n, buffer_b);
      partial[k].add(std::span(buffer_a).first(n * a.components), std::span(buffer_b).first(n * b.components),
                     atol, rtol);
      done += n * (a.element_bytes + b.element_bytes);
    }
  });
  for (size_t k = 0; k < pieces.size(); ++k) {
    Pair& p = pairs[pieces[k].item];
    p.diff.merge(partial[k]);
    p.compared = true;
  }
  for (const size_t i : to_compare) {
    Pair& p = pairs[i];
    if (p.status == Status::Identical || !p.compared) continue;
    if (const Repeats* repeats = shared_repeats(p)) p.diff.repeat(repeats->repeats);
    p.status = p.diff.unequal == 0     ? Status::Equal
               : p.diff.not_close == 0 ? Status::Close
                                       : Status::Different;
  }
}

void print_diff_json(const std::vector<Pair>& pairs, std::span<const size_t> counts, double atol, double rtol,
                     bool same, std::ostream& out) {
  nlohmann::ordered_json doc;
  auto& list = doc["tensors"] = nlohmann::ordered_json::array();
  for (const Pair& p : pairs) {
    nlohmann::ordered_json row;
    row["name"] = p.name;
    if (p.a != nullptr && p.a->tensor->name != p.name) row["name_a"] = p.a->tensor->name;
    row["status"] = kStatusNames[static_cast<int>(p.status)];
    if (p.a != nullptr) {
      row["dtype_a"] = p.a->tensor->dtype_name();
      row["shape_a"] = std::vector<uint64_t>(p.a->tensor->shape.begin(), p.a->tensor->shape.end());
    }
    if (p.b != nullptr) {
      row["dtype_b"] = p.b->tensor->dtype_name();
      row["shape_b"] = std::vector<uint64_t>(p.b->tensor->shape.begin(), p.b->tensor->shape.end());
    }
    if (p.compared) {
      row["max_abs_diff"] = p.diff.max_abs;
      row["rmse"] = p.diff.rmse();
      row["nmse"] = optional_json(p.diff.nmse());
      row["cosine"] =
          p.status == Status::Identical ? nlohmann::ordered_json(1.0) : optional_json(p.diff.cosine());
      row["not_close"] = p.diff.not_close;
      row["nan_mismatch"] = p.diff.nan_mismatch;
      row["inf_mismatch"] = p.diff.inf_mismatch;
    } else {
      for (const char* key :
           {"max_abs_diff", "rmse", "nmse", "cosine", "not_close", "nan_mismatch", "inf_mismatch"})
        row[key] = nullptr;
    }
    list.push_back(std::move(row));
  }
  auto& summary = doc["summary"];
  summary["tensors"] = pairs.size();
  for (int s = 0; s < 7; ++s) summary[kStatusNames[s]] = counts[s];
  summary["atol"] = atol;
  summary["rtol"] = rtol;
  summary["same"] = same;
  out << json_for_terminal(doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)) << "\n";
}

// The counts under the table, wrapped to its width.
void print_diff_counts(size_t pairs, std::span<const size_t> counts, std::ostream& out) {
  const char* labels[] = {"identical", "equal", "close", "different", "mismatch", "only in A", "only in B"};
  std::string line = std::to_string(pairs) + " tensors:";
  out << "\n";
  for (int s = 0; s < 7; ++s) {
    const std::string item = std::to_string(counts[s]) + " " + labels[s] + (s < 6 ? "," : "");
    if (line.size() + 1 + item.size() > kTableColumns) {
      out << line << "\n";
      line = " ";
    }
    line += " " + item;
  }
  out << line << "\n";
}

}  // namespace

int diff_command(const Options& options, Budget& budget) {
  if (options.positional != 2) {
    spdlog::error("--diff takes two models: modelfs --diff [--json] [--atol X] [--rtol Y] A B");
    return kExitUsage;
  }
  const auto atol = tolerance(options.atol, "--atol");
  const auto rtol = tolerance(options.rtol, "--rtol");
  if (!atol || !rtol) return kExitUsage;
  std::vector<Rename> renames;
  try {
    for (const auto& text : *options.renames) renames.push_back(Rename::parse(text));
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return kExitUsage;
  }

  try {
    // Each model has a budget of its own, as it would alone.
    Budget budget_b(options.max_parse_mb > 0 ? std::optional<uint64_t>(uint64_t(options.max_parse_mb) << 20)
                                             : std::nullopt);
    const OpenModel model_a = open_for_values(options.model, budget, *remote_options(options));
    const OpenModel model_b = open_for_values(options.mountpoint, budget_b, *remote_options(options));
    const Tree& tree_a = *model_a.tree;
    const Tree& tree_b = *model_b.tree;
    const std::vector<TensorValues> values_a = tensor_values(tree_a);
    const std::vector<TensorValues> values_b = tensor_values(tree_b);

    std::vector<Pair> pairs = match_pairs(values_a, values_b, renames);
    const std::vector<size_t> to_compare = find_identical(pairs, tree_a, tree_b);
    compare_values(pairs, to_compare, tree_a, tree_b, *atol, *rtol);

    std::array<size_t, 7> counts{};
    for (const Pair& p : pairs) ++counts[static_cast<int>(p.status)];
    const bool same = counts[0] + counts[1] + counts[2] == pairs.size();
    if (options.json) {
      print_diff_json(pairs, counts, *atol, *rtol, same, std::cout);
    } else {
      print_diff_table(pairs, std::cout);
      print_diff_counts(pairs.size(), counts, std::cout);
    }
    return same ? kExitOk : kExitDifferent;
  } catch (const std::runtime_error& e) {
    spdlog::error("{}", printable(e.what()));
    return kExitBadModel;
  }
}

}  // namespace modelfs::cli
