// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Core ML reader's insides (coreml.hpp), shared by its two halves:
// coreml.cpp (entry points, probe, description, neural networks) and
// coreml_program.cpp (ML programs and their weight.bin blobs).
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/coreml.hpp"
#include "formats/model_folder.hpp"
#include "io/protobuf_wire.hpp"
#include "io/tensor_spec.hpp"

namespace modelfs::coreml::detail {

using protobuf::WireContext;
using protobuf::WireField;
using protobuf::WireMessage;
using protobuf::WireType;

inline constexpr std::string_view kFormat = "Core ML";

// A message's fields by number, in order.
class Fields {
 public:
  explicit Fields(const WireMessage& message);
  const WireField* last(uint32_t number) const;
  const std::vector<WireField>& every(uint32_t number) const;
  // The merge of every occurrence of a message field, or none.
  std::optional<WireMessage> message(uint32_t number) const;

 private:
  WireMessage message_;  // a copy: a Fields may outlive the message it was made from
  std::map<uint32_t, std::vector<WireField>> by_number_;
};

class Reader {
 public:
  // `name_in_files` is how the catalog lists the model file ("model.mlmodel",
  // or its path inside an .mlpackage).
  Reader(const ModelFile& model, std::string name_in_files);
  Catalog read();

  // coreml_program.cpp
  void read_program(const WireMessage& program);

  [[noreturn]] void fail(uint64_t offset, const std::string& reason) const;
  uint64_t varint(const WireField& field) const;
  std::string text(const Fields& fields, uint32_t number) const;

  // Adds a tensor whose bytes are `bytes`, in the mapping when `in_place`.
  void add(std::string name, DType dtype, std::vector<uint64_t> shape, ByteSpan bytes,
           const std::string& file, std::optional<uint64_t> offset, nlohmann::json extras = nullptr);
  void not_tensor(const std::string& name, const std::string& why);

  const ModelFile& model() const { return model_; }
  const WireContext& context() const { return context_; }
  Catalog& catalog() { return catalog_; }
  const std::string& model_name() const { return model_name_; }

 private:
  void read_description(const WireMessage& description);
  void read_network(const WireMessage& network);
  void read_layer(const WireMessage& layer, uint64_t index);
  bool read_counted_layer(const Fields& fields, const std::string& name);
  // `shape` from the layer, or none for [n] (n the values stored).
  void read_weights(const std::string& layer, const std::string& field, const WireMessage& weights,
                    std::optional<std::vector<uint64_t>> shape);

  const ModelFile& model_;
  std::string model_name_;
  WireContext context_;
  Catalog catalog_;
  nlohmann::json not_tensors_ = nlohmann::json::array();
  nlohmann::json layers_not_read_ = nlohmann::json::array();
};

}  // namespace modelfs::coreml::detail
