// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by the readers' fuzz targets: a catalog a reader accepted is built
// into a tree and every file read at its start, middle and end, as a mount
// would serve it. A read may fail (ModelError: a computed part refusing its
// bytes); it may not crash.
#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "modelfs/catalog.hpp"
#include "modelfs/error.hpp"
#include "modelfs/tree.hpp"

namespace modelfs::fuzz {

inline void read_tree(Catalog catalog) {
  const auto tree = Tree::build(std::move(catalog), {});
  std::array<iovec, 4> io{};
  std::string scratch;
  for (uint64_t ino = 1; ino <= tree->node_count(); ++ino) {
    const Node* node = tree->node(ino);
    if (node->kind != NodeKind::File) continue;
    for (const uint64_t at : {uint64_t{0}, node->size / 2, node->size > 4096 ? node->size - 4096 : 0}) {
      try {
        (void)tree->read(*node, at, 4096, io, scratch);
      } catch (const ModelError&) {
      }
    }
  }
}

}  // namespace modelfs::fuzz
