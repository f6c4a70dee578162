// SPDX-License-Identifier: Apache-2.0
// The remote block cache's record (src/remote/cache_object.hpp), which a
// daemon reads from a folder it does not alone write: its header, the
// marks of its blocks, and the preparation a mount makes of it.
#include <fcntl.h>
#include <unistd.h>

#include "fuzz_input.hpp"
#include "remote/cache_object.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace modelfs::remote::cache;
  const auto path = modelfs::fuzz::write_input(data, size, "record.blocks");
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return 0;
  const auto header = parse_header(std::as_bytes(std::span(data, size)));
  // The record of the object the header names, else of a small one.
  const std::string key = header ? header->key : std::string(kKeyChars, 'a');
  const uint64_t object_size = header ? header->object_size : 1000;
  try {
    prepare_record(fd, key, object_size);
    uint64_t present = 0;
    for_each_present(fd, block_count(object_size), [&](uint64_t b) {
      if (b >= block_count(object_size)) __builtin_trap();
      ++present;
    });
  } catch (const Refused&) {
  }
  ::close(fd);
  return 0;
}
