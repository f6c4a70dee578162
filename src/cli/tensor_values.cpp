// SPDX-License-Identifier: Apache-2.0
#include "cli/tensor_values.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "commands.hpp"
#include "io/budget_charge.hpp"
#include "io/mapped_bytes.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "tree/numeric_views.hpp"
#include "tree/pieces_view.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs::cli {
namespace {

// IEEE binary16 to double: the .npy keeps float16 as stored (numpy has it).
double half_to_double(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31)
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  return sign * std::ldexp(mantissa + 1024, exponent - 25);
}

template <typename T>
void widen(const std::byte* bytes, uint64_t count, double* out) {
  for (uint64_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, bytes + i * sizeof(T), sizeof(T));
    out[i] = static_cast<double>(value);
  }
}

// Bytes [offset, offset + length) of `file` as the tree's iovecs (into the
// mapping, or into `scratch`), visited in order; the visitor reads them
// under the mapped-bytes guard.
template <typename Visit>
void for_each_segment(const Tree& tree, const Node& file, uint64_t offset, uint64_t length,
                      std::vector<iovec>& iov, std::string& scratch, Visit&& visit) {
  const size_t count = tree.read(file, offset, length, iov, scratch);
  uint64_t got = 0;
  for (size_t i = 0; i < count; ++i) got += iov[i].iov_len;
  if (got != length) throw std::runtime_error("the tree gave a short read");
  for (size_t i = 0; i < count; ++i) visit(static_cast<const std::byte*>(iov[i].iov_base), iov[i].iov_len);
}

// What the .npy of `tensor` (its parts `npy`, of `count` elements, in C
// order) only repeats, read from the structure of the tree's view: none
// when it may hold as many distinct values as elements.
std::optional<Repeats> repeats_of(const Tensor& tensor, std::span<const Part> npy, uint64_t count) {
  if (count == 0) return std::nullopt;
  // A tensor of pieces none of which was written (an HDF5 dataset of its
  // fill value): every element has the first one's value, unless a
  // conversion could tell the zeros apart by where they are.
  const auto converted = [](const Part& p) {
    return dynamic_cast<const ConvertedView*>(p.computed) != nullptr;
  };
  if (never_written(tensor) && std::ranges::none_of(npy, converted))
    return Repeats{.distinct = 1, .run = 1, .repeats = count, .outer = {}, .steps = {}};
  if (npy.size() != 2) return std::nullopt;
  const auto* view = dynamic_cast<const ElementView*>(npy[1].computed);
  const std::vector<bool> repeated = view != nullptr ? view->repeated_dimensions() : std::vector<bool>();
  if (repeated.empty()) return std::nullopt;
  const auto shape = tensor.shape;
  size_t last = 0;  // the innermost repeated dimension
  for (size_t d = 0; d < shape.size(); ++d)
    if (repeated[d]) last = d;
  Repeats r;
  uint64_t step = 1;  // elements of the .npy a step along dimension d moves
  for (size_t d = shape.size(); d-- > 0;) {
    if (d > last) {
      r.run *= shape[d];
    } else if (repeated[d]) {
      r.repeats *= shape[d];
    } else if (shape[d] > 1) {
      r.outer.insert(r.outer.begin(), shape[d]);
      r.steps.insert(r.steps.begin(), step);
    }
    step *= shape[d];
  }
  r.distinct = count / r.repeats;
  return r;
}

}  // namespace

bool never_written(const Tensor& tensor) {
  return !tensor.pieces.empty() && std::ranges::all_of(tensor.pieces, &Piece::zeros);
}

uint64_t Repeats::position(uint64_t i) const {
  uint64_t rest = i / run, at = i % run;
  for (size_t d = outer.size(); d-- > 0;) {
    at += rest % outer[d] * steps[d];
    rest /= outer[d];
  }
  return at;
}

OpenModel open_for_values(const std::string& path, Budget& budget, const RemoteOptions& remote) {
  return {path, Tree::build(open_model(path, {.budget = &budget, .remote = remote}), {.budget = &budget})};
}

std::vector<TensorValues> tensor_values(const Tree& tree) {
  std::vector<TensorValues> out;
  const auto tensors = tree.tensors();
  const auto paths = tree.tensor_paths();
  out.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorValues& v = out.emplace_back();
    v.tensor = &tensors[i];
    if (const auto raw = tree.resolve(paths[i])) v.raw = tree.node(*raw);
    const auto& content = tree.npy_of(tensors[i]);
    const auto npy = tree.resolve(paths[i] + ".npy");
    if (!content || !npy) continue;
    const Node* node = tree.node(*npy);
    const auto parts = tree.parts(*node);
    if (parts.empty() || parts[0].bytes == nullptr) continue;
    v.npy = node;
    v.dtype = content->dtype;
    v.element_bytes = dtype_bits(v.dtype) / 8;
    v.components = v.dtype == DType::Complex64 || v.dtype == DType::Complex128 ? 2 : 1;
    v.body = parts[0].size;
    if (v.element_bytes == 0) {
      v.npy = nullptr;
      continue;
    }
    v.count = (node->size - v.body) / v.element_bytes;
    // The header is the tree's own text (npy.cpp), not mapped bytes.
    const std::string_view header(reinterpret_cast<const char*>(parts[0].bytes), parts[0].size);
    v.fortran = header.find("'fortran_order': True") != std::string_view::npos;
    if (!v.fortran) v.repeats = repeats_of(tensors[i], parts, v.count);
  }
  return out;
}

void to_doubles(DType dtype, const std::byte* bytes, uint64_t count, double* out) {
  switch (dtype) {
    case DType::Bool:
      for (uint64_t i = 0; i < count; ++i) out[i] = bytes[i] != std::byte{0} ? 1.0 : 0.0;
      return;
    case DType::Int8:
      return widen<int8_t>(bytes, count, out);
    case DType::Int16:
      return widen<int16_t>(bytes, count, out);
    case DType::Int32:
      return widen<int32_t>(bytes, count, out);
    case DType::Int64:
      return widen<int64_t>(bytes, count, out);
    case DType::UInt8:
      return widen<uint8_t>(bytes, count, out);
    case DType::UInt16:
      return widen<uint16_t>(bytes, count, out);
    case DType::UInt32:
      return widen<uint32_t>(bytes, count, out);
    case DType::UInt64:
      return widen<uint64_t>(bytes, count, out);
    case DType::Float32:
      return widen<float>(bytes, count, out);
    case DType::Float64:
      return widen<double>(bytes, count, out);
    case DType::Complex64:
      return widen<float>(bytes, count * 2, out);
    case DType::Complex128:
      return widen<double>(bytes, count * 2, out);
    case DType::Float16:
      for (uint64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + i * 2, 2);
        out[i] = half_to_double(h);
      }
      return;
    default:
      // tensor_values gives only the .npy's types: numpy's own.
      throw std::logic_error("no .npy values of this dtype");
  }
}

void ValueReader::read_bytes(const Node& file, uint64_t offset, uint64_t length) {
  bytes_.resize(length);
  std::byte* to = bytes_.data();
  for_each_segment(tree_, file, offset, length, iov_, scratch_, [&](const std::byte* from, size_t size) {
    copy_mapped(to, from, size);
    to += size;
  });
}

void ValueReader::read(const TensorValues& values, uint64_t first, uint64_t n, std::span<double> out) {
  read_bytes(*values.npy, values.body + first * values.element_bytes, n * values.element_bytes);
  to_doubles(values.dtype, bytes_.data(), n, out.data());
}

void ValueReader::read_distinct(const TensorValues& values, uint64_t first, uint64_t n,
                                std::span<double> out) {
  if (!values.repeats) return read(values, first, n, out);
  const Repeats& r = *values.repeats;
  for (uint64_t done = 0; done < n;) {
    const uint64_t i = first + done;
    const uint64_t take = std::min(n - done, r.run - i % r.run);
    read(values, r.position(i), take, out.subspan(done * values.components));
    done += take;
  }
}

void ValueReader::read_c_order(const TensorValues& values, uint64_t first, uint64_t n,
                               std::span<double> out) {
  const auto shape = values.tensor->shape;
  // The C-order index's digits, and each dimension's step in Fortran order.
  std::vector<uint64_t> index(shape.size()), step(shape.size());
  uint64_t rest = first;
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] == 0 ? 0 : rest % shape[d];
    rest = shape[d] == 0 ? 0 : rest / shape[d];
  }
  for (size_t d = 0, s = 1; d < shape.size(); s *= static_cast<size_t>(shape[d]), ++d) step[d] = s;
  for (uint64_t k = 0; k < n; ++k) {
    uint64_t at = 0;
    for (size_t d = 0; d < shape.size(); ++d) at += index[d] * step[d];
    read_bytes(*values.npy, values.body + at * values.element_bytes, values.element_bytes);
    to_doubles(values.dtype, bytes_.data(), 1, out.data() + k * values.components);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

bool ValueReader::same_bytes(const Tree& a, const Node& file_a, const Tree& b, const Node& file_b) {
  if (file_a.size != file_b.size) return false;
  constexpr uint64_t kBytes = 4 << 20;
  std::vector<iovec> iov_a(16), iov_b(16);
  std::string scratch_a, scratch_b;
  for (uint64_t offset = 0; offset < file_a.size; offset += kBytes) {
    const uint64_t length = std::min(kBytes, file_a.size - offset);
    const size_t count_a = a.read(file_a, offset, length, iov_a, scratch_a);
    const size_t count_b = b.read(file_b, offset, length, iov_b, scratch_b);
    // Walks both iovec lists side by side, comparing the overlap of the
    // current segments.
    bool same = true;
    size_t i = 0, j = 0;
    size_t at_i = 0, at_j = 0;
    read_mapped([&] {
      while (same && i < count_a && j < count_b) {
        const size_t left_i = iov_a[i].iov_len - at_i, left_j = iov_b[j].iov_len - at_j;
        const size_t n = std::min(left_i, left_j);
        same = std::memcmp(static_cast<const char*>(iov_a[i].iov_base) + at_i,
                           static_cast<const char*>(iov_b[j].iov_base) + at_j, n) == 0;
        at_i += n;
        at_j += n;
        if (at_i == iov_a[i].iov_len) ++i, at_i = 0;
        if (at_j == iov_b[j].iov_len) ++j, at_j = 0;
      }
    });
    if (!same || (i < count_a) != (j < count_b)) return false;
  }
  return true;
}

void StatsAccumulator::add(std::span<const double> chunk) {
  values += chunk.size();
  uint64_t n = 0;
  double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const double x : chunk) {
    if (x == 0) ++zeros;
    if (std::isnan(x)) {
      ++nan;
    } else if (std::isinf(x)) {
      ++inf;
    } else {
      ++n;
      sum += x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  }
  if (n == 0) return;
  const double chunk_mean = sum / static_cast<double>(n);
  double squares = 0;
  for (const double x : chunk)
    if (std::isfinite(x)) squares += (x - chunk_mean) * (x - chunk_mean);
  StatsAccumulator part;
  part.finite = n;
  part.min = lo;
  part.max = hi;
  part.mean = chunk_mean;
  part.m2 = squares;
  merge(part);  // its counts are zero: they were counted above
}

void StatsAccumulator::merge(const StatsAccumulator& other) {
  values += other.values;
  nan += other.nan;
  inf += other.inf;
  zeros += other.zeros;
  if (other.finite == 0) return;
  if (finite == 0) {
    finite = other.finite;
    min = other.min;
    max = other.max;
    mean = other.mean;
    m2 = other.m2;
    return;
  }
  const double n_a = static_cast<double>(finite), n_b = static_cast<double>(other.finite);
  const double n = n_a + n_b;
  const double delta = other.mean - mean;
  mean += delta * (n_b / n);
  m2 += other.m2 + delta * delta * (n_a * n_b / n);
  finite += other.finite;
  min = std::min(min, other.min);
  max = std::max(max, other.max);
}

void StatsAccumulator::repeat(uint64_t times) {
  values *= times;
  nan *= times;
  inf *= times;
  zeros *= times;
  finite *= times;
  m2 *= static_cast<double>(times);
}

double StatsAccumulator::std_dev() const {
  return finite == 0 ? 0.0 : std::sqrt(m2 / static_cast<double>(finite));
}

void DiffAccumulator::add(std::span<const double> a, std::span<const double> b, double atol, double rtol) {
  pairs += a.size();
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    if (std::isfinite(x) && std::isfinite(y)) {
      ++finite;
      const double d = std::fabs(x - y);
      if (d != 0) ++unequal;
      if (!(d <= atol + rtol * std::fabs(y))) ++not_close;
      max_abs = std::max(max_abs, d);
      sum_sq_diff += d * d;
      sum_aa += x * x;
      sum_bb += y * y;
      sum_ab += x * y;
      continue;
    }
    const bool nan_x = std::isnan(x), nan_y = std::isnan(y);
    if (nan_x && nan_y) continue;
    if (nan_x != nan_y) {
      ++nan_mismatch;
    } else if (x != y) {
      ++inf_mismatch;
    } else {
      continue;  // the same infinity
    }
    ++unequal;
    ++not_close;
  }
}

void DiffAccumulator::merge(const DiffAccumulator& o) {
  pairs += o.pairs;
  finite += o.finite;
  unequal += o.unequal;
  not_close += o.not_close;
  nan_mismatch += o.nan_mismatch;
  inf_mismatch += o.inf_mismatch;
  max_abs = std::max(max_abs, o.max_abs);
  sum_sq_diff += o.sum_sq_diff;
  sum_aa += o.sum_aa;
  sum_bb += o.sum_bb;
  sum_ab += o.sum_ab;
}

void DiffAccumulator::repeat(uint64_t times) {
  pairs *= times;
  finite *= times;
  unequal *= times;
  not_close *= times;
  nan_mismatch *= times;
  inf_mismatch *= times;
  const auto k = static_cast<double>(times);
  sum_sq_diff *= k;
  sum_aa *= k;
  sum_bb *= k;
  sum_ab *= k;
}

double DiffAccumulator::rmse() const {
  return finite == 0 ? 0.0 : std::sqrt(sum_sq_diff / static_cast<double>(finite));
}

std::optional<double> DiffAccumulator::nmse() const {
  if (sum_sq_diff == 0) return 0.0;
  if (sum_bb == 0) return std::nullopt;
  return sum_sq_diff / sum_bb;
}

std::optional<double> DiffAccumulator::cosine() const {
  if (sum_aa == 0 || sum_bb == 0) return std::nullopt;
  return sum_ab / (std::sqrt(sum_aa) * std::sqrt(sum_bb));
}

void run_pool(size_t count, const std::function<void(size_t)>& work, const std::function<void()>& progress) {
  const size_t threads = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), count));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex mutex;
  std::condition_variable finished;
  size_t running = threads;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i; !failed && (i = next.fetch_add(1)) < count;) {
        try {
          work(i);
        } catch (...) {
          std::lock_guard lock(mutex);
          if (!first_error) first_error = std::current_exception();
          failed = true;
        }
      }
      std::lock_guard lock(mutex);
      if (--running == 0) finished.notify_all();
    });
  }
  {
    std::unique_lock lock(mutex);
    while (running > 0) {
      finished.wait_for(lock, std::chrono::milliseconds(100));
      lock.unlock();
      progress();
      lock.lock();
    }
  }
  for (auto& thread : pool) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

void add_value_pieces(std::vector<ValuePiece>& pieces, size_t item, uint64_t count) {
  for (uint64_t first = 0; first < count; first += kPieceElements)
    pieces.push_back({item, first, std::min(kPieceElements, count - first)});
}

void run_pieces(std::span<const ValuePiece> pieces, const char* label, uint64_t total_bytes,
                const std::function<void(size_t k, std::atomic<uint64_t>& done)>& work) {
  std::atomic<uint64_t> done{0};
  ProgressBar bar(::isatty(STDERR_FILENO) != 0, label);
  run_pool(
      pieces.size(), [&](size_t k) { work(k, done); }, [&] { bar.update(done, total_bytes); });
}

Rename Rename::parse(std::string_view text) {
  if (text.size() < 4 || text[0] != 's')
    throw std::invalid_argument("--rename takes s/PATTERN/REPLACEMENT/ (optionally g after it)");
  const char delimiter = text[1];
  // The two fields, a backslash before the delimiter keeping it literal.
  std::string fields[2];
  size_t at = 2;
  for (auto& field : fields) {
    for (;; ++at) {
      if (at >= text.size())
        throw std::invalid_argument("--rename: the s command needs three '" + std::string(1, delimiter) +
                                    "'");
      if (text[at] == '\\' && at + 1 < text.size() && text[at + 1] == delimiter) {
        field += delimiter;
        ++at;
      } else if (text[at] == delimiter) {
        ++at;
        break;
      } else {
        field += text[at];
      }
    }
  }
  const std::string_view flags = text.substr(at);
  if (!flags.empty() && flags != "g") throw std::invalid_argument("--rename: the only flag is g");
  Rename rename;
  rename.global = !flags.empty();
  try {
    rename.pattern = std::regex(fields[0], std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument("--rename: " + fields[0] + ": " + e.what());
  }
  // sed's \1..\9 and & into regex_replace's $1..$9 and $&; its $ kept.
  const std::string& from = fields[1];
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] == '\\' && i + 1 < from.size()) {
      const char next = from[++i];
      if (next >= '0' && next <= '9')
        rename.replacement += std::string("$") + next;
      else if (next == '$')
        rename.replacement += "$$";
      else
        rename.replacement += next;
    } else if (from[i] == '&') {
      rename.replacement += "$&";
    } else if (from[i] == '$') {
      rename.replacement += "$$";
    } else {
      rename.replacement += from[i];
    }
  }
  return rename;
}

std::string Rename::apply(const std::string& name) const {
  return std::regex_replace(
      name, pattern, replacement,
      global ? std::regex_constants::format_default : std::regex_constants::format_first_only);
}

std::string number_text(std::optional<double> value) {
  if (!value) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", *value);
  return buf;
}

}  // namespace modelfs::cli
