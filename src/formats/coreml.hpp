// SPDX-License-Identifier: Apache-2.0
#pragma once
// Core ML (docs/formats.md, "Core ML"): a `.mlmodel` is one serialized
// CoreML.Specification.Model with no magic, read with the lazy wire scanner
// (protobuf_wire.hpp) so that weights stay in the mapping; an `.mlpackage`
// is a folder whose Manifest.json names the root model item under Data/.
//
// Model: specificationVersion 1 (required: a file without one is a
// pre-release layout and refused), description 2, then one model field:
// neuralNetwork 500, neuralNetworkClassifier 403, neuralNetworkRegressor
// 303 (layers = field 1 in each) or mlProgram 502. Any other model type is
// refused by its field number.
//
// Neural networks: a WeightParams holding values becomes LAYER.FIELD
// (weights, bias), shaped by its layer: convolution weights
// [outputChannels, kernelChannels, kH, kW] (deconvolution [kernelChannels,
// outputChannels/nGroups, kH, kW]), innerProduct [outputChannels,
// inputChannels], batchedMatmul [second, first] (its [first, second] matrix
// is stored column-major), biases [outputChannels]. floatValue (packed
// float32) and float16Value are served in place, int8RawValue as int8,
// rawValue as uint8; a count that does not fill the layer's shape is
// refused, except a quantized rawValue (its bits packed), served as its
// bytes, 1-D. batchnorm, scale, bias, loadConstant and PReLU/parametric
// softplus WeightParams are [n] (batchnorm checked against its channels),
// embedding weights [outputChannels, inputDim]. Layers of other types are
// listed in metadata.json's "layers_not_read", never guessed.
//
// ML programs: every `const` operation of every function and block (nested
// blocks too), named by its output (FUNCTION/NAME when there are several
// functions), dtype and shape from its TensorType; the bytes from the
// immediate value (packed floats and doubles, and `bytes`, in place; varint
// ints and bools decoded once) or from a blob of @model_path/weights/
// weight.bin: the value's offset points at a 64-byte metadata record whose
// sentinel, dtype and size must agree with the const, its data 64-byte
// aligned after it and inside the file. String consts, sub-byte and fp8
// blobs are listed in metadata.json's "not_tensors".
//
// Documents: metadata.json (specification version, model type, inputs,
// outputs, metadata, what was not read).
#include <cstdint>
#include <filesystem>
#include <span>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::coreml {

// protobuf's own limit on one message.
inline constexpr uint64_t kMaxModelBytes = 2147483647;
// A Manifest.json is read whole.
inline constexpr uint64_t kMaxManifestBytes = 1 << 20;

// specificationVersion (1..kMaxSpecificationVersion) or the description
// first, then only Model fields, the model's own (>= 200) among them when
// the head shows it; told from ONNX (whose field 2 is a string and whose
// graph is field 7) by those numbers and by the description's first field.
bool probe_file(std::span<const std::byte> head);
Catalog open_file(const ModelFile& model);

// A folder holding Manifest.json and Data/.
bool probe_folder(const std::filesystem::path& folder);
Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks);

}  // namespace modelfs::coreml
