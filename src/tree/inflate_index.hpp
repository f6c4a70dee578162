// SPDX-License-Identifier: Apache-2.0
#pragma once
// Random access into deflate streams (a deflated .npz member, a deflated
// HDF5 chunk), as zlib's zran example does it, with its memory bounded.
//
// Deflate cannot be entered in the middle: a read at decoded offset N
// inflates from a state kept at or before N. One index, shared by every
// thread and every stream of the process, keeps such states (zlib's
// inflate state with its 32 KiB window, taken by inflateCopy):
//   - fixed points, at every kDeflateSpan of a stream's output, made by
//     the reads that pass there; so a random read inflates at most one span
//     (once the reads before it have passed that way);
//   - moving points, where reads stopped, so a sequential reader goes on
//     from its last read and pays in proportion to what it reads.
// Both are bounded in count (least recently used replaced), so in memory:
// about 40 KiB each (kDeflateIndexBytes in all). A read holds its own state
// while it inflates, outside the index's lock: threads inflate in parallel.
//
// The mapped-bytes rule (ARCHITECTURE.md): the compressed bytes are made
// present through their ByteSpan (a remote model's blocks) before zlib
// reads them under read_mapped's guard; zlib's frames hold nothing to
// destroy. The caller's sink runs outside the guard.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "modelfs/catalog.hpp"

namespace modelfs {

// Decoded bytes between two fixed points of one stream.
inline constexpr uint64_t kDeflateSpan = uint64_t{4} << 20;
// Fixed and moving points kept, and what they hold at most (zlib's state,
// about 7 KiB, and its 32 KiB window, each).
inline constexpr size_t kDeflateFixedPoints = 512;
inline constexpr size_t kDeflateMovingPoints = 32;
inline constexpr uint64_t kDeflatePointBytes = uint64_t{40} << 10;
inline constexpr uint64_t kDeflateIndexBytes =
    (kDeflateFixedPoints + kDeflateMovingPoints) * kDeflatePointBytes;

// A deflate stream: its compressed bytes, the exact size it decodes to,
// and whose it is (the index's key: a view's id and which of its streams).
struct DeflateStream {
  uint64_t owner = 0;
  uint64_t part = 0;
  ByteSpan bytes;
  uint64_t decoded_size = 0;
  bool zlib_wrapper = false;  // zlib's header and Adler-32 (HDF5), or raw (ZIP)
  bool indexed = true;        // keep points for it (not for a stream read whole once)
};

// The stream is not what it says (corrupt, short, longer): the reason, for
// the caller to name its file.
class DeflateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Decoded bytes [begin, end) of `stream`, in order, in pieces:
// sink(at, data, n) for bytes [at, at + n). When `end` is the stream's
// decoded size, the stream must end exactly there. Throws DeflateError,
// or ModelError when its bytes cannot be had (a fault in the mapping, a
// remote block). The stream's bytes are taken for the read `scope`.
using DeflateSink = std::function<void(uint64_t at, const std::byte* data, uint64_t n)>;
void inflate_range(const DeflateStream& stream, uint64_t begin, uint64_t end, const DeflateSink& sink,
                   ReadScope& scope);

// A new owner for the index's key, unique in the process (a view's id).
uint64_t new_stream_owner() noexcept;

// Drops the points of `owner`'s streams (a view destroyed).
void forget_deflate_streams(uint64_t owner);

// Points kept now, fixed and moving, and the decoded bytes every read of
// the process has inflated (for tests: the work a read costs).
struct DeflateIndexCounts {
  size_t fixed = 0;
  size_t moving = 0;
  uint64_t inflated = 0;
};
DeflateIndexCounts deflate_index_counts();

}  // namespace modelfs
