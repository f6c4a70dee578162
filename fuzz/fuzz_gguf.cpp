// SPDX-License-Identifier: Apache-2.0
// The GGUF reader: header, key-values, tensor infos, data section.
#include "formats/gguf.hpp"
#include "fuzz_input.hpp"
#include "io/json_text.hpp"
#include "modelfs/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "model.gguf");
  try {
    auto file = modelfs::gguf::parse(modelfs::MappedFile::open(path), "model.gguf");
    (void)modelfs::readable_json(nlohmann::ordered_json(file.kv));  // metadata.json of any bytes
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
