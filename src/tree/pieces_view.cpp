// SPDX-License-Identifier: Apache-2.0
#include "pieces_view.hpp"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <numeric>
#include <stdexcept>

#include "modelfs/checked_math.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_bytes.hpp"
#include "npy.hpp"

namespace modelfs {
namespace {

std::atomic<uint64_t> g_next_id{1};

// Zeros: a run piece never written. Its part's size says how many.
class ZeroBytes final : public ComputedBytes {
 public:
  void fill(uint64_t, std::span<std::byte> out) const override { std::memset(out.data(), 0, out.size()); }
};
const ZeroBytes kZeros;

// A view's bytes of the thread's last read, from prepare() to fill().
struct ReadOut {
  uint64_t view = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<std::byte> bytes;

  // Room for [offset, offset + length) of `view`, not yet filled.
  std::byte* start(uint64_t at, uint64_t n) {
    view = 0;
    if (bytes.size() < n) bytes.resize(n);
    offset = at;
    length = n;
    return bytes.data();
  }
  void copy_out(uint64_t id, uint64_t at, std::span<std::byte> out) const {
    if (out.empty()) return;
    if (view != id || at < offset || at - offset > length || out.size() > length - (at - offset))
      throw std::logic_error("a computed part filled without prepare() first");
    std::memcpy(out.data(), bytes.data() + (at - offset), out.size());
  }
};
thread_local ReadOut t_gathered;
thread_local ReadOut t_converted;

// Where one read's bytes come from: `length` bytes at `from` of a piece's
// decoded bytes, to `to` of the read's output.
struct Segment {
  uint32_t piece;
  uint64_t from;
  uint64_t to;
  uint64_t length;
};
// Segments gathered at a time: a read of a tensor whose rows are a few
// bytes is done in steps, its memory bounded.
constexpr size_t kSegments = 1 << 16;
thread_local std::vector<Segment> t_segments;

// Decoded pieces kept per thread: a sequential reader's next read mostly
// touches the pieces its last one did (a row of chunks). Bounded in bytes
// and count; the piece a read is copying is never evicted under it.
constexpr uint64_t kCacheBytes = uint64_t{32} << 20;
constexpr size_t kCacheSlots = 256;
struct Decoded {
  uint64_t view = 0;
  uint32_t piece = 0;
  std::vector<std::byte> bytes;
};
struct DecodedCache {
  std::list<Decoded> slots;  // most recent first
  uint64_t bytes = 0;
};
thread_local DecodedCache t_cache;
thread_local std::vector<std::byte> t_filter_scratch;

}  // namespace

std::vector<Part> pieces_parts(const Tensor& tensor, const std::string& file, const std::string& format,
                               std::vector<std::unique_ptr<const ComputedBytes>>& views) {
  std::vector<Part> parts;
  const auto pieces = tensor.pieces;
  auto lay_out = [&] {
    uint64_t at = 0;
    for (Part& p : parts) {
      p.offset = at;
      at += p.size;
    }
    return std::move(parts);
  };
  if (!box_pieces(tensor)) {
    parts.reserve(pieces.size());
    for (const auto& p : pieces)
      parts.push_back(p.zeros ? Part{nullptr, &kZeros, p.size} : Part::held(p.bytes));
    return lay_out();
  }
  PieceGrid grid = piece_grid(tensor, file, format);
  const size_t rank = tensor.shape.size();
  const bool whole_rows = std::all_of(pieces.begin(), pieces.end(), [&](const Piece& p) {
    if (p.zeros || !p.filters.empty() || p.start[0] + p.extent[0] > tensor.shape[0]) return false;
    for (size_t d = 1; d < rank; ++d)
      if (p.start[d] != 0 || p.extent[d] != tensor.shape[d]) return false;
    return true;
  });
  if (whole_rows) {
    // The grid has one cell a piece along dimension 0 only: cell order is
    // the order of start[0].
    parts.reserve(pieces.size());
    for (const uint32_t index : grid.piece) parts.push_back(Part::held(pieces[index].bytes));
    return lay_out();
  }
  auto view = std::make_unique<PiecesView>(tensor, std::move(grid), file, format);
  parts.push_back(Part{nullptr, view.get(), view->size()});
  views.push_back(std::move(view));
  return lay_out();
}

PiecesView::PiecesView(const Tensor& tensor, PieceGrid grid, std::string file, std::string format)
    : id_(g_next_id.fetch_add(1)),
      tensor_(&tensor),
      grid_(std::move(grid)),
      element_(dtype_bits(tensor.dtype) / 8),
      size_(tensor.nbytes()),
      file_(std::move(file)),
      format_(std::move(format)) {}

void PiecesView::fault(uint32_t index, const std::string& reason) const {
  throw ModelError(
      file_, format_, std::nullopt,
      "tensor \"" + std::string(tensor_->name) + "\", piece " + std::to_string(index) + ": " + reason);
}

void PiecesView::decode(uint32_t index, std::vector<std::byte>& out) const {
  const Piece& p = tensor_->pieces[index];
  if (p.filters.empty()) throw std::logic_error("an unfiltered piece decoded");
  out.resize(p.size);
  // Made present (a remote model's blocks) before anything reads it.
  const std::span<const std::byte> stored = p.bytes.span();
  const std::byte* in = stored.data();
  uint64_t in_size = stored.size();
  // Undone last first; the last undone lands in `out`.
  for (size_t k = p.filters.size(); k-- > 0;) {
    if (p.filters[k] == PieceFilter::Fletcher32) {
      // Checked, then cut off: what it follows is the next filter's input.
      bool holds = false;
      read_mapped([&] { holds = fletcher32_holds({in, in_size}); });
      if (!holds) fault(index, "its Fletcher-32 checksum does not match its bytes");
      in_size -= kFletcher32Bytes;
      if (k > 0) continue;
      if (in_size != p.size) fault(index, "its checksummed bytes are not the size its box holds");
      read_mapped([&] { std::memcpy(out.data(), in, in_size); });
      return;
    }
    std::vector<std::byte>& to = k == 0 ? out : t_filter_scratch;
    if (to.size() < p.size) to.resize(p.size);
    if (p.filters[k] == PieceFilter::Deflate) {
      z_stream zs{};
      if (inflateInit(&zs) != Z_OK) fault(index, "zlib cannot start inflating (out of memory)");
      zs.next_out = reinterpret_cast<Bytef*>(to.data());
      zs.avail_out = static_cast<uInt>(p.size);  // at most kMaxDecodedPiece
      uint64_t fed = 0;
      int rc = Z_OK;
      std::string why;
      try {
        for (;;) {
          if (zs.avail_in == 0 && fed < in_size) {
            const uint64_t n = std::min<uint64_t>(in_size - fed, uint64_t{1} << 30);
            zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in + fed));
            zs.avail_in = static_cast<uInt>(n);
            fed += n;
          }
          read_mapped([&] { rc = inflate(&zs, Z_NO_FLUSH); });
          if (rc == Z_STREAM_END || rc == Z_OK) {
            if (rc == Z_STREAM_END) break;
            continue;
          }
          if (rc == Z_BUF_ERROR && zs.avail_out == 0) {
            why =
                "its zlib stream decodes to more than the " + std::to_string(p.size) + " bytes its box holds";
          } else if (rc == Z_BUF_ERROR && zs.avail_in == 0 && fed == in_size) {
            why = "its zlib stream ends after " + std::to_string(zs.total_out) + " of the " +
                  std::to_string(p.size) + " bytes its box holds";
          } else {
            why = std::string("corrupt zlib stream: ") +
                  (zs.msg != nullptr ? zs.msg : "error " + std::to_string(rc));
          }
          break;
        }
      } catch (const ModelError&) {
        inflateEnd(&zs);
        throw;
      }
      const uint64_t produced = zs.total_out;
      inflateEnd(&zs);
      if (!why.empty()) fault(index, why);
      if (produced != p.size)
        fault(index, "its zlib stream decodes to " + std::to_string(produced) + " bytes, its box holds " +
                         std::to_string(p.size));
    } else {
      // HDF5's shuffle: byte b of every element first, then byte b + 1.
      if (in_size != p.size) fault(index, "its shuffled bytes are not the size its box holds");
      const uint64_t n = p.size / element_, size = element_;
      std::byte* dest = to.data();
      read_mapped([&] {
        for (uint64_t b = 0; b < size; ++b)
          for (uint64_t i = 0; i < n; ++i) dest[i * size + b] = in[b * n + i];
      });
    }
    in = to.data();
    in_size = p.size;
  }
}

const std::byte* PiecesView::decoded(uint32_t index) const {
  auto& cache = t_cache;
  for (auto it = cache.slots.begin(); it != cache.slots.end(); ++it)
    if (it->view == id_ && it->piece == index) {
      cache.slots.splice(cache.slots.begin(), cache.slots, it);
      return cache.slots.front().bytes.data();
    }
  const uint64_t need = tensor_->pieces[index].size;
  while (!cache.slots.empty() && (cache.slots.size() >= kCacheSlots || cache.bytes + need > kCacheBytes)) {
    cache.bytes -= cache.slots.back().bytes.size();
    cache.slots.pop_back();
  }
  Decoded slot;
  slot.view = id_;
  slot.piece = index;
  decode(index, slot.bytes);
  cache.bytes += slot.bytes.size();
  cache.slots.push_front(std::move(slot));
  return cache.slots.front().bytes.data();
}

void PiecesView::prepare(uint64_t offset, uint64_t length) const {
  if (length == 0) {
    t_gathered.view = 0;
    return;
  }
  if (offset > size_ || length > size_ - offset) throw std::logic_error("a read outside a gathered part");
  std::byte* const out = t_gathered.start(offset, length);
  const auto shape = tensor_->shape;
  const auto pieces = tensor_->pieces;
  const size_t rank = shape.size();
  const uint64_t element = element_;
  const uint64_t row_bytes = shape[rank - 1] * element;
  const auto& inner_cuts = grid_.cuts[rank - 1];
  auto& segments = t_segments;
  segments.clear();  // a read that failed may have left its own
  segments.reserve(kSegments + 1);

  // Copies the gathered segments, piece by piece (each decoded once).
  auto copy_segments = [&] {
    std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) {
      return std::pair(a.piece, a.to) < std::pair(b.piece, b.to);
    });
    for (size_t first = 0; first < segments.size();) {
      const uint32_t index = segments[first].piece;
      size_t last = first;
      while (last < segments.size() && segments[last].piece == index) ++last;
      const Piece& p = pieces[index];
      const Segment* s = segments.data() + first;
      const size_t count = last - first;
      if (p.zeros) {
        for (size_t k = 0; k < count; ++k) std::memset(out + s[k].to, 0, s[k].length);
      } else if (p.filters.empty()) {
        // What the segments reach made present (a remote model's blocks)
        // before the guard reads it, not the whole piece.
        uint64_t low = s[0].from, high = 0;
        for (size_t k = 0; k < count; ++k) {
          low = std::min(low, s[k].from);
          high = std::max(high, s[k].from + s[k].length);
        }
        p.bytes.subspan(low, high - low).span();
        const std::byte* from = p.bytes.data();
        read_mapped([&] {
          for (size_t k = 0; k < count; ++k) std::memcpy(out + s[k].to, from + s[k].from, s[k].length);
        });
      } else {
        const std::byte* from = decoded(index);
        for (size_t k = 0; k < count; ++k) std::memcpy(out + s[k].to, from + s[k].from, s[k].length);
      }
      first = last;
    }
    segments.clear();
  };

  // Row by row (a row: every index but the innermost fixed), each row's
  // inner cuts in turn.
  std::vector<uint64_t> index(rank, 0);
  uint64_t at = offset;
  const uint64_t end = offset + length;
  while (at < end) {
    const uint64_t row = at / row_bytes;
    uint64_t within = at % row_bytes;
    // The row's outer indices and their cells.
    uint64_t rest = row;
    for (size_t d = rank - 1; d-- > 0;) {
      index[d] = rest % shape[d];
      rest /= shape[d];
    }
    uint64_t outer_cell = 0;
    for (size_t d = 0; d + 1 < rank; ++d) {
      const auto& cuts = grid_.cuts[d];
      const auto c =
          static_cast<uint64_t>(std::upper_bound(cuts.begin(), cuts.end(), index[d]) - cuts.begin() - 1);
      outer_cell = outer_cell * cuts.size() + c;
    }
    const uint64_t row_end = std::min(row_bytes, within + (end - at));
    const uint64_t row_start = row * row_bytes;
    auto c = static_cast<size_t>(std::upper_bound(inner_cuts.begin(), inner_cuts.end(), within / element) -
                                 inner_cuts.begin() - 1);
    while (within < row_end) {
      const uint64_t cut_end = (c + 1 < inner_cuts.size() ? inner_cuts[c + 1] : shape[rank - 1]) * element;
      const uint64_t n = std::min(cut_end, row_end) - within;
      const uint32_t piece = grid_.piece[outer_cell * inner_cuts.size() + c];
      const Piece& p = pieces[piece];
      // The element's place in the piece's own C-order array of `extent`.
      uint64_t local = 0;
      for (size_t d = 0; d + 1 < rank; ++d) local = local * p.extent[d] + (index[d] - p.start[d]);
      local = local * p.extent[rank - 1] + (within / element - p.start[rank - 1]);
      const uint64_t from = local * element + within % element;
      const uint64_t to = row_start + within - offset;
      if (!segments.empty() && segments.back().piece == piece &&
          segments.back().from + segments.back().length == from &&
          segments.back().to + segments.back().length == to) {
        segments.back().length += n;
      } else {
        if (segments.size() >= kSegments) copy_segments();
        segments.push_back(Segment{piece, from, to, n});
      }
      within += n;
      ++c;
    }
    at = row_start + row_end;
  }
  copy_segments();
  t_gathered.view = id_;
}

void PiecesView::fill(uint64_t offset, std::span<std::byte> out) const {
  t_gathered.copy_out(id_, offset, out);
}

std::unique_ptr<ConvertedView> ConvertedView::make(std::span<const Part> stored, uint64_t numel,
                                                   std::shared_ptr<const ElementConversion> conversion) {
  if (!conversion) return nullptr;
  const uint64_t stored_size = stored.empty() ? 0 : stored.back().offset + stored.back().size;
  const Size reach = (Size(numel) * conversion->stored_bits() + 7) / 8;
  const Size size = Size(numel) * conversion->value_size();
  if (!reach.ok() || !size.ok() || reach.value() > stored_size) return nullptr;
  if (!kViewBound.allows(size.value(), stored_size)) return nullptr;
  return std::unique_ptr<ConvertedView>(
      new ConvertedView(stored, numel, reach.value(), std::move(conversion)));
}

ConvertedView::ConvertedView(std::span<const Part> stored, uint64_t numel, uint64_t stored_size,
                             std::shared_ptr<const ElementConversion> conversion)
    : id_(g_next_id.fetch_add(1)),
      stored_(stored),
      numel_(numel),
      stored_size_(stored_size),
      size_(numel * conversion->value_size()),
      conversion_(std::move(conversion)) {}

namespace {
// Elements of `bits` bits that start and end on a byte: 1 for whole bytes,
// 2 for 4 bits, 4 for 2 or 6 bits.
uint64_t byte_group(uint32_t bits) { return bits % 8 == 0 ? 1 : 8 / std::gcd(8u, bits); }
}  // namespace

void ConvertedView::prepare(uint64_t offset, uint64_t length) const {
  t_converted.view = 0;
  if (length == 0) return;
  if (offset > size_ || length > size_ - offset) throw std::logic_error("a read outside a converted part");
  const uint32_t value_size = conversion_->value_size();
  const uint32_t bits = conversion_->stored_bits();
  const uint64_t first = offset / value_size;
  const uint64_t last = std::min(numel_, (offset + length + value_size - 1) / value_size);
  const uint64_t group = byte_group(bits);
  const uint64_t aligned = first / group * group;
  const uint64_t from = aligned * bits / 8;
  const uint64_t to = std::min(stored_size_, (last * bits + 7) / 8);
  std::byte* buffer = t_converted.start(aligned, to - from);
  copy_parts(stored_, from, std::span(buffer, to - from));
  conversion_->prepare();
  t_converted.view = id_;
}

void ConvertedView::fill(uint64_t offset, std::span<std::byte> out) const {
  if (out.empty()) return;
  if (t_converted.view != id_) throw std::logic_error("a converted part filled without prepare() first");
  // t_converted.offset is the first element its bytes hold.
  const uint64_t base = t_converted.offset;
  const std::byte* stored = t_converted.bytes.data();
  auto values = [&](uint64_t at, size_t count, std::byte* into) {
    if (at < base) throw std::logic_error("a converted part filled outside what prepare() read");
    conversion_->convert(stored, at - base, count, at, into);
  };
  // What prepare() read is all in memory: every whole value in one call.
  fill_values(offset, out, conversion_->value_size(), SIZE_MAX, values);
}

}  // namespace modelfs
