// SPDX-License-Identifier: Apache-2.0
// The NumPy reader: an .npy's preamble and header dict (the parser of
// docs/formats.md §10.5), and an .npz's members, stored or deflated, whose
// raw files are then read at both ends and in the middle through the tree,
// so the per-read inflation meets every stream the fuzzer makes.

#include <string>

#include "formats/numpy.hpp"
#include "fuzz_input.hpp"
#include "fuzz_tree_reads.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool zip = size >= 2 && data[0] == 'P' && data[1] == 'K';
  auto path = modelfs::fuzz::write_input(data, size, zip ? "model.npz" : "model.npy");
  modelfs::Budget budget;
  modelfs::BudgetScope scope(budget);
  try {
    const auto model = modelfs::ModelFile::open(path);
    if (zip) {
      const auto archive = modelfs::ZipArchive::open(model.mapped, "ZIP archive");
      if (modelfs::numpy::is_npz_archive(archive))
        modelfs::fuzz::read_tree(modelfs::numpy::open_npz(model, archive));
    } else {
      modelfs::fuzz::read_tree(modelfs::numpy::open_file(model));
    }
  } catch (const modelfs::ModelError&) {
  } catch (const modelfs::SizeOverflow&) {
  } catch (const modelfs::BudgetExceeded&) {
  }
  return 0;
}
