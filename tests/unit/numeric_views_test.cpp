// SPDX-License-Identifier: Apache-2.0
// Converted .npy bodies (src/tree/numeric_views.*, ggml_dequant.*): each
// conversion against values worked out from the formats' definitions, read
// whole and at odd ranges; ggml block types without a reference here only
// range against whole (test_numeric_views checks their values by mount).
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "formats/gguf.hpp"
#include "io/json_text.hpp"
#include "io/tensor_spec.hpp"
#include "tree/ggml_dequant.hpp"
#include "tree/ggml_grids.hpp"
#include "tree/numeric_views.hpp"
#include "tree/sidecar.hpp"

namespace modelfs {
namespace {

// A ggml block type without kernels: what a block type modelfs cannot
// dequantize looks like to the views.
constexpr GgmlType kNoKernels{99, "q9_9", 32, 18, std::nullopt};
// Bytes in memory as the catalog holds them (a ByteSpan, which the views take).
ByteSpan in_memory(std::span<const std::byte> bytes) {
  return ByteSpan::owned(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

std::vector<std::byte> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xFF);
  return out;
}

// A read of `view` in a scope of its own (outside FUSE).
void read_view(const modelfs::ComputedBytes& view, uint64_t offset, std::span<std::byte> out) {
  modelfs::ReadScope scope(modelfs::ReadScope::Kind::Copied);
  view.read(offset, out, scope);
}

std::vector<float> floats_of(const ComputedBytes& view, uint64_t size) {
  std::vector<std::byte> out(size);
  read_view(view, 0, out);
  std::vector<float> values(size / 4);
  std::memcpy(values.data(), out.data(), size);
  return values;
}

// The ranges asked of a view: odd offsets and lengths (1 byte, across
// values, chunks and blocks, up to the end, the last partial block).
std::vector<std::pair<uint64_t, uint64_t>> odd_ranges(uint64_t size) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges = {{0, 1}, {1, 1}, {3, 2}, {size - 1, 1}, {0, size}};
  for (uint64_t at :
       {uint64_t{5}, uint64_t{127}, uint64_t{1023}, uint64_t{4095}, uint64_t{4097}, size / 2 + 3})
    for (uint64_t length : {uint64_t{1}, uint64_t{3}, uint64_t{129}, uint64_t{4096}, uint64_t{5000}})
      if (at < size) ranges.push_back({at, std::min(length, size - at)});
  ranges.push_back({size > 7 ? size - 7 : 0, size > 7 ? 7 : size});
  return ranges;
}

// Every range asked of the view, at odd offsets and lengths, equals that
// slice of the whole (for views whose values are checked elsewhere).
void expect_ranges_match_whole(const ComputedBytes& view, uint64_t size) {
  std::vector<std::byte> whole(size);
  read_view(view, 0, whole);
  for (auto [at, length] : odd_ranges(size)) {
    std::vector<std::byte> part(length);
    read_view(view, at, part);
    ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + at, length)) << "range " << at << " + " << length;
  }
}

// The view holds `expected` (float32 values where `floats`, worked out by
// the test), read whole and at every odd range; where both hold a NaN, its
// bits are the view's (IEEE leaves a NaN's payload to the arithmetic).
void expect_view_holds(const ComputedBytes& view, uint64_t size, std::vector<std::byte> expected,
                       bool floats) {
  ASSERT_EQ(size, expected.size());
  std::vector<std::byte> whole(size);
  read_view(view, 0, whole);
  if (floats)
    for (uint64_t at = 0; at + 4 <= size; at += 4) {
      float got, want;
      std::memcpy(&got, whole.data() + at, 4);
      std::memcpy(&want, expected.data() + at, 4);
      if (std::isnan(got) && std::isnan(want)) std::memcpy(expected.data() + at, whole.data() + at, 4);
    }
  for (uint64_t at = 0; at < size; ++at)
    ASSERT_EQ(whole[at], expected[at]) << "byte " << at << " of the whole";
  for (auto [at, length] : odd_ranges(size)) {
    std::vector<std::byte> part(length);
    read_view(view, at, part);
    ASSERT_EQ(0, std::memcmp(part.data(), expected.data() + at, length)) << "range " << at << " + " << length;
  }
}

// A small float's value from its definition: sign, `ebits` of exponent
// with `bias`, `mbits` of mantissa, subnormals at exponent 0; `fn_nan`: the
// all-ones code after the sign is NaN (float8_e4m3fn), no infinities.
float minifloat(uint32_t code, int ebits, int mbits, int bias, bool fn_nan) {
  const uint32_t e = (code >> mbits) & ((1u << ebits) - 1), m = code & ((1u << mbits) - 1);
  const bool negative = (code >> (ebits + mbits)) & 1;
  if (fn_nan && e == (1u << ebits) - 1 && m == (1u << mbits) - 1)
    return std::numeric_limits<float>::quiet_NaN();
  const float magnitude =
      e == 0 ? std::ldexp(static_cast<float>(m), 1 - bias - mbits)
             : std::ldexp(static_cast<float>((1u << mbits) + m), static_cast<int>(e) - bias - mbits);
  return negative ? -magnitude : magnitude;
}

// Element i's code: `bits` wide, packed from the lowest bits of the bytes up.
uint32_t packed_code(const std::vector<std::byte>& stored, uint64_t i, int bits) {
  uint32_t code = 0;
  for (int b = 0; b < bits; ++b) {
    const uint64_t bit = i * bits + b;
    code |= ((std::to_integer<uint32_t>(stored[bit / 8]) >> (bit % 8)) & 1u) << b;
  }
  return code;
}

// What a plain conversion of `numel` elements of `stored` must give, from
// the dtypes' definitions alone.
std::vector<std::byte> reference_values(DType dtype, const std::vector<std::byte>& stored, uint64_t numel) {
  std::vector<std::byte> out;
  auto put_float = [&out](float v) {
    const auto bits = std::bit_cast<std::array<std::byte, 4>>(v);
    out.insert(out.end(), bits.begin(), bits.end());
  };
  for (uint64_t i = 0; i < numel; ++i) switch (dtype) {
      case DType::BFloat16:
        put_float(std::bit_cast<float>(packed_code(stored, i, 16) << 16));
        break;
      case DType::Float8E4M3FN:
        put_float(minifloat(packed_code(stored, i, 8), 4, 3, 7, true));
        break;
      case DType::Float4E2M1:
        put_float(minifloat(packed_code(stored, i, 4), 2, 1, 1, false));
        break;
      case DType::Float6E3M2FN:
        put_float(minifloat(packed_code(stored, i, 6), 3, 2, 3, false));
        break;
      case DType::Int4: {
        const int code = static_cast<int>(packed_code(stored, i, 4));
        out.push_back(static_cast<std::byte>(static_cast<int8_t>(code >= 8 ? code - 16 : code)));
        break;
      }
      case DType::UInt2:
        out.push_back(static_cast<std::byte>(packed_code(stored, i, 2)));
        break;
      default:
        ADD_FAILURE() << "no reference for " << dtype_name(dtype);
        return out;
    }
  return out;
}

std::vector<float> convert_all(DType dtype, const std::vector<std::byte>& stored, uint64_t numel) {
  std::vector<uint64_t> shape{numel};
  std::vector<int64_t> strides{1};
  auto view = ElementView::make(in_memory(stored), shape, strides, plain_conversion(dtype));
  EXPECT_TRUE(view);
  if (!view) return {};
  return floats_of(*view, view->size());
}

float f(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(NumericViews, BFloat16IsTheTopHalfOfAFloat32) {
  auto stored = bytes_of({0x80, 0x3F, 0x00, 0xC0, 0x80, 0x7F, 0xC1, 0x7F, 0x01, 0x00});
  auto values = convert_all(DType::BFloat16, stored, 5);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[1], -2.0f);
  EXPECT_TRUE(std::isinf(values[2]));
  EXPECT_EQ(std::bit_cast<uint32_t>(values[3]), 0x7FC10000u);  // NaN payload kept
  EXPECT_EQ(values[4], f(0x00010000u));                        // a subnormal
}

TEST(NumericViews, Float8ValuesFollowTheirDefinitions) {
  std::vector<std::byte> all(256);
  for (int i = 0; i < 256; ++i) all[i] = static_cast<std::byte>(i);
  auto e4m3fn = convert_all(DType::Float8E4M3FN, all, 256);
  EXPECT_EQ(e4m3fn[0x7E], 448.0f);
  EXPECT_TRUE(std::isnan(e4m3fn[0x7F]) && std::isnan(e4m3fn[0xFF]));
  EXPECT_EQ(e4m3fn[0x78], 256.0f);  // exponent 15 is a number
  EXPECT_EQ(e4m3fn[0x01], std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3fn[0x08], std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::signbit(e4m3fn[0x80]) && e4m3fn[0x80] == 0);
  auto e4m3fnuz = convert_all(DType::Float8E4M3FNUZ, all, 256);
  EXPECT_TRUE(std::isnan(e4m3fnuz[0x80]));
  EXPECT_EQ(e4m3fnuz[0x7F], 240.0f);
  EXPECT_EQ(e4m3fnuz[0x01], std::ldexp(1.0f, -10));
  auto e5m2 = convert_all(DType::Float8E5M2, all, 256);
  EXPECT_TRUE(std::isinf(e5m2[0x7C]) && std::isinf(e5m2[0xFC]) && e5m2[0xFC] < 0);
  EXPECT_TRUE(std::isnan(e5m2[0x7D]));
  EXPECT_EQ(e5m2[0x7B], 57344.0f);
  EXPECT_EQ(e5m2[0x01], std::ldexp(1.0f, -16));
  auto e5m2fnuz = convert_all(DType::Float8E5M2FNUZ, all, 256);
  EXPECT_TRUE(std::isnan(e5m2fnuz[0x80]));
  EXPECT_EQ(e5m2fnuz[0x7F], 57344.0f);
  EXPECT_EQ(e5m2fnuz[0x01], std::ldexp(1.0f, -17));
  auto e8m0 = convert_all(DType::Float8E8M0FNU, all, 256);
  EXPECT_EQ(e8m0[0], std::ldexp(1.0f, -127));  // a float32 subnormal, exact
  EXPECT_EQ(e8m0[127], 1.0f);
  EXPECT_EQ(e8m0[254], std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(e8m0[255]));
  // float8_e5m2 is the top byte of a float16.
  for (int i = 0; i < 256; ++i)
    if (!std::isnan(e5m2[i])) EXPECT_EQ(e5m2[i], ggml::half_to_float(static_cast<uint16_t>(i << 8))) << i;
}

TEST(NumericViews, PackedFloatsAndIntegersUnpackFromTheLowBitsUp) {
  // float4_e2m1: 0x21 holds element 0 = 1 (0.5), element 1 = 2 (1.0).
  auto f4 = convert_all(DType::Float4E2M1, bytes_of({0x21, 0xF7}), 4);
  EXPECT_EQ(f4, (std::vector<float>{0.5f, 1.0f, 6.0f, -6.0f}));
  // float6: four codes in three bytes, element 0 in the lowest 6 bits.
  // Codes 0x1F, 0x01, 0x3F, 0x08: bits 011111 000001 111111 001000.
  const uint32_t packed = 0x1Fu | (0x01u << 6) | (0x3Fu << 12) | (0x08u << 18);
  auto stored = bytes_of({int(packed & 0xFF), int((packed >> 8) & 0xFF), int(packed >> 16)});
  auto e2m3 = convert_all(DType::Float6E2M3FN, stored, 4);
  EXPECT_EQ(e2m3, (std::vector<float>{7.5f, 0.125f, -7.5f, 1.0f}));
  auto e3m2 = convert_all(DType::Float6E3M2FN, stored, 4);
  EXPECT_EQ(e3m2, (std::vector<float>{28.0f, 0.0625f, -28.0f, 0.5f}));

  std::vector<uint64_t> shape{4};
  std::vector<int64_t> strides{1};
  const auto nibbles = bytes_of({0x8F, 0x21});
  auto int4 = ElementView::make(in_memory(nibbles), shape, strides, plain_conversion(DType::Int4));
  ASSERT_TRUE(int4);
  std::vector<std::byte> out(4);
  read_view(*int4, 0, out);
  EXPECT_EQ(out, bytes_of({0xFF, 0xF8, 0x01, 0x02}));  // -1, -8, 1, 2
  const auto pairs = bytes_of({0xE4});
  auto uint2 = ElementView::make(in_memory(pairs), shape, strides, plain_conversion(DType::UInt2));
  read_view(*uint2, 0, out);
  EXPECT_EQ(out, bytes_of({0, 1, 2, 3}));
  auto int2 = ElementView::make(in_memory(pairs), shape, strides, plain_conversion(DType::Int2));
  read_view(*int2, 0, out);
  EXPECT_EQ(out, bytes_of({0, 1, 0xFE, 0xFF}));  // 0, 1, -2, -1
  // uint1: element 0 in the most significant bit; nf4: indices low nibble first.
  const auto bits = bytes_of({0xA1});
  auto uint1 = ElementView::make(in_memory(bits), shape, strides, plain_conversion(DType::UInt1));
  ASSERT_TRUE(uint1);
  read_view(*uint1, 0, out);
  EXPECT_EQ(out, bytes_of({1, 0, 1, 0}));
  EXPECT_EQ(convert_all(DType::NF4, bytes_of({0xF0, 0x87}), 4),
            (std::vector<float>{-1.0f, 1.0f, 0.0f, 0.07958029955625534f}));
}

TEST(NumericViews, StridedViewsConvertInCOrder) {
  // bfloat16 storage [[1, 2, 3], [4, 5, 6]] read transposed (shape 3x2).
  std::vector<std::byte> stored;
  for (float v : {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}) {
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    stored.push_back(static_cast<std::byte>((bits >> 16) & 0xFF));
    stored.push_back(static_cast<std::byte>(bits >> 24));
  }
  std::vector<uint64_t> shape{3, 2};
  std::vector<int64_t> strides{1, 3};
  auto view = ElementView::make(in_memory(stored), shape, strides, plain_conversion(DType::BFloat16));
  ASSERT_TRUE(view);
  EXPECT_EQ(floats_of(*view, view->size()), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  // A slice with an inner stride of 1 ([:, 1:] of a 4x5), big enough for
  // several chunks and runs.
  auto big = random_bytes(2 * 400 * 500, 7);
  std::vector<uint64_t> slice_shape{400, 499};
  std::vector<int64_t> slice_strides{500, 1};
  auto slice = ElementView::make(in_memory(std::span(big).subspan(2)), slice_shape, slice_strides,
                                 plain_conversion(DType::BFloat16));
  ASSERT_TRUE(slice);
  auto values = floats_of(*slice, slice->size());
  for (uint64_t r : {0u, 1u, 399u})
    for (uint64_t c : {0u, 1u, 498u}) {
      const size_t at = 2 * (1 + r * 500 + c);
      const uint32_t bits =
          (std::to_integer<uint32_t>(big[at]) << 16) | (std::to_integer<uint32_t>(big[at + 1]) << 24);
      EXPECT_EQ(std::bit_cast<uint32_t>(values[r * 499 + c]), bits);
    }
  std::vector<std::byte> slice_values;
  for (uint64_t r = 0; r < 400; ++r)
    for (uint64_t c = 0; c < 499; ++c) {
      const auto bits = std::bit_cast<std::array<std::byte, 4>>(
          (std::to_integer<uint32_t>(big[2 * (1 + r * 500 + c)]) << 16) |
          (std::to_integer<uint32_t>(big[2 * (1 + r * 500 + c) + 1]) << 24));
      slice_values.insert(slice_values.end(), bits.begin(), bits.end());
    }
  expect_view_holds(*slice, slice->size(), std::move(slice_values), true);
  std::vector<std::byte> transposed(6 * 4);
  const float by_columns[] = {1, 4, 2, 5, 3, 6};
  std::memcpy(transposed.data(), by_columns, transposed.size());
  expect_view_holds(*view, view->size(), std::move(transposed), true);
}

TEST(NumericViews, OddRangesHoldTheValuesOfTheDefinitions) {
  auto stored = random_bytes(3 * 10007, 11);
  std::vector<uint64_t> shape{10007};
  std::vector<int64_t> strides{1};
  for (DType dtype : {DType::BFloat16, DType::Float8E4M3FN, DType::Float4E2M1, DType::Float6E3M2FN,
                      DType::Int4, DType::UInt2}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    auto view = ElementView::make(in_memory(stored), shape, strides, plain_conversion(dtype));
    ASSERT_TRUE(view);
    const bool floats = dtype != DType::Int4 && dtype != DType::UInt2;
    expect_view_holds(*view, view->size(), reference_values(dtype, stored, shape[0]), floats);
  }
}

TEST(NumericViews, ViewsReachingPastTheirBytesAreRefused) {
  std::vector<std::byte> stored(8);
  std::vector<uint64_t> shape{5};
  std::vector<int64_t> strides{1};
  EXPECT_FALSE(ElementView::make(in_memory(stored), shape, strides, plain_conversion(DType::BFloat16)));
  std::vector<uint64_t> two{2, 2};
  std::vector<int64_t> far{3, 1};
  EXPECT_FALSE(ElementView::make(in_memory(stored), two, far,
                                 plain_conversion(DType::BFloat16)));  // reaches element 4
  std::vector<int64_t> negative{-1, 1};
  EXPECT_FALSE(ElementView::make(in_memory(stored), two, negative, plain_conversion(DType::BFloat16)));
  std::vector<uint64_t> odd{17};
  std::vector<int64_t> one{1};
  EXPECT_FALSE(
      ElementView::make(in_memory(stored), odd, one, plain_conversion(DType::Int4)));  // 17 nibbles > 8 bytes
  EXPECT_FALSE(BlockView::make(in_memory(stored), *ggml_type_named("q8_0"), 32));      // 34 bytes needed
  std::vector<std::byte> block(34);
  EXPECT_FALSE(BlockView::make(in_memory(block), *ggml_type_named("q8_0"), 31));  // not whole blocks
  EXPECT_FALSE(BlockView::make(in_memory(block), kNoKernels, 64));                // no dequantization
  EXPECT_TRUE(BlockView::make(in_memory(block), *ggml_type_named("q8_0"), 32));
}

TEST(NumericViews, TorchAffineDequantization) {
  // qint8 per tensor: (q - zp) * scale with float32 arithmetic.
  auto stored = bytes_of({0x05, 0xFD, 0x7F, 0x80});  // 5, -3, 127, -128
  std::vector<uint64_t> shape{4};
  std::vector<int64_t> strides{1};
  auto per_tensor = ElementView::make(in_memory(stored), shape, strides,
                                      affine_conversion(DType::Int8, PerTensorAffine{0.05, 3}));
  ASSERT_TRUE(per_tensor);
  const float s = 0.05f;
  EXPECT_EQ(floats_of(*per_tensor, 16), (std::vector<float>{2 * s, -6 * s, 124 * s, -131 * s}));
  // quint8 per channel along axis 1 of a 2x2: float64 scales, int64 zero points.
  std::vector<std::byte> scales(16), zeros(16);
  const double sc[2] = {0.5, 0.25};
  const int64_t zp[2] = {1, 2};
  std::memcpy(scales.data(), sc, 16);
  std::memcpy(zeros.data(), zp, 16);
  PerChannelAffine p{in_memory(scales), DType::Float64, in_memory(zeros), DType::Int64, false, 2, 1};
  std::vector<uint64_t> square{2, 2};
  std::vector<int64_t> square_strides{2, 1};
  const auto quants = bytes_of({3, 3, 10, 0});
  auto per_channel =
      ElementView::make(in_memory(quants), square, square_strides, affine_conversion(DType::UInt8, p));
  ASSERT_TRUE(per_channel);
  EXPECT_EQ(floats_of(*per_channel, 16), (std::vector<float>{1.0f, 0.25f, 4.5f, -0.5f}));
  // Too few parameters for the channels: refused.
  p.channels = 3;
  EXPECT_FALSE(affine_conversion(DType::UInt8, p));
}

// ---- ggml

// One table of ggml types: every id and every name maps to one entry, the
// block types (and only they) have kernels, the plain types are one element
// of their dtype.
TEST(GgmlTypes, EveryIdAndNameMapsToOneEntry) {
  std::set<uint32_t> ids;
  for (const auto& type : ggml_types()) {
    SCOPED_TRACE(std::string(type.name));
    EXPECT_TRUE(ids.insert(type.id).second);
    EXPECT_EQ(ggml_type(type.id), &type);
    EXPECT_EQ(ggml_type_named(type.name), &type);
    EXPECT_EQ(type.plain.has_value(), ggml::kernels(type) == nullptr);
    if (type.plain) {
      EXPECT_EQ(type.block_size, 1u);
      EXPECT_EQ(type.type_size * 8, dtype_bits(*type.plain));
    } else {
      EXPECT_GE(type.block_size, 32u);
      EXPECT_LE(type.block_size, 256u);  // what BlockView's buffer holds
    }
  }
  for (uint32_t id = 0; id < 1024; ++id)
    if (!ids.contains(id)) {
      EXPECT_EQ(ggml_type(id), nullptr) << id;
    }
  EXPECT_EQ(ggml_type_named("q9_9"), nullptr);
  EXPECT_EQ(ids.size(), 35u);
}

TEST(GgmlDequant, HalfToFloatIsExact) {
  EXPECT_EQ(ggml::half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(ggml::half_to_float(0xC000), -2.0f);
  EXPECT_EQ(ggml::half_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(ggml::half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(ggml::half_to_float(0x03FF), 1023 * std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(ggml::half_to_float(0xFC00)));
  EXPECT_TRUE(std::isnan(ggml::half_to_float(0x7E00)));
  EXPECT_TRUE(std::signbit(ggml::half_to_float(0x8000)));
}

TEST(GgmlDequant, LegacyBlocksByHand) {
  // q8_0: d = 0.5 (0x3800), quants 0..31 -> 0, 0.5, ...
  std::vector<std::byte> q8(34);
  q8[0] = std::byte{0x00};
  q8[1] = std::byte{0x38};
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<std::byte>(j - 16);
  auto view = BlockView::make(in_memory(q8), *ggml_type_named("q8_0"), 32);
  auto values = floats_of(*view, 128);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(values[j], 0.5f * static_cast<float>(j - 16));
  // q4_0: d = 1, byte j = (hi << 4) | lo: element j = lo - 8, j + 16 = hi - 8.
  std::vector<std::byte> q4(18);
  q4[1] = std::byte{0x3C};
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<std::byte>(((15 - j) << 4) | j);
  auto v4 = floats_of(*BlockView::make(in_memory(q4), *ggml_type_named("q4_0"), 32), 128);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v4[j], static_cast<float>(j - 8));
    EXPECT_EQ(v4[j + 16], static_cast<float>(7 - j));
  }
  // mxfp4 exponent extremes: 0 -> 2^-128 x doubled value (subnormal),
  // 255 -> 2^127 x doubled value (infinity for |value| > 1).
  std::vector<std::byte> mx(17);
  mx[1] = std::byte{0x72};  // element 0 code 2 (doubled 2), element 16 code 7 (doubled 12)
  auto low = floats_of(*BlockView::make(in_memory(mx), *ggml_type_named("mxfp4"), 32), 128);
  EXPECT_EQ(low[0], std::ldexp(1.0f, -127));
  EXPECT_EQ(low[16], 12 * std::ldexp(1.0f, -128));
  mx[0] = std::byte{0xFF};
  auto high = floats_of(*BlockView::make(in_memory(mx), *ggml_type_named("mxfp4"), 32), 128);
  EXPECT_TRUE(std::isinf(high[0]));
  EXPECT_EQ(high[1], 0.0f);
}

// float16 from its definition: minifloat's rule, and exponent 31 for
// infinities and NaN.
float half_value(uint32_t code) {
  if (((code >> 10) & 31) == 31)
    return (code & 1023) ? std::numeric_limits<float>::quiet_NaN()
                         : ((code & 0x8000) ? -std::numeric_limits<float>::infinity()
                                            : std::numeric_limits<float>::infinity());
  return minifloat(code, 5, 10, 15, false);
}

// ggml's legacy 32-element blocks from their definitions (ggml-common.h's
// block layouts, ggml-quants.c's dequantize_row_*): a float16 scale d (and
// minimum m), then quants; element j < 16 from a byte's low nibble, j + 16
// from its high one; q5's fifth bit j from the 32-bit qh. Empty for the
// other types, whose values test_numeric_views checks through a mount.
std::vector<std::byte> legacy_reference(std::string_view name, const std::vector<std::byte>& stored,
                                        size_t blocks, size_t type_size) {
  const bool q8 = name == "q8_0", q4_0 = name == "q4_0", q4_1 = name == "q4_1", q5_0 = name == "q5_0",
             q5_1 = name == "q5_1";
  if (!(q8 || q4_0 || q4_1 || q5_0 || q5_1)) return {};
  std::vector<float> values;
  for (size_t b = 0; b < blocks; ++b) {
    const std::vector<std::byte> block(stored.begin() + b * type_size, stored.begin() + (b + 1) * type_size);
    const float d = half_value(packed_code(block, 0, 16));
    const bool has_min = q4_1 || q5_1;
    const float m = has_min ? half_value(packed_code(block, 1, 16)) : 0.0f;
    const size_t quants = has_min ? 4 : 2;
    if (q8) {
      for (size_t j = 0; j < 32; ++j)
        values.push_back(d * static_cast<float>(static_cast<int8_t>(block[2 + j])));
      continue;
    }
    const bool five = q5_0 || q5_1;
    uint32_t qh = 0;
    for (size_t k = 0; five && k < 4; ++k) qh |= std::to_integer<uint32_t>(block[quants + k]) << (8 * k);
    const size_t qs = quants + (five ? 4 : 0);
    for (size_t j = 0; j < 32; ++j) {
      const uint32_t byte = std::to_integer<uint32_t>(block[qs + j % 16]);
      const int q = static_cast<int>((j < 16 ? byte & 15 : byte >> 4) | (((qh >> j) & 1) << 4));
      values.push_back(has_min ? static_cast<float>(q) * d + m : static_cast<float>(q - (five ? 16 : 8)) * d);
    }
  }
  std::vector<std::byte> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST(GgmlDequant, EveryTypeReadsAtOddRangesAsWhole) {
  for (const auto& codec : ggml_types()) {
    if (codec.plain) continue;
    SCOPED_TRACE(std::string(codec.name));
    const uint64_t blocks = 37;
    auto stored = random_bytes(blocks * codec.type_size, codec.type_size);
    auto view = BlockView::make(in_memory(stored), codec, blocks * codec.block_size);
    ASSERT_TRUE(view);
    EXPECT_EQ(view->size(), blocks * codec.block_size * 4);
    auto expected = legacy_reference(codec.name, stored, blocks, codec.type_size);
    if (expected.empty())
      expect_ranges_match_whole(*view, view->size());
    else
      expect_view_holds(*view, view->size(), std::move(expected), true);
  }
}

TEST(GgmlGrids, DerivedTablesFollowTheirDefinitions) {
  const int8_t mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(ggml::kMxfp4Doubled[i], mxfp4[i]) << i;
  // Sign patterns: the 7 stored bits, and an eighth making the count of
  // minus signs even.
  for (uint32_t i = 0; i < 128; ++i) {
    const uint8_t s = ggml::sign_pattern(i);
    EXPECT_EQ(s & 127, i);
    EXPECT_EQ(std::popcount(s) % 2, 0);
  }
  EXPECT_EQ(ggml::sign_pattern(1), 129);
  EXPECT_EQ(ggml::sign_pattern(3), 3);
  // iq4_nl's levels: 16, ascending, spanning -127..113.
  for (int i = 1; i < 16; ++i) EXPECT_LT(ggml::kIq4nlLevels[i - 1], ggml::kIq4nlLevels[i]);
  EXPECT_EQ(ggml::kIq4nlLevels[0], -127);
  EXPECT_EQ(ggml::kIq4nlLevels[15], 113);
}

// Each lattice grid against its definition: the codes as tabulated (their
// count, ascending, every digit naming a level), each row the levels its
// code's digits name, and rows of ggml's published byte grids.
uint64_t row_bits(const uint8_t* row, int width) {
  uint64_t bits = 0;
  for (int i = width - 1; i >= 0; --i) bits = (bits << 8) | row[i];
  return bits;
}

void expect_grid_follows_codes(const ggml::GridCodes& grid, size_t rows, const void* (*row_of)(uint32_t)) {
  ASSERT_EQ(grid.codes.size(), rows);
  for (size_t k = 0; k < rows; ++k) {
    if (k > 0) EXPECT_LT(grid.codes[k - 1], grid.codes[k]) << k;
    const uint32_t code = grid.codes[k];
    EXPECT_EQ(code >> (grid.bits_per_element * grid.elements_per_row), 0u) << k;
    const auto* row = static_cast<const uint8_t*>(row_of(static_cast<uint32_t>(k)));
    for (uint32_t i = 0; i < grid.elements_per_row; ++i) {
      const uint32_t digit = (code >> (grid.bits_per_element * i)) & ((1u << grid.bits_per_element) - 1);
      ASSERT_LT(digit, grid.levels.size()) << k;
      EXPECT_EQ(static_cast<int8_t>(row[i]), static_cast<int8_t>(grid.levels[digit])) << k << " " << i;
    }
  }
}

TEST(GgmlGrids, EachGridIsItsCodesLevels) {
  expect_grid_follows_codes(ggml::iq2xxs_codes(), 256,
                            [](uint32_t i) -> const void* { return ggml::iq2xxs_grid(i); });
  expect_grid_follows_codes(ggml::iq2xs_codes(), 512,
                            [](uint32_t i) -> const void* { return ggml::iq2xs_grid(i); });
  expect_grid_follows_codes(ggml::iq2s_codes(), 1024,
                            [](uint32_t i) -> const void* { return ggml::iq2s_grid(i); });
  expect_grid_follows_codes(ggml::iq3xxs_codes(), 256,
                            [](uint32_t i) -> const void* { return ggml::iq3xxs_grid(i); });
  expect_grid_follows_codes(ggml::iq3s_codes(), 512,
                            [](uint32_t i) -> const void* { return ggml::iq3s_grid(i); });
  expect_grid_follows_codes(ggml::iq1s_codes(), 2048,
                            [](uint32_t i) -> const void* { return ggml::iq1s_grid(i); });
}

TEST(GgmlGrids, RowsMatchGgmlsPublishedGrids) {
  // Rows as ggml-common.h prints them (element 0 in the lowest byte).
  const uint64_t iq2xxs[][2] = {{0, 0x0808080808080808},
                                {1, 0x080808080808082b},
                                {2, 0x0808080808081919},
                                {254, 0x2b2b2b0819190808},
                                {255, 0x2b2b2b1908081908}};
  for (auto [i, v] : iq2xxs) EXPECT_EQ(row_bits(ggml::iq2xxs_grid(static_cast<uint32_t>(i)), 8), v) << i;
  const uint64_t iq2xs[] = {0x0808080808080808, 0x080808080808082b, 0x0808080808081919, 0x0808080808082b08,
                            0x0808080808082b2b, 0x0808080808190819, 0x0808080808191908, 0x080808080819192b,
                            0x0808080808192b19, 0x08080808082b0808, 0x08080808082b082b, 0x08080808082b1919,
                            0x08080808082b2b08, 0x0808080819080819, 0x0808080819081908, 0x080808081908192b,
                            0x0808080819082b19, 0x0808080819190808, 0x080808081919082b, 0x0808080819191919,
                            0x0808080819192b08};
  for (uint32_t i = 0; i < std::size(iq2xs); ++i) EXPECT_EQ(row_bits(ggml::iq2xs_grid(i), 8), iq2xs[i]) << i;
  EXPECT_EQ(row_bits(ggml::iq2s_grid(1022), 8), 0x2b2b2b2b2b082b08u);
  EXPECT_EQ(row_bits(ggml::iq2s_grid(1023), 8), 0x2b2b2b2b2b2b2b2bu);
  const uint64_t iq3xxs[] = {
      0x04040404, 0x04040414, 0x04040424, 0x04040c0c, 0x04040c1c, 0x04040c3e, 0x04041404, 0x04041414,
      0x04041c0c, 0x04042414, 0x04043e1c, 0x04043e2c, 0x040c040c, 0x040c041c, 0x040c0c04, 0x040c0c14,
      0x040c140c, 0x040c142c, 0x040c1c04, 0x040c1c14, 0x040c240c, 0x040c2c24, 0x040c3e04, 0x04140404,
      0x04140414, 0x04140424, 0x04140c0c, 0x04141404, 0x04141414, 0x04141c0c, 0x04141c1c, 0x04141c3e};
  for (uint32_t i = 0; i < std::size(iq3xxs); ++i)
    EXPECT_EQ(row_bits(ggml::iq3xxs_grid(i), 4), iq3xxs[i]) << i;
  EXPECT_EQ(row_bits(ggml::iq3xxs_grid(255), 4), 0x3e341c04u);
  EXPECT_EQ(row_bits(ggml::iq3s_grid(510), 4), 0x0f0d0703u);
  EXPECT_EQ(row_bits(ggml::iq3s_grid(511), 4), 0x0f0f0101u);
  const uint64_t iq1s[] = {0xffffffffffffffff, 0xffffffffffffff01, 0xffffffffffff0000, 0xffffffffffff01ff,
                           0xffffffffffff0101, 0xffffffffff00ff00, 0xffffffffff000000, 0xffffffffff01ffff,
                           0xffffffffff01ff01, 0xffffffffff0101ff, 0xffffffffff010101, 0xffffffff00ff0000,
                           0xffffffff0000ff00, 0xffffffff000000ff, 0xffffffff00000001, 0xffffffff00010000};
  for (uint32_t i = 0; i < std::size(iq1s); ++i)
    EXPECT_EQ(row_bits(reinterpret_cast<const uint8_t*>(ggml::iq1s_grid(i)), 8), iq1s[i]) << i;
}

// ---- the tree

TensorSpec tensor_of(const std::string& name, DType dtype, std::vector<uint64_t> shape, std::string bytes) {
  TensorSpec t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.strides = contiguous_strides(t.shape).value();
  t.bytes = ByteSpan::owned(std::move(bytes));
  t.source = {"m", 0};
  return t;
}

TEST(NumericTree, ConvertedNpyHasAFloat32HeaderAndTheSidecarSaysSo) {
  Catalog catalog;
  catalog.format = "gguf";
  catalog.files = {"m"};
  catalog.add(tensor_of("bf", DType::BFloat16, {2}, std::string("\x80\x3f\x00\xc0", 4)));
  TensorSpec q = tensor_of("q", DType::GgmlBlock, {32}, std::string(34, '\0'));
  q.ggml = ggml_type_named("q8_0");
  catalog.add(q);
  TensorSpec nv = tensor_of("nv", DType::GgmlBlock, {64}, std::string(36, '\0'));
  nv.ggml = &kNoKernels;  // no dequantization
  catalog.add(nv);
  catalog.add(tensor_of("f", DType::Float32, {1}, std::string(4, '\0')));
  auto tree = Tree::build(std::move(catalog), {});
  const std::string npy = tree->content(*tree->node(*tree->resolve("bf.npy")));
  EXPECT_NE(npy.find("'descr': '<f4'"), std::string::npos);
  float values[2];
  std::memcpy(values, npy.data() + npy.size() - 8, 8);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[1], -2.0f);
  auto sidecar = nlohmann::json::parse(tree->content(*tree->node(*tree->resolve("bf.json"))));
  EXPECT_EQ(sidecar["npy"], nlohmann::json({{"dtype", "float32"}, {"from", "bfloat16"}, {"exact", true}}));
  sidecar = nlohmann::json::parse(tree->content(*tree->node(*tree->resolve("q.json"))));
  EXPECT_EQ(sidecar["npy"], nlohmann::json({{"dtype", "float32"}, {"from", "q8_0"}, {"exact", false}}));
  EXPECT_EQ(tree->node(*tree->resolve("q.npy"))->size, 128u + 128u);
  sidecar = nlohmann::json::parse(tree->content(*tree->node(*tree->resolve("f.json"))));
  EXPECT_EQ(sidecar["npy"], nlohmann::json({{"dtype", "float32"}, {"from", "float32"}, {"exact", true}}));
  // A block type modelfs cannot dequantize: no .npy, and the sidecar says
  // nothing of one.
  EXPECT_FALSE(tree->resolve("nv.npy"));
  sidecar = nlohmann::json::parse(tree->content(*tree->node(*tree->resolve("nv.json"))));
  EXPECT_FALSE(sidecar.contains("npy"));
  // Each sidecar's size was measured by the printer that serves it.
  for (const char* name : {"bf.json", "q.json", "nv.json", "f.json"}) {
    const Node* file = tree->node(*tree->resolve(name));
    EXPECT_EQ(tree->content(*file).size(), file->size) << name;
  }
}

}  // namespace
}  // namespace modelfs
