// The whole path a mount takes: detection, whichever reader the bytes
// lead to, the tree (names, sidecars, .npy headers, documents) and --check.
#include "fuzz_input.hpp"
#include "modelfs/check.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/tree.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "model");
  try {
    auto catalog = modelfs::open_model(path);
    (void)modelfs::check_model(catalog, nullptr);
    auto tree = modelfs::Tree::build(std::move(catalog), {});
    for (const auto& p : tree->tensor_paths()) (void)tree->resolve(p);
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
