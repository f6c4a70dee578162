// SPDX-License-Identifier: Apache-2.0
#pragma once
// `--check`'s one way of reading stored bytes back (modelfs/check.hpp, check.cpp): the
// tensors' ranges, and the files a reader's integrity checks read whole.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "modelfs/mapped_file.hpp"

namespace modelfs {

// Reads bytes [begin, end) of `file` with pread, not through the mapping,
// so that a disk error is a message and not a SIGBUS; a remote model's
// blocks are fetched into its cache file first. `buffer` is the scratch
// space, grown to a chunk as needed and kept for the next call;
// `progress(n)` follows each chunk. A read that fails or finds the file
// shorter than when it was opened throws ModelError naming `file`,
// `format` and the offset: "`what` cannot be read: why".
void read_back(const MappedFile& file, uint64_t begin, uint64_t end, const std::string& format,
               const std::string& what, std::vector<char>& buffer,
               const std::function<void(uint64_t)>& progress);

}  // namespace modelfs
