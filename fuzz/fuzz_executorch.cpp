// SPDX-License-Identifier: Apache-2.0
// The ExecuTorch reader: the input is a .pte program, optionally followed
// by the marker "\n--ptd--\n" and the .ptd written beside it (so EXTERNAL
// tensors are looked up too), or a .ptd alone; walked field by field, every
// file of the tree then read at both ends and in the middle, and the
// --check segment checks run.

#include <cstring>
#include <string>
#include <string_view>

#include "formats/executorch.hpp"
#include "fuzz_input.hpp"
#include "fuzz_tree_reads.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr std::string_view kMarker = "\n--ptd--\n";
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find(kMarker);
  const size_t program = split == std::string_view::npos ? size : split;
  const auto path = modelfs::fuzz::write_input(data, program, "model.pte");
  if (split != std::string_view::npos)
    modelfs::fuzz::write_input(data + split + kMarker.size(), size - split - kMarker.size(), "model.ptd");
  else
    modelfs::fuzz::write_input(data, 0, "model.ptd");
  modelfs::Budget budget;
  modelfs::BudgetScope scope(budget);
  try {
    modelfs::IntegrityChecks checks;
    const auto model = modelfs::ModelFile::open(path, &checks);
    modelfs::fuzz::read_tree(modelfs::executorch::open_file(model));
    for (const auto& check : checks) check.run([](uint64_t) {});
  } catch (const modelfs::ModelError&) {
  } catch (const modelfs::SizeOverflow&) {
  } catch (const modelfs::BudgetExceeded&) {
  }
  return 0;
}
