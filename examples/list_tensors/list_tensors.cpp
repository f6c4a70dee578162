// SPDX-License-Identifier: Apache-2.0
// Lists a model's tensors with where their bytes lie, using the modelfs
// library (no FUSE, no mount): one line per tensor,
//   NAME DTYPE SHAPE FILE OFFSET NBYTES
// and reads the first bytes of each straight from the library's mapping.
#include <modelfs/catalog.hpp>
#include <modelfs/error.hpp>
#include <modelfs/formats.hpp>

#include <cstdio>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: list_tensors MODEL\n";
    return 1;
  }
  try {
    const modelfs::Catalog catalog = modelfs::open_model(argv[1]);
    std::cout << "# " << catalog.format << ", " << catalog.tensors().size() << " tensors\n";
    for (const auto& tensor : catalog.tensors()) {
      std::cout << tensor.name << " " << tensor.dtype_name() << " [";
      for (size_t i = 0; i < tensor.shape.size(); ++i) std::cout << (i ? "," : "") << tensor.shape[i];
      std::cout << "] " << tensor.source.file << " "
                << (tensor.source.offset ? std::to_string(*tensor.source.offset) : "-") << " "
                << tensor.bytes.size();
      // The bytes themselves, mapped from the model file (span() makes them
      // present: a remote model's are fetched).
      const auto head = tensor.bytes.subspan(0, std::min<uint64_t>(tensor.bytes.size(), 4)).span();
      std::cout << " ";
      for (std::byte b : head) {
        char hex[3];
        std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned>(b));
        std::cout << hex;
      }
      std::cout << "\n";
    }
  } catch (const modelfs::ModelError& e) {
    std::cerr << "list_tensors: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
