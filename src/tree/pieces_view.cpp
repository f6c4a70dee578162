// SPDX-License-Identifier: Apache-2.0
#include "tree/pieces_view.hpp"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <unordered_map>

#include "io/checked_math.hpp"
#include "io/mapped_bytes.hpp"
#include "modelfs/error.hpp"
#include "tree/inflate_index.hpp"
#include "tree/npy.hpp"

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

using Segment = PieceSegment;
// Segments gathered at a time: a read of a tensor whose rows are a few
// bytes is done in steps, its memory bounded.
constexpr size_t kSegments = 1 << 14;
thread_local std::vector<Segment> t_segments;

// Decoded pieces, shared by every thread of the process (a sequential
// reader's next read mostly touches the pieces its last one did, a row of
// chunks; readers of one piece share its one copy). Their bytes, and those
// of decodes under way, are bounded by kServingDecodedBytes in all: a piece
// is evicted, least recent first, only once no reader holds it, and a
// piece that finds no room is streamed instead.
struct DecodedEntry {
  uint64_t view = 0;
  uint32_t piece = 0;
  std::shared_ptr<const std::vector<std::byte>> bytes;
};
// What an entry costs beside its bytes (its list and map nodes, the
// shared_ptr's block, the allocator's headers), charged with them, so that
// many tiny pieces stay within the bound too.
constexpr uint64_t kEntryBytes = 256;
struct DecodedPool {
  struct KeyHash {
    size_t operator()(const std::pair<uint64_t, uint32_t>& k) const noexcept {
      return std::hash<uint64_t>()(k.first * 0x9E3779B97F4A7C15ULL ^ k.second);
    }
  };
  std::mutex mutex;
  std::list<DecodedEntry> entries;  // most recent first
  std::unordered_map<std::pair<uint64_t, uint32_t>, std::list<DecodedEntry>::iterator, KeyHash> where;
  uint64_t charged = 0;  // bytes of the entries and of decodes under way

  std::shared_ptr<const std::vector<std::byte>> find(uint64_t view, uint32_t piece) {
    const std::lock_guard lock(mutex);
    const auto it = where.find({view, piece});
    if (it == where.end()) return nullptr;
    entries.splice(entries.begin(), entries, it->second);
    return it->second->bytes;
  }
  // Charges a decode of `n` bytes, evicting what no reader holds; false
  // when it does not fit.
  bool reserve(uint64_t n) {
    const std::lock_guard lock(mutex);
    const uint64_t need = n + kEntryBytes;
    for (auto it = entries.end(); charged + need > kServingDecodedBytes && it != entries.begin();) {
      --it;
      if (it->bytes.use_count() != 1) continue;  // a reader copies from it
      it = erase(it);
    }
    if (charged + need > kServingDecodedBytes) return false;
    charged += need;
    return true;
  }
  void release(uint64_t n) {
    const std::lock_guard lock(mutex);
    charged -= n + kEntryBytes;
  }
  std::shared_ptr<const std::vector<std::byte>> add(uint64_t view, uint32_t piece,
                                                    std::shared_ptr<const std::vector<std::byte>> bytes) {
    const std::lock_guard lock(mutex);
    if (const auto it = where.find({view, piece}); it != where.end()) {
      charged -= bytes->size() + kEntryBytes;  // another thread decoded it meanwhile
      return it->second->bytes;
    }
    entries.push_front(DecodedEntry{view, piece, bytes});
    where.emplace(std::pair(view, piece), entries.begin());
    return bytes;
  }
  void forget(uint64_t view) {
    const std::lock_guard lock(mutex);
    for (auto it = entries.begin(); it != entries.end();) it = it->view == view ? erase(it) : std::next(it);
  }
  std::list<DecodedEntry>::iterator erase(std::list<DecodedEntry>::iterator it) {
    charged -= it->bytes->size() + kEntryBytes;
    where.erase({it->view, it->piece});
    return entries.erase(it);
  }
};
// Never destroyed: FUSE threads may still read while the process exits.
DecodedPool& decoded_pool() {
  static DecodedPool* kept = new DecodedPool;
  return *kept;
}

// Scatters bytes [at, at + n) of plane `plane` of a piece's unfiltered
// stream to the segments (sorted by `from`) that want them. A shuffled
// piece's stream holds byte `plane` of every element, then the next byte:
// element i's byte b is at b * count + i. Unshuffled: one plane, the
// piece's bytes as they are.
class Scatter {
 public:
  Scatter(std::span<const Segment> segments, std::byte* out, uint64_t element, uint64_t count, uint64_t plane)
      : segments_(segments), out_(out), element_(element), count_(count), plane_(plane) {}

  // The elements (bytes, when unshuffled) of the plane segment k wants.
  std::pair<uint64_t, uint64_t> wanted(size_t k) const {
    const Segment& s = segments_[k];
    auto first = [&](uint64_t q) { return q > plane_ ? (q - plane_ + element_ - 1) / element_ : 0; };
    return {first(s.from), first(s.from + s.length)};
  }
  // The plane's positions some segment wants, [low, high) of the stream.
  std::pair<uint64_t, uint64_t> reach() const {
    uint64_t low = UINT64_MAX, high = 0;
    for (size_t k = 0; k < segments_.size(); ++k) {
      const auto [a, b] = wanted(k);
      if (a < b) {
        low = std::min(low, a);
        high = std::max(high, b);
      }
    }
    if (low >= high) return {0, 0};
    return {plane_ * count_ + low, plane_ * count_ + high};
  }
  void operator()(uint64_t at, const std::byte* data, uint64_t n) {
    const uint64_t low = at - plane_ * count_, high = low + n;
    while (next_ < segments_.size() && wanted(next_).second <= low) ++next_;
    for (size_t k = next_; k < segments_.size(); ++k) {
      const auto [a, b] = wanted(k);
      if (a >= high) break;
      const uint64_t from = std::max(a, low), to = std::min(b, high);
      if (from >= to) continue;
      // Where byte `plane` of element i goes: wraps below zero in unsigned
      // arithmetic and back for every element the segment wants.
      const uint64_t base = segments_[k].to + plane_ - segments_[k].from;
      if (element_ == 1) {
        std::memcpy(out_ + (base + from), data + (from - low), to - from);  // the index first: base wraps
      } else {
        for (uint64_t i = from; i < to; ++i) out_[base + i * element_] = data[i - low];
      }
    }
  }

 private:
  std::span<const Segment> segments_;
  std::byte* out_;
  uint64_t element_;  // 1 when unshuffled
  uint64_t count_;    // positions of a plane
  uint64_t plane_;
  size_t next_ = 0;  // segments before it want nothing from here on
};

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
    : id_(new_stream_owner()),
      tensor_(&tensor),
      checked_(std::make_unique<std::atomic<bool>[]>(tensor.pieces.size())),
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

PiecesView::~PiecesView() {
  forget_deflate_streams(id_);
  decoded_pool().forget(id_);
}

void PiecesView::stream(uint32_t index, std::span<const PieceSegment> segments, std::byte* out,
                        bool indexed) const {
  const Piece& p = tensor_->pieces[index];
  ByteSpan stored = p.bytes;
  std::span<const PieceFilter> filters = p.filters;
  if (checksum_bytes(filters) != 0) {
    // Checked over what it follows, once per view: no decode needs it whole.
    if (!checked_[index].load(std::memory_order_acquire)) {
      const std::span<const std::byte> bytes = stored.span();  // made present first
      bool holds = false;
      read_mapped([&] { holds = fletcher32_holds(bytes); });
      if (!holds) fault(index, "its Fletcher-32 checksum does not match its bytes");
      checked_[index].store(true, std::memory_order_release);
    }
    stored = stored.subspan(0, stored.size() - kFletcher32Bytes);
    filters = filters.first(filters.size() - 1);
  }
  const bool deflated = std::find(filters.begin(), filters.end(), PieceFilter::Deflate) != filters.end();
  const bool shuffled = std::find(filters.begin(), filters.end(), PieceFilter::Shuffle) != filters.end();
  // Written shuffle first, then deflate: inflated, then unshuffled. The
  // other order shuffles the compressed bytes, which no stream can read.
  if (deflated && shuffled && filters.front() == PieceFilter::Deflate)
    fault(index, "its filters shuffle the deflated bytes, which modelfs cannot read");
  if (!deflated && stored.size() != p.size) fault(index, "its stored bytes are not the size its box holds");
  const uint64_t planes = shuffled ? element_ : 1;
  for (uint64_t plane = 0; plane < planes; ++plane) {
    Scatter scatter(segments, out, planes, p.size / planes, plane);
    // Plain copies, not a structured binding: clang 14 cannot capture one.
    const uint64_t low = scatter.reach().first, high = scatter.reach().second;
    if (low == high) continue;
    if (!deflated) {
      const std::byte* from = stored.subspan(low, high - low).span().data();
      read_mapped([&] { scatter(low, from, high - low); });
      continue;
    }
    const DeflateStream deflate{id_, index, stored, p.size, true, indexed};
    try {
      inflate_range(deflate, low, high, std::ref(scatter));
    } catch (const DeflateError& e) {
      fault(index, e.what());
    }
  }
}

std::shared_ptr<const std::vector<std::byte>> PiecesView::decoded(uint32_t index) const {
  const uint64_t size = tensor_->pieces[index].size;
  if (size > kDecodedWhole) return nullptr;
  auto& pool = decoded_pool();
  if (auto kept = pool.find(id_, index)) {
    // Kept from an earlier read: its stored bytes must still be there (a
    // model file cut since fails the read, as an uncached one would).
    const ByteSpan& stored = tensor_->pieces[index].bytes;
    stored.subspan(stored.size() - 1, 1).span();
    return kept;
  }
  if (!pool.reserve(size)) return nullptr;
  std::shared_ptr<std::vector<std::byte>> bytes;
  try {
    bytes = std::make_shared<std::vector<std::byte>>(size);
    const PieceSegment whole{index, 0, 0, size};
    stream(index, {&whole, 1}, bytes->data(), false);
  } catch (...) {
    pool.release(size);
    throw;
  }
  return pool.add(id_, index, std::move(bytes));
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
      } else if (const auto whole = decoded(index)) {
        const std::byte* from = whole->data();
        for (size_t k = 0; k < count; ++k) std::memcpy(out + s[k].to, from + s[k].from, s[k].length);
      } else {
        // Too large to keep whole, or no room: what the segments want, read
        // from the piece's stream.
        std::sort(segments.begin() + static_cast<std::ptrdiff_t>(first),
                  segments.begin() + static_cast<std::ptrdiff_t>(last),
                  [](const Segment& a, const Segment& b) { return a.from < b.from; });
        stream(index, {s, count}, out, true);
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
