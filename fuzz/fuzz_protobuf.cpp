// SPDX-License-Identifier: Apache-2.0
// The protobuf wire scanner: every length-delimited field is also tried as
// a nested message, to the depth limit, as the ONNX reader walks them.
#include "fuzz_input.hpp"
#include "io/protobuf_wire.hpp"
#include "modelfs/error.hpp"

namespace {

void walk(const modelfs::protobuf::WireMessage& message) {
  for (const auto& field : message.fields()) {
    if (field.type != modelfs::protobuf::WireType::Length) continue;
    try {
      walk(message.child(field));
    } catch (const modelfs::ModelError&) {
      // not a message, or too deep: the scanner said so cleanly
    }
    std::vector<uint64_t> values;
    try {
      modelfs::protobuf::append_varints(field, message.context(), values);
    } catch (const modelfs::ModelError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  modelfs::fuzz::work_dir();
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  modelfs::protobuf::WireContext context{"input.bin", "protobuf"};
  try {
    walk(modelfs::protobuf::WireMessage(bytes, 0, &context));
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
