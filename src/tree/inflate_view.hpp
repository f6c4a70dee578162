// SPDX-License-Identifier: Apache-2.0
#pragma once
// The raw bytes of an encoded tensor (catalog.hpp, Encoded: a deflated .npz
// member), inflated for exactly what each read asks. Nothing is inflated
// ahead of a read and no member is ever held whole.
//
// Deflate cannot be entered in the middle, so a read at offset N inflates
// from the last point reached before N. A few inflate states, shared by
// every view of the process, are kept where the last reads stopped
// (checkpoints): a sequential reader continues from its previous read and
// pays in proportion to what it reads; a read behind every checkpoint
// starts the stream again. Memory is those few states (zlib's 32 KiB window
// each) and one read's output per reading thread.
//
// The mapped-bytes rule (ARCHITECTURE.md): zlib's state must be taken under
// a lock, and a lock may not be held where a SIGBUS jump can pass. So the
// work is done in prepare(): it locks, makes the compressed bytes present,
// inflates under its own guard (zlib's frames hold nothing to destroy) into
// the calling thread's buffer, and unlocks as it returns or throws; fill()
// only copies from that buffer and reads no mapping.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "modelfs/catalog.hpp"
#include "tree_parts.hpp"

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
  // Inflates [offset, offset + length) of the part into this thread's
  // buffer; throws ModelError (EIO) when the stream is corrupt, ends early
  // or yields more than the member declares.
  void prepare(uint64_t offset, uint64_t length) const override;
  void fill(uint64_t offset, std::span<std::byte> out) const override;

 private:
  uint64_t id_;      // which checkpoints are this view's (addresses are reused)
  ByteSpan stream_;  // the deflate stream, in the mapping
  uint64_t stream_size_;
  uint64_t decoded_offset_;
  uint64_t size_;
  uint64_t decoded_size_;
  std::string file_;
  std::string format_;
};

}  // namespace modelfs
