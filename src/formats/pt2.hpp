// SPDX-License-Identifier: Apache-2.0
#pragma once
// PT2 archives (torch.export.save, AOTInductor packages), all inside the ZIP
// container of torch.save, in every layout torch has written: layered (2.8+),
// flat (2.1-2.7) and AOTInductor; docs/formats.md, "PT2 archives", says what
// each holds, and docs/design.md, "Tensor names", how tensors are named.
// Nothing pickled is executed: custom objects are listed, never rebuilt.
#include "formats/format_reader.hpp"
#include "io/zip_archive.hpp"
#include "modelfs/catalog.hpp"

namespace modelfs::pt2 {

// True when `zip` claims to be a PT2 archive: an `archive_format` record at
// the root or in a top folder, or a root serialized_exported_program.json.
// open_archive then reads it or says why it is not one after all.
bool is_pt2_archive(const ZipArchive& zip);

// Reads the PT2 archive `zip`, which lies in `model`.
Catalog open_archive(const ModelFile& model, const ZipArchive& zip);

}  // namespace modelfs::pt2
