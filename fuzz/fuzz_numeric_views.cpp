// SPDX-License-Identifier: Apache-2.0
// The numeric views alone: an ElementView (a plain conversion, a copy, a
// torch quantized dequantization) over a fuzzed shape, strides and stored
// bytes, or a BlockView of a ggml block type over fuzzed blocks, made and
// then filled at both ends and at a fuzzed range. make() must refuse what
// does not fit; a view it makes must fill any range of its size.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "modelfs/dtype.hpp"
#include "tree/ggml_dequant.hpp"
#include "tree/numeric_views.hpp"

namespace {

// Bytes in memory as the catalog holds them (a ByteSpan, which the views take).
modelfs::ByteSpan in_memory(std::span<const std::byte> bytes) {
  return modelfs::ByteSpan::owned(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

using modelfs::DType;

// Small numbers mostly (what a real view has), any 64-bit number sometimes.
uint64_t dimension(FuzzedDataProvider& in) {
  return in.ConsumeBool() ? in.ConsumeIntegralInRange<uint64_t>(0, 9) : in.ConsumeIntegral<uint64_t>();
}
int64_t stride(FuzzedDataProvider& in) {
  return in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-1, 9) : in.ConsumeIntegral<int64_t>();
}

std::shared_ptr<const modelfs::ElementConversion> conversion(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0:
      return modelfs::plain_conversion(static_cast<DType>(in.ConsumeIntegral<uint8_t>() % 28));
    case 1:
      return modelfs::copy_conversion(in.ConsumeIntegralInRange<uint32_t>(0, 17));
    case 2: {
      constexpr DType kStored[] = {DType::Int8, DType::UInt8, DType::Int32, DType::Float32};
      const DType stored = kStored[in.ConsumeIntegralInRange(0, 3)];
      return modelfs::affine_conversion(
          stored, modelfs::PerTensorAffine{in.ConsumeFloatingPoint<double>(), in.ConsumeIntegral<int64_t>()});
    }
    default:
      return nullptr;
  }
}

// The view's first and last bytes, and a range from the input.
template <typename View>
void fill(const View& view, FuzzedDataProvider& in) {
  constexpr uint64_t kMost = 4096;
  std::vector<std::byte> out(kMost);
  modelfs::ReadScope scope(modelfs::ReadScope::Kind::Copied);
  const uint64_t size = view.size();
  const uint64_t edge = std::min(size, kMost);
  view.read(0, std::span(out.data(), edge), scope);
  view.read(size - edge, std::span(out.data(), edge), scope);
  if (size == 0) return;
  const uint64_t offset = in.ConsumeIntegralInRange<uint64_t>(0, size - 1);
  const uint64_t length = in.ConsumeIntegralInRange<uint64_t>(0, std::min(size - offset, kMost));
  view.read(offset, std::span(out.data(), length), scope);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  if (in.ConsumeBool()) {
    const auto codecs = modelfs::ggml_types();
    const auto& codec = codecs[in.ConsumeIntegralInRange<size_t>(0, codecs.size() - 1)];
    const uint64_t numel = in.ConsumeBool() ? codec.block_size * in.ConsumeIntegralInRange<uint64_t>(0, 8)
                                            : in.ConsumeIntegral<uint64_t>();
    const auto stored = in.ConsumeRemainingBytes<std::byte>();
    if (auto view = modelfs::BlockView::make(in_memory(stored), codec, numel)) fill(*view, in);
    return 0;
  }
  const size_t rank = in.ConsumeIntegralInRange<size_t>(0, 6);
  std::vector<uint64_t> shape(rank);
  std::vector<int64_t> strides(rank);
  for (auto& d : shape) d = dimension(in);
  for (auto& s : strides) s = stride(in);
  // Now and then strides of a rank other than the shape's.
  if (in.ConsumeIntegralInRange(0, 15) == 0) strides.push_back(1);
  auto converted = conversion(in);
  const auto stored = in.ConsumeBytes<std::byte>(in.ConsumeIntegralInRange<size_t>(0, 1 << 16));
  if (auto view = modelfs::ElementView::make(in_memory(stored), shape, strides, std::move(converted)))
    fill(*view, in);
  return 0;
}
