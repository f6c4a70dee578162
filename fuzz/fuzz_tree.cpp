// SPDX-License-Identifier: Apache-2.0
// The tree builder alone, from a catalog no reader would make: fuzzed
// tensor names (any bytes, clashes, dots and slashes), dtypes, shapes and
// strides (contiguous, or any), bytes, ggml block types and torch
// quantization extras, under a budget as at a mount. Every file of the tree
// is then read at both ends, as FUSE serves it; a printed file must be
// exactly the size the builder measured.
#include <fuzzer/FuzzedDataProvider.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "modelfs/budget.hpp"
#include "modelfs/catalog.hpp"
#include "modelfs/error.hpp"
#include "modelfs/tensor_spec.hpp"
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
