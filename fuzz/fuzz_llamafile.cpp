// SPDX-License-Identifier: Apache-2.0
// llamafiles: the probes (APE magic, the end record in the last bytes), the
// ZIP behind an executable (ZIP64 extras) and the GGUF member parsed over
// its range of the file, as detection reaches them.
#include "formats/llamafile.hpp"
#include "fuzz_input.hpp"
#include "modelfs/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "model.llamafile");
  try {
    const auto model = modelfs::ModelFile::open(path);
    (void)modelfs::llamafile::probe_file(std::as_bytes(std::span(data, size)));
    if (modelfs::llamafile::probe_past_head(*model.mapped, 0)) (void)modelfs::llamafile::open_file(model);
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
