// SPDX-License-Identifier: Apache-2.0
// The tree builder alone, from a catalog no reader would make: fuzzed
// tensor names (any bytes, clashes, dots and slashes), dtypes, shapes and
// strides (contiguous, or any), bytes, ggml block types, torch
// quantization extras and pieces (runs, or boxes on a grid, sometimes off
// it, shuffled and deflated, some of their streams valid), under a budget
// as at a mount. Every file of the tree
// is then read at both ends, as FUSE serves it; a printed file must be
// exactly the size the builder measured.
#include <fuzzer/FuzzedDataProvider.h>
#include <sys/uio.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "io/budget_charge.hpp"
#include "io/pieces.hpp"
#include "io/tensor_spec.hpp"
#include "modelfs/catalog.hpp"
#include "modelfs/error.hpp"
#include "modelfs/tree.hpp"
#include "tree/ggml_dequant.hpp"

namespace {

using modelfs::DType;

uint64_t dimension(FuzzedDataProvider& in) {
  return in.ConsumeBool() ? in.ConsumeIntegralInRange<uint64_t>(0, 6) : in.ConsumeIntegral<uint64_t>();
}

// A quantized tensor's quantization (what the views read), sometimes
// wrong.
modelfs::BasicQuantization<std::string> quantization(FuzzedDataProvider& in,
                                                     const std::vector<std::string>& names) {
  modelfs::BasicQuantization<std::string> q;
  q.scheme = static_cast<modelfs::QScheme>(
      in.ConsumeIntegralInRange<uint8_t>(0, static_cast<uint8_t>(modelfs::QScheme::Widened)));
  if (in.ConsumeBool()) q.scale = in.ConsumeFloatingPoint<double>();
  if (in.ConsumeBool()) q.min = in.ConsumeFloatingPoint<double>();
  q.values = in.ConsumeBool() ? modelfs::DType::Int32 : modelfs::DType::Float32;
  if (in.ConsumeBool()) q.zero_point = in.ConsumeIntegral<int64_t>();
  if (in.ConsumeBool()) q.axis = in.ConsumeIntegralInRange<int64_t>(-1, 4);
  if (!names.empty()) {
    q.scales = names[in.ConsumeIntegralInRange<size_t>(0, names.size() - 1)];
    q.zero_points = names[in.ConsumeIntegralInRange<size_t>(0, names.size() - 1)];
  }
  return q;
}

using SpecPiece = modelfs::BasicPiece<std::string, std::vector<uint64_t>, std::vector<modelfs::PieceFilter>>;

// A piece's stored bytes: `decoded` through its filters (as HDF5 writes
// them), or fuzzed bytes.
std::string stored(FuzzedDataProvider& in, std::string decoded,
                   const std::vector<modelfs::PieceFilter>& filters, size_t element) {
  if (in.ConsumeIntegralInRange(0, 3) == 0) return in.ConsumeRandomLengthString(256);
  for (const auto f : filters) {
    if (f == modelfs::PieceFilter::Shuffle) {
      std::string out(decoded.size(), '\0');
      const size_t n = decoded.size() / element;
      for (size_t i = 0; i < n; ++i)
        for (size_t b = 0; b < element; ++b) out[b * n + i] = decoded[i * element + b];
      decoded = out;
    } else if (f == modelfs::PieceFilter::Fletcher32) {
      // The sum after the bytes, little-endian; now and then one bit off.
      uint32_t sum = modelfs::fletcher32(std::as_bytes(std::span(decoded.data(), decoded.size())));
      if (in.ConsumeIntegralInRange(0, 7) == 0) sum ^= 1u << in.ConsumeIntegralInRange(0, 31);
      for (int i = 0; i < 4; ++i) decoded.push_back(static_cast<char>(sum >> (8 * i)));
    } else {
      uLongf size = compressBound(decoded.size());
      std::string out(size, '\0');
      if (compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                    reinterpret_cast<const Bytef*>(decoded.data()), decoded.size(), 1) != Z_OK)
        return {};
      out.resize(size);
      decoded = out;
    }
  }
  return decoded;
}

// The tensor's bytes as pieces instead: runs, or boxes of one chunk shape
// over the shape (a few of them nudged off the grid).
void add_pieces(FuzzedDataProvider& in, modelfs::TensorSpec& t) {
  t.bytes = {};
  if (in.ConsumeIntegralInRange(0, 7) != 0)
    t.strides = modelfs::contiguous_strides(t.shape).value_or(std::vector<int64_t>(t.shape.size(), 1));
  const size_t element = std::max<size_t>(1, modelfs::dtype_bits(t.dtype) / 8);
  if (t.shape.empty() || in.ConsumeIntegralInRange(0, 3) == 0) {
    const size_t count = in.ConsumeIntegralInRange<size_t>(1, 8);
    for (size_t i = 0; i < count; ++i) {
      SpecPiece p;
      p.zeros = in.ConsumeIntegralInRange(0, 7) == 0;
      if (!p.zeros) p.bytes = modelfs::ByteSpan::owned(in.ConsumeRandomLengthString(128));
      p.size = in.ConsumeIntegralInRange(0, 7) == 0 ? in.ConsumeIntegral<uint8_t>() : p.bytes.size();
      p.source = {"m", i};
      t.pieces.push_back(std::move(p));
    }
    return;
  }
  const size_t rank = t.shape.size();
  std::vector<uint64_t> chunk(rank), cells(rank);
  uint64_t total = 1;
  for (size_t d = 0; d < rank; ++d) {
    chunk[d] = in.ConsumeIntegralInRange<uint64_t>(1, 5);
    cells[d] = t.shape[d] == 0 ? 1 : std::min<uint64_t>((t.shape[d] + chunk[d] - 1) / chunk[d], 64);
    total = std::min<uint64_t>(total * cells[d], 65);
  }
  const size_t count = std::min<uint64_t>(total, 64);
  std::vector<modelfs::PieceFilter> filters;
  const uint8_t which = in.ConsumeIntegralInRange<uint8_t>(0, 6);
  if (which == 1) filters = {modelfs::PieceFilter::Deflate};
  if (which == 2) filters = {modelfs::PieceFilter::Shuffle, modelfs::PieceFilter::Deflate};
  if (which == 3) filters = {modelfs::PieceFilter::Shuffle};
  if (which == 5)
    filters = {modelfs::PieceFilter::Shuffle, modelfs::PieceFilter::Deflate,
               modelfs::PieceFilter::Fletcher32};
  if (which == 6) filters = {modelfs::PieceFilter::Fletcher32};
  for (size_t i = 0; i < count; ++i) {
    SpecPiece p;
    p.start.resize(rank);
    uint64_t rest = i;
    for (size_t d = rank; d-- > 0;) {
      p.start[d] = rest % cells[d] * chunk[d];
      rest /= cells[d];
    }
    p.extent = chunk;
    if (in.ConsumeIntegralInRange(0, 15) == 0) {
      const size_t d = in.ConsumeIntegralInRange<size_t>(0, rank - 1);
      (in.ConsumeBool() ? p.start[d] : p.extent[d]) += in.ConsumeIntegralInRange<uint64_t>(0, 2);
    }
    uint64_t elements = 1;
    for (const uint64_t e : p.extent) elements *= e;
    p.size = in.ConsumeIntegralInRange(0, 15) == 0 ? in.ConsumeIntegral<uint16_t>() : elements * element;
    p.zeros = in.ConsumeIntegralInRange(0, 7) == 0;
    if (!p.zeros) {
      p.filters = filters;
      std::string decoded = in.ConsumeBytesAsString(std::min<uint64_t>(p.size, 4096));
      decoded.resize(std::min<uint64_t>(p.size, 4096));
      p.bytes = modelfs::ByteSpan::owned(filters.empty() ? decoded : stored(in, decoded, filters, element));
    }
    p.source = {"m", std::nullopt};
    t.pieces.push_back(std::move(p));
  }
}

modelfs::TensorSpec tensor(FuzzedDataProvider& in, const std::vector<std::string>& names) {
  modelfs::TensorSpec t;
  t.name = in.ConsumeRandomLengthString(300);
  t.dtype = static_cast<DType>(in.ConsumeIntegralInRange<uint8_t>(0, static_cast<uint8_t>(DType::GgmlBlock)));
  if (t.dtype == DType::GgmlBlock) {
    // Any entry of the table, a plain type's or one without kernels too.
    const auto types = modelfs::ggml_types();
    t.ggml = in.ConsumeBool() ? &types[in.ConsumeIntegralInRange<size_t>(0, types.size() - 1)] : nullptr;
  }
  t.shape.resize(in.ConsumeIntegralInRange<size_t>(0, 5));
  for (auto& d : t.shape) d = dimension(in);
  if (in.ConsumeBool()) {
    t.strides = modelfs::contiguous_strides(t.shape).value_or(std::vector<int64_t>(t.shape.size(), 1));
  } else {
    t.strides.resize(in.ConsumeBool() ? t.shape.size() : in.ConsumeIntegralInRange<size_t>(0, 5));
    for (auto& s : t.strides)
      s = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-1, 8) : in.ConsumeIntegral<int64_t>();
  }
  t.bytes = modelfs::ByteSpan::owned(in.ConsumeRandomLengthString(4096));
  t.source = {"m", in.ConsumeBool() ? std::optional<uint64_t>(in.ConsumeIntegral<uint64_t>()) : std::nullopt};
  if (in.ConsumeIntegralInRange(0, 7) == 0) t.quantization = quantization(in, names);
  if (in.ConsumeIntegralInRange(0, 3) == 0) add_pieces(in, t);
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  constexpr const char* kFormats[] = {"safetensors", "pytorch", "gguf", "onnx", "pt2"};
  try {
    modelfs::Budget budget;
    modelfs::BudgetScope scope(budget);
    modelfs::Catalog catalog;
    catalog.format = kFormats[in.ConsumeIntegralInRange(0, 4)];
    catalog.files = {"m"};
    catalog.tensors_may_share_bytes = true;
    const modelfs::TreeOptions options{.flat = in.ConsumeBool(), .export_float32 = in.ConsumeBool()};
    std::vector<std::string> names;
    const size_t count = in.ConsumeIntegralInRange<size_t>(0, 48);
    for (size_t i = 0; i < count && in.remaining_bytes() > 0; ++i) {
      const auto& added = catalog.add(tensor(in, names));
      names.emplace_back(added.name);
    }
    if (in.ConsumeBool())
      catalog.documents.push_back({in.ConsumeRandomLengthString(64), in.ConsumeRandomLengthString(256)});
    auto tree = modelfs::Tree::build(std::move(catalog), options);
    std::array<iovec, 16> iov{};
    std::string scratch;
    for (uint64_t ino = 1; ino <= tree->node_count(); ++ino) {
      const modelfs::Node& node = *tree->node(ino);
      if (node.kind != modelfs::NodeKind::File) continue;
      const uint64_t edge = std::min<uint64_t>(node.size, 4096);
      for (uint64_t offset : {uint64_t{0}, node.size - edge}) {
        uint64_t got = 0;
        const size_t n = tree->read(node, offset, edge, iov, scratch);
        for (size_t i = 0; i < n; ++i) got += iov[i].iov_len;
        if (got != edge) __builtin_trap();  // a file shorter than its size
      }
    }
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
