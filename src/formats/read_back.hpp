// SPDX-License-Identifier: Apache-2.0
#pragma once
// --check's read-back of a whole file a reader opened beside the model (an
// OpenVINO IR's .bin, a TensorFlow.js shard): with pread rather than
// through the mapping, so that a disk error is a message, not a SIGBUS.
// Private to the library.
#include <cstdint>
#include <functional>
#include <string_view>

#include "modelfs/mapped_file.hpp"

namespace modelfs {

// Reads all of `file` (as many bytes as when it was opened), telling
// `progress` each chunk's bytes. A read that fails, or a file that ends
// sooner, throws ModelError in `format` at the offset, naming `what` ("the
// weights file cannot be read: ...").
void read_back_whole(const MappedFile& file, std::string_view format, std::string_view what,
                     const std::function<void(uint64_t)>& progress);

}  // namespace modelfs
