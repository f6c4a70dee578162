// SPDX-License-Identifier: Apache-2.0
#include "tree/ggml_dequant.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "io/ggml_table.hpp"
#include "tree/ggml_grids.hpp"

// Each kernel below follows its type's definition in ggml (docs/formats.md,
// "ggml dequantization"): the same field layout and the same float operations in the same
// order, so that the values are bit for bit those of ggml's reference
// dequantization. (This file is compiled without contracting a*b+c into
// fused multiply-adds, which would change the rounding.)

namespace modelfs::ggml {
namespace {

constexpr uint32_t kSuperBlock = 256;  // QK_K

inline uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
// IEEE binary16 to float32, exactly; inline here, where every block
// converts one or two.
inline float half_bits(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa x 2^-24, exact in float32.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
}
inline float half_at(const uint8_t* p) { return half_bits(le16(p)); }

// 2 x kHalf elements from kHalf bytes: element j is the low nibble of byte
// j, element j + kHalf its high nibble; y[j] = value(nibble, j).
template <int kHalf = 16, typename Value>
inline void nibble_halves(const uint8_t* __restrict qs, float* __restrict y, Value value) {
  for (int j = 0; j < kHalf; ++j) {
    y[j] = value(qs[j] & 0x0F, j);
    y[j + kHalf] = value(qs[j] >> 4, j + kHalf);
  }
}

// ---- 32-element blocks: a float16 scale (and minimum), 4, 5 or 8 bits a value

// q4_0: d | 16 bytes of nibbles; value = (nibble - 8) * d.
void q4_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  nibble_halves(b + 2, y, [d](int q, int) { return static_cast<float>(q - 8) * d; });
}

// q4_1: d | m | 16 bytes; value = nibble * d + m.
void q4_1(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  const float m = half_at(b + 2);
  nibble_halves(b + 4, y, [d, m](int q, int) { return static_cast<float>(q) * d + m; });
}

// The 5-bit quant of element j: its nibble and bit j of the fifth bits.
inline int with_fifth_bit(int nibble, uint32_t qh, int j) {
  return nibble | static_cast<int>(((qh >> j) & 1) << 4);
}

// q5_0: d | u32 fifth bits | 16 bytes of low nibbles as q4_0; value =
// (5-bit - 16) * d.
void q5_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  const uint32_t qh = le32(b + 2);
  nibble_halves(b + 6, y,
                [d, qh](int q, int j) { return static_cast<float>(with_fifth_bit(q, qh, j) - 16) * d; });
}

// q5_1: d | m | u32 fifth bits | 16 bytes; value = 5-bit * d + m.
void q5_1(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  const float m = half_at(b + 2);
  const uint32_t qh = le32(b + 4);
  nibble_halves(b + 8, y,
                [d, m, qh](int q, int j) { return static_cast<float>(with_fifth_bit(q, qh, j)) * d + m; });
}

// q8_0: d | 32 int8; value = q * d.
void q8_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// q8_1: d | s (d times the sum of the quants, for dot products) | 32 int8;
// value = q * d. ggml has no dequantization of its own for this type (it
// only ever holds activations); this is the value its fields define.
void q8_1(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[4 + j])) * d;
}

// ---- k-quants: 256-element super-blocks of 16 or 8 sub-blocks with
// quantized scales (and minimums).

// Sub-block j's (0..7) scale and minimum of a q4_k / q5_k block, times the
// block's d and dmin. Both are 6 bits, packed in 12 bytes: sub-blocks 0-3
// in the low 6 bits of bytes 0-3 (scales) and 4-7 (minimums); 4-7 in the
// nibbles of bytes 8-11 with their top two bits in the top bits of bytes 0-7.
struct ScaleMin {
  float scale, min;
};
inline ScaleMin scale_min_k4(int j, const uint8_t* q, float d, float dmin) {
  const int scale = j < 4 ? q[j] & 63 : (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
  const int min = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  return {d * static_cast<float>(scale), dmin * static_cast<float>(min)};
}

// q2_k: 16 scale bytes (low nibble scale, high nibble min) | 64 bytes of
// 2-bit quants | d | dmin. Each half of 128 elements takes 32 quant bytes;
// its four groups of 32 are the four bit pairs of those bytes, 16 elements
// per scale; value = d*scale * q - dmin*min.
void q2_k(const uint8_t* __restrict b, float* __restrict y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = half_at(b + 80);
  const float dmin = half_at(b + 82);
  int is = 0;
  for (int half = 0; half < 2; ++half, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0x0F);
        const float ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
      }
    }
  }
}

// q3_k: 32 bytes of high bits | 64 bytes of 2-bit quants | 12 bytes of
// sixteen 6-bit scales | d. Quants as q2_k; the high bit of element
// (16*part + l) of group g of half h is bit 4h+g of hmask[16*part + l], and
// a clear high bit subtracts 4; value = d*(scale - 32) * q.
void q3_k(const uint8_t* __restrict b, float* __restrict y) {
  const uint8_t* hmask = b;
  const uint8_t* q = b + 32;
  const uint8_t* packed = b + 96;
  const float d = half_at(b + 108);
  // Scale i: low 4 bits in a nibble of bytes 0-7 (low nibbles first), top
  // 2 bits in bytes 8-11.
  int scale[16];
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? (packed[i] & 0x0F) : (packed[i - 8] >> 4);
    const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    scale[i] = (low | (high << 4)) - 32;
  }
  int is = 0;
  int bit = 0;
  for (int half = 0; half < 2; ++half, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, ++bit) {
      for (int part = 0; part < 2; ++part) {
        const float dl = d * static_cast<float>(scale[is++]);
        for (int l = 0; l < 16; ++l) {
          const int k = 16 * part + l;
          const int value = ((q[k] >> shift) & 3) - ((hmask[k] >> bit) & 1 ? 0 : 4);
          *y++ = dl * static_cast<float>(value);
        }
      }
    }
  }
}

// q4_k and q5_k: d | dmin | 12 bytes of 6-bit scales and mins | (q5_k's
// fifth bits) | 128 bytes of nibbles at `q`. Eight sub-blocks of 32, one
// scale and min each; each 32 bytes of nibbles hold two sub-blocks, the
// low nibbles the first's. value = d*scale * q - dmin*min, where q is
// quant(nibble, sub-block, element).
template <typename Quant>
inline void k4_sub_blocks(const uint8_t* __restrict b, const uint8_t* __restrict q, float* __restrict y,
                          Quant quant) {
  const float d = half_at(b);
  const float dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  int s = 0;
  for (int g = 0; g < 4; ++g, q += 32) {
    for (int shift = 0; shift < 8; shift += 4, ++s, y += 32) {
      const auto [dl, ml] = scale_min_k4(s, scales, d, dmin);
      for (int l = 0; l < 32; ++l) y[l] = dl * static_cast<float>(quant((q[l] >> shift) & 0x0F, s, l)) - ml;
    }
  }
}

// q4_k: the nibbles right after the scales; q = nibble.
void q4_k(const uint8_t* __restrict b, float* __restrict y) {
  k4_sub_blocks(b, b + 16, y, [](int nibble, int, int) { return nibble; });
}

// q5_k: 32 bytes of fifth bits before the nibbles: the fifth bit of
// element l of sub-block s is bit s of qh[l] (worth 16).
void q5_k(const uint8_t* __restrict b, float* __restrict y) {
  const uint8_t* qh = b + 16;
  k4_sub_blocks(b, b + 48, y, [qh](int nibble, int s, int l) { return nibble + (((qh[l] >> s) & 1) << 4); });
}

// q6_k: 128 bytes of low nibbles | 64 bytes of high bit pairs | 16 int8
// scales | d. Each half of 128 elements takes 64 low bytes, 32 high bytes
// and 8 scales; value = d * scale * (6-bit - 32), in that order.
void q6_k(const uint8_t* __restrict b, float* __restrict y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

// q8_k: float32 d | 256 int8 | 16 int16 group sums (not needed for the
// values); value = d * q.
void q8_k(const uint8_t* __restrict b, float* __restrict y) {
  const float d = std::bit_cast<float>(le32(b));
  for (uint32_t j = 0; j < kSuperBlock; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[4 + j]));
}

// ---- ternary

// tq1_0: 48 bytes of five base-3 digits each | 4 bytes of four digits each
// | d. A byte holds its digits as a fixed-point fraction: digit n is the
// integer part of 3 * (byte * 3^n mod 256) / 256. Elements: the first 32
// bytes' digit 0, then digit 1, ... (160), the next 16 bytes' likewise
// (80), then the last 4 bytes' digits 0-3 (16); value = (digit - 1) * d.
void tq1_0(const uint8_t* __restrict b, float* __restrict y) {
  static constexpr uint8_t kPow3[6] = {1, 3, 9, 27, 81, 243};
  const uint8_t* qs = b;
  const uint8_t* qh = b + 48;
  const float d = half_at(b + 52);
  auto digit = [](uint8_t byte, uint8_t pow) {
    const auto q = static_cast<uint8_t>(byte * pow);  // mod 256
    return static_cast<int>((static_cast<uint16_t>(q) * 3) >> 8);
  };
  for (int n = 0; n < 5; ++n)
    for (int m = 0; m < 32; ++m) *y++ = static_cast<float>(digit(qs[m], kPow3[n]) - 1) * d;
  for (int n = 0; n < 5; ++n)
    for (int m = 0; m < 16; ++m) *y++ = static_cast<float>(digit(qs[32 + m], kPow3[n]) - 1) * d;
  for (int n = 0; n < 4; ++n)
    for (int j = 0; j < 4; ++j) *y++ = static_cast<float>(digit(qh[j], kPow3[n]) - 1) * d;
}

// tq2_0: 64 bytes of 2-bit values | d. Each 32 bytes give 128 elements,
// bit pair 0 of the 32 first, then pair 1, ...; value = (q - 1) * d.
void tq2_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b + 64);
  for (int j = 0; j < 64; j += 32)
    for (int shift = 0; shift < 8; shift += 2)
      for (int m = 0; m < 32; ++m) *y++ = static_cast<float>(((b[j + m] >> shift) & 3) - 1) * d;
}

// ---- non-linear 4-bit

// iq4_nl: d | 16 bytes of indices into the 16 levels (low nibbles are
// elements 0-15); value = d * level.
void iq4_nl(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  nibble_halves(b + 2, y, [d](int q, int) { return d * static_cast<float>(kIq4nlLevels[q]); });
}

// iq4_xs: d | u16 high scale bits | 4 bytes of low scale nibbles | 128
// bytes of indices. Eight sub-blocks of 32, each with a 6-bit scale (low
// nibble from scales_l, top two bits from scales_h) and 16 bytes laid out
// as iq4_nl's; value = d*(scale - 32) * level.
void iq4_xs(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  const uint16_t scales_h = le16(b + 2);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, qs += 16, y += 32) {
    const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    nibble_halves(qs, y, [dl](int q, int) { return dl * static_cast<float>(kIq4nlLevels[q]); });
  }
}

// mxfp4: an E8M0 exponent e | 16 bytes of E2M1 codes (low nibbles are
// elements 0-15). ggml keeps the E2M1 values doubled (integers) and halves
// the scale: value = 2*e2m1(code) * 2^(e - 128), computed in float32, so an
// exponent of 255 gives 2^127 (infinity past the largest codes), not NaN.
float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return std::bit_cast<float>(bits);
}

void mxfp4(const uint8_t* __restrict b, float* __restrict y) {
  const float d = e8m0_half(b[0]);
  nibble_halves(b + 1, y, [d](int q, int) { return static_cast<float>(kMxfp4Doubled[q]) * d; });
}

// nvfp4: 4 UE4M3 scales (one per 16 elements) | 32 bytes of E2M1 codes;
// within each 16, low nibbles are elements 0-7 and high nibbles 8-15.
// UE4M3 as ggml reads it: bit 7 ignored, 4 exponent bits (bias 7), 3
// mantissa bits, 0x00 and 0x7F zero, and the value halved (the codes are
// doubled): value = 2*e2m1(code) * ue4m3(scale)/2.
float ue4m3_half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const int exponent = (x >> 3) & 0x0F;
  const int mantissa = x & 0x07;
  const float raw = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                  : std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return raw * 0.5f;
}

void nvfp4(const uint8_t* __restrict b, float* __restrict y) {
  for (int s = 0; s < 4; ++s, y += 16) {
    const float d = ue4m3_half(b[s]);
    nibble_halves<8>(b + 4 + 8 * s, y, [d](int q, int) { return static_cast<float>(kMxfp4Doubled[q]) * d; });
  }
}

// q1_0: d | 16 bytes, one bit an element (bit j%8 of byte j/8): d or -d.
void q1_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  for (int j = 0; j < 128; ++j) y[j] = (b[2 + j / 8] >> (j % 8)) & 1 ? d : -d;
}

// q2_0: d | 16 bytes, two bits an element (pair j%4 of byte j/4):
// value = (q - 1) * d.
void q2_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  for (int j = 0; j < 64; ++j) y[j] = static_cast<float>(((b[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
}

// ---- grid-based 2- and 3-bit types (lattice points from ggml_grids)

// One row of a lattice grid: y[j] = db * grid[j], negative where bit
// first + j of `signs` is set.
inline void signed_row(float* y, float db, const uint8_t* grid, uint8_t signs, int n, int first = 0) {
  for (int j = 0; j < n; ++j)
    y[j] = db * static_cast<float>(grid[j]) * ((signs >> (first + j)) & 1 ? -1.0f : 1.0f);
}

// A scale byte's two nibbles as iq2_xs and iq2_s apply them, one to each
// 16 elements: d*(0.5 + s)*0.25.
inline std::array<float, 2> nibble_scales(float d, uint8_t scale) {
  return {d * (0.5f + static_cast<float>(scale & 0x0F)) * 0.25f,
          d * (0.5f + static_cast<float>(scale >> 4)) * 0.25f};
}

// iq2_xxs: d | 8 x (4 grid bytes | u32: four 7-bit sign indices, then a
// 4-bit scale in the top bits). Each group of 32: four rows of 8 from
// the 256-point grid; value = d*(0.5 + s)*0.25 * grid * sign.
void iq2_xxs(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* group = b + 2 + 8 * ib;
    const uint32_t aux = le32(group + 4);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l, y += 8) {
      const uint8_t* grid = iq2xxs_grid(group[l]);
      signed_row(y, db, grid, sign_pattern((aux >> (7 * l)) & 127), 8);
    }
  }
}

// iq2_xs: d | 32 u16 (9-bit grid index, 7-bit sign index) | 8 scale bytes
// (a nibble per 16 elements); value = d*(0.5 + s)*0.25 * grid * sign.
void iq2_xs(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  const uint8_t* scales = b + 66;
  for (int ib = 0; ib < 8; ++ib) {
    const auto db = nibble_scales(d, scales[ib]);
    for (int l = 0; l < 4; ++l, y += 8) {
      const uint16_t q = le16(b + 2 + 2 * (4 * ib + l));
      signed_row(y, db[l / 2], iq2xs_grid(q & 511), sign_pattern(q >> 9), 8);
    }
  }
}

// The eight 32-element groups of an iq2_s / iq3_s block: d, then grid
// indices (kIndexBytes a group), and at their offsets the high index bits
// (a byte a group), the sign bytes (4 a group) and the scales; `group`
// writes one group's values from them.
template <int kIndexBytes, int kSignsAt, int kHighAt, int kScalesAt, typename Group>
inline void grid_groups(const uint8_t* __restrict b, float* __restrict y, Group group) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  const uint8_t* signs = b + kSignsAt;
  const uint8_t* qh = b + kHighAt;
  const uint8_t* scales = b + kScalesAt;
  for (int ib = 0; ib < 8; ++ib, qs += kIndexBytes, signs += 4, y += 32)
    group(d, ib, qs, qh[ib], signs, scales, y);
}

// iq2_s: d | 32 low grid-index bytes | 32 sign bytes | 8 bytes of two
// high index bits per row | 8 scale bytes; a 1024-point grid.
void iq2_s(const uint8_t* __restrict b, float* __restrict y) {
  grid_groups<4, 34, 66, 74>(b, y,
                             [](float d, int ib, const uint8_t* qs, int qh, const uint8_t* signs,
                                const uint8_t* scales, float* out) {
                               const auto db = nibble_scales(d, scales[ib]);
                               for (int l = 0; l < 4; ++l, out += 8) {
                                 const int index = qs[l] | ((qh << (8 - 2 * l)) & 0x300);
                                 signed_row(out, db[l / 2], iq2s_grid(index), signs[l], 8);
                               }
                             });
}

// iq3_xxs: d | 64 grid-index bytes (rows of 4 from a 256-point grid) | 8 x
// u32 (four 7-bit sign indices, 4-bit scale); value = d*(0.5 + s)*0.5 *
// grid * sign.
void iq3_xxs(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  const uint8_t* scales_and_signs = b + 66;
  for (int ib = 0; ib < 8; ++ib, qs += 8) {
    const uint32_t aux = le32(scales_and_signs + 4 * ib);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l, y += 8) {
      const uint8_t signs = sign_pattern((aux >> (7 * l)) & 127);
      signed_row(y, db, iq3xxs_grid(qs[2 * l]), signs, 4);
      signed_row(y + 4, db, iq3xxs_grid(qs[2 * l + 1]), signs, 4, 4);
    }
  }
}

// iq3_s: d | 64 low index bytes | 8 bytes of ninth index bits | 32 sign
// bytes | 4 scale bytes (a nibble per 32 elements); 512-point grid of
// rows of 4; value = d*(1 + 2s) * grid * sign.
void iq3_s(const uint8_t* __restrict b, float* __restrict y) {
  grid_groups<8, 74, 66, 106>(
      b, y,
      [](float d, int ib, const uint8_t* qs, int qh, const uint8_t* signs, const uint8_t* scales,
         float* out) {
        const int s = ib % 2 == 0 ? (scales[ib / 2] & 0x0F) : (scales[ib / 2] >> 4);
        const float db = d * static_cast<float>(1 + 2 * s);
        for (int l = 0; l < 4; ++l, out += 8) {
          signed_row(out, db, iq3s_grid(qs[2 * l] | ((qh << (8 - 2 * l)) & 256)), signs[l], 4);
          signed_row(out + 4, db, iq3s_grid(qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)), signs[l], 4, 4);
        }
      });
}

// iq1_s: d | 32 low index bytes | 8 u16 (four 3-bit high index parts, a
// 3-bit scale, a delta sign); 2048-point grid of rows of 8 in {-1, 0, 1};
// value = d*(2s + 1) * (grid + delta), delta = -/+ 0.125.
constexpr float kIq1Delta = 0.125f;

void iq1_s(const uint8_t* __restrict b, float* __restrict y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int ib = 0; ib < 8; ++ib, qs += 4) {
    const uint16_t qh = le16(b + 34 + 2 * ib);
    const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
    const float delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
    for (int l = 0; l < 4; ++l, y += 8) {
      const int8_t* grid = iq1s_grid(qs[l] | (((qh >> (3 * l)) & 7) << 8));
      for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(grid[j]) + delta);
    }
  }
}

// iq1_m: 32 low index bytes | 16 bytes (per row: 3 high index bits and a
// delta sign) | 8 bytes of 3-bit scales whose top nibbles, as four u16,
// hold the float16 d; value = d*(2s + 1) * (grid + delta).
void iq1_m(const uint8_t* __restrict b, float* __restrict y) {
  const uint8_t* qs = b;
  const uint8_t* qh = b + 32;
  uint16_t sc[4];
  for (int i = 0; i < 4; ++i) sc[i] = le16(b + 48 + 2 * i);
  const auto d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                            ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
  const float d = half_bits(d_bits);
  for (int ib = 0; ib < 8; ++ib, qs += 4, qh += 2) {
    const int shift = 6 * (ib % 2);
    const float dl1 = d * static_cast<float>(2 * ((sc[ib / 2] >> shift) & 7) + 1);
    const float dl2 = d * static_cast<float>(2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1);
    const int index[4] = {qs[0] | ((qh[0] << 8) & 0x700), qs[1] | ((qh[0] << 4) & 0x700),
                          qs[2] | ((qh[1] << 8) & 0x700), qs[3] | ((qh[1] << 4) & 0x700)};
    const float delta[4] = {qh[0] & 0x08 ? -kIq1Delta : kIq1Delta, qh[0] & 0x80 ? -kIq1Delta : kIq1Delta,
                            qh[1] & 0x08 ? -kIq1Delta : kIq1Delta, qh[1] & 0x80 ? -kIq1Delta : kIq1Delta};
    for (int l = 0; l < 4; ++l, y += 8) {
      const int8_t* grid = iq1s_grid(index[l]);
      const float dl = l < 2 ? dl1 : dl2;
      for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(grid[j]) + delta[l]);
    }
  }
}

template <void (*kernel)(const uint8_t*, float*), uint32_t kBlockSize, uint32_t kTypeSize>
void row(const uint8_t* blocks, size_t count, float* out) {
  for (size_t i = 0; i < count; ++i) kernel(blocks + i * kTypeSize, out + i * kBlockSize);
}

struct Kernels {
  uint32_t id;
  GgmlKernels kernels;
};

// A kernel for each block type of the table (io/ggml_table.hpp), its row
// loop's sizes taken from the table's entry.
#define MODELFS_KERNELS(name)                                                             \
  Kernels {                                                                               \
    entry(#name).id, { name, row<name, entry(#name).block_size, entry(#name).type_size> } \
  }

constexpr Kernels kKernels[] = {
    MODELFS_KERNELS(q4_0),    MODELFS_KERNELS(q4_1),   MODELFS_KERNELS(q5_0),    MODELFS_KERNELS(q5_1),
    MODELFS_KERNELS(q8_0),    MODELFS_KERNELS(q8_1),   MODELFS_KERNELS(q2_k),    MODELFS_KERNELS(q3_k),
    MODELFS_KERNELS(q4_k),    MODELFS_KERNELS(q5_k),   MODELFS_KERNELS(q6_k),    MODELFS_KERNELS(q8_k),
    MODELFS_KERNELS(iq2_xxs), MODELFS_KERNELS(iq2_xs), MODELFS_KERNELS(iq3_xxs), MODELFS_KERNELS(iq1_s),
    MODELFS_KERNELS(iq4_nl),  MODELFS_KERNELS(iq3_s),  MODELFS_KERNELS(iq2_s),   MODELFS_KERNELS(iq4_xs),
    MODELFS_KERNELS(iq1_m),   MODELFS_KERNELS(tq1_0),  MODELFS_KERNELS(tq2_0),   MODELFS_KERNELS(mxfp4),
    MODELFS_KERNELS(nvfp4),   MODELFS_KERNELS(q1_0),   MODELFS_KERNELS(q2_0),
};

#undef MODELFS_KERNELS

}  // namespace

float half_to_float(uint16_t bits) noexcept { return half_bits(bits); }

}  // namespace modelfs::ggml

namespace modelfs::ggml {

const GgmlKernels* kernels(const GgmlType& type) noexcept {
  for (const auto& entry : kKernels)
    if (entry.id == type.id) return &entry.kernels;
  return nullptr;
}

}  // namespace modelfs::ggml
