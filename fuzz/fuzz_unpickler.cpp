// SPDX-License-Identifier: Apache-2.0
// The restricted unpickler: every opcode, memo, marks, persistent ids,
// limits. It builds values and never calls anything, whatever the bytes.
#include "fuzz_input.hpp"
#include "io/unpickler.hpp"
#include "modelfs/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  modelfs::fuzz::work_dir();
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    auto pickled = modelfs::pickle::unpickle(bytes, "data.pkl", "pytorch");
    (void)pickled.values.size();
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
