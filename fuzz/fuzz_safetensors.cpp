// SPDX-License-Identifier: Apache-2.0
// The safetensors header parser and its validation rules.
#include "formats/safetensors.hpp"
#include "fuzz_input.hpp"
#include "modelfs/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "model.safetensors");
  try {
    auto file = modelfs::safetensors::parse(modelfs::MappedFile::open(path), "model.safetensors");
    modelfs::Catalog catalog;
    for (const auto& tensor : file.tensors) (void)catalog.add(tensor).is_c_contiguous();
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
