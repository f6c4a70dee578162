// SPDX-License-Identifier: Apache-2.0
// NeMo .nemo archives: the tar's headers (checksums, PAX records, GNU long
// names, base-256 sizes) and the torch.save checkpoint read inside its
// member, as detection reaches them.
#include "formats/nemo.hpp"
#include "fuzz_input.hpp"
#include "modelfs/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "model.nemo");
  try {
    (void)modelfs::nemo::open_file(modelfs::ModelFile::open(path));
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
