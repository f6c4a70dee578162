// SPDX-License-Identifier: Apache-2.0
// The ONNX reader over its wire scanner: every tensor source, typed-field
// decoding, graph.json, external-data resolution next to the input.
#include "formats/onnx.hpp"
#include "fuzz_input.hpp"
#include "modelfs/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "model.onnx");
  try {
    auto catalog = modelfs::onnx::open_file(modelfs::ModelFile::open(path));
    for (const auto& document : catalog.documents) (void)document.content.size();
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
