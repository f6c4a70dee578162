// SPDX-License-Identifier: Apache-2.0
#pragma once
// File parts as the tree lays them out and reads them, for the tests of
// the read path (slice_parts).
#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tree/tree_parts.hpp"

namespace modelfs::test {

// What the tree's read path serves of `parts` [offset, offset + length),
// through `iovecs` iovecs: the bytes gathered.
inline std::string read_parts(std::span<const Part> parts, uint64_t offset, uint64_t length, size_t iovecs,
                              ReadScope::Kind kind = ReadScope::Kind::Copied) {
  std::vector<iovec> iov(iovecs);
  std::string scratch;
  ReadScope scope(kind);
  const size_t n = slice_parts(parts, offset, length, iov, scratch, scope);
  std::string out;
  for (size_t i = 0; i < n; ++i) out.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  return out;
}

// Parts laid out one after another, as the tree sets their offsets.
inline std::vector<Part> laid_out(std::vector<Part> parts) {
  uint64_t at = 0;
  for (Part& p : parts) {
    p.offset = at;
    at += p.size;
  }
  return parts;
}

}  // namespace modelfs::test
