// SPDX-License-Identifier: Apache-2.0
// PT2 archives: the payload configs (dtype codes, sizes, strides, storage
// offsets, symbolic sizes), model JSONs, nested torch.save members and the
// AOTInductor layout, reached as detection reaches them: through the ZIP.
#include "formats/pt2.hpp"
#include "fuzz_input.hpp"
#include "modelfs/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "model.pt2");
  try {
    const auto model = modelfs::ModelFile::open(path);
    const auto zip = modelfs::ZipArchive::open(model.mapped, "ZIP archive");
    (void)modelfs::pt2::open_archive(model, zip);
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
