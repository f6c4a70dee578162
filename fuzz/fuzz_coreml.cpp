// SPDX-License-Identifier: Apache-2.0
// The Core ML reader: the probe, then a .mlmodel (a neural network's
// weights or an ML program's consts) and, after the marker
// "\n--weight.bin--\n", the weights/weight.bin beside it that blob consts
// point into. Every file of the tree is then read at both ends and in the
// middle.
#include <filesystem>
#include <span>
#include <string_view>

#include "formats/coreml.hpp"
#include "fuzz_input.hpp"
#include "fuzz_tree_reads.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr std::string_view kMarker = "\n--weight.bin--\n";
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find(kMarker);
  const size_t model_size = split == std::string_view::npos ? size : split;
  (void)modelfs::coreml::probe_file(std::as_bytes(std::span(data, model_size)));
  const auto path = modelfs::fuzz::write_input(data, model_size, "model.mlmodel");
  std::filesystem::create_directories(modelfs::fuzz::work_dir() / "weights");
  if (split != std::string_view::npos)
    modelfs::fuzz::write_input(data + split + kMarker.size(), size - split - kMarker.size(),
                               "weights/weight.bin");
  else
    modelfs::fuzz::write_input(data, 0, "weights/weight.bin");
  modelfs::Budget budget;
  modelfs::BudgetScope scope(budget);
  try {
    modelfs::fuzz::read_tree(modelfs::coreml::open_file(modelfs::ModelFile::open(path)));
  } catch (const modelfs::ModelError&) {
  } catch (const modelfs::SizeOverflow&) {
  } catch (const modelfs::BudgetExceeded&) {
  }
  return 0;
}
