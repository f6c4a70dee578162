// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the NeMo reader (formats/nemo.hpp) reads a gzip-compressed .nemo
// with, never holding what it inflates: a gzip stream inflated forward in
// pieces (RFC 1952: one member, its CRC-32 and size checked at its end),
// and a sparse image of what it inflates, a memory file of the stream's
// decoded size into which only the bytes the readers need are written (tar
// headers, small members, a checkpoint's ZIP records but its storages), so
// the tar and torch.save readers read it as they read a file. Its tensors
// are then served from the compressed stream by the tree's inflate views.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "modelfs/catalog.hpp"
#include "modelfs/mapped_file.hpp"

namespace modelfs::nemo {

using InflateSink = std::function<void(uint64_t at, std::span<const std::byte> bytes)>;

class GzipStream {
 public:
  // Checks the gzip header of `file` (ModelError in `format` otherwise).
  GzipStream(std::shared_ptr<const MappedFile> file, std::string format);
  ~GzipStream();
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  // Inflates until `until` bytes are out or the stream ends, each piece
  // handed to `sink` at its decoded offset; returns the bytes out so far.
  // At the end, the trailer's CRC-32 and size are checked, and nothing but
  // zeros may follow it.
  uint64_t advance(uint64_t until, const InflateSink& sink);
  bool ended() const noexcept { return ended_; }
  // From the start again (a second pass), the stream known to be whole.
  void restart();
  // Once the end was reached (by this pass or one before): the raw
  // deflate stream, in the file, and what the whole of it decodes to.
  ByteSpan deflate_bytes() const;
  uint64_t decoded_size() const noexcept { return decoded_size_; }
  // Decoded bytes out in this pass.
  uint64_t produced() const noexcept { return produced_; }

 private:
  [[noreturn]] void fail(uint64_t at, const std::string& reason) const;
  void check_trailer();

  struct Zlib;
  std::unique_ptr<Zlib> zlib_;
  std::shared_ptr<const MappedFile> file_;
  std::string format_;
  uint64_t deflate_at_ = 0;
  uint64_t consumed_ = 0;  // input bytes taken, from deflate_at_
  uint64_t produced_ = 0;
  uint64_t deflate_size_ = 0;  // known at the end
  uint64_t decoded_size_ = 0;
  uint32_t crc_ = 0;
  bool ended_ = false;
};

// A memory file whose bytes are zeros but where written (tmpfs keeps no
// page for a hole); what is written is charged to the budget.
class SparseImage {
 public:
  SparseImage(std::string name, std::string format);
  ~SparseImage();
  SparseImage(const SparseImage&) = delete;
  SparseImage& operator=(const SparseImage&) = delete;

  void write(uint64_t at, std::span<const std::byte> bytes);
  // The image of `size` bytes, mapped (writes after it are seen through
  // the mapping).
  std::shared_ptr<const MappedFile> map(uint64_t size);

 private:
  std::string name_;
  std::string format_;
  int fd_ = -1;
  int mapped_fd_ = -1;
};

}  // namespace modelfs::nemo
