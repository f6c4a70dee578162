// SPDX-License-Identifier: Apache-2.0
// The OpenVINO IR reader: an .xml and the .bin of its stem. The input is
// the .xml's text, then a NUL, then the .bin's bytes (model.xml and
// model.bin). Every file of the tree is then read at both ends and in the
// middle, and the --check pass run.

#include <string>
#include <string_view>

#include "formats/openvino.hpp"
#include "fuzz_input.hpp"
#include "fuzz_tree_reads.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view xml = input.substr(0, nul);
  const std::string_view bin = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  modelfs::fuzz::write_input(reinterpret_cast<const uint8_t*>(bin.data()), bin.size(), "model.bin");
  const auto path =
      modelfs::fuzz::write_input(reinterpret_cast<const uint8_t*>(xml.data()), xml.size(), "model.xml");
  modelfs::Budget budget;
  modelfs::BudgetScope scope(budget);
  try {
    modelfs::IntegrityChecks checks;
    modelfs::fuzz::read_tree(modelfs::openvino::open_file(modelfs::ModelFile::open(path, &checks)));
    for (const auto& check : checks) check.run([](uint64_t) {});
  } catch (const modelfs::ModelError&) {
  } catch (const modelfs::SizeOverflow&) {
  } catch (const modelfs::BudgetExceeded&) {
  }
  return 0;
}
