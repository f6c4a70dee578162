// SPDX-License-Identifier: Apache-2.0
// The one list of format readers. Adding a format: its reader's files, its
// entry here (ARCHITECTURE.md, "Adding a format").
#include "formats/registry.hpp"

#include <array>

#include "formats/dcp.hpp"
#include "formats/executorch.hpp"
#include "formats/ggml_legacy.hpp"
#include "formats/gguf.hpp"
#include "formats/hdf5.hpp"
#include "formats/llamafile.hpp"
#include "formats/nemo.hpp"
#include "formats/numpy.hpp"
#include "formats/onnx.hpp"
#include "formats/openvino.hpp"
#include "formats/paddle.hpp"
#include "formats/pt2.hpp"
#include "formats/safetensors.hpp"
#include "formats/tfckpt.hpp"
#include "formats/tfjs.hpp"
#include "formats/tflite.hpp"
#include "formats/torch.hpp"

namespace modelfs {
namespace {

constexpr std::array<std::string_view, 2> kSafetensorsRemoteIndexes{
    "model.safetensors.index.json", "diffusion_pytorch_model.safetensors.index.json"};
constexpr std::array<std::string_view, 1> kTorchRemoteIndexes{"pytorch_model.bin.index.json"};
// A remote SavedModel folder's bundle.
constexpr std::array<std::string_view, 1> kTfckptRemoteIndexes{"variables/variables.index"};
constexpr std::array<std::string_view, 1> kTfjsRemoteIndexes{"model.json"};
// A remote torch.distributed.checkpoint folder's pickle.
constexpr std::array<std::string_view, 1> kDcpRemoteIndexes{".metadata"};

// Any ZIP no reader before it claimed: the torch reader then says why it is
// not a PyTorch archive either.
bool any_archive(const ZipArchive&) { return true; }

const std::array kReaders{
    FormatReader{.name = "safetensors",
                 .family = "safetensors",
                 .probe_file = safetensors::probe_file,
                 .open_file = safetensors::open_file,
                 .probe_folder = safetensors::probe_folder,
                 .open_folder = safetensors::open_folder,
                 .folder_holds = "*.safetensors.index.json",
                 .remote_index_names = kSafetensorsRemoteIndexes},
    // Before the safetensors index, whose probe takes any weight_map JSON;
    // this one takes only those whose shards are torch.save files.
    FormatReader{.name = "pytorch index",
                 .family = "PyTorch",
                 .probe_file = torch::probe_index_file,
                 .open_file = torch::open_index_file},
    FormatReader{.name = "safetensors index",
                 .family = "safetensors",
                 .probe_file = safetensors::probe_index_file,
                 .open_file = safetensors::open_index_file},
    // A JSON object too, told from the indexes by TensorFlow.js's own keys.
    FormatReader{.name = "TensorFlow.js",
                 .family = "TensorFlow.js",
                 .probe_file = tfjs::probe_file,
                 .open_file = tfjs::open_file,
                 .probe_folder = tfjs::probe_folder,
                 .open_folder = tfjs::open_folder,
                 .folder_holds = "model.json",
                 .remote_index_names = kTfjsRemoteIndexes},
    // A flatbuffer told by its file identifier, "TFL3" at bytes 4..8.
    FormatReader{.name = "tflite",
                 .family = "TensorFlow Lite",
                 .probe_file = tflite::probe_file,
                 .open_file = tflite::open_file},
    // Flatbuffers too, told by their file identifiers: "ET12" (a .pte
    // program; its .ptd beside it) or "FT01" (a .ptd alone).
    FormatReader{.name = "executorch",
                 .family = "ExecuTorch",
                 .probe_file = executorch::probe_file,
                 .open_file = executorch::open_file},
    // An XML document whose root is <net version=...>; its .bin is beside it
    // (of the same stem): a URL's too.
    FormatReader{.name = "OpenVINO IR",
                 .family = "OpenVINO IR",
                 .probe_file = openvino::probe_file,
                 .open_file = openvino::open_file},
    FormatReader{.name = "gguf",
                 .family = "GGUF",
                 .probe_file = gguf::probe_file,
                 .open_file = gguf::open_file,
                 .probe_folder = gguf::probe_folder,
                 .open_folder = gguf::open_folder,
                 .folder_holds = "*-00001-of-NNNNN.gguf"},
    // GGUF's predecessors ('ggml', 'ggmf', 'ggjt' magics): each program's
    // header layout told apart by parsing it whole.
    FormatReader{.name = "ggml",
                 .family = "legacy GGML",
                 .probe_file = ggml_legacy::probe_file,
                 .open_file = ggml_legacy::open_file},
    FormatReader{.name = "hdf5",
                 .family = "HDF5",
                 .probe_file = hdf5::probe_file,
                 .probe_past_head = hdf5::probe_past_head,
                 .open_file = hdf5::open_file},
    FormatReader{.name = "npz",
                 .family = "NumPy",
                 .probe_archive = numpy::is_npz_archive,
                 .open_archive = numpy::open_npz},
    FormatReader{.name = "keras",
                 .family = "Keras",
                 .probe_archive = hdf5::is_keras_archive,
                 .open_archive = hdf5::open_keras},
    // A ZIP holding a .gguf member: at the head (among the archive readers),
    // after an APE executable (its magic at the head), or after another
    // (its end record in the file's last bytes).
    FormatReader{.name = "llamafile",
                 .family = "llamafile",
                 .probe_file = llamafile::probe_file,
                 .probe_past_head = llamafile::probe_past_head,
                 .open_file = llamafile::open_file,
                 .probe_archive = llamafile::is_llamafile_archive,
                 .open_archive = llamafile::open_archive},
    // A tar ("ustar" at byte 257) holding model_weights.ckpt, or gzip's
    // magic (a .nemo of NeMo before 1.7, read through the inflate index).
    FormatReader{
        .name = "nemo", .family = "NeMo", .probe_file = nemo::probe_file, .open_file = nemo::open_file},
    FormatReader{.name = "pt2",
                 .family = "PyTorch",
                 .probe_archive = pt2::is_pt2_archive,
                 .open_archive = pt2::open_archive},
    // torch.save and TorchScript archives; the archive reader of last resort.
    FormatReader{.name = "pytorch",
                 .family = "PyTorch",
                 .probe_archive = any_archive,
                 .open_archive = torch::open_zip},
    FormatReader{.name = "pytorch legacy",
                 .family = "PyTorch",
                 .probe_file = torch::probe_legacy,
                 .open_file = torch::open_legacy},
    FormatReader{.name = "pytorch sharded",
                 .family = "PyTorch",
                 .probe_folder = torch::probe_folder,
                 .open_folder = torch::open_folder,
                 .folder_holds = "*.bin.index.json",
                 .remote_index_names = kTorchRemoteIndexes},
    // A pickle (protocol 2+) whose first class is DCP's Metadata; its data
    // files are beside it.
    FormatReader{.name = "torch.distributed.checkpoint",
                 .family = "torch.distributed.checkpoint",
                 .probe_file = dcp::probe_file,
                 .open_file = dcp::open_file,
                 .probe_folder = dcp::probe_folder,
                 .open_folder = dcp::open_folder,
                 .folder_holds = ".metadata (torch.distributed.checkpoint)",
                 .remote_index_names = kDcpRemoteIndexes},
    // A pickle too, told from torch's (its magic number first) by a dict
    // first and numpy's array reconstruction named in the head.
    FormatReader{.name = "paddle pdparams",
                 .family = "PaddlePaddle",
                 .probe_file = paddle::probe_pdparams,
                 .open_file = paddle::open_pdparams},
    // The table's magic is in its last bytes, past the probed head: probed
    // by its first entry, key "" and a BundleHeaderProto.
    FormatReader{.name = "tensorflow checkpoint",
                 .family = "TensorFlow checkpoint",
                 .probe_file = tfckpt::probe_file,
                 .open_file = tfckpt::open_file,
                 .probe_folder = tfckpt::probe_folder,
                 .open_folder = tfckpt::open_folder,
                 .folder_holds = "variables/variables.index or *.index",
                 .remote_index_names = kTfckptRemoteIndexes},
    FormatReader{
        .name = "npy", .family = "NumPy", .probe_file = numpy::probe_file, .open_file = numpy::open_file},
    // A protobuf ProgramDesc with no magic, told from ONNX (whose first
    // field is a varint) by its first block's idx 0 and parent_idx -1.
    FormatReader{.name = "paddle",
                 .family = "PaddlePaddle",
                 .probe_file = paddle::probe_program,
                 .open_file = paddle::open_program,
                 .probe_folder = paddle::probe_folder,
                 .open_folder = paddle::open_folder,
                 .folder_holds = "a PaddlePaddle __model__ or *.pdmodel"},
    // ONNX has no magic: probed last, by a bounded trial parse of its first
    // fields, so that every format with a magic is recognised before it.
    FormatReader{
        .name = "onnx", .family = "ONNX", .probe_file = onnx::probe_file, .open_file = onnx::open_file},
};

}  // namespace

std::span<const FormatReader> format_readers() noexcept { return kReaders; }

}  // namespace modelfs
