// SPDX-License-Identifier: Apache-2.0
// The TensorFlow Lite reader: the input is a .tflite file (a flatbuffer),
// walked field by field; every file of the tree is then read at both ends
// and in the middle, and the --check ranges are run.

#include <string>

#include "formats/tflite.hpp"
#include "fuzz_input.hpp"
#include "fuzz_tree_reads.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = modelfs::fuzz::write_input(data, size, "model.tflite");
  modelfs::Budget budget;
  modelfs::BudgetScope scope(budget);
  try {
    modelfs::IntegrityChecks checks;
    const auto model = modelfs::ModelFile::open(path, &checks);
    modelfs::fuzz::read_tree(modelfs::tflite::open_file(model));
    for (const auto& check : checks) check.run([](uint64_t) {});
  } catch (const modelfs::ModelError&) {
  } catch (const modelfs::SizeOverflow&) {
  } catch (const modelfs::BudgetExceeded&) {
  }
  return 0;
}
