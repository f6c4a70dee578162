// SPDX-License-Identifier: Apache-2.0
#include "io/pieces.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "io/json_text.hpp"
#include "modelfs/error.hpp"

namespace modelfs {

std::string_view piece_filter_name(PieceFilter filter) noexcept {
  switch (filter) {
    case PieceFilter::Deflate:
      return "deflate";
    case PieceFilter::Shuffle:
      return "shuffle";
    case PieceFilter::Fletcher32:
      return "fletcher32";
  }
  return "unknown";
}

uint32_t fletcher32(std::span<const std::byte> bytes) noexcept {
  uint32_t sum1 = 0, sum2 = 0;
  const auto at = [&](size_t i) { return static_cast<uint32_t>(bytes[i]); };
  size_t words = bytes.size() / 2, i = 0;
  // 360 words at most between folds keep both sums inside 32 bits.
  while (words > 0) {
    const size_t run = std::min<size_t>(words, 360);
    words -= run;
    for (size_t k = 0; k < run; ++k, i += 2) {
      sum1 += at(i) << 8 | at(i + 1);
      sum2 += sum1;
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (bytes.size() % 2 != 0) {
    sum1 += at(i) << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return sum2 << 16 | sum1;
}

bool fletcher32_holds(std::span<const std::byte> stored) noexcept {
  if (stored.size() < kFletcher32Bytes) return false;
  const size_t n = stored.size() - kFletcher32Bytes;
  uint32_t kept = 0;
  for (size_t i = 0; i < kFletcher32Bytes; ++i) kept |= static_cast<uint32_t>(stored[n + i]) << (8 * i);
  const uint32_t sum = fletcher32(stored.first(n));
  return kept == sum || kept == __builtin_bswap32(sum);
}

namespace {

// Each field of `p` as the sidecar and `--list --json` give it, in order:
// `field(key, value)`, the value a bool, a number, a text, a list of
// numbers or the filters.
template <typename Field>
void piece_fields(const Piece& p, Field&& field) {
  if (p.zeros) {
    field("zeros", true);
  } else {
    field("file", p.source.file);
    if (p.source.offset) field("offset", *p.source.offset);
    field("size", p.bytes.size());
  }
  if (!p.start.empty()) {
    field("start", p.start);
    field("extent", p.extent);
    if (!p.filters.empty()) field("filters", p.filters);
  }
}

void append_value(std::string& out, bool value) { out += value ? "true" : "false"; }
void append_value(std::string& out, uint64_t value) { out += std::to_string(value); }
void append_value(std::string& out, std::string_view text) { append_json_string(out, text); }
void append_value(std::string& out, std::span<const uint64_t> values) { append_json_array(out, values); }
void append_value(std::string& out, std::span<const PieceFilter> filters) {
  out += '[';
  for (size_t k = 0; k < filters.size(); ++k) {
    if (k) out += ',';
    append_json_string(out, piece_filter_name(filters[k]));
  }
  out += ']';
}

}  // namespace

void append_piece_json(std::string& out, const Piece& piece) {
  out += '{';
  bool first = true;
  piece_fields(piece, [&](std::string_view key, const auto& value) {
    out += first ? "\"" : ",\"";
    first = false;
    out += key;
    out += "\":";
    append_value(out, value);
  });
  out += '}';
}

void append_pieces_json(std::string& out, const Tensor& tensor) {
  out += '[';
  for (size_t i = 0; i < tensor.pieces.size(); ++i) {
    if (i) out += ',';
    append_piece_json(out, tensor.pieces[i]);
  }
  out += ']';
}

namespace {

class Refusal {
 public:
  Refusal(const Tensor& tensor, std::string_view file, std::string_view format)
      : tensor_(tensor), file_(file), format_(format) {}
  [[noreturn]] void operator()(const std::string& reason) const {
    throw ModelError(std::string(file_), std::string(format_), std::nullopt,
                     "tensor \"" + std::string(tensor_.name) + "\": " + reason);
  }
  [[noreturn]] void operator()(size_t piece, const std::string& reason) const {
    (*this)("piece " + std::to_string(piece) + " " + reason);
  }

 private:
  const Tensor& tensor_;
  std::string_view file_;
  std::string_view format_;
};

// Bytes the raw file of `tensor` takes, where its type says (none for a
// type of no fixed size, or a ggml type whose blocks the shape does not fill).
std::optional<Size> shape_bytes(const Tensor& tensor) {
  Size numel = 1;
  for (const uint64_t d : tensor.shape) numel *= d;
  if (tensor.dtype == DType::GgmlBlock) {
    if (tensor.ggml == nullptr || tensor.ggml->block_size == 0 || !numel.ok() ||
        numel.value() % tensor.ggml->block_size != 0)
      return std::nullopt;
    return Size(numel.value() / tensor.ggml->block_size) * tensor.ggml->type_size;
  }
  const uint32_t bits = dtype_bits(tensor.dtype);
  if (bits == 0) return std::nullopt;
  return (numel * bits + 7) / 8;
}

std::string number(uint64_t n) { return std::to_string(n); }

}  // namespace

PieceGrid piece_grid(const Tensor& t, std::string_view file, std::string_view format) {
  const Refusal refuse(t, file, format);
  const size_t rank = t.shape.size();
  const auto pieces = t.pieces;
  PieceGrid grid;
  grid.cuts.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    auto& cuts = grid.cuts[d];
    cuts.reserve(pieces.size());
    for (const auto& p : pieces) cuts.push_back(p.start[d]);
    check_budget();
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    cuts.shrink_to_fit();
    if (cuts.front() != 0) refuse("its pieces leave a hole: none starts at 0 of dimension " + number(d));
  }
  // As many cells as pieces, each piece one cell: then every element is
  // covered exactly once.
  Size cells = 1;
  for (const auto& cuts : grid.cuts) cells *= cuts.size();
  if (!cells.ok() || cells.value() > pieces.size())
    refuse("its " + number(pieces.size()) +
           " pieces leave a hole, or do not form a grid (each piece one cell of the cuts its starts make " +
           "along each dimension)");
  constexpr uint32_t kFree = std::numeric_limits<uint32_t>::max();
  grid.piece.assign(cells.value(), kFree);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i % 4096 == 0) check_budget();
    const auto& p = pieces[i];
    uint64_t cell = 0;
    for (size_t d = 0; d < rank; ++d) {
      const auto& cuts = grid.cuts[d];
      const auto at = std::lower_bound(cuts.begin(), cuts.end(), p.start[d]);
      const auto c = static_cast<uint64_t>(at - cuts.begin());
      const uint64_t next = c + 1 < cuts.size() ? cuts[c + 1] : t.shape[d];
      // check_pieces has checked start + extent.
      const uint64_t end = std::min(p.start[d] + p.extent[d], t.shape[d]);
      if (end > next)
        refuse(i, "overlaps another along dimension " + number(d) + " (it ends at " + number(end) +
                      ", another starts at " + number(next) + ")");
      if (end < next)
        refuse(i, "leaves a hole along dimension " + number(d) + " (it ends at " + number(end) +
                      ", the next piece starts at " + number(next) + ")");
      cell = cell * cuts.size() + c;
    }
    if (grid.piece[cell] != kFree) refuse(i, "overlaps piece " + number(grid.piece[cell]));
    grid.piece[cell] = static_cast<uint32_t>(i);
  }
  // Every cell taken: n pieces in n cells, none twice.
  if (cells.value() != pieces.size()) refuse("its pieces overlap");
  return grid;
}

void check_pieces(const Tensor& t, std::string_view file, std::string_view format) {
  if (t.pieces.empty()) return;
  const Refusal refuse(t, file, format);
  const auto pieces = t.pieces;
  if (pieces.size() > std::numeric_limits<uint32_t>::max() - 1) refuse("more pieces than a tensor can have");
  if (t.bytes.size() != 0 || t.encoded) refuse("has stored bytes beside its pieces");
  if (t.strides.size() != t.shape.size() || !t.is_c_contiguous())
    refuse("its pieces assemble a C-order array, but its strides are not C order");
  const bool box = !pieces.front().start.empty() || !pieces.front().extent.empty();
  const size_t rank = t.shape.size();
  if (box) {
    const uint32_t bits = dtype_bits(t.dtype);
    if (t.dtype == DType::GgmlBlock || t.dtype == DType::String || bits == 0 || bits % 8 != 0)
      refuse("box pieces need elements of whole bytes, not " + std::string(t.dtype_name()));
    if (rank == 0) refuse("box pieces of a scalar");
  }
  const uint64_t element = dtype_bits(t.dtype) / 8;
  Size total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i % 4096 == 0) check_budget();
    const auto& p = pieces[i];
    const bool is_box = !p.start.empty() || !p.extent.empty();
    if (is_box != box) refuse(i, "is not of the kind of piece 0 (run pieces and box pieces mixed)");
    if (p.zeros && (p.bytes.size() != 0 || !p.filters.empty()))
      refuse(i, "reads as zeros but has stored bytes or filters");
    bool deflate = false, shuffle = false, fletcher = false;
    for (const PieceFilter f : p.filters) {
      bool& seen = f == PieceFilter::Deflate ? deflate : f == PieceFilter::Shuffle ? shuffle : fletcher;
      if (seen) refuse(i, "applies the filter " + std::string(piece_filter_name(f)) + " twice");
      seen = true;
    }
    if (fletcher && p.filters.back() != PieceFilter::Fletcher32)
      refuse(i, "applies fletcher32 before another filter (only as the last one)");
    const uint64_t checksum = checksum_bytes(p.filters);
    if (!p.filters.empty() && p.size > kMaxDecodedPiece)
      refuse(i, "decodes to " + number(p.size) + " bytes, more than the " + number(kMaxDecodedPiece) +
                    " a piece decoded whole may take");
    if (!p.zeros && p.filters.empty() && p.bytes.size() != p.size)
      refuse(i, "holds " + number(p.bytes.size()) + " bytes but says " + number(p.size));
    if (!p.filters.empty() && p.bytes.size() == 0) refuse(i, "is filtered but stores no bytes");
    if (!p.filters.empty() && !deflate && p.bytes.size() != p.size + checksum)
      refuse(i, "is not deflated but holds " + number(p.bytes.size()) + " bytes, not " +
                    number(p.size + checksum));
    total += p.size;
    if (!box) {
      if (!p.filters.empty()) refuse(i, "is a run of the raw bytes: run pieces cannot be filtered");
      continue;
    }
    if (p.start.size() != rank || p.extent.size() != rank)
      refuse(i, "has a box of rank " + number(p.start.size()) + "/" + number(p.extent.size()) +
                    ", the tensor is of rank " + number(rank));
    Size elements = 1;
    for (size_t d = 0; d < rank; ++d) {
      if (p.extent[d] == 0) refuse(i, "has a zero extent along dimension " + number(d));
      if (p.start[d] >= t.shape[d])
        refuse(i, "starts at " + number(p.start[d]) + " of dimension " + number(d) + ", outside the shape");
      if (!(Size(p.start[d]) + p.extent[d]).ok()) refuse(i, "ends past 2^64");
      elements *= p.extent[d];
    }
    const Size bytes = elements * element;
    if (!bytes.ok() || bytes.value() != p.size)
      refuse(i, "says " + number(p.size) + " bytes, its box holds " +
                    (bytes.ok() ? number(bytes.value()) : std::string("more than 2^64")));
  }
  if (!total.ok()) refuse("its pieces pass 2^64 bytes");
  if (!box) {
    const auto expected = shape_bytes(t);
    if (expected && (!expected->ok() || expected->value() != total.value()))
      refuse("its run pieces hold " + number(total.value()) + " bytes, its shape needs " +
             (expected->ok() ? number(expected->value()) : std::string("more than 2^64")));
    return;
  }
  piece_grid(t, file, format);
}

}  // namespace modelfs
