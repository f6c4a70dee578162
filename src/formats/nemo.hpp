// SPDX-License-Identifier: Apache-2.0
#pragma once
// NeMo `.nemo` archives (docs/formats.md, "NeMo"): a tar, as Python's
// tarfile writes it (`tar.add(folder, arcname=".")`), of
//
//   ./                         a directory entry
//   ./model_config.yaml        the model's configuration (OmegaConf YAML)
//   ./model_weights.ckpt       torch.save of the state_dict (a ZIP archive)
//   or ./mp_rank_XX/model_weights.ckpt, one per model-parallel rank
//   (./tp_rank_XX_pp_rank_YYY/ with pipeline parallelism)
//   ./...                      tokenizer files and other artifacts
//
// Tar: 512-byte headers (name, octal size, checksum, type, "ustar" magic,
// a name prefix), each member's data after its header, padded to 512.
// Python 3.8+ writes POSIX (PAX) archives: an 'x' header before a member
// holds "LEN key=value\n" records (path and size override the header's);
// GNU's 'L' long name is read too. A size may be base-256 (first byte
// 0x80).
//
// What a tree shows: every tensor of each checkpoint, read by the torch.save
// reader over the checkpoint's range of the tar (formats/torch_save.hpp),
// served in place at its offset in the .nemo; named by its state_dict key,
// under "mp_rank_XX/" (the checkpoint's folder) when there are several.
// model_config.yaml is the document .modelfs/model_config.yaml; other
// members of at most kMaxDocumentBytes are documents under .modelfs/nemo/,
// up to kMaxDocumentsBytes in all. metadata.json: "nemo" {members: [{name,
// size, offset}], checkpoints: [{member, tensors, protocol}], gzip}, and
// the checkpoint's plain "values".
//
// A gzip-compressed .nemo (NeMo before 1.7) is read from a sparse image of
// the tar it inflates to (formats/nemo_gzip.hpp), made in two forward
// passes; its tensors are ranges of the deflate stream's output, inflated
// per read by the tree (Encoded::Deflate), never held whole.
//
// Refused, one line: a header whose checksum is wrong or that is cut short;
// a member (or a PAX record) whose data runs past the end of the file; a
// name that appears twice; no model_weights.ckpt; a checkpoint that is not
// a torch.save ZIP (a legacy torch.save) or a ZIP that does not fit its
// member; of a gzip .nemo, a stream cut short, corrupt or whose CRC-32 or
// size is wrong, bytes after it, more than kMaxTrailingBytes after the
// tar, a checkpoint directory outside its last kCheckpointTail bytes.
#include <cstdint>
#include <span>

#include "formats/format_reader.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::nemo {

inline constexpr uint64_t kMaxTarMembers = 1'000'000;
inline constexpr uint64_t kMaxPaxBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;
inline constexpr uint64_t kMaxDocumentBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMaxDocumentsBytes = uint64_t{16} << 20;
// Of a checkpoint in a gzip .nemo, the last bytes kept by the first pass:
// its ZIP directory must lie there.
inline constexpr uint64_t kCheckpointTail = uint64_t{16} << 20;
// After a gzip .nemo's tar ends: at most this much (tarfile pads to 10 KiB).
inline constexpr uint64_t kMaxTrailingBytes = uint64_t{1} << 20;

// A tar ("ustar" at byte 257), or gzip's magic (a .nemo of NeMo before 1.7).
bool probe_file(std::span<const std::byte> head);
Catalog open_file(const ModelFile& model);

}  // namespace modelfs::nemo
