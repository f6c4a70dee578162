// SPDX-License-Identifier: Apache-2.0
#include "tree/numeric_views.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "io/checked_math.hpp"
#include "io/mapped_bytes.hpp"
#include "io/utf8.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"
#include "tree/ggml_dequant.hpp"

namespace modelfs {
namespace {

// A little-endian number at `p`, at any alignment.
static_assert(std::endian::native == std::endian::little, "stored numbers are read as they lie");
template <typename T>
inline T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

// ---- small float formats

enum class Specials : uint8_t {
  Ieee,    // the top exponent is infinity (mantissa 0) or NaN
  Fn,      // finite; only all-ones exponent and mantissa is NaN
  Fnuz,    // finite, no negative zero: the sign bit alone is NaN
  Finite,  // every code is a number
};

// The value of `code` in a format of 1 sign bit, `e` exponent and `m`
// mantissa bits with `bias`: 2^(1-bias) x m/2^m for exponent 0, else
// 2^(exp-bias) x (1 + m/2^m). Every such value is exact in float32.
float small_float(uint32_t code, int e, int m, int bias, Specials specials) {
  const uint32_t sign = (code >> (e + m)) & 1;
  const uint32_t exponent = (code >> m) & ((1u << e) - 1);
  const uint32_t mantissa = code & ((1u << m) - 1);
  const uint32_t top = (1u << e) - 1;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float magnitude = 0;
  if (specials == Specials::Fnuz && sign == 1 && exponent == 0 && mantissa == 0) return nan;
  if (specials == Specials::Ieee && exponent == top)
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity() : nan;
  else if (specials == Specials::Fn && exponent == top && mantissa == (1u << m) - 1)
    magnitude = nan;
  else if (exponent == 0)
    magnitude = std::ldexp(static_cast<float>(mantissa), 1 - bias - m);
  else
    magnitude = std::ldexp(static_cast<float>(mantissa + (1u << m)), static_cast<int>(exponent) - bias - m);
  return sign ? -magnitude : magnitude;
}

// float8_e8m0fnu: an unsigned power of two, 2^(code - 127); 0xFF is NaN.
float e8m0(uint32_t code) {
  if (code == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(code) - 127);
}

// One value a code, from a table made once: every stored type of 8 bits or
// fewer. Codes are read `bits` at a time from the lowest bits of each byte
// up (a 6-bit code may straddle two bytes), or, for uint1, from the most
// significant bit down.
class LookupConversion final : public ElementConversion {
 public:
  LookupConversion(uint32_t bits, uint32_t value_size, bool msb_first = false)
      : bits_(bits), value_size_(value_size), msb_first_(msb_first) {}
  uint32_t stored_bits() const noexcept override { return bits_; }
  uint32_t value_size() const noexcept override { return value_size_; }
  void set(uint32_t code, uint32_t value_bits) { table_[code] = value_bits; }

  void convert(const std::byte* stored, uint64_t first, size_t count, uint64_t,
               std::byte* out) const override {
    const auto* bytes = reinterpret_cast<const uint8_t*>(stored);
    if (value_size_ == 4) {
      if (bits_ == 8) {
        for (size_t i = 0; i < count; ++i) std::memcpy(out + 4 * i, &table_[bytes[first + i]], 4);
        return;
      }
      for (size_t i = 0; i < count; ++i) std::memcpy(out + 4 * i, &table_[code(bytes, first + i)], 4);
      return;
    }
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<std::byte>(table_[code(bytes, first + i)]);
  }

 private:
  uint32_t code(const uint8_t* bytes, uint64_t element) const {
    const uint64_t bit = element * bits_;
    const uint64_t at = bit / 8;
    if (msb_first_) return (bytes[at] >> (8 - bits_ - bit % 8)) & ((1u << bits_) - 1);  // bits_ divides 8
    const uint32_t shift = bit % 8;
    uint32_t word = bytes[at];
    if (shift + bits_ > 8) word |= uint32_t{bytes[at + 1]} << 8;  // lies in the element's bits
    return (word >> shift) & ((1u << bits_) - 1);
  }

  uint32_t bits_;
  uint32_t value_size_;
  bool msb_first_;
  std::array<uint32_t, 256> table_{};
};

std::unique_ptr<ElementConversion> float_table(uint32_t bits, auto value_of) {
  auto conversion = std::make_unique<LookupConversion>(bits, 4);
  for (uint32_t code = 0; code < (1u << bits); ++code)
    conversion->set(code, std::bit_cast<uint32_t>(static_cast<float>(value_of(code))));
  return conversion;
}

// int4/int2 (two's complement) to int8, uint4/uint2/uint1 to uint8.
std::unique_ptr<ElementConversion> integer_table(uint32_t bits, bool is_signed, bool msb_first = false) {
  auto conversion = std::make_unique<LookupConversion>(bits, 1, msb_first);
  for (uint32_t code = 0; code < (1u << bits); ++code) {
    int value = static_cast<int>(code);
    if (is_signed && code >= (1u << (bits - 1))) value -= 1 << bits;
    conversion->set(code, static_cast<uint8_t>(value));
  }
  return conversion;
}

// NF4's 16 values (QLoRA's NormalFloat quantiles, as OpenVINO's
// ConvertNF4::dequantize lists them), each exact in float32.
constexpr float kNF4[16] = {-1.0f,
                            -0.6961928009986877f,
                            -0.5250730514526367f,
                            -0.39491748809814453f,
                            -0.28444138169288635f,
                            -0.18477343022823334f,
                            -0.09105003625154495f,
                            0.0f,
                            0.07958029955625534f,
                            0.16093020141124725f,
                            0.24611230194568634f,
                            0.33791524171829224f,
                            0.44070982933044434f,
                            0.5626170039176941f,
                            0.7229568362236023f,
                            1.0f};

// bfloat16 is the top half of a float32.
class BFloat16Conversion final : public ElementConversion {
 public:
  uint32_t stored_bits() const noexcept override { return 16; }
  uint32_t value_size() const noexcept override { return 4; }
  void convert(const std::byte* stored, uint64_t first, size_t count, uint64_t,
               std::byte* out) const override {
    const std::byte* in = stored + 2 * first;
    for (size_t i = 0; i < count; ++i) {
      const uint32_t bits = uint32_t{load<uint16_t>(in + 2 * i)} << 16;
      std::memcpy(out + 4 * i, &bits, 4);
    }
  }
};

// The stored integer q of a torch quantized tensor.
inline int64_t quantized_at(const std::byte* stored, DType dtype, uint64_t element) {
  switch (dtype) {
    case DType::Int8:
      return static_cast<int8_t>(std::to_integer<uint8_t>(stored[element]));
    case DType::UInt8:
      return std::to_integer<uint8_t>(stored[element]);
    default:
      return load<int32_t>(stored + 4 * element);
  }
}

uint32_t quantized_bits(DType dtype) { return dtype == DType::Int32 ? 32 : 8; }

// Per tensor, as torch dequantizes: float(q - zero_point) x float(scale).
class PerTensorConversion final : public ElementConversion {
 public:
  PerTensorConversion(DType stored, const PerTensorAffine& p)
      : stored_(stored), scale_(static_cast<float>(p.scale)), zero_point_(p.zero_point) {}
  uint32_t stored_bits() const noexcept override { return quantized_bits(stored_); }
  uint32_t value_size() const noexcept override { return 4; }
  void convert(const std::byte* stored, uint64_t first, size_t count, uint64_t,
               std::byte* out) const override {
    for (size_t i = 0; i < count; ++i) {
      const int64_t q = quantized_at(stored, stored_, first + i);
      // q and the zero point are within 64 bits' reach of each other only
      // if the difference cannot overflow: saturate the (hostile) rest.
      int64_t difference = 0;
      if (__builtin_sub_overflow(q, zero_point_, &difference))
        difference = q < 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
      const float value = static_cast<float>(difference) * scale_;
      std::memcpy(out + 4 * i, &value, 4);
    }
  }

 private:
  DType stored_;
  float scale_;
  int64_t zero_point_;
};

// Per channel, as torch dequantizes: (float(q) - float(zero_point)) in
// float32, times the channel's scale in float64, rounded to float32.
class PerChannelConversion final : public ElementConversion {
 public:
  PerChannelConversion(DType stored, const PerChannelAffine& p) : stored_(stored), p_(p) {}
  uint32_t stored_bits() const noexcept override { return quantized_bits(stored_); }
  bool by_position() const noexcept override { return true; }
  uint32_t value_size() const noexcept override { return 4; }
  // The scales and zero points may lie in a remote model's mapping.
  void make_present(ReadScope& scope) const override {
    p_.scales.span(&scope);
    p_.zero_points.span(&scope);
  }
  void convert(const std::byte* stored, uint64_t first, size_t count, uint64_t position,
               std::byte* out) const override {
    size_t i = 0;
    while (i < count) {
      const uint64_t at = position + i;
      const uint64_t channel = (at / p_.inner) % p_.channels;
      const size_t run = static_cast<size_t>(std::min<uint64_t>(count - i, p_.inner - at % p_.inner));
      const double scale = scale_of(channel);
      const float zero_point = zero_point_of(channel);
      for (size_t k = i; k < i + run; ++k) {
        const float centered = static_cast<float>(quantized_at(stored, stored_, first + k)) - zero_point;
        const auto value = static_cast<float>(static_cast<double>(centered) * scale);
        std::memcpy(out + 4 * k, &value, 4);
      }
      i += run;
    }
  }

 private:
  double scale_of(uint64_t channel) const {
    if (p_.scales_dtype == DType::Float32)
      return static_cast<double>(load<float>(p_.scales.data() + 4 * channel));
    return load<double>(p_.scales.data() + 8 * channel);
  }
  float zero_point_of(uint64_t channel) const {
    const std::byte* at = p_.zero_points.data();
    switch (p_.zero_points_dtype) {
      case DType::Int32:
        return static_cast<float>(load<int32_t>(at + 4 * channel));
      case DType::Float32:
        return load<float>(at + 4 * channel);
      case DType::Float64:
        return static_cast<float>(load<double>(at + 8 * channel));
      default:
        return static_cast<float>(load<int64_t>(at + 8 * channel));
    }
  }

  DType stored_;
  PerChannelAffine p_;
};

// q x scale + min in float64, as JavaScript computes it, then kept as a
// float32 (what a Float32Array stores) or, for integers, rounded half up
// (Math.round) and wrapped modulo 2^32, NaN and infinities to 0 (what an
// Int32Array stores).
class MinScaleConversion final : public ElementConversion {
 public:
  MinScaleConversion(DType stored, double scale, double min, bool integers)
      : wide_(stored == DType::UInt16), scale_(scale), min_(min), integers_(integers) {}
  uint32_t stored_bits() const noexcept override { return wide_ ? 16 : 8; }
  uint32_t value_size() const noexcept override { return 4; }
  void convert(const std::byte* stored, uint64_t first, size_t count, uint64_t,
               std::byte* out) const override {
    for (size_t i = 0; i < count; ++i) {
      const uint64_t at = first + i;
      const double q = wide_ ? load<uint16_t>(stored + 2 * at) : std::to_integer<uint8_t>(stored[at]);
      const double value = q * scale_ + min_;
      if (integers_) {
        const int32_t rounded = wrapped_int32(round_half_up(value));
        std::memcpy(out + 4 * i, &rounded, 4);
      } else {
        const auto single = static_cast<float>(value);
        std::memcpy(out + 4 * i, &single, 4);
      }
    }
  }

 private:
  static double round_half_up(double x) {
    if (!std::isfinite(x)) return x;
    double whole = std::floor(x);
    if (x - whole >= 0.5) whole += 1;  // exact: x and its floor share their exponent's grid
    return whole;
  }
  static int32_t wrapped_int32(double whole) {
    if (!std::isfinite(whole)) return 0;
    constexpr double kTwo32 = 4294967296.0;
    double m = std::fmod(whole, kTwo32);
    if (m < 0) m += kTwo32;
    return static_cast<int32_t>(static_cast<uint32_t>(m));
  }

  bool wide_;
  double scale_;
  double min_;
  bool integers_;
};

// IEEE half precision widened to float32: every value exact, NaN payloads
// kept.
class HalfConversion final : public ElementConversion {
 public:
  uint32_t stored_bits() const noexcept override { return 16; }
  uint32_t value_size() const noexcept override { return 4; }
  void convert(const std::byte* stored, uint64_t first, size_t count, uint64_t,
               std::byte* out) const override {
    for (size_t i = 0; i < count; ++i) {
      const uint32_t h = load<uint16_t>(stored + 2 * (first + i));
      const uint32_t sign = (h & 0x8000u) << 16;
      const uint32_t exponent = (h >> 10) & 0x1Fu;
      const uint32_t mantissa = h & 0x3FFu;
      uint32_t bits;
      if (exponent == 0) {
        // Zero or subnormal: mantissa x 2^-24, exact in float32.
        const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
        bits = sign | std::bit_cast<uint32_t>(magnitude);
      } else if (exponent == 0x1F) {
        bits = sign | 0x7F800000u | (mantissa << 13);
      } else {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
      }
      std::memcpy(out + 4 * i, &bits, 4);
    }
  }
};

bool is_quantized_storage(DType dtype) {
  return dtype == DType::Int8 || dtype == DType::UInt8 || dtype == DType::Int32;
}

uint64_t bytes_of(DType dtype) {
  switch (dtype) {
    case DType::Float64:
    case DType::Int64:
      return 8;
    case DType::Float32:
    case DType::Int32:
      return 4;
    default:
      return 0;
  }
}

// The plain dtypes numpy lacks: the numpy type each one's .npy holds, and
// how a stored element becomes one value of it.
struct Widening {
  DType stored;
  DType npy;
  std::unique_ptr<ElementConversion> (*make)();
};

constexpr Widening kWidenings[] = {
    {DType::BFloat16, DType::Float32,
     []() -> std::unique_ptr<ElementConversion> { return std::make_unique<BFloat16Conversion>(); }},
    {DType::Float8E4M3FN, DType::Float32,
     [] { return float_table(8, [](uint32_t c) { return small_float(c, 4, 3, 7, Specials::Fn); }); }},
    {DType::Float8E4M3FNUZ, DType::Float32,
     [] { return float_table(8, [](uint32_t c) { return small_float(c, 4, 3, 8, Specials::Fnuz); }); }},
    {DType::Float8E5M2, DType::Float32,
     [] { return float_table(8, [](uint32_t c) { return small_float(c, 5, 2, 15, Specials::Ieee); }); }},
    {DType::Float8E5M2FNUZ, DType::Float32,
     [] { return float_table(8, [](uint32_t c) { return small_float(c, 5, 2, 16, Specials::Fnuz); }); }},
    {DType::Float8E8M0FNU, DType::Float32, [] { return float_table(8, e8m0); }},
    {DType::Float4E2M1, DType::Float32,
     [] { return float_table(4, [](uint32_t c) { return small_float(c, 2, 1, 1, Specials::Finite); }); }},
    {DType::Float6E2M3FN, DType::Float32,
     [] { return float_table(6, [](uint32_t c) { return small_float(c, 2, 3, 1, Specials::Finite); }); }},
    {DType::Float6E3M2FN, DType::Float32,
     [] { return float_table(6, [](uint32_t c) { return small_float(c, 3, 2, 3, Specials::Finite); }); }},
    {DType::Int4, DType::Int8, [] { return integer_table(4, true); }},
    {DType::UInt4, DType::UInt8, [] { return integer_table(4, false); }},
    {DType::Int2, DType::Int8, [] { return integer_table(2, true); }},
    {DType::UInt2, DType::UInt8, [] { return integer_table(2, false); }},
    {DType::UInt1, DType::UInt8, [] { return integer_table(1, false, true); }},
    {DType::NF4, DType::Float32, [] { return float_table(4, [](uint32_t c) { return kNF4[c]; }); }},
};

const Widening* widening(DType stored) {
  for (const auto& w : kWidenings)
    if (w.stored == stored) return &w;
  return nullptr;
}

// A strided view's elements as stored, gathered into C order.
class CopyConversion final : public ElementConversion {
 public:
  explicit CopyConversion(uint32_t size) : size_(size) {}
  uint32_t stored_bits() const noexcept override { return 8 * size_; }
  uint32_t value_size() const noexcept override { return size_; }
  void convert(const std::byte* stored, uint64_t first, size_t count, uint64_t,
               std::byte* out) const override {
    std::memcpy(out, stored + first * size_, count * size_);
  }

 private:
  uint32_t size_;
};

}  // namespace

std::shared_ptr<const ElementConversion> copy_conversion(uint32_t element_size) {
  if (element_size == 0 || element_size > ElementView::kMaxValueSize) return nullptr;
  return std::make_shared<CopyConversion>(element_size);
}

std::optional<DType> widened_type(DType stored) {
  if (const Widening* w = widening(stored)) return w->npy;
  return std::nullopt;
}

std::shared_ptr<const ElementConversion> plain_conversion(DType stored) {
  // One per dtype, made once (thread-safe static initialisation).
  static const auto conversions = [] {
    std::array<std::shared_ptr<const ElementConversion>, 256> made;
    for (const Widening& w : kWidenings) made[static_cast<uint8_t>(w.stored)] = w.make();
    return made;
  }();
  return conversions[static_cast<uint8_t>(stored)];
}

std::unique_ptr<ElementConversion> affine_conversion(DType stored, const PerTensorAffine& params) {
  if (!is_quantized_storage(stored)) return nullptr;
  return std::make_unique<PerTensorConversion>(stored, params);
}

bool dequantizes(const Quantization& q, DType stored) {
  if (q.scheme == QScheme::MinScaleAffine)
    return (stored == DType::UInt8 || stored == DType::UInt16) && q.scale && q.min &&
           (q.values == DType::Float32 || q.values == DType::Int32);
  if (q.scheme == QScheme::Widened) return stored == DType::Float16 && q.values == DType::Float32;
  return false;
}

std::unique_ptr<ElementConversion> dequantization(const Quantization& q, DType stored) {
  if (!dequantizes(q, stored)) return nullptr;
  if (q.scheme == QScheme::Widened) return std::make_unique<HalfConversion>();
  return std::make_unique<MinScaleConversion>(stored, *q.scale, *q.min, q.values == DType::Int32);
}

std::unique_ptr<ElementConversion> affine_conversion(DType stored, const PerChannelAffine& params) {
  if (!is_quantized_storage(stored) || params.channels == 0 || params.inner == 0) return nullptr;
  const uint64_t scale_bytes = bytes_of(params.scales_dtype);
  const uint64_t zero_bytes = bytes_of(params.zero_points_dtype);
  if (params.scales_dtype != DType::Float64 && params.scales_dtype != DType::Float32) return nullptr;
  if (zero_bytes == 0) return nullptr;
  const Size scales = Size(params.channels) * scale_bytes;
  const Size zeros = Size(params.channels) * zero_bytes;
  if (!scales.ok() || !zeros.ok() || scales.value() > params.scales.size() ||
      zeros.value() > params.zero_points.size())
    return nullptr;
  return std::make_unique<PerChannelConversion>(stored, params);
}

std::unique_ptr<ElementView> ElementView::make(const ByteSpan& stored, std::span<const uint64_t> shape,
                                               std::span<const int64_t> strides,
                                               std::shared_ptr<const ElementConversion> conversion) {
  if (!conversion || shape.size() != strides.size()) return nullptr;
  Size numel = 1;
  for (uint64_t d : shape) numel *= d;
  if (!numel.ok()) return nullptr;
  const bool empty = numel.value() == 0;
  bool contiguous = true;
  Size expected = 1;  // a partial product of numel: it fits
  Size last = 0;      // the storage index of the last element
  for (size_t d = shape.size(); d-- > 0;) {
    if (strides[d] < 0) return nullptr;
    if (empty) continue;  // reaches nothing
    const auto stride = static_cast<uint64_t>(strides[d]);
    if (shape[d] != 1 && stride != expected.value()) contiguous = false;
    expected *= shape[d];
    last += Size(shape[d] - 1) * stride;
  }
  if (empty) contiguous = true;
  // The stored elements the view reaches must lie inside `stored`.
  const Size reached = empty ? Size(0) : (contiguous ? numel : last + 1);
  const Size reach = (reached * conversion->stored_bits() + 7) / 8;
  const Size size = numel * conversion->value_size();
  if (!reach.ok() || !size.ok() || reach.value() > stored.size()) return nullptr;
  // Stride 0 repeats a few stored bytes as often as the shape says: past
  // the bound, no view (npy.hpp).
  if (!kViewBound.allows(size.value(), stored.size())) return nullptr;

  std::unique_ptr<ElementView> view(new ElementView(stored, reach.value(), size.value()));
  view->shape_ = shape;
  view->strides_ = strides;
  view->contiguous_ = contiguous;
  view->conversion_ = std::move(conversion);
  return view;
}

std::vector<bool> ElementView::repeated_dimensions() const {
  std::vector<bool> repeated(shape_.size(), false);
  bool any = false;
  for (size_t d = 0; d < shape_.size(); ++d) {
    repeated[d] = strides_[d] == 0 && shape_[d] > 1;
    any = any || repeated[d];
  }
  if (!any || conversion_->by_position()) return {};
  return repeated;
}

void ElementView::values(uint64_t position, size_t count, std::byte* out) const {
  if (contiguous_) {
    conversion_->convert(base(), position, count, position, out);
    return;
  }
  // Runs along the innermost dimension: contiguous in storage where its
  // stride is 1, element by element otherwise.
  const size_t rank = shape_.size();
  const uint32_t value_size = conversion_->value_size();
  const uint64_t inner = shape_[rank - 1];
  const auto inner_stride = static_cast<uint64_t>(strides_[rank - 1]);
  while (count > 0) {
    uint64_t rest = position;
    uint64_t at = 0;
    uint64_t inner_index = 0;
    for (size_t d = rank; d-- > 0;) {
      const uint64_t index = rest % shape_[d];
      rest /= shape_[d];
      at += index * static_cast<uint64_t>(strides_[d]);
      if (d == rank - 1) inner_index = index;
    }
    const size_t run = static_cast<size_t>(std::min<uint64_t>(count, inner - inner_index));
    if (inner_stride == 1) {
      conversion_->convert(base(), at, run, position, out);
    } else {
      for (size_t k = 0; k < run; ++k)
        conversion_->convert(base(), at + k * inner_stride, 1, position + k, out + k * value_size);
    }
    out += run * value_size;
    position += run;
    count -= run;
  }
}

void StoredView::read(uint64_t offset, std::span<std::byte> out, ReadScope& scope) const {
  if (out.empty()) return;
  make_present(offset, out.size(), scope);
  read_mapped([&] { compute(offset, out); });
}

void ElementView::make_present(uint64_t offset, uint64_t length, ReadScope& scope) const {
  conversion_->make_present(scope);
  if (!contiguous_ || length == 0) return prepare_stored(scope);
  // Elements in order: those of the values [offset, offset + length).
  const uint64_t value_size = conversion_->value_size(), bits = conversion_->stored_bits();
  const uint64_t first = offset / value_size, end = (offset + length - 1) / value_size + 1;
  prepare_stored(first * bits / 8, (end * bits + 7) / 8 - first * bits / 8, scope);
}

void SwapView::make_present(uint64_t offset, uint64_t length, ReadScope& scope) const {
  if (length == 0) return;
  // The whole elements the range lies in.
  const uint64_t first = offset / swap_ * swap_, end = (offset + length - 1) / swap_ * swap_ + swap_;
  prepare_stored(first, end - first, scope);
}

void SwapView::compute(uint64_t offset, std::span<std::byte> out) const {
  const std::byte* in = base();
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t at = offset + i, within = at % swap_;
    out[i] = in[at - within + swap_ - 1 - within];
  }
}

namespace {

// Decodes latin-1 text in UTF-8 from text[*at], `count` bytes into `out`
// (null: skipped); false when the text ends first or is not such text.
// Runs under the mapped-bytes guard: plain loops only.
bool decode_latin1(std::span<const std::byte> text, size_t* at, uint64_t count, std::byte* out) {
  size_t i = *at;
  for (uint64_t k = 0; k < count; ++k) {
    if (i >= text.size()) return false;
    const auto lead = std::to_integer<unsigned char>(text[i]);
    unsigned char next = 0;
    if (lead >= 0x80) {
      if ((lead != 0xC2 && lead != 0xC3) || i + 1 >= text.size()) return false;
      next = std::to_integer<unsigned char>(text[i + 1]);
      if ((next & 0xC0) != 0x80) return false;
    }
    if (out != nullptr) out[k] = std::byte{latin1_byte(lead, next)};
    i += lead < 0x80 ? 1 : 2;
  }
  *at = i;
  return true;
}

}  // namespace

std::unique_ptr<Latin1View> Latin1View::make(const ByteSpan& stored, uint64_t size) {
  if (stored.size() < size || stored.size() / 2 > size) return nullptr;
  std::unique_ptr<Latin1View> view(new Latin1View(stored, size));
  view->marks_.resize(size / kMarkBytes + 1);
  const std::span<const std::byte> text = stored.span();
  uint64_t* marks = view->marks_.data();
  bool whole = true;
  read_mapped([&] {
    size_t at = 0;
    for (uint64_t mark = 0; mark * kMarkBytes < size && whole; ++mark) {
      marks[mark] = at;
      whole = decode_latin1(text, &at, std::min(kMarkBytes, size - mark * kMarkBytes), nullptr);
    }
    if (size % kMarkBytes == 0) marks[size / kMarkBytes] = at;
    whole = whole && at == text.size();
  });
  if (!whole) return nullptr;
  return view;
}

void Latin1View::read(uint64_t offset, std::span<std::byte> out, ReadScope& scope) const {
  if (out.empty()) return;
  const uint64_t mark = offset / kMarkBytes, from = marks_[mark];
  const uint64_t skip = offset - mark * kMarkBytes;
  // At most two bytes of text a byte.
  const uint64_t reach = std::min<uint64_t>(stored_.size() - from, 2 * (skip + out.size()));
  const std::span<const std::byte> text = stored_.subspan(from, reach).span(&scope);
  bool decoded = false;
  read_mapped([&] {
    size_t at = 0;
    decoded = decode_latin1(text, &at, skip, nullptr) && decode_latin1(text, &at, out.size(), out.data());
  });
  if (!decoded) {
    const MappedFile* file = stored_.mapped_file();
    throw ModelError(file != nullptr ? file->display_name() : std::string(), "pickle",
                     stored_.file_offset() + from,
                     "an array's latin-1 text no longer decodes (the file changed under the mount)");
  }
}

void BlockView::make_present(uint64_t offset, uint64_t length, ReadScope& scope) const {
  if (length == 0) return;
  const uint64_t block_bytes = uint64_t{type_->block_size} * 4;  // of float32 values
  const uint64_t first = offset / block_bytes, end = (offset + length - 1) / block_bytes + 1;
  prepare_stored(first * type_->type_size, (end - first) * type_->type_size, scope);
}

void ElementView::compute(uint64_t offset, std::span<std::byte> out) const {
  constexpr size_t kChunk = 64 << 10;  // values converted at a time
  fill_values(offset, out, conversion_->value_size(), kChunk,
              [this](uint64_t at, size_t count, std::byte* into) { values(at, count, into); });
}

std::unique_ptr<BlockView> BlockView::make(const ByteSpan& stored, const GgmlType& type, uint64_t numel) {
  const GgmlType* codec = &type;
  const ggml::GgmlKernels* kernels = ggml::kernels(type);
  if (kernels == nullptr || numel % codec->block_size != 0) return nullptr;
  const Size bytes = Size(numel / codec->block_size) * codec->type_size;
  const Size size = Size(numel) * 4;
  if (!bytes.ok() || !size.ok() || bytes.value() > stored.size()) return nullptr;
  if (!kViewBound.allows(size.value(), stored.size())) return nullptr;
  std::unique_ptr<BlockView> view(new BlockView(stored, bytes.value(), size.value()));
  view->type_ = codec;
  view->kernels_ = kernels;
  return view;
}

void BlockView::compute(uint64_t offset, std::span<std::byte> out) const {
  const GgmlType* codec = type_;
  const uint64_t block_bytes = uint64_t{codec->block_size} * 4;  // of float32 values
  const auto* stored = reinterpret_cast<const uint8_t*>(base());
  alignas(16) float values[256];
  uint64_t block = offset / block_bytes;
  size_t within = offset % block_bytes;
  std::byte* to = out.data();
  size_t left = out.size();
  while (left > 0) {
    // Whole blocks straight into `out` where it can hold floats; a block
    // cut by either end of the range through `values`.
    if (within == 0 && left >= block_bytes && reinterpret_cast<uintptr_t>(to) % alignof(float) == 0) {
      const size_t count = left / block_bytes;
      kernels_->row(stored + block * codec->type_size, count, reinterpret_cast<float*>(to));
      block += count;
      to += count * block_bytes;
      left -= count * block_bytes;
      continue;
    }
    kernels_->block(stored + block * codec->type_size, values);
    const size_t take = std::min<size_t>(block_bytes - within, left);
    std::memcpy(to, reinterpret_cast<const std::byte*>(values) + within, take);
    to += take;
    left -= take;
    within = 0;
    ++block;
  }
}

ViewArena::ViewArena(size_t elements, size_t blocks) {
  elements_.reserve(elements);
  blocks_.reserve(blocks);
}

template <typename View>
const View* ViewArena::place(std::vector<View>& reserved, std::deque<View>& more,
                             std::unique_ptr<View> view) {
  if (!view) return nullptr;
  if (reserved.size() < reserved.capacity()) return &reserved.emplace_back(std::move(*view));
  return &more.emplace_back(std::move(*view));
}

const ElementView* ViewArena::add(std::unique_ptr<ElementView> view) {
  return place(elements_, more_elements_, std::move(view));
}

const BlockView* ViewArena::add(std::unique_ptr<BlockView> view) {
  return place(blocks_, more_blocks_, std::move(view));
}

}  // namespace modelfs
