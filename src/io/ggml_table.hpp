// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one ggml type table (docs/formats.md, "ggml types"), constexpr so
// that the tree's kernels (src/tree/ggml_dequant.cpp) take their block
// sizes from it at compile time. Ids missing here were removed from ggml
// (or never used in files) and are refused.
#include <string_view>

#include "modelfs/dtype.hpp"

namespace modelfs::ggml {

inline constexpr GgmlType kTypes[] = {
    GgmlType{0, "f32", 1, 4, DType::Float32},
    GgmlType{1, "f16", 1, 2, DType::Float16},
    GgmlType{2, "q4_0", 32, 18, std::nullopt},
    GgmlType{3, "q4_1", 32, 20, std::nullopt},
    GgmlType{6, "q5_0", 32, 22, std::nullopt},
    GgmlType{7, "q5_1", 32, 24, std::nullopt},
    GgmlType{8, "q8_0", 32, 34, std::nullopt},
    // ggml's struct; gguf-py says 40 (docs/formats.md, "Open questions").
    GgmlType{9, "q8_1", 32, 36, std::nullopt},
    GgmlType{10, "q2_k", 256, 84, std::nullopt},
    GgmlType{11, "q3_k", 256, 110, std::nullopt},
    GgmlType{12, "q4_k", 256, 144, std::nullopt},
    GgmlType{13, "q5_k", 256, 176, std::nullopt},
    GgmlType{14, "q6_k", 256, 210, std::nullopt},
    GgmlType{15, "q8_k", 256, 292, std::nullopt},
    GgmlType{16, "iq2_xxs", 256, 66, std::nullopt},
    GgmlType{17, "iq2_xs", 256, 74, std::nullopt},
    GgmlType{18, "iq3_xxs", 256, 98, std::nullopt},
    GgmlType{19, "iq1_s", 256, 50, std::nullopt},
    GgmlType{20, "iq4_nl", 32, 18, std::nullopt},
    GgmlType{21, "iq3_s", 256, 110, std::nullopt},
    GgmlType{22, "iq2_s", 256, 82, std::nullopt},
    GgmlType{23, "iq4_xs", 256, 136, std::nullopt},
    GgmlType{24, "i8", 1, 1, DType::Int8},
    GgmlType{25, "i16", 1, 2, DType::Int16},
    GgmlType{26, "i32", 1, 4, DType::Int32},
    GgmlType{27, "i64", 1, 8, DType::Int64},
    GgmlType{28, "f64", 1, 8, DType::Float64},
    GgmlType{29, "iq1_m", 256, 56, std::nullopt},
    GgmlType{30, "bf16", 1, 2, DType::BFloat16},
    GgmlType{34, "tq1_0", 256, 54, std::nullopt},
    GgmlType{35, "tq2_0", 256, 66, std::nullopt},
    GgmlType{39, "mxfp4", 32, 17, std::nullopt},
    GgmlType{40, "nvfp4", 64, 36, std::nullopt},
    GgmlType{41, "q1_0", 128, 18, std::nullopt},
    GgmlType{42, "q2_0", 64, 18, std::nullopt},
};

// The entry named `name`; a name not in the table does not compile where
// it is asked for in a constant expression.
consteval const GgmlType& entry(std::string_view name) {
  for (const auto& type : kTypes)
    if (type.name == name) return type;
  throw "not a ggml type";
}

}  // namespace modelfs::ggml
