// SPDX-License-Identifier: Apache-2.0
// The HDF5 reader. An input with the HDF5 signature (at 0, 512, 1024, ...) is a file:
// it goes the whole way (the sandboxed child walks it with libhdf5, the
// parent validates its records, the tree is built and read). Any other
// input is a record stream as a child sends it, given straight to the
// parent's validation (hdf5::add_records) over a fixed 64 KiB file, so the
// fuzzer spends its time on what the daemon trusts least: records from a
// process that may have been subverted.

#include <cstring>
#include <string>

#include "formats/hdf5.hpp"
#include "fuzz_input.hpp"
#include "fuzz_tree_reads.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"

namespace {

const std::filesystem::path& fixed_file() {
  static const std::filesystem::path path = [] {
    std::string bytes(64 * 1024, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 31);
    return modelfs::fuzz::write_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                      "fixed.h5");
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A file as the reader probes one: the signature at 0, or after a user block.
  const bool file = modelfs::hdf5::probe_file(std::as_bytes(std::span(data, size)));
  modelfs::Budget budget;
  modelfs::BudgetScope scope(budget);
  try {
    if (file) {
      const auto model = modelfs::ModelFile::open(modelfs::fuzz::write_input(data, size, "model.h5"));
      modelfs::fuzz::read_tree(modelfs::hdf5::open_file(model));
    } else {
      const auto mapped = modelfs::MappedFile::open(fixed_file());
      const modelfs::hdf5::Source source{mapped, 0, mapped->size(), "fixed.h5", "fixed.h5"};
      modelfs::Catalog catalog;
      catalog.format = "hdf5";
      modelfs::hdf5::add_records(catalog, std::string_view(reinterpret_cast<const char*>(data), size),
                                 source);
      modelfs::fuzz::read_tree(std::move(catalog));
    }
  } catch (const modelfs::ModelError&) {
  } catch (const modelfs::SizeOverflow&) {
  } catch (const modelfs::BudgetExceeded&) {
  }
  return 0;
}
