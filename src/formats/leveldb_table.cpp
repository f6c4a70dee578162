// SPDX-License-Identifier: Apache-2.0
// The LevelDB-format table of a TensorFlow bundle's .index
// (leveldb_table.hpp): footer, block trailers and snappy, block entries.
// Apart from the bundle reader (tfckpt.cpp) so that the table's structural
// checks read on their own, without the tensors built from its entries.
#include "formats/leveldb_table.hpp"

#include <snappy.h>

#include <algorithm>

#include "formats/tfckpt.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"

namespace modelfs::tfckpt {
namespace {

const std::string kFormatName(kFormat);

[[noreturn]] void fail(const std::string& file, std::optional<uint64_t> offset, const std::string& reason) {
  throw ModelError(file, kFormatName, offset, reason);
}

std::string_view as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}
std::span<const std::byte> as_bytes(std::string_view text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

}  // namespace

Footer parse_footer(std::span<const std::byte> footer, uint64_t file_size, const std::string& file) {
  if (footer.size() != kFooterBytes || file_size < kFooterBytes)
    fail(file, std::nullopt,
         "file is " + std::to_string(file_size) + " bytes, shorter than a table's 48-byte footer");
  const uint64_t at = file_size - kFooterBytes;
  const auto magic = load_le<uint64_t>(footer, 40);
  if (magic != kTableMagic) fail(file, at + 40, "no table magic at the end of the file (not an .index)");
  uint64_t pos = 0;
  auto handle = [&](const char* what) {
    BlockHandle h;
    const auto offset = varint_at(footer, pos, 40, 10);
    const auto size = offset ? varint_at(footer, pos, 40, 10) : std::nullopt;
    if (!size) fail(file, at + pos, std::string("footer: the ") + what + " block handle is not two varints");
    h.offset = *offset;
    h.size = *size;
    // The block and its trailer lie before the footer.
    const auto end = checked_add(h.size, kTrailerBytes);
    if (!end || !range_fits(h.offset, *end, at))
      fail(file, at,
           std::string("footer: the ") + what + " block (" + std::to_string(h.offset) + ", " +
               std::to_string(h.size) + " bytes) does not end before the footer at " + std::to_string(at));
    if (h.size > kMaxBlockBytes)
      fail(file, h.offset,
           std::string("the ") + what + " block is " + std::to_string(h.size) + " bytes, over the " +
               std::to_string(kMaxBlockBytes) + "-byte limit on a block");
    return h;
  };
  Footer out;
  out.metaindex = handle("metaindex");
  out.index = handle("index");
  return out;
}

Block read_block(std::span<const std::byte> contents_and_trailer, uint64_t offset, const std::string& file) {
  if (contents_and_trailer.size() < kTrailerBytes) fail(file, offset, "block shorter than its trailer");
  const uint64_t size = contents_and_trailer.size() - kTrailerBytes;
  const auto contents = contents_and_trailer.first(size);
  const auto type = static_cast<uint8_t>(contents_and_trailer[size]);
  const auto stored = load_le<uint32_t>(contents_and_trailer, size + 1);
  const uint32_t actual = crc32c_extend(crc32c(contents), contents_and_trailer.subspan(size, 1));
  if (unmask_crc(stored) != actual)
    fail(file, offset + size + 1, "block checksum mismatch (the .index is corrupt)");
  Block block;
  if (type == 0) {
    block.bytes = contents;
    return block;
  }
  if (type != 1)
    fail(file, offset + size,
         "block compression type " + std::to_string(type) + " (TensorFlow writes 0, raw, or 1, snappy)");
  const char* in = reinterpret_cast<const char*>(contents.data());
  size_t length = 0;
  if (!snappy::GetUncompressedLength(in, size, &length))
    fail(file, offset, "snappy block has no valid length preamble");
  if (length > kMaxBlockBytes)
    fail(file, offset,
         "snappy block claims " + std::to_string(length) + " bytes, over the " +
             std::to_string(kMaxBlockBytes) + "-byte limit on a block");
  if (const Budget* budget = current_budget();
      budget != nullptr && length > budget->limit() - std::min(budget->used(), budget->limit()))
    fail(file, offset,
         "snappy block claims " + std::to_string(length) +
             " bytes, more than the model's memory budget has left");
  if (!snappy::IsValidCompressedBuffer(in, size)) fail(file, offset, "snappy block is not valid snappy data");
  block.owned.resize(length);
  check_budget();
  if (!snappy::RawUncompress(in, size, block.owned.data()))
    fail(file, offset, "snappy block is not valid snappy data");
  block.bytes = as_bytes(block.owned);
  block.compressed = true;
  return block;
}

void for_each_entry(
    std::span<const std::byte> contents, uint64_t offset, const std::string& file,
    const std::function<void(std::string_view key, std::span<const std::byte> value)>& visit) {
  const uint64_t size = contents.size();
  if (size < 4) fail(file, offset, "block of " + std::to_string(size) + " bytes has no restart count");
  const uint64_t restarts = load_le<uint32_t>(contents, size - 4);
  if (restarts == 0 || restarts > (size - 4) / 4)
    fail(file, offset + size - 4,
         "block says it has " + std::to_string(restarts) + " restart points, which its " +
             std::to_string(size) + " bytes cannot hold");
  const uint64_t entries_end = size - 4 - restarts * 4;
  uint64_t next_restart = 0;  // index into the restart array
  auto restart_at = [&](uint64_t i) { return load_le<uint32_t>(contents, entries_end + i * 4); };
  if (restart_at(0) != 0) fail(file, offset + entries_end, "block's first restart point is not 0");
  std::string key;
  uint64_t pos = 0;
  while (pos < entries_end) {
    check_budget();
    const uint64_t entry_at = pos;
    bool is_restart = false;
    if (next_restart < restarts) {
      const uint64_t r = restart_at(next_restart);
      if (r < entry_at)
        fail(file, offset + entries_end + next_restart * 4,
             "restart point " + std::to_string(r) + " is not the start of an entry");
      if (r == entry_at) {
        is_restart = true;
        ++next_restart;
      }
    }
    const auto shared = varint_at(contents, pos, entries_end, 5);
    const auto non_shared = shared ? varint_at(contents, pos, entries_end, 5) : std::nullopt;
    const auto value_length = non_shared ? varint_at(contents, pos, entries_end, 5) : std::nullopt;
    if (!value_length) fail(file, offset + entry_at, "bad entry in block: its lengths run past the entries");
    if (*shared > key.size())
      fail(file, offset + entry_at,
           "bad entry in block: shares " + std::to_string(*shared) + " bytes with a previous key of " +
               std::to_string(key.size()));
    if (is_restart && *shared != 0)
      fail(file, offset + entry_at, "bad entry in block: a restart point's key shares a prefix");
    if (*non_shared > entries_end - pos || *value_length > entries_end - pos - *non_shared)
      fail(file, offset + entry_at, "bad entry in block: key and value run past the entries");
    if (*shared + *non_shared > kMaxKeyBytes)
      fail(file, offset + entry_at,
           "key of " + std::to_string(*shared + *non_shared) + " bytes, over the " +
               std::to_string(kMaxKeyBytes) + "-byte limit");
    key.resize(*shared);
    key.append(as_text(contents.subspan(pos, *non_shared)));
    pos += *non_shared;
    visit(key, contents.subspan(pos, *value_length));
    pos += *value_length;
  }
  // An empty block has its one restart point at 0, where no entry starts.
  if (entries_end == 0 && restarts == 1) return;
  if (next_restart != restarts)
    fail(file, offset + entries_end + next_restart * 4,
         "restart point " + std::to_string(restart_at(next_restart)) + " is not the start of an entry");
}

}  // namespace modelfs::tfckpt
