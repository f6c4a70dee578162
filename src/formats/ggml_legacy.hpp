// SPDX-License-Identifier: Apache-2.0
#pragma once
// The legacy GGML family, before GGUF (docs/formats.md, "Legacy GGML"): files
// of whisper.cpp (whisper, Silero VAD, Parakeet), old llama.cpp and rwkv.cpp.
// All integers little-endian. There is no common header: after the magic,
// each program wrote its own hyper-parameters (and vocabulary), and the
// tensor records follow them to the end of the file:
//
//   magic u32: "ggml" (bytes "lmgg"), "ggmf" ("fmgg"), "ggjt" ("tjgg")
//   'ggml'  whisper    11 i32 hparams | i32 n_mel | i32 n_fft
//                      | f32 filters[n_mel x n_fft] | i32 n_tokens
//                      | n_tokens x (u32 len | bytes)
//           Silero VAD i32 len | type text | i32 major, minor, patch
//                      | i32 n_window, n_context, n_encoder_layers
//                      | n_encoder_layers x i32 (in, out, kernel)
//                      | i32 lstm_input, lstm_hidden, final_conv_in, final_conv_out
//           Parakeet   15 i32 hparams | i32 n_mel | i32 n_fb | f32[n_mel x n_fb]
//                      | i32 n_window | f32[n_window] | u32[n_tdt_durations]
//                      | i32 n_vocab | n_vocab x (i32 len | bytes)
//           llama.cpp  7 u32 hparams | n_vocab x (u32 len | bytes)
//   'ggmf'  v1 llama.cpp: u32 version | 7 u32 hparams | n_vocab x (u32 len
//                      | bytes | f32 score)
//           v100, v101 rwkv.cpp: u32 version | u32 n_vocab, n_embed,
//                      n_layer, data_type
//   'ggjt'  v1-v3 llama.cpp: as 'ggmf' v1, each record's data on the next
//                      multiple of 32 bytes of the file
//   record  i32 n_dims | i32 name_len | i32 type | i32 ne[n_dims] (fastest
//           first) | name | data: ne[0] / block_size x type_size x ne[1] ...
//
// A 'ggml' file is tried as each of its four layouts: the one whose header
// parses and whose records end exactly at the end of the file is the
// file's; none or several is refused, naming the layouts (never guessed).
// A header whose records start at the end of the file is a model with no
// tensors (whisper.cpp's test files).
//
// Type codes are ggml_type ids, except rwkv.cpp's own (its 7 is q5_0 and 8
// q5_1; ggml's 6 and 7), mapped explicitly. Block types are served only
// where their blocks have ggml's current layout: ggjt v3, rwkv.cpp v101,
// whisper quantization version 2, Silero VAD and Parakeet (which postdate
// the last change); elsewhere they are refused, as are removed type codes.
//
// Checks: n_dims within what the program accepts (whisper.cpp 0..4,
// llama.cpp 1..2, rwkv.cpp 1..3), name lengths 1..65535 and names unique,
// dimensions non-negative, ne[0] a whole number of blocks, every count and
// length against what remains, each record's data inside the file.
//
// What a tensor becomes: the record's name; shape ne reversed; the ggml
// type's dtype or GgmlBlock (ggml_tensor.hpp, as GGUF's), served in place
// from the mapping at its (unaligned) offset. Metadata: "ggml" {magic,
// version, layout, program, records_offset, tensor_count}, "hparams",
// "vocab_size"; whisper's and Parakeet's header arrays under "not_tensors".
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::ggml_legacy {

inline constexpr uint64_t kMaxNameBytes = 65535;
// A Silero VAD header's encoder layers are listed in metadata.json; real
// models have four.
inline constexpr uint64_t kMaxEncoderLayers = 1024;

bool probe_file(std::span<const std::byte> head);
Catalog open_file(const ModelFile& model);

}  // namespace modelfs::ggml_legacy
