// SPDX-License-Identifier: Apache-2.0
#include "formats/hdf5.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_set>

#include "formats/hdf5_sandbox.hpp"
#include "formats/json_limits.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "io/pieces.hpp"
#include "modelfs/error.hpp"

namespace modelfs::hdf5 {
namespace {

constexpr std::string_view kFormat = "hdf5";
constexpr std::string_view kKerasFormat = "keras";
constexpr std::string_view kSignature = "\x89HDF\r\n\x1a\n";
constexpr std::string_view kWeightsMember = "model.weights.h5";
constexpr uint64_t kMaxKerasDocument = uint64_t{64} << 20;
constexpr uint64_t kMaxDeflateRatio = 1032;  // deflate's most: 258 bytes per 2 bits, and a bit
// Keras' "shape bomb" rule (docs/formats.md §10): a dataset declaring
// more than 4 GiB and more than 1000 times what it stores is left out.
constexpr uint64_t kBombBytes = uint64_t{4} << 30;
constexpr uint64_t kBombRatio = 1000;
constexpr uint32_t kFilterDeflate = 1, kFilterShuffle = 2, kFilterFletcher32 = 3;
// libhdf5's own margin beyond the model's budget: 24 MiB, so that the
// child, which also holds the pages of the program it was forked from,
// stays within the budget and 32 MiB, as every modelfs process does.
constexpr uint64_t kLibraryBytes = uint64_t{24} << 20;

struct Dataset {
  std::string path;
  uint8_t cls = 0;
  uint64_t size = 0;
  uint8_t order = 0;
  uint8_t sign = 0;
  uint64_t fields[5] = {};
  uint64_t bias = 0;
  uint64_t precision = 0, bit_offset = 0;
  uint8_t lsb_pad = 0, msb_pad = 0, norm = 0, inner_pad = 0;
  bool is_bool = false;
  std::string tag;
  std::string dtype_attr;
  std::vector<uint64_t> dims;
  uint8_t layout = 0;
  bool external = false;
  uint64_t offset = kUndefined, storage = 0;  // contiguous
  std::vector<uint64_t> chunk;                // chunked
  std::vector<uint32_t> filters;
  bool fill_zero = false;
  struct Chunk {
    std::vector<uint64_t> coords;
    uint32_t mask = 0;
    uint64_t address = 0, size = 0;
  };
  uint64_t chunk_count = 0;
  std::vector<Chunk> chunks;
  std::string compact;  // compact
  bool compact_too_large = false;
};

class Records {
 public:
  Records(std::string_view stream, const Source& source)
      : reader_(std::as_bytes(std::span(stream.data(), stream.size())), source.display, "hdf5 records") {}
  bool done() const { return reader_.remaining() == 0; }
  uint8_t u8() { return reader_.u8("a record field"); }
  uint32_t u32() { return reader_.u32("a record field"); }
  uint64_t u64() { return reader_.u64("a record field"); }
  std::string str(uint64_t limit) {
    const uint32_t n = u32();
    if (n > limit)
      reader_.fail("a record string of " + std::to_string(n) + " bytes, over " + std::to_string(limit));
    return std::string(reader_.take_string(n, "a record string"));
  }
  std::vector<uint64_t> dims(size_t rank) {
    std::vector<uint64_t> out(rank);
    for (auto& d : out) d = u64();
    return out;
  }
  [[noreturn]] void fail(const std::string& why) const { reader_.fail(why); }

  Dataset dataset() {
    Dataset d;
    d.path = str(kMaxPathBytes);
    d.cls = u8();
    d.size = u64();
    d.order = u8();
    d.sign = u8();
    for (auto& f : d.fields) f = u64();
    d.bias = u64();
    d.precision = u64();
    d.bit_offset = u64();
    d.lsb_pad = u8();
    d.msb_pad = u8();
    d.norm = u8();
    d.inner_pad = u8();
    d.is_bool = u8() != 0;
    d.tag = str(256);
    d.dtype_attr = str(64);
    const uint8_t rank = u8();
    if (rank > kMaxRank) fail("a dataset of rank " + std::to_string(rank));
    d.dims = dims(rank);
    d.layout = u8();
    d.external = u8() != 0;
    if (d.layout == kLayoutContiguous && !d.external) {
      d.offset = u64();
      d.storage = u64();
    } else if (d.layout == kLayoutChunked) {
      d.chunk = dims(rank);
      const uint8_t n = u8();
      if (n > 32) fail("a pipeline of " + std::to_string(n) + " filters");
      for (uint8_t i = 0; i < n; ++i) d.filters.push_back(u32());
      d.fill_zero = u8() != 0;
      d.chunk_count = u64();
      if (d.chunk_count != kUndefined && d.chunk_count != kTooManyLookups) {
        if (d.chunk_count > kMaxChunkCells) fail("more than " + std::to_string(kMaxChunkCells) + " chunks");
        // Each record takes at least 20 bytes: a count the stream cannot hold is refused before anything is
        // allocated for it.
        if (d.chunk_count > reader_.remaining() / 20) fail("a chunk count past the records' end");
        d.chunks.resize(d.chunk_count);
        for (auto& c : d.chunks) {
          check_budget();
          c.coords = dims(rank);
          c.mask = u32();
          c.address = u64();
          c.size = u64();
        }
      }
    } else if (d.layout == kLayoutCompact) {
      const uint64_t n = u64();
      if (n == kUndefined) {
        d.compact_too_large = true;
      } else {
        if (n > kMaxCompactBytes) fail("a compact dataset of " + std::to_string(n) + " bytes");
        d.compact = std::string(reader_.take_string(n, "a compact dataset's bytes"));
      }
    } else if (d.layout != kLayoutVirtual && d.layout != kLayoutOther && !(d.layout == kLayoutContiguous)) {
      fail("an unknown layout " + std::to_string(d.layout));
    }
    return d;
  }

 private:
  ByteReader reader_;
};

// The tensor dtype of a dataset's HDF5 type, or why it has none.
struct TypeOf {
  std::optional<DType> dtype;
  std::string refusal;
  bool big_endian = false;  // served byte-swapped where not chunked
};

// H5T_pad_t ZERO, H5T_norm_t IMPLIED; H5T_sign_t NONE and 2 (two's complement).
constexpr uint8_t kPadZero = 0, kNormImplied = 0, kSignNone = 0, kSignTwos = 1;

// Why the bits of an integer, enum or float type are not a whole word of
// its size with nothing around them (libhdf5 would shift, mask or extend
// them as it read), or "".
std::string odd_bits(const Dataset& d) {
  if (d.precision != d.size * 8 || d.bit_offset != 0)
    return std::to_string(d.precision) + "-bit values at bit " +
           (d.bit_offset == kUndefined ? std::string("?") : std::to_string(d.bit_offset)) + " of " +
           std::to_string(d.size) + "-byte words";
  if (d.lsb_pad != kPadZero || d.msb_pad != kPadZero) return "padding bits that are not zeros";
  return {};
}

TypeOf type_of(const Dataset& d) {
  // H5T_class_t: INTEGER 0, FLOAT 1, TIME 2, STRING 3, BITFIELD 4, OPAQUE 5, COMPOUND 6, REFERENCE 7,
  // ENUM 8, VLEN 9, ARRAY 10; H5T_order_t LE 0, BE 1.
  const bool big = d.order == 1 && d.size > 1;
  if (d.size > 1 && d.order > 1 && (d.cls == 0 || d.cls == 1))
    return {std::nullopt, "a byte order other than little- or big-endian (VAX, mixed or none)"};
  // Served in place only when the stored bits are exactly the dtype's.
  if (d.cls == 0 || d.cls == 1 || d.cls == 8)
    if (const std::string odd = odd_bits(d); !odd.empty())
      return {std::nullopt,
              (d.cls == 1 ? "floats of " : "integers of ") + odd + " (modelfs serves whole words only)"};
  switch (d.cls) {
    case 0: {
      if (d.sign != kSignNone && d.sign != kSignTwos)
        return {std::nullopt, "integers of an unknown sign scheme"};
      static constexpr DType kSigned[] = {DType::Int8, DType::Int16, DType::Int32, DType::Int64};
      static constexpr DType kUnsigned[] = {DType::UInt8, DType::UInt16, DType::UInt32, DType::UInt64};
      for (size_t i = 0; i < 4; ++i)
        if (d.size == uint64_t{1} << i) return {d.sign == 1 ? kSigned[i] : kUnsigned[i], {}, big};
      return {std::nullopt, std::to_string(d.size) + "-byte integers"};
    }
    case 1: {
      struct Ieee {
        uint64_t size, fields[5], bias;
        DType dtype;
      };
      static constexpr Ieee kFloats[] = {{2, {15, 10, 5, 0, 10}, 15, DType::Float16},
                                         {4, {31, 23, 8, 0, 23}, 127, DType::Float32},
                                         {8, {63, 52, 11, 0, 52}, 1023, DType::Float64}};
      for (const auto& f : kFloats)
        if (d.size == f.size && std::equal(d.fields, d.fields + 5, f.fields) && d.bias == f.bias) {
          if (d.norm != kNormImplied)
            return {std::nullopt, "floats whose mantissa has no implied leading bit (not IEEE)"};
          if (d.inner_pad != kPadZero) return {std::nullopt, "floats whose internal padding is not zeros"};
          return {f.dtype, {}, big};
        }
      return {std::nullopt, "a floating-point layout that is not IEEE float16, float32 or float64"};
    }
    case 8:
      if (d.is_bool) return {DType::Bool, {}};
      return {std::nullopt, "an enumeration (other than h5py's bool)"};
    case 5:
      // Keras marks bfloat16 variables so (docs/formats.md §10, types).
      if (d.size == 2 && d.tag.empty() && d.dtype_attr == "bfloat16") return {DType::BFloat16, {}};
      return {std::nullopt, "opaque elements with no Keras dtype mark"};
    case 3:
      return {std::nullopt, "strings, not a tensor type"};
    case 6:
      return {std::nullopt, "compound elements, not a tensor type"};
    case 7:
      return {std::nullopt, "object references, not a tensor type"};
    case 9:
      return {std::nullopt, "variable-length elements, not a tensor type"};
    case 10:
      return {std::nullopt, "array elements, not a tensor type"};
    default:
      return {std::nullopt, "an HDF5 type class modelfs does not serve"};
  }
}

std::string filter_name(uint32_t id) {
  switch (id) {
    case 1:
      return "deflate";
    case 2:
      return "shuffle";
    case 3:
      return "fletcher32";
    case 4:
      return "szip";
    case 5:
      return "nbit";
    case 6:
      return "scaleoffset";
    case 32000:
      return "lzf";
    default:
      return "filter " + std::to_string(id);
  }
}

class Builder {
 public:
  Builder(Catalog& catalog, const Source& source) : catalog_(catalog), source_(source) {}

  void run(std::string_view stream) {
    Records records(stream, source_);
    while (!records.done()) {
      check_budget();
      const uint8_t kind = records.u8();
      if (kind == kRecordBase) {
        if (based_ || !paths_.empty()) records.fail("a base address after the first dataset or twice");
        base_ = records.u64();
        if (base_ > source_.length) records.fail("a base address past the end of the file");
        based_ = true;
      } else if (kind == kRecordAttribute) {
        const std::string name = records.str(64);
        const std::string value = records.str(kMaxAttributeBytes);
        attribute(name, value);
      } else if (kind == kRecordSkipped) {
        const std::string path = records.str(kMaxPathBytes);
        const std::string reason = records.str(256);
        leave_out(path, reason);
      } else if (kind == kRecordDataset) {
        dataset(records, records.dataset());
      } else {
        records.fail("an unknown record kind " + std::to_string(kind));
      }
    }
    if (!left_out_.empty()) catalog_.metadata["left_out"] = std::move(left_out_);
  }

 private:
  [[noreturn]] void fail(const Dataset& d, const std::string& why) const {
    throw ModelError(source_.display, catalog_.format, std::nullopt, "dataset \"" + d.path + "\": " + why);
  }
  void leave_out(const std::string& path, const std::string& reason) {
    left_out_.push_back({{"name", path}, {"reason", reason}});
  }

  void attribute(const std::string& name, const std::string& value) {
    static constexpr std::string_view kJson[] = {"model_config", "training_config"};
    static constexpr std::string_view kText[] = {"keras_version", "backend"};
    if (std::find(std::begin(kJson), std::end(kJson), name) != std::end(kJson)) {
      catalog_.metadata[name] = parse_json_limited(value, source_.display, catalog_.format, 0, 64);
    } else if (std::find(std::begin(kText), std::end(kText), name) != std::end(kText)) {
      catalog_.metadata[name] = value;
    }
  }

  void dataset(const Records& records, Dataset d) {
    if (d.path.empty() || d.path.find('\0') != std::string::npos)
      records.fail("a dataset path that is empty or holds a NUL");
    if (!paths_.insert(d.path).second) fail(d, "listed twice");
    if (d.external) return leave_out(d.path, "external raw storage (its data is in another file)");
    if (d.layout == kLayoutVirtual)
      return leave_out(d.path, "a virtual dataset (its data is in other datasets)");
    if (d.layout == kLayoutOther) return leave_out(d.path, "a storage layout modelfs does not serve");
    const TypeOf type = type_of(d);
    if (!type.dtype) return leave_out(d.path, type.refusal);
    const uint64_t element = dtype_bits(*type.dtype) / 8;
    if (d.size != element) fail(d, "a type of " + std::to_string(d.size) + " bytes");
    const auto numel = checked_numel(d.dims);
    const auto nbytes = numel ? checked_mul(*numel, element) : std::nullopt;
    if (!nbytes) fail(d, "the size in bytes of the shape passes 2^64");
    const auto strides = contiguous_strides(d.dims);
    if (!strides) fail(d, "the strides of the shape pass 2^63");

    TensorSpec t;
    t.name = d.path;
    t.dtype = *type.dtype;
    t.shape = d.dims;
    t.strides = *strides;
    t.source = {source_.name, std::nullopt};
    if (d.layout == kLayoutContiguous) {
      if (*nbytes == 0) {
        t.bytes = ByteSpan::owned({});
      } else if (d.offset == kUndefined) {
        return leave_out(d.path, "never written (no storage allocated)");
      } else {
        if (d.storage != *nbytes)
          fail(d, "its storage is " + std::to_string(d.storage) + " bytes but shape and type need " +
                      std::to_string(*nbytes));
        if (!inside(d.offset, *nbytes))
          fail(d, "its data at " + std::to_string(d.offset) + " runs past the end of the file");
        t.bytes = ByteSpan::mapped(source_.file, in_mapping(d.offset), *nbytes);
        t.source.offset = in_mapping(d.offset);
      }
      t.extras["hdf5_layout"] = "contiguous";
    } else if (d.layout == kLayoutCompact) {
      if (d.compact_too_large)
        fail(d, "a compact dataset over " + std::to_string(kMaxCompactBytes) + " bytes");
      if (d.compact.size() != *nbytes)
        fail(d, "its compact data is " + std::to_string(d.compact.size()) +
                    " bytes but shape and type need " + std::to_string(*nbytes));
      t.bytes = ByteSpan::owned(std::move(d.compact));
      t.extras["hdf5_layout"] = "compact";
    } else {
      if (type.big_endian)
        return leave_out(d.path,
                         "big-endian elements in chunks (modelfs swaps the bytes of contiguous and "
                         "compact datasets only)");
      if (!chunked(d, t, element, *nbytes)) return;
    }
    if (type.big_endian && *nbytes > 0) serve_byte_swapped(t);
    catalog_.add(t);
  }

  // The chunks as box pieces; false when the dataset is left out.
  bool chunked(const Dataset& d, TensorSpec& t, uint64_t element, uint64_t nbytes) {
    std::vector<PieceFilter> pipeline;
    nlohmann::json names = nlohmann::json::array();
    for (const uint32_t id : d.filters) {
      names.push_back(filter_name(id));
      if (id == kFilterDeflate) {
        pipeline.push_back(PieceFilter::Deflate);
      } else if (id == kFilterShuffle) {
        pipeline.push_back(PieceFilter::Shuffle);
      } else if (id == kFilterFletcher32 && names.size() == d.filters.size()) {
        pipeline.push_back(PieceFilter::Fletcher32);  // checked and cut off first
      } else {
        const std::string why =
            id == kFilterFletcher32
                ? "the fletcher32 checksum filter before another filter, an order modelfs "
                  "does not undo"
                : "the " + filter_name(id) + " filter, which modelfs does not decode";
        leave_out(d.path, "chunks stored through " + why);
        return false;
      }
    }
    Checked<uint64_t> chunk_elements = 1;
    Checked<uint64_t> grid = 1;
    for (size_t i = 0; i < d.dims.size(); ++i) {
      if (d.chunk[i] == 0) fail(d, "a chunk dimension of 0");
      chunk_elements *= d.chunk[i];
      grid *= d.dims[i] / d.chunk[i] + (d.dims[i] % d.chunk[i] != 0);
    }
    const auto chunk_bytes = (chunk_elements * element).get();
    // HDF5 stores a chunk's size in 32 bits.
    if (!chunk_bytes || *chunk_bytes > UINT32_MAX) fail(d, "chunks of more than 4 GiB");
    if (d.chunk_count == kTooManyLookups) {
      leave_out(d.path,
                "its chunks would take libhdf5 more than " + std::to_string(kMaxChunkLookupSteps) +
                    " steps to find, with the datasets before it (libhdf5 1.10 walks a dataset's chunk "
                    "index from its start for each chunk)");
      return false;
    }
    if (d.chunk_count == kUndefined || !grid.get() || *grid.get() > kMaxChunkCells) {
      leave_out(d.path, "more than " + std::to_string(kMaxChunkCells) + " chunks");
      return false;
    }
    const uint64_t cells = *grid.get();
    std::vector<int64_t> cell_strides(d.dims.size(), 1);
    for (size_t i = d.dims.size(); i-- > 1;)
      cell_strides[i - 1] =
          cell_strides[i] * static_cast<int64_t>(d.dims[i] / d.chunk[i] + (d.dims[i] % d.chunk[i] != 0));
    // Each cell of the chunk grid once, in C order: its stored chunk, or zeros.
    constexpr uint32_t kNone = UINT32_MAX;
    std::vector<uint32_t> chunk_at(nbytes == 0 ? 0 : cells, kNone);
    uint64_t stored = 0;
    for (size_t index = 0; index < d.chunks.size(); ++index) {
      check_budget();
      const auto& c = d.chunks[index];
      uint64_t cell = 0;
      for (size_t i = 0; i < d.dims.size(); ++i) {
        if (c.coords[i] >= d.dims[i] || c.coords[i] % d.chunk[i] != 0)
          fail(d, "a chunk at coordinates off the chunk grid or outside the shape");
        cell += c.coords[i] / d.chunk[i] * static_cast<uint64_t>(cell_strides[i]);
      }
      if (chunk_at[cell] != kNone) fail(d, "two chunks at the same coordinates");
      chunk_at[cell] = static_cast<uint32_t>(index);
      if (!inside(c.address, c.size) || c.size == 0)
        fail(d, "a chunk at " + std::to_string(c.address) + " of " + std::to_string(c.size) +
                    " bytes runs past the end of the file");
      if (d.filters.size() < 32 && (c.mask >> d.filters.size()) != 0)
        fail(d, "a chunk's filter mask names no filter");
      stored += c.size;
    }
    if (nbytes > kBombBytes && nbytes / kBombRatio > stored) {
      leave_out(d.path, "declares " + std::to_string(nbytes) + " bytes but stores " + std::to_string(stored) +
                            " (more than 4 GiB and 1000 times what it stores)");
      return false;
    }
    if (nbytes > 0 && d.chunks.size() < cells && !d.fill_zero) {
      leave_out(d.path, "chunks never written, whose fill value is not zero");
      return false;
    }
    std::vector<uint64_t> start(d.dims.size());
    for (uint64_t cell = 0; cell < chunk_at.size(); ++cell) {
      check_budget();
      uint64_t rest = cell;
      for (size_t i = 0; i < d.dims.size(); ++i) {
        start[i] = rest / static_cast<uint64_t>(cell_strides[i]) * d.chunk[i];
        rest %= static_cast<uint64_t>(cell_strides[i]);
      }
      auto& piece = t.pieces.emplace_back();
      piece.size = *chunk_bytes;
      piece.start = start;
      piece.extent = d.chunk;
      if (chunk_at[cell] == kNone) {
        piece.zeros = true;
        piece.source = {source_.name, std::nullopt};
        continue;
      }
      const auto& c = d.chunks[chunk_at[cell]];
      for (size_t i = 0; i < pipeline.size(); ++i)
        if ((c.mask >> i & 1) == 0) piece.filters.push_back(pipeline[i]);
      const bool deflated =
          std::find(piece.filters.begin(), piece.filters.end(), PieceFilter::Deflate) != piece.filters.end();
      const uint64_t checksum = checksum_bytes(piece.filters);
      if (!deflated && c.size != *chunk_bytes + checksum)
        fail(d, "a chunk of " + std::to_string(c.size) + " bytes that is not deflated (a chunk is " +
                    std::to_string(*chunk_bytes + checksum) + ")");
      if (deflated && *chunk_bytes / kMaxDeflateRatio > c.size)
        fail(d, "a chunk of " + std::to_string(c.size) + " deflated bytes cannot make " +
                    std::to_string(*chunk_bytes));
      piece.bytes = ByteSpan::mapped(source_.file, in_mapping(c.address), c.size);
      piece.source = {source_.name, in_mapping(c.address)};
    }
    if (nbytes == 0) {
      t.pieces.clear();
      t.bytes = ByteSpan::owned({});
    }
    t.extras["hdf5_layout"] = "chunked";
    t.extras["hdf5_chunk"] = d.chunk;
    if (!names.empty()) t.extras["hdf5_filters"] = std::move(names);
    return true;
  }

  // Every address the child sends counts from the file's base address:
  // whether [address, address + size) lies inside the HDF5 bytes after the
  // base, and where `address` is in the mapping.
  bool inside(uint64_t address, uint64_t size) const {
    const uint64_t room = source_.length - base_;
    return address <= room && size <= room - address;
  }
  uint64_t in_mapping(uint64_t address) const { return source_.base + base_ + address; }

  Catalog& catalog_;
  const Source& source_;
  uint64_t base_ = 0;  // the file's base address, from the start of the HDF5 bytes
  bool based_ = false;
  nlohmann::json left_out_ = nlohmann::json::array();
  std::unordered_set<std::string> paths_;
};

// What the zlib stream `in` inflates to, counted through a small buffer
// (a chunk may decode to far more than the check may hold), stopping past
// `expected`; UINT64_MAX when it is corrupt or ends early.
uint64_t inflated_size(std::span<const std::byte> in, uint64_t expected) {
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) return UINT64_MAX;
  std::array<Bytef, 64 * 1024> out{};
  uint64_t fed = 0, made = 0;
  int rc = Z_OK;
  while (rc == Z_OK && made <= expected) {
    if (zs.avail_in == 0 && fed < in.size()) {
      const uint64_t n = std::min<uint64_t>(in.size() - fed, uint64_t{1} << 30);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data() + fed));
      zs.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    zs.next_out = out.data();
    zs.avail_out = static_cast<uInt>(out.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    made += out.size() - zs.avail_out;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && fed < in.size()) rc = Z_OK;  // more to feed
  }
  inflateEnd(&zs);
  return rc == Z_STREAM_END ? made : UINT64_MAX;
}

// --check: every stored chunk read back and, when deflated, inflated to
// its end (a chunk that does not decode, or decodes to another size, is a
// fault the mount would meet only when read).
void add_chunk_check(const Catalog& catalog, IntegrityChecks& checks, const std::string& display) {
  struct Range {
    std::string name;
    ByteSpan bytes;
    uint64_t size;
    bool deflated;
    uint64_t checksum;  // its fletcher32 bytes at its end (checksum_bytes)
  };
  auto ranges = std::make_shared<std::vector<Range>>();
  uint64_t total = 0;
  for (const Tensor& t : catalog.tensors())
    for (const Piece& p : t.pieces) {
      if (p.zeros) continue;
      const bool deflated =
          std::find(p.filters.begin(), p.filters.end(), PieceFilter::Deflate) != p.filters.end();
      ranges->push_back({std::string(t.name), p.bytes, p.size, deflated, checksum_bytes(p.filters)});
      total += p.bytes.size();
    }
  if (ranges->empty()) return;
  const std::string format = catalog.format;
  checks.push_back(
      {"the chunks of the HDF5 datasets", total, [ranges, display, format](const auto& progress) {
         for (const Range& r : *ranges) {
           auto in = r.bytes.span();
           if (r.checksum != 0) {
             if (!fletcher32_holds(in))
               throw ModelError(display, format, r.bytes.file_offset(),
                                "a chunk of \"" + r.name + "\" does not match its Fletcher-32 checksum");
             in = in.first(in.size() - r.checksum);
           }
           if (r.deflated && inflated_size(in, r.size) != r.size)
             throw ModelError(display, format, r.bytes.file_offset(),
                              "a chunk of \"" + r.name + "\" does not inflate to its " +
                                  std::to_string(r.size) + " bytes");
           progress(r.bytes.size());
         }
       }});
}

Catalog open_source(const Source& source, std::string format, IntegrityChecks* checks, Catalog catalog = {}) {
  catalog.format = std::move(format);
  catalog.mtime = source.file->mtime();
  if (catalog.files.empty()) catalog.files.push_back(source.name);
  // libhdf5 is held to the model's budget as the parent is: it may use
  // what the budget has left, and a fixed margin for the library's own
  // state (its metadata cache, free lists, the driver's blocks).
  SandboxLimits limits;
  if (const Budget* budget = current_budget(); budget != nullptr)
    limits.memory_bytes =
        (budget->limit() > budget->used() ? budget->limit() - budget->used() : 0) + kLibraryBytes;
  const std::string stream =
      run_sandboxed(*source.file, source.base, source.length, source.display, walk_hdf5_child, limits);
  add_records(catalog, stream, source);
  if (checks != nullptr) add_chunk_check(catalog, *checks, source.display);
  return catalog;
}

}  // namespace

void add_records(Catalog& catalog, std::string_view records, const Source& source) {
  Builder(catalog, source).run(records);
}

bool probe_file(std::span<const std::byte> head) {
  for (uint64_t at = 0; at + kSignature.size() <= head.size(); at = at == 0 ? 512 : at * 2)
    if (std::memcmp(head.data() + at, kSignature.data(), kSignature.size()) == 0) return true;
  return false;
}

bool probe_past_head(const MappedFile& file, uint64_t head_bytes) {
  // Powers of two the head did not hold, while the signature fits in the
  // file: at most 64 reads of 8 bytes.
  for (uint64_t at = 512; at != 0 && at <= file.size() && file.size() - at >= kSignature.size(); at *= 2) {
    if (at + kSignature.size() <= head_bytes) continue;  // probe_file's
    const auto bytes = file.read(at, kSignature.size());
    if (std::memcmp(bytes.data(), kSignature.data(), kSignature.size()) == 0) return true;
  }
  return false;
}

Catalog open_file(const ModelFile& model) {
  const Source source{model.mapped, 0, model.mapped->size(), model.path.filename().string(),
                      model.mapped->display_name()};
  return open_source(source, std::string(kFormat), model.checks);
}

bool is_keras_archive(const ZipArchive& zip) {
  return zip.find("config.json") != nullptr &&
         (zip.find(kWeightsMember) != nullptr || zip.find("model.weights.npz") != nullptr);
}

Catalog open_keras(const ModelFile& model, const ZipArchive& zip) {
  const std::string display = model.mapped->display_name();
  auto fail = [&](const std::string& why) {
    throw ModelError(display, std::string(kKerasFormat), std::nullopt, why);
  };
  const ZipMember* weights = zip.find(kWeightsMember);
  if (weights == nullptr)
    fail(
        "model.weights.npz holds its weights as pickled object arrays, never loaded (only model.weights.h5 "
        "is "
        "read)");
  if (!weights->stored())
    fail("model.weights.h5 is compressed (method " + std::to_string(weights->method) +
         "); Keras stores it, and modelfs serves it only so");
  if (weights->compressed_size != weights->uncompressed_size)
    fail("model.weights.h5 is stored but its sizes differ");
  Catalog catalog;
  catalog.files.push_back(model.path.filename().string());
  for (const char* name : {"config.json", "metadata.json"}) {
    const ZipMember* member = zip.find(name);
    if (member == nullptr) continue;
    if (member->uncompressed_size > kMaxKerasDocument) fail(std::string(name) + " is larger than 64 MiB");
    const ByteSpan bytes = zip.contents(*member);
    const std::string text(bytes.view());
    if (std::string_view(name) == "metadata.json") {
      auto metadata = parse_json_limited(text, display, kKerasFormat, zip.file_offset(*member), 64);
      if (metadata.is_object())
        for (auto& [key, value] : metadata.items()) catalog.metadata[key] = value;
    } else {
      parse_json_limited(text, display, kKerasFormat, zip.file_offset(*member), 64);  // refused unless JSON
      catalog.documents.push_back({name, text});
    }
  }
  const Source source{zip.file(), zip.file_offset(*weights), weights->uncompressed_size,
                      catalog.files.front(), display + ":" + std::string(kWeightsMember)};
  catalog = open_source(source, std::string(kKerasFormat), model.checks, std::move(catalog));
  if (model.checks != nullptr)
    for (auto& check : zip.crc_checks()) model.checks->push_back(std::move(check));
  return catalog;
}

}  // namespace modelfs::hdf5
