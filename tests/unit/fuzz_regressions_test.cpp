// SPDX-License-Identifier: Apache-2.0
// Every input a fuzzer once crashed on (fuzz/regressions/<target>/) is
// replayed through the whole open -> check -> tree path (a bare pickle,
// through the unpickler): it must now be refused with a ModelError or read
// cleanly. Runs under ASan/UBSan in the
// sanitizer pass of scripts/test.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>

#include "io/unpickler.hpp"
#include "modelfs/check.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/tree.hpp"

namespace modelfs {
namespace {

TEST(FuzzRegressions, EveryKeptInputIsRefusedOrReadCleanly) {
  const std::filesystem::path root = std::filesystem::path(MODELFS_SOURCE_DIR) / "fuzz" / "regressions";
  size_t replayed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root, ec)) {
    if (!entry.is_regular_file() || entry.path().filename() == "README.md") continue;
    SCOPED_TRACE(entry.path().string());
    try {
      // A bare pickle is no model file: it goes to the unpickler itself.
      if (entry.path().parent_path().filename() == "fuzz_unpickler") {
        std::ifstream in(entry.path(), std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        pickle::unpickle(std::as_bytes(std::span(bytes.data(), bytes.size())), entry.path().string(),
                         "pickle");
        ++replayed;
        continue;
      }
      IntegrityChecks checks;
      auto catalog = open_model(entry.path(), &checks);
      check_model(catalog, checks, nullptr);
      auto tree = Tree::build(std::move(catalog), {});
      for (const auto& path : tree->tensor_paths()) EXPECT_TRUE(tree->resolve(path));
    } catch (const ModelError&) {
    }
    ++replayed;
  }
  if (replayed == 0) GTEST_SKIP() << "no fuzz regressions kept yet under " << root;
}

}  // namespace
}  // namespace modelfs
