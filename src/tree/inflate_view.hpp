// SPDX-License-Identifier: Apache-2.0
#pragma once
// The raw bytes of an encoded tensor (catalog.hpp, Encoded: a deflated .npz
// member), inflated for exactly what each read asks. Nothing is inflated
// ahead of a read and no member is ever held whole.
//
// Tensors that are ranges of one stream (a gzip-compressed .nemo's: the
// whole tar is one stream) share its points in the index: a read of one
// starts from the points reads of the others left.
//
// Deflate cannot be entered in the middle: a read inflates from the
// nearest state the process's deflate index (inflate_index.hpp) keeps at
// or before its offset: a fixed point every few MiB of output, so a random
// read inflates at most one span once the stream has been passed through,
// or where a read stopped, so a sequential reader pays in proportion to
// what it reads. Memory is the index's (bounded for the process) and one
// read's output per reading thread.
//
// The mapped-bytes rule (ARCHITECTURE.md): a read inflates under
// read_mapped's guard (zlib's frames hold nothing to destroy; the index's
// lock is never held there) straight into the caller's buffer.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "modelfs/catalog.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs {

class InflateView final : public ComputedBytes {
 public:
  // The raw file of `tensor`, which has `encoded` set; `file` and `format`
  // name it in the messages of a failed read.
  InflateView(const Tensor& tensor, std::string file, std::string format);
  ~InflateView() override;
  InflateView(const InflateView&) = delete;
  InflateView& operator=(const InflateView&) = delete;

  uint64_t size() const noexcept { return size_; }
  // Inflates [offset, offset + out.size()) of the part into `out`; throws
  // ModelError (EIO) when the stream is corrupt, ends early or yields more
  // than the member declares.
  void read(uint64_t offset, std::span<std::byte> out, ReadScope& scope) const override;

 private:
  // Which index points are this stream's: one owner for every view of the
  // same stream (addresses are reused: the owner lives while its views do).
  std::shared_ptr<const struct StreamOwner> owner_;
  ByteSpan stream_;  // the deflate stream, in the mapping
  uint64_t decoded_offset_;
  uint64_t size_;
  uint64_t decoded_size_;
  std::string file_;
  std::string format_;
};

}  // namespace modelfs
