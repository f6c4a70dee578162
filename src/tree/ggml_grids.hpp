// SPDX-License-Identifier: Apache-2.0
#pragma once
// The lookup tables of ggml's non-linear and lattice quantization types:
// facts of the format (docs/formats.md §6.6, ggml dequantization), kept in
// the compact form they are defined in (the grids' codes in the data file
// ggml_grids.txt) and expanded once into the rows the kernels read.
//
//   - the 16 levels of iq4_nl / iq4_xs (tabulated);
//   - mxfp4's 16 values: the E2M1 values doubled (derived from E2M1);
//   - the 128 sign patterns of the iq2/iq3 types: 7 stored sign bits and
//     an eighth that makes the number of minus signs even (derived);
//   - the lattice grids of iq2_xxs (256 rows of 8), iq2_xs (512 x 8),
//     iq2_s (1024 x 8), iq3_xxs (256 x 4), iq3_s (512 x 4) and iq1_s /
//     iq1_m (2048 x 8): each row is a code of 2 or 3 bits an element
//     (element 0 in the lowest bits), tabulated in ascending order, and
//     each code digit stands for one level (iq2: 8, 25, 43; iq3: 4, 12,
//     20, 28, 36, 44, 52, 62; iq1: -1, 0, 1).
//
// Every index the kernels pass is masked to the grid's size by
// construction (an 8-bit byte, a 9-bit field, ...).
#include <cstdint>
#include <span>

namespace modelfs::ggml {

inline constexpr int8_t kIq4nlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// E2M1 (1 sign, 2 exponent, 1 mantissa bit; bias 1; no infinity or NaN),
// doubled so every value is an integer.
constexpr int8_t e2m1_doubled(uint8_t code) {
  const int magnitude_code = code & 7;
  const int exponent = magnitude_code >> 1, mantissa = magnitude_code & 1;
  // Subnormal (exponent 0): mantissa x 0.5; else 2^(e-1) x (1 + m/2).
  const int doubled = exponent == 0 ? mantissa : (2 + mantissa) << (exponent - 1);
  return static_cast<int8_t>(code & 8 ? -doubled : doubled);
}
inline constexpr int8_t kMxfp4Doubled[16] = {
    e2m1_doubled(0),  e2m1_doubled(1),  e2m1_doubled(2),  e2m1_doubled(3), e2m1_doubled(4),  e2m1_doubled(5),
    e2m1_doubled(6),  e2m1_doubled(7),  e2m1_doubled(8),  e2m1_doubled(9), e2m1_doubled(10), e2m1_doubled(11),
    e2m1_doubled(12), e2m1_doubled(13), e2m1_doubled(14), e2m1_doubled(15)};

// Sign pattern `index` (0..127): bit j set = element j negative.
constexpr uint8_t sign_pattern(uint32_t index) {
  const uint32_t low = index & 127;
  return static_cast<uint8_t>(low | ((__builtin_popcount(low) & 1) << 7));
}

// Rows of the lattice grids (index masked to the grid's size).
const uint8_t* iq2xxs_grid(uint32_t index) noexcept;  // 8 values
const uint8_t* iq2xs_grid(uint32_t index) noexcept;   // 8 values
const uint8_t* iq2s_grid(uint32_t index) noexcept;    // 8 values
const uint8_t* iq3xxs_grid(uint32_t index) noexcept;  // 4 values
const uint8_t* iq3s_grid(uint32_t index) noexcept;    // 4 values
const int8_t* iq1s_grid(uint32_t index) noexcept;     // 8 values

// The grids' codes, as tabulated (for the tests).
struct GridCodes {
  std::span<const uint16_t> codes;
  uint32_t bits_per_element;    // 2 or 3
  uint32_t elements_per_row;    // 8 or 4
  std::span<const int> levels;  // the value of each code digit
};
GridCodes iq2xxs_codes() noexcept;
GridCodes iq2xs_codes() noexcept;
GridCodes iq2s_codes() noexcept;
GridCodes iq3xxs_codes() noexcept;
GridCodes iq3s_codes() noexcept;
GridCodes iq1s_codes() noexcept;

}  // namespace modelfs::ggml
