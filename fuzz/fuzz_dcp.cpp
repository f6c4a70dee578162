// SPDX-License-Identifier: Apache-2.0
// The torch.distributed.checkpoint reader: one input that is both the
// .metadata pickle (the unpickler stops at its STOP) and every data file
// __0_0.distcp .. __3_0.distcp, so storage records may point past the
// pickle at archives appended to it (fuzz/make_seeds.py's
// dcp_rows_and_columns seed does). Every file of the tree is then read at
// both ends and in the middle, and --check's integrity checks run.

#include <string>

#include "formats/dcp.hpp"
#include "fuzz_input.hpp"
#include "fuzz_tree_reads.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (int rank = 0; rank < 4; ++rank)
    modelfs::fuzz::write_input(data, size, "__" + std::to_string(rank) + "_0.distcp");
  const auto path = modelfs::fuzz::write_input(data, size, ".metadata");
  modelfs::Budget budget;
  modelfs::BudgetScope scope(budget);
  try {
    modelfs::IntegrityChecks checks;
    modelfs::fuzz::read_tree(modelfs::dcp::open_file(modelfs::ModelFile::open(path, &checks)));
    for (const auto& check : checks) check.run([](uint64_t) {});
  } catch (const modelfs::ModelError&) {
  } catch (const modelfs::SizeOverflow&) {
  } catch (const modelfs::BudgetExceeded&) {
  }
  return 0;
}
