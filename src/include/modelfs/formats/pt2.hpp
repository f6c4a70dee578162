// SPDX-License-Identifier: Apache-2.0
#pragma once
// PT2 archives (torch.export.save, AOTInductor packages; docs/formats.md, "PT2 archives"), in
// every layout torch has written, all inside the ZIP container of torch.save:
//
//   layered (2.8+)   [folder/]archive_format = "pt2", models/<name>.json per
//                    model; weights and constants as raw weight_N / tensor_N
//                    payloads described by <name>_weights_config.json and
//                    <name>_constants_config.json (2.9+), or as nested
//                    torch.save archives data/weights/<name>.pt (2.8);
//                    sample inputs data/sample_inputs/<name>.pt
//   flat (2.1-2.7)   serialized_exported_program.json beside nested
//                    torch.save archives serialized_state_dict.pt,
//                    serialized_constants.pt, serialized_example_inputs.pt;
//                    torch 2.1-2.2 named them serialized_<field>.json, so a
//                    .json member holding a ZIP is read as one (decided by
//                    its first bytes), and any other is shown as a document.
//                    Those exporters wrote unions with every variant, the
//                    unused ones null; the first wrote the signature as
//                    name maps (inputs_to_parameters, ...): both are read.
//   AOTInductor      data/aotinductor/<name>/: weights named by its
//                    weights_config.json, or compiled into the .so (then
//                    only the documents are mounted)
//
// Tensor names are the fully qualified names of the configs, prefixed by
// "<model>." when the archive holds several models or one not called
// "model"; sample inputs are sample_inputs.args.N / sample_inputs.kwargs.K.
// Nothing pickled is executed: custom objects are listed, never rebuilt.
#include <filesystem>
#include <memory>

#include "modelfs/catalog.hpp"
#include "modelfs/formats.hpp"
#include "modelfs/mapped_file.hpp"
#include "modelfs/zip_archive.hpp"

namespace modelfs::pt2 {

// True when `zip` claims to be a PT2 archive: an `archive_format` record at
// the root or in a top folder, or a root serialized_exported_program.json.
// open_archive then reads it or says why it is not one after all.
bool is_pt2_archive(const ZipArchive& zip);

// Reads the PT2 archive `zip`, which lies in `model`.
Catalog open_archive(const ModelFile& model, const ZipArchive& zip);

}  // namespace modelfs::pt2
