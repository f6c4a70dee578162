// SPDX-License-Identifier: Apache-2.0
// The PaddlePaddle readers. An input that starts as a pickle (0x80) is a
// .pdparams state dict; any other is a program (model.pdmodel), then, after
// the marker "\n--pdiparams--\n" when the input holds one, its combined
// parameters file (model.pdiparams; without one, the program's vars are
// looked for as files of their own, which are not there). Every file of
// the tree is then read at both ends and in the middle.

#include <filesystem>
#include <string_view>
#include <system_error>

#include "formats/paddle.hpp"
#include "fuzz_input.hpp"
#include "fuzz_tree_reads.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr std::string_view kMarker = "\n--pdiparams--\n";
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const bool pickle = size > 0 && data[0] == 0x80;
  std::filesystem::path path;
  if (pickle) {
    path = modelfs::fuzz::write_input(data, size, "model.pdparams");
  } else {
    const size_t split = input.find(kMarker);
    path = modelfs::fuzz::write_input(data, split == std::string_view::npos ? size : split, "model.pdmodel");
    std::error_code ec;
    std::filesystem::remove(modelfs::fuzz::work_dir() / "model.pdiparams", ec);  // the last input's
    if (split != std::string_view::npos)
      modelfs::fuzz::write_input(data + split + kMarker.size(), size - split - kMarker.size(),
                                 "model.pdiparams");
  }
  modelfs::Budget budget;
  modelfs::BudgetScope scope(budget);
  try {
    const auto model = modelfs::ModelFile::open(path);
    modelfs::fuzz::read_tree(pickle ? modelfs::paddle::open_pdparams(model)
                                    : modelfs::paddle::open_program(model));
  } catch (const modelfs::ModelError&) {
  } catch (const modelfs::SizeOverflow&) {
  } catch (const modelfs::BudgetExceeded&) {
  }
  return 0;
}
