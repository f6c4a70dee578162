// SPDX-License-Identifier: Apache-2.0
// The legacy GGML reader: the input is a 'ggml', 'ggmf' or 'ggjt' file,
// tried as each layout its magic allows and walked record by record; every
// file of the tree is then read at both ends and in the middle (the
// dequantized .npy of block types too).

#include <string>

#include "formats/ggml_legacy.hpp"
#include "fuzz_input.hpp"
#include "fuzz_tree_reads.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = modelfs::fuzz::write_input(data, size, "model.bin");
  modelfs::Budget budget;
  modelfs::BudgetScope scope(budget);
  try {
    modelfs::fuzz::read_tree(modelfs::ggml_legacy::open_file(modelfs::ModelFile::open(path)));
  } catch (const modelfs::ModelError&) {
  } catch (const modelfs::SizeOverflow&) {
  } catch (const modelfs::BudgetExceeded&) {
  }
  return 0;
}
