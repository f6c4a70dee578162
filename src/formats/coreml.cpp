// SPDX-License-Identifier: Apache-2.0
// Core ML (coreml.hpp): entry points, the probe, the model description and
// neural-network weights. ML programs are coreml_program.cpp's.
#include "formats/coreml.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "formats/coreml_reader.hpp"
#include "formats/json_limits.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"

namespace modelfs::coreml {
namespace detail {
namespace {

// Field numbers (coremltools mlmodel/format/Model.proto, NeuralNetwork.proto).
namespace model_field {
constexpr uint32_t kSpecificationVersion = 1, kDescription = 2, kIsUpdatable = 10, kFirstModel = 200,
                   kNeuralNetworkRegressor = 303, kNeuralNetworkClassifier = 403, kNeuralNetwork = 500,
                   kMlProgram = 502;
}
namespace description_field {
constexpr uint32_t kInput = 1, kOutput = 10, kPredictedFeatureName = 11, kPredictedProbabilitiesName = 12,
                   kMetadata = 100;
}
namespace metadata_field {
constexpr uint32_t kShortDescription = 1, kVersionString = 2, kAuthor = 3, kLicense = 4, kUserDefined = 100;
}
namespace layer_field {
constexpr uint32_t kName = 1, kConvolution = 100, kInnerProduct = 140, kBatchedMatmul = 1045;
}
namespace conv_field {
constexpr uint32_t kOutputChannels = 1, kKernelChannels = 2, kGroups = 10, kKernelSize = 20,
                   kIsDeconvolution = 60, kWeights = 90, kBias = 91;
}
namespace inner_field {
constexpr uint32_t kInputChannels = 1, kOutputChannels = 2, kWeights = 20, kBias = 21;
}
namespace matmul_field {
constexpr uint32_t kFirst = 5, kSecond = 6, kWeights = 8, kBias = 9;
}
// Layers whose WeightParams are 1-D, [n] (docs/formats.md, "Naming"):
// the layer's params field, then each WeightParams field and its name;
// activation's PReLU (25) and parametricSoftplus (71) one level deeper.
struct CountedLayer {
  uint32_t layer;
  uint32_t nested;  // 0: the params hold the WeightParams themselves
  std::pair<uint32_t, const char*> weights[4];
};
constexpr CountedLayer kCountedLayers[] = {
    {160, 0, {{15, "gamma"}, {16, "beta"}, {17, "mean"}, {18, "variance"}}},
    {245, 0, {{2, "scale"}, {5, "bias"}}},
    {250, 0, {{2, "bias"}}},
    {290, 0, {{2, "data"}}},
    {130, 25, {{1, "alpha"}}},
    {130, 71, {{1, "alpha"}, {2, "beta"}}},
};
// Layer types that hold no WeightParams (NeuralNetwork.proto): pooling,
// activations other than those above, normalizations without parameters,
// element-wise and reshaping layers.
constexpr uint32_t kWeightless[] = {120, 130, 165, 170, 175, 180, 190, 200, 210, 211, 212, 220, 230, 231,
                                    240, 260, 261, 270, 280, 300, 301, 310, 320, 330, 340, 345, 350};
namespace embedding_field {
constexpr uint32_t kLayer = 150, kInputDim = 1, kOutputChannels = 2, kWeights = 20, kBias = 21;
}
namespace batchnorm_field {
constexpr uint32_t kLayer = 160, kChannels = 1;
}
namespace weight_field {
constexpr uint32_t kFloat = 1, kFloat16 = 2, kRaw = 30, kInt8Raw = 31, kQuantization = 40, kIsUpdatable = 50;
}

constexpr uint64_t kMaxSpecificationVersion = 100;
// How many unread layers metadata.json names.
constexpr size_t kMaxListed = 4096;

const char* feature_kind(uint32_t number) {
  switch (number) {
    case 1:
      return "int64";
    case 2:
      return "double";
    case 3:
      return "string";
    case 4:
      return "image";
    case 5:
      return "multiArray";
    case 6:
      return "dictionary";
    case 7:
      return "sequence";
    default:
      return "other";
  }
}

}  // namespace

Fields::Fields(const WireMessage& message) : message_(message) {
  message.scan([&](const WireField& f) { by_number_[f.number].push_back(f); });
}

const WireField* Fields::last(uint32_t number) const {
  auto it = by_number_.find(number);
  return it == by_number_.end() ? nullptr : &it->second.back();
}

const std::vector<WireField>& Fields::every(uint32_t number) const {
  static const std::vector<WireField> kNone;
  auto it = by_number_.find(number);
  return it == by_number_.end() ? kNone : it->second;
}

std::optional<WireMessage> Fields::message(uint32_t number) const {
  const auto& all = every(number);
  if (all.empty()) return std::nullopt;
  for (const auto& f : all) protobuf::expect_type(f, WireType::Length, "hold a message", message_.context());
  return message_.child(all);
}

Reader::Reader(const ModelFile& model, std::string name_in_files)
    : model_(model),
      model_name_(std::move(name_in_files)),
      context_{model.mapped->display_name(), std::string(kFormat)} {
  catalog_.format = "coreml";
  catalog_.mtime = model.mapped->mtime();
  catalog_.files.push_back(model_name_);
  catalog_.tensors_may_share_bytes = true;
}

void Reader::fail(uint64_t offset, const std::string& reason) const {
  throw ModelError(context_.file, std::string(kFormat), offset, reason);
}

uint64_t Reader::varint(const WireField& field) const {
  protobuf::expect_type(field, WireType::Varint, "hold a number", context_);
  return field.value;
}

std::string Reader::text(const Fields& fields, uint32_t number) const {
  const WireField* f = fields.last(number);
  return f ? std::string(protobuf::field_text(*f, context_)) : std::string();
}

void Reader::add(std::string name, DType dtype, std::vector<uint64_t> shape, ByteSpan bytes,
                 const std::string& file, std::optional<uint64_t> offset, nlohmann::json extras) {
  TensorSpec spec;
  spec.name = std::move(name);
  spec.dtype = dtype;
  const auto strides = contiguous_strides(shape);
  if (!strides) fail(offset.value_or(0), spec.name + ": its shape overflows");
  spec.shape = std::move(shape);
  spec.strides = *strides;
  spec.bytes = std::move(bytes);
  spec.source = {file, offset};
  spec.extras = std::move(extras);
  catalog_.add(spec);
}

void Reader::not_tensor(const std::string& name, const std::string& why) {
  not_tensors_.push_back({{"name", name}, {"reason", why}});
}

Catalog Reader::read() {
  if (model_.mapped->size() > kMaxModelBytes)
    fail(0, "file is " + std::to_string(model_.mapped->size()) + " bytes; a protobuf message is limited to " +
                std::to_string(kMaxModelBytes));
  const WireMessage model(model_.mapped->unchecked_bytes(), 0, &context_);
  const Fields fields(model);
  auto& meta = catalog_.metadata;
  const WireField* version = fields.last(model_field::kSpecificationVersion);
  if (version == nullptr || varint(*version) == 0)
    fail(0, "no specificationVersion (field 1): a pre-release Core ML layout (such as NN_v2), not read");
  meta["specification_version"] = varint(*version);
  if (const WireField* f = fields.last(model_field::kIsUpdatable)) meta["is_updatable"] = varint(*f) != 0;
  if (auto description = fields.message(model_field::kDescription)) read_description(*description);

  std::optional<uint32_t> kind;
  model.scan([&](const WireField& f) {
    if (f.number < model_field::kFirstModel) return;
    if (kind && *kind != f.number)
      fail(f.offset,
           "two model types (fields " + std::to_string(*kind) + " and " + std::to_string(f.number) + ")");
    kind = f.number;
  });
  if (!kind) fail(0, "the model holds no model type (no field 200 or above)");
  const std::pair<uint32_t, const char*> kTypes[] = {
      {model_field::kNeuralNetwork, "neuralNetwork"},
      {model_field::kNeuralNetworkClassifier, "neuralNetworkClassifier"},
      {model_field::kNeuralNetworkRegressor, "neuralNetworkRegressor"},
      {model_field::kMlProgram, "mlProgram"}};
  const auto* type = std::ranges::find(kTypes, *kind, &std::pair<uint32_t, const char*>::first);
  if (type == std::end(kTypes))
    fail(fields.last(*kind)->offset,
         "model type field " + std::to_string(*kind) +
             " is not read (neural networks 303, 403, 500 and ML programs 502 are)");
  meta["model_type"] = type->second;
  const auto body = fields.message(*kind);
  if (*kind == model_field::kMlProgram)
    read_program(*body);
  else
    read_network(*body);
  if (!layers_not_read_.empty()) meta["layers_not_read"] = std::move(layers_not_read_);
  if (!not_tensors_.empty()) meta["not_tensors"] = std::move(not_tensors_);
  return std::move(catalog_);
}

void Reader::read_description(const WireMessage& description) {
  const Fields fields(description);
  auto features = [&](uint32_t number) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& f : fields.every(number)) {
      const Fields feature(description.child(f));
      nlohmann::json entry = {{"name", text(feature, 1)}};
      if (const std::string about = text(feature, 2); !about.empty()) entry["description"] = about;
      if (auto type = feature.message(3)) {
        Fields kinds(*type);
        for (uint32_t k = 1; k <= 7; ++k)
          if (kinds.last(k) != nullptr) entry["type"] = feature_kind(k);
      }
      list.push_back(std::move(entry));
    }
    return list;
  };
  auto& meta = catalog_.metadata;
  meta["inputs"] = features(description_field::kInput);
  meta["outputs"] = features(description_field::kOutput);
  if (const std::string name = text(fields, description_field::kPredictedFeatureName); !name.empty())
    meta["predicted_feature_name"] = name;
  if (const std::string name = text(fields, description_field::kPredictedProbabilitiesName); !name.empty())
    meta["predicted_probabilities_name"] = name;
  if (auto m = fields.message(description_field::kMetadata)) {
    const Fields md(*m);
    nlohmann::json out = nlohmann::json::object();
    const std::pair<uint32_t, const char*> keys[] = {{metadata_field::kShortDescription, "short_description"},
                                                     {metadata_field::kVersionString, "version"},
                                                     {metadata_field::kAuthor, "author"},
                                                     {metadata_field::kLicense, "license"}};
    for (const auto& [number, key] : keys)
      if (const std::string value = text(md, number); !value.empty()) out[key] = value;
    nlohmann::json user = nlohmann::json::object();
    for (const auto& entry : md.every(metadata_field::kUserDefined)) {
      const Fields kv(m->child(entry));
      user[text(kv, 1)] = text(kv, 2);
    }
    if (!user.empty()) out["user_defined"] = std::move(user);
    meta["metadata"] = std::move(out);
  }
}

void Reader::read_network(const WireMessage& network) {
  const Fields fields(network);
  const auto& layers = fields.every(1);
  catalog_.metadata["layer_count"] = layers.size();
  for (uint64_t i = 0; i < layers.size(); ++i) {
    protobuf::expect_type(layers[i], WireType::Length, "hold a layer", context_);
    read_layer(network.child(layers[i]), i);
  }
}

void Reader::read_layer(const WireMessage& layer, uint64_t index) {
  const Fields fields(layer);
  std::string name = text(fields, layer_field::kName);
  if (name.empty()) name = "layer_" + std::to_string(index);
  auto number = [&](const Fields& params, uint32_t field) -> uint64_t {
    const WireField* f = params.last(field);
    return f ? varint(*f) : 0;
  };
  if (auto conv = fields.message(layer_field::kConvolution)) {
    const Fields p(*conv);
    const uint64_t out = number(p, conv_field::kOutputChannels);
    const uint64_t kernel = number(p, conv_field::kKernelChannels);
    const uint64_t groups = std::max<uint64_t>(1, number(p, conv_field::kGroups));
    std::vector<uint64_t> size;
    for (const auto& f : p.every(conv_field::kKernelSize)) protobuf::append_varints(f, context_, size);
    if (size.size() != 2)
      fail(conv->offset(),
           "convolution layer " + name + " has " + std::to_string(size.size()) + " kernel sizes, not 2");
    const bool deconv = number(p, conv_field::kIsDeconvolution) != 0;
    if (deconv && out % groups != 0)
      fail(conv->offset(), "deconvolution layer " + name + ": outputChannels is not a multiple of nGroups");
    const std::vector<uint64_t> shape = deconv ? std::vector<uint64_t>{kernel, out / groups, size[0], size[1]}
                                               : std::vector<uint64_t>{out, kernel, size[0], size[1]};
    if (auto w = p.message(conv_field::kWeights)) read_weights(name, "weights", *w, shape);
    if (auto b = p.message(conv_field::kBias)) read_weights(name, "bias", *b, std::vector<uint64_t>{out});
    return;
  }
  if (auto inner = fields.message(layer_field::kInnerProduct)) {
    const Fields p(*inner);
    const uint64_t out = number(p, inner_field::kOutputChannels);
    if (auto w = p.message(inner_field::kWeights))
      read_weights(name, "weights", *w, std::vector<uint64_t>{out, number(p, inner_field::kInputChannels)});
    if (auto b = p.message(inner_field::kBias)) read_weights(name, "bias", *b, std::vector<uint64_t>{out});
    return;
  }
  if (auto matmul = fields.message(layer_field::kBatchedMatmul)) {
    const Fields p(*matmul);
    const uint64_t first = number(p, matmul_field::kFirst), second = number(p, matmul_field::kSecond);
    if (auto w = p.message(matmul_field::kWeights))
      read_weights(name, "weights", *w, std::vector<uint64_t>{second, first});
    if (auto b = p.message(matmul_field::kBias))
      read_weights(name, "bias", *b, std::vector<uint64_t>{second});
    return;
  }
  if (auto embedding = fields.message(embedding_field::kLayer)) {
    const Fields p(*embedding);
    const uint64_t out = number(p, embedding_field::kOutputChannels);
    if (auto w = p.message(embedding_field::kWeights))
      read_weights(name, "weights", *w, std::vector<uint64_t>{out, number(p, embedding_field::kInputDim)});
    if (auto b = p.message(embedding_field::kBias))
      read_weights(name, "bias", *b, std::vector<uint64_t>{out});
    return;
  }
  if (read_counted_layer(fields, name)) return;
  // Another layer type that may hold weights: named with its params' field
  // number, so that weights this reader does not shape are seen, not lost.
  layer.scan([&](const WireField& f) {
    if (f.number >= 100 && std::ranges::find(kWeightless, f.number) == std::end(kWeightless) &&
        layers_not_read_.size() < kMaxListed)
      layers_not_read_.push_back({{"name", name}, {"layer_field", f.number}});
  });
}

bool Reader::read_counted_layer(const Fields& fields, const std::string& name) {
  bool read = false;
  for (const auto& counted : kCountedLayers) {
    auto params = fields.message(counted.layer);
    if (params && counted.nested != 0) params = Fields(*params).message(counted.nested);
    if (!params) continue;
    read = true;
    const Fields p(*params);
    std::optional<std::vector<uint64_t>> shape;
    // Batchnorm says its channels: each of its four vectors must hold that many.
    if (counted.layer == batchnorm_field::kLayer) {
      const WireField* channels = p.last(batchnorm_field::kChannels);
      shape = std::vector<uint64_t>{channels ? varint(*channels) : 0};
    }
    for (const auto& [number, field] : counted.weights)
      if (field != nullptr)
        if (auto w = p.message(number)) read_weights(name, field, *w, shape);
  }
  return read;
}

void Reader::read_weights(const std::string& layer, const std::string& field, const WireMessage& weights,
                          std::optional<std::vector<uint64_t>> layer_shape) {
  const Fields p(weights);
  const std::string name = layer + "." + field;
  nlohmann::json extras = nlohmann::json::object();
  extras["layer"] = layer;
  if (const WireField* u = p.last(weight_field::kIsUpdatable)) extras["is_updatable"] = varint(*u) != 0;

  struct Stored {
    const WireField* field;
    DType dtype;
    uint64_t element_bytes;
  };
  std::vector<Stored> stored;
  const std::pair<uint32_t, Stored> kinds[] = {
      {weight_field::kFloat, {nullptr, DType::Float32, 4}},
      {weight_field::kFloat16, {nullptr, DType::Float16, 2}},
      {weight_field::kRaw, {nullptr, DType::UInt8, 1}},
      {weight_field::kInt8Raw, {nullptr, DType::Int8, 1}},
  };
  for (const auto& [number, kind] : kinds) {
    const auto& all = p.every(number);
    if (all.empty()) continue;
    // Unpacked floats (one fixed32 field each) are gathered below.
    if (number != weight_field::kFloat && all.size() > 1)
      fail(all.back().offset,
           name + ": field " + std::to_string(number) + " occurs " + std::to_string(all.size()) + " times");
    stored.push_back({&all.back(), kind.dtype, kind.element_bytes});
  }
  if (stored.empty()) return;  // holds no values (no bias)
  if (stored.size() > 1) fail(weights.offset(), name + ": holds values in more than one of its fields");
  const Stored s = stored.front();
  const bool quantized = p.last(weight_field::kQuantization) != nullptr;
  const bool split_floats = s.dtype == DType::Float32 && s.field->type == WireType::Fixed32;
  // A layer that gives no shape: [n], n the values stored.
  if (!layer_shape) {
    const uint64_t n =
        split_floats ? p.every(weight_field::kFloat).size() : s.field->length / s.element_bytes;
    layer_shape = std::vector<uint64_t>{n};
  }
  const std::vector<uint64_t>& shape = *layer_shape;
  const auto numel = checked_numel(shape);
  if (!numel) fail(weights.offset(), name + ": its layer's shape overflows");

  if (split_floats) {
    const auto& all = p.every(weight_field::kFloat);
    if (all.size() != *numel)
      fail(s.field->offset,
           name + ": " + std::to_string(all.size()) + " floats for a shape of " + std::to_string(*numel));
    std::string bytes;
    bytes.reserve(all.size() * 4);
    for (const auto& f : all) {
      protobuf::expect_type(f, WireType::Fixed32, "hold a float", context_);
      const auto raw = static_cast<uint32_t>(f.value);
      char le[4];
      std::memcpy(le, &raw, 4);
      bytes.append(le, 4);
    }
    add(name, DType::Float32, shape, ByteSpan::owned(std::move(bytes)), model_name_, std::nullopt,
        std::move(extras));
    return;
  }
  if (s.dtype == DType::Float32 && p.every(weight_field::kFloat).size() > 1)
    fail(s.field->offset, name + ": floatValue both packed and split");
  protobuf::expect_type(*s.field, WireType::Length, "hold the weights' bytes", context_);
  const uint64_t length = s.field->length;
  if (s.dtype == DType::UInt8 && quantized) {
    extras["quantized"] = true;
    extras["layer_shape"] = shape;
    add(name, DType::UInt8, {length}, ByteSpan::mapped(model_.mapped, s.field->offset, length), model_name_,
        s.field->offset, std::move(extras));
    return;
  }
  const auto expected = checked_mul(*numel, s.element_bytes);
  if (!expected || *expected != length)
    fail(s.field->offset, name + ": " + std::to_string(length) + " bytes of " +
                              std::string(dtype_name(s.dtype)) + " values for its layer's shape of " +
                              std::to_string(*numel) + " elements");
  add(name, s.dtype, shape, ByteSpan::mapped(model_.mapped, s.field->offset, length), model_name_,
      s.field->offset, std::move(extras));
}

}  // namespace detail

namespace {

// A package's Manifest.json: a JSON object naming its items.
bool is_manifest(std::span<const std::byte> head) {
  const std::string_view text(reinterpret_cast<const char*>(head.data()), head.size());
  const size_t start = text.find_first_not_of(" \t\r\n");
  return start != std::string_view::npos && text[start] == '{' &&
         (text.find("\"itemInfoEntries\"") != std::string_view::npos ||
          text.find("\"rootModelIdentifier\"") != std::string_view::npos);
}

// The first byte of a ModelDescription field's key (length-delimited):
// input 1, output 10, predictedFeatureName 11, predictedProbabilitiesName
// 12, and the first byte of trainingInput 50's and metadata 100's.
bool is_description_tag(uint8_t byte) {
  return byte == 0x0a || byte == 0x52 || byte == 0x5a || byte == 0x62 || byte == 0x92 || byte == 0xa2;
}
}  // namespace

bool probe_file(std::span<const std::byte> head) {
  if (is_manifest(head)) return true;
  // Model fields only: specificationVersion or the description first, then
  // the description, isUpdatable or a model type (>= 200). The
  // description is a message whose first field is one of its own
  // (inputs, outputs, the predicted names, training inputs, metadata); an
  // ONNX producer_name in its place is text.
  const protobuf::WireContext context{"", std::string(detail::kFormat)};
  uint64_t pos = 0;
  int fields = 0;
  try {
    while (pos < head.size()) {
      const uint64_t key = protobuf::read_varint(head, pos, context, 0);
      const uint64_t number = key >> 3, type = key & 7;
      const uint64_t value = protobuf::read_varint(head, pos, context, 0);
      if (number == 1) {
        if (fields != 0 || type != 0 || value == 0 || value > detail::kMaxSpecificationVersion) return false;
      } else if (number == 2) {
        if (type != 2 || fields > 1) return false;
        if (value > 0 && (pos >= head.size() || !is_description_tag(static_cast<uint8_t>(head[pos]))))
          return false;
      } else if (number == 10) {
        if (type != 0) return false;
      } else if (number >= 200 && number < 1000) {
        return type == 2;
      } else {
        return false;
      }
      ++fields;
      if (type == 2) {
        if (value >= head.size() - pos) return fields >= 2;  // runs on past the head
        pos += value;
      }
    }
  } catch (const ModelError&) {
    return false;
  }
  return false;
}

namespace {

// The root model an .mlpackage's Manifest.json names, under Data/ beside
// it (a URL's too), read as its own file.
Catalog open_package(const ModelFile& manifest) {
  const std::string format(detail::kFormat);
  const std::string file = manifest.mapped->display_name();
  const auto doc = parse_json_limited(
      whole_text(*manifest.mapped, kMaxManifestBytes, format, "a Manifest.json"), file, format, 0, 8);
  auto refuse = [&](const std::string& why) -> std::string {
    throw ModelError(file, format, std::nullopt, why);
  };
  if (!doc.is_object() || !doc.contains("rootModelIdentifier") || !doc["rootModelIdentifier"].is_string())
    refuse("no rootModelIdentifier string");
  const auto root = doc["rootModelIdentifier"].get<std::string>();
  const auto entries = doc.find("itemInfoEntries");
  if (entries == doc.end() || !entries->is_object() || !entries->contains(root) ||
      !(*entries)[root].is_object())
    refuse("itemInfoEntries has no entry for the root model " + shown(root));
  const auto& entry = (*entries)[root];
  if (!entry.contains("path") || !entry["path"].is_string()) refuse("the root model's entry has no path");
  const std::string path = "Data/" + entry["path"].get<std::string>();
  const auto package = ModelFolder::of_file(manifest.path, format, manifest.remote);
  auto opened = package.open(path);
  if (!opened) refuse("the root model " + shown(path) + " " + opened.reason);
  const ModelFile model{manifest.path.parent_path() / path, opened.file, manifest.checks, manifest.remote};
  Catalog catalog = detail::Reader(model, model.path.filename().string()).read();
  catalog.metadata["package_root_model"] = path;
  return catalog;
}

}  // namespace

Catalog open_file(const ModelFile& model) {
  const auto head = model.mapped->read(0, std::min<uint64_t>(model.mapped->size(), 4096));
  if (is_manifest(head)) return open_package(model);
  return detail::Reader(model, model.path.filename().string()).read();
}

bool probe_folder(const std::filesystem::path& folder) {
  std::error_code ec;
  return std::filesystem::is_regular_file(folder / "Manifest.json", ec) &&
         std::filesystem::is_directory(folder / "Data", ec);
}

Catalog open_folder(const std::filesystem::path& folder, IntegrityChecks* checks) {
  return open_file(ModelFile::open(folder / "Manifest.json", checks));
}

}  // namespace modelfs::coreml
