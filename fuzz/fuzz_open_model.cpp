// SPDX-License-Identifier: Apache-2.0
// The whole path a mount takes: detection, whichever reader the bytes
// lead to, the tree (names, sidecars, .npy headers, documents) and --check.
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <string>

#include "fuzz_input.hpp"
#include "modelfs/check.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/tree.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = modelfs::fuzz::write_input(data, size, "model");
  try {
    modelfs::IntegrityChecks checks;
    auto catalog = modelfs::open_model(path, &checks);
    (void)modelfs::check_model(catalog, checks, nullptr);
    auto tree = modelfs::Tree::build(std::move(catalog), {});
    for (const auto& p : tree->tensor_paths()) (void)tree->resolve(p);
    // Every file served as FUSE would serve it, through what the tree kept
    // (the catalog it now owns, its views and documents), at both ends: a
    // printed file must be exactly the size the builder measured.
    std::array<iovec, 64> iov{};
    std::string scratch;
    unsigned sum = 0;
    for (uint64_t ino = 1; ino <= tree->node_count(); ++ino) {
      const modelfs::Node& node = *tree->node(ino);
      if (node.kind != modelfs::NodeKind::File) continue;
      const bool printed = node.role == modelfs::FileRole::Sidecar || node.role == modelfs::FileRole::Index ||
                           node.role == modelfs::FileRole::Document;
      // At most what one FUSE read asks (1 MiB): the export file is a
      // document as large as the model's tensors.
      const uint64_t edge = std::min<uint64_t>(node.size, printed ? (1 << 20) : 64);
      for (uint64_t offset : {uint64_t{0}, node.size - edge}) {
        uint64_t got = 0;
        const size_t n = tree->read(node, offset, edge, iov, scratch);
        for (size_t i = 0; i < n; ++i) {
          const auto* bytes = static_cast<const unsigned char*>(iov[i].iov_base);
          for (size_t j = 0; j < iov[i].iov_len; ++j) sum += bytes[j];
          got += iov[i].iov_len;
        }
        if (got != edge) __builtin_trap();  // a file shorter than its size
      }
    }
    volatile unsigned keep = sum;
    (void)keep;
  } catch (const modelfs::ModelError&) {
  }
  return 0;
}
