// SPDX-License-Identifier: Apache-2.0
#pragma once
// llamafile (docs/formats.md, "llamafile"): an executable (APE: a shell
// script that is also a PE program) with a ZIP archive after it, or a ZIP
// alone, whose weights are a GGUF stored as a member:
//
//   [executable] | local header, GGUF bytes (stored) | other members (.args,
//   licences) | central directory | [ZIP64 end record, locator] | end record
//
// zipalign, the tool llamafile documents for adding weights, writes the
// member stored, its data on a 64 KiB boundary, 0xFFFFFFFF in the 32-bit
// sizes and offset with the real ones in a ZIP64 extra field, and offsets
// counted from the file's first byte (the executable included); Python's
// zipfile (and zip -0) write a plain stored member. Either is read by the
// project's ZIP reader (io/zip_archive.hpp) over the whole file.
//
// What a tree shows: the GGUF member read by the GGUF reader over its
// range of the file (formats/gguf.hpp, parse with a base): tensors served
// in place at their offset in the file, nothing extracted; alignment and
// offsets inside the GGUF count from its first byte, as its writer counted
// them. Several GGUF members (a model and its multimodal projector): each
// one's tensors under "STEM/", STEM its member name without ".gguf", and
// each exported on its own too. Metadata: the (first) GGUF's "gguf", "kv",
// "kv_types" as a .gguf file's; "llamafile" {gguf_member, gguf_offset,
// members: [{name, size, method, offset}], other_ggufs: [...]}. Members
// that are not GGUFs of at most kMaxDocumentBytes (the .args, licences)
// are documents under .modelfs/llamafile/, up to kMaxDocumentsBytes in all;
// larger ones only listed.
//
// Refused, one line: a GGUF member that is compressed (it could not be
// served in place), encrypted, or runs past the archive; a ZIP with no
// .gguf member (when found behind an executable: a ZIP at the head is
// offered to the other archive readers first).
#include <cstdint>
#include <span>

#include "formats/format_reader.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::llamafile {

inline constexpr uint64_t kMaxDocumentBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMaxDocumentsBytes = uint64_t{16} << 20;

// An Actually Portable Executable (one of APE's three magics, "MZqFpD='",
// "jartsr='", "APEDBG='": the llamafile runtime's first bytes).
bool probe_file(std::span<const std::byte> head);
// A file no reader took by its head whose last bytes hold a ZIP end
// record (another executable with an archive appended).
bool probe_past_head(const MappedFile& file, uint64_t head_bytes);
// A ZIP holding a member named *.gguf.
bool is_llamafile_archive(const ZipArchive& zip);

Catalog open_file(const ModelFile& model);
Catalog open_archive(const ModelFile& model, const ZipArchive& zip);

}  // namespace modelfs::llamafile
