// SPDX-License-Identifier: Apache-2.0
// The PyTorch readers end to end: torch.save ZIP, TorchScript, legacy
// torch.save (object walking, storages, views, byte order).
#include "formats/torch.hpp"
#include "fuzz_input.hpp"
#include "modelfs/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "model.pt");
  std::span<const std::byte> head(reinterpret_cast<const std::byte*>(data), size);
  try {
    if (modelfs::torch::probe_zip(head))
      (void)modelfs::torch::open_zip(modelfs::ModelFile::open(path));
    else
      (void)modelfs::torch::open_legacy(modelfs::ModelFile::open(path));
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
