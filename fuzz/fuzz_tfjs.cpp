// SPDX-License-Identifier: Apache-2.0
// The TensorFlow.js reader: a model.json and the shards it names. The input
// is the model.json's text, then a NUL, then the shards' bytes, written as
// the names TensorFlow.js's converters give a group's shards: weights.bin
// and group1-shard1of1.bin hold them all, group1-shard1of2.bin and
// group1-shard2of2.bin a half each (so weights span two shards). Every file
// of the tree is then read at both ends and in the middle.

#include <string>
#include <string_view>

#include "formats/tfjs.hpp"
#include "fuzz_input.hpp"
#include "fuzz_tree_reads.hpp"
#include "io/budget_charge.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"

namespace {

void write(std::string_view bytes, const std::string& name) {
  modelfs::fuzz::write_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view shards = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  write(shards, "weights.bin");
  write(shards, "group1-shard1of1.bin");
  write(shards.substr(0, shards.size() / 2), "group1-shard1of2.bin");
  write(shards.substr(shards.size() / 2), "group1-shard2of2.bin");
  const auto path =
      modelfs::fuzz::write_input(reinterpret_cast<const uint8_t*>(json.data()), json.size(), "model.json");
  modelfs::Budget budget;
  modelfs::BudgetScope scope(budget);
  try {
    modelfs::IntegrityChecks checks;
    modelfs::fuzz::read_tree(modelfs::tfjs::open_file(modelfs::ModelFile::open(path, &checks)));
    for (const auto& check : checks) check.run([](uint64_t) {});
  } catch (const modelfs::ModelError&) {
  } catch (const modelfs::SizeOverflow&) {
  } catch (const modelfs::BudgetExceeded&) {
  }
  return 0;
}
