// SPDX-License-Identifier: Apache-2.0
// The TensorFlow checkpoint reader: the table (footer, blocks, restarts,
// prefixes, snappy), the bundle's protos, slice keys and DT_STRING data.
// The input is both the .index and its one data shard, so that entries'
// ranges land in a file as often as not.
#include <filesystem>

#include "formats/tfckpt.hpp"
#include "fuzz_input.hpp"
#include "modelfs/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "model.index");
  modelfs::fuzz::write_input(data, size, "model.data-00000-of-00001");
  try {
    modelfs::IntegrityChecks checks;
    auto catalog = modelfs::tfckpt::open_file(modelfs::ModelFile::open(path, &checks));
    for (const auto& check : checks) check.run([](uint64_t) {});
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
