#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Seeds from the hostile corpus (tests/mount/hostile_corpus.py) for the fuzz
targets' corpora: a long name, deep sharing, expanded views (and exports
they would make huge), a ZIP bomb, deep nesting, huge GGUF counts,
strides past int64, each small (under 64 KiB). Whole files for
the file targets, the pickle bytes for fuzz_unpickler.

    fuzz/make_seeds.py CORPUS_ROOT      writes CORPUS_ROOT/<target>/hostile-<case>

Called by fuzz/run.sh. Cases that need torch are left out without it."""
import pathlib
import struct
import sys
import tempfile
import zipfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "mount"))
import hostile_corpus as hc  # noqa: E402

MAX_SEED_BYTES = 64 * 1024
MiB = 1 << 20

# case -> (targets, make(folder) -> path): sizes shrunk to fit a seed, the
# shape of each case kept (the long name stays just under 64 KiB: mutations
# that insert bytes carry it past 65 535).
SEEDS = {
    "long_name": (("fuzz_safetensors", "fuzz_open_model"),
                  lambda d: hc.long_name(d, name_bytes=65_100)),
    "long_listed_name": (("fuzz_safetensors", "fuzz_open_model"),
                         lambda d: hc.long_listed_name(d, name_bytes=4000, others=100)),
    "huge_sidecar": (("fuzz_safetensors", "fuzz_open_model"),
                     lambda d: hc.huge_sidecar(d, dims=30_000)),
    "nul_name_bad_offsets": (("fuzz_safetensors", "fuzz_open_model"), hc.nul_name_bad_offsets),
    "deep_json_header": (("fuzz_safetensors", "fuzz_open_model"),
                         lambda d: hc.deep_json_header(d, depth=30_000)),
    "safetensors_header_2_63": (("fuzz_safetensors", "fuzz_open_model"),
                                hc.safetensors_header_2_63),
    "shared_pickle_dict": (("fuzz_torch", "fuzz_zip", "fuzz_open_model"), hc.shared_pickle_dict),
    "shared_pickle_list": (("fuzz_torch", "fuzz_zip", "fuzz_open_model"), hc.shared_pickle_list),
    "expanded_views": (("fuzz_torch", "fuzz_zip", "fuzz_open_model", "fuzz_export"), hc.expanded_views),
    "zip_bomb": (("fuzz_torch", "fuzz_zip", "fuzz_open_model"),
                 lambda d: hc.zip_bomb(d, size=MiB)),
    "deep_pickle": (("fuzz_torch", "fuzz_zip", "fuzz_open_model"),
                    lambda d: hc.deep_pickle(d, depth=30_000)),
    "truncated_central_directory": (("fuzz_torch", "fuzz_zip", "fuzz_open_model"),
                                    hc.truncated_central_directory),
    "gguf_huge_array_count": (("fuzz_gguf", "fuzz_open_model"), hc.gguf_huge_array_count),
    "gguf_huge_string_length": (("fuzz_gguf", "fuzz_open_model"), hc.gguf_huge_string_length),
    "memo_repeated_tensor": (("fuzz_torch", "fuzz_open_model"),
                             lambda d: hc.memo_repeated_tensor(d, repeats=20_000)),
    "memo_repeated_storage": (("fuzz_torch", "fuzz_open_model"),
                              lambda d: hc.memo_repeated_storage(d, repeats=20_000)),
    "export_size_wraps": (("fuzz_torch", "fuzz_zip", "fuzz_open_model", "fuzz_export"),
                          hc.export_size_wraps),
    "tib_expanded_view": (("fuzz_torch", "fuzz_zip", "fuzz_open_model", "fuzz_export"),
                          hc.tib_expanded_view),
    "stride_overflow": (("fuzz_safetensors", "fuzz_open_model", "fuzz_export"), hc.stride_overflow),
    "safetensors_metadata_million_keys": (("fuzz_safetensors", "fuzz_open_model"),
                                          lambda d: hc.safetensors_metadata_keys(d, keys=4000)),
    "gguf_120k_keys": (("fuzz_gguf", "fuzz_open_model"), lambda d: hc.gguf_keys(d, keys=2000)),
    "onnx_150k_props": (("fuzz_onnx", "fuzz_open_model"), lambda d: hc.onnx_props(d, entries=4000)),
    "onnx_150k_attributes": (("fuzz_onnx", "fuzz_open_model"), lambda d: hc.onnx_attributes(d, entries=3000)),
    "colliding_names_2_16": (("fuzz_safetensors", "fuzz_open_model"),
                             lambda d: hc.colliding_names(d, separators=8)),
    "long_name_bad_offsets": (("fuzz_safetensors", "fuzz_open_model"),
                              lambda d: hc.long_name_bad_offsets(d, name_bytes=60_000)),
    "gguf_long_name_past_end": (("fuzz_gguf", "fuzz_open_model"),
                                lambda d: hc.gguf_long_name_past_end(d, name_bytes=60_000)),
    "onnx_long_name_bad_tensor": (("fuzz_onnx", "fuzz_open_model"),
                                  lambda d: hc.onnx_long_name_bad_tensor(d, name_bytes=60_000)),
    "npy_header_lies": (("fuzz_numpy", "fuzz_open_model"), hc.npy_header_lies),
    "npy_shape_overflow": (("fuzz_numpy", "fuzz_open_model"), hc.npy_shape_overflow),
    "npz_100k_members": (("fuzz_numpy", "fuzz_zip", "fuzz_open_model"),
                         lambda d: hc.npz_many_members(d, count=200)),
    "npz_deflate_bomb": (("fuzz_numpy", "fuzz_zip", "fuzz_open_model"),
                         lambda d: hc.npz_deflate_bomb(d, size=MiB)),
    "npz_member_short_stream": (("fuzz_numpy", "fuzz_zip", "fuzz_open_model"), hc.npz_member_short_stream),
    "npy_deep_header": (("fuzz_numpy", "fuzz_open_model"), lambda d: hc.npy_deep_header(d, depth=30_000)),
    "npy_odd_header": (("fuzz_numpy", "fuzz_open_model"), hc.npy_odd_header),
    "hdf5_chunk_past_file": (("fuzz_hdf5", "fuzz_open_model"), hc.hdf5_chunk_past_file),
    "hdf5_truncated": (("fuzz_hdf5", "fuzz_open_model"), hc.hdf5_truncated),
    "hdf5_huge_dataspace": (("fuzz_hdf5", "fuzz_open_model"), hc.hdf5_huge_dataspace),
    "tfckpt_restarts_lie": (("fuzz_tfckpt", "fuzz_open_model"), hc.tfckpt_restarts_lie),
    "tfckpt_prefix_lies": (("fuzz_tfckpt", "fuzz_open_model"), hc.tfckpt_prefix_lies),
    "tfckpt_snappy_4gib": (("fuzz_tfckpt", "fuzz_open_model"), hc.tfckpt_snappy_4gib),
    "tfckpt_200k_entries": (("fuzz_tfckpt", "fuzz_open_model"), lambda d: hc.tfckpt_many_entries(d, count=1000)),
    "tfckpt_100k_slices": (("fuzz_tfckpt", "fuzz_open_model"), lambda d: hc.tfckpt_many_slices(d, count=500)),
    # The model.json alone: fuzz_tfjs then has no shard bytes.
    "tfjs_sizes_disagree": (("fuzz_tfjs", "fuzz_open_model"), hc.tfjs_sizes_disagree),
    "tfjs_repeated_shards": (("fuzz_tfjs", "fuzz_open_model"),
                             lambda d: hc.tfjs_repeated_shards(d, repeats=2000)),
    "tfjs_200k_weights": (("fuzz_tfjs", "fuzz_open_model"), lambda d: hc.tfjs_many_weights(d, count=1000)),
    "tfjs_deep_topology": (("fuzz_tfjs", "fuzz_open_model"),
                           lambda d: hc.tfjs_deep_topology(d, depth=20_000)),
    "tflite_vector_2_31": (("fuzz_tflite", "fuzz_open_model"), hc.tflite_vector_2_31),
    "tflite_cyclic_offsets": (("fuzz_tflite", "fuzz_open_model"),
                              lambda d: hc.tflite_cyclic_offsets(d, count=1000)),
    "tflite_million_tensors": (("fuzz_tflite", "fuzz_open_model"),
                               lambda d: hc.tflite_million_tensors(d, count=4000)),
    "tflite_offset_past_file": (("fuzz_tflite", "fuzz_open_model"), hc.tflite_offset_past_file),
    # The .xml alone: fuzz_openvino then has no .bin bytes.
    "openvino_const_2_62": (("fuzz_openvino", "fuzz_open_model"), hc.openvino_const_2_62),
    "openvino_200k_consts": (("fuzz_openvino", "fuzz_open_model"),
                             lambda d: hc.openvino_many_consts(d, count=400)),
    "openvino_deep_nesting": (("fuzz_openvino", "fuzz_open_model"),
                              lambda d: hc.openvino_deep_nesting(d, depth=5_000)),
    "dcp_million_chunks": (("fuzz_dcp", "fuzz_open_model"),
                           lambda d: hc.dcp_million_chunks(d, count=2000) / ".metadata"),
    "dcp_chunk_2_62": (("fuzz_dcp", "fuzz_open_model"), lambda d: hc.dcp_chunk_2_62(d) / ".metadata"),
    "dcp_deep_pickle": (("fuzz_dcp", "fuzz_open_model"), lambda d: hc.dcp_deep_pickle(d, depth=5000) / ".metadata"),
    "dcp_overlapping_chunks": (("fuzz_dcp", "fuzz_open_model"),
                               lambda d: hc.dcp_overlapping_chunks(d) / ".metadata"),
    # HDF5 (issue 42): the type description's every bit property, a user block, libhdf5's memory.
    "hdf5_odd_types": (("fuzz_hdf5", "fuzz_open_model"), hc.hdf5_odd_types),
    "hdf5_user_block_chunks": (("fuzz_hdf5", "fuzz_open_model"), hc.hdf5_user_block_chunks),
    "hdf5_heap_cycle": (("fuzz_hdf5", "fuzz_open_model"), hc.hdf5_heap_cycle),
    # Legacy GGML (issue 45): records that lie about what follows them.
    "ggml_truncated_record": (("fuzz_ggml_legacy", "fuzz_open_model"), hc.ggml_truncated_record),
    "ggml_data_past_end": (("fuzz_ggml_legacy", "fuzz_open_model"), hc.ggml_data_past_end),
    "ggml_ndims_lies": (("fuzz_ggml_legacy", "fuzz_open_model"), hc.ggml_ndims_lies),
    "ggml_name_length_lies": (("fuzz_ggml_legacy", "fuzz_open_model"), hc.ggml_name_length_lies),
    "ggml_50k_records": (("fuzz_ggml_legacy", "fuzz_open_model"), lambda d: hc.ggml_many_records(d, count=1000)),
    # llamafile (issue 45): members on 4 KiB instead of zipalign's 64 KiB, to fit a seed.
    "llamafile_deflated_gguf": (("fuzz_llamafile", "fuzz_open_model"),
                                lambda d: hc.llamafile_deflated_gguf(d, alignment=4096)),
    "llamafile_gguf_cut_short": (("fuzz_llamafile", "fuzz_open_model"),
                                 lambda d: hc.llamafile_gguf_cut_short(d, alignment=4096)),
    "llamafile_tensor_past_end": (("fuzz_llamafile", "fuzz_open_model"),
                                  lambda d: hc.llamafile_tensor_past_end(d, alignment=4096)),
    # NeMo (issue 45): tar headers that lie, a checkpoint cut by its member.
    "nemo_member_past_end": (("fuzz_nemo", "fuzz_open_model"), hc.nemo_member_past_end),
    "nemo_ckpt_cut_by_its_member": (("fuzz_nemo", "fuzz_open_model"), hc.nemo_ckpt_cut_by_its_member),
    "nemo_pax_size_lies": (("fuzz_nemo", "fuzz_open_model"), hc.nemo_pax_size_lies),
}


def cache_record_seed(folder):
    """A remote block cache's record as modelfs writes it
    (src/remote/cache_object.hpp): the header, then the marks of an object
    of 8 blocks, 3 of them present."""
    key = b"0123456789abcdef0123456789abcdef01234567"
    header = (b"MODELFSb" + struct.pack("<IIQ", 2, 256 << 10, 8 * (256 << 10) - 100) + key).ljust(64, b"\0")
    marks = b"".join(struct.pack("<II", int(b in (0, 3, 7)), (0x9E3779B1 * (b + 1)) & 0xFFFFFFFF) for b in range(8))
    path = folder / "record.blocks"
    path.write_bytes(header + marks)
    return path


def hdf5_type_records(folder):
    """A record stream as the HDF5 child sends it (src/formats/hdf5.hpp), for
    fuzz_hdf5's record mode: a base address, then contiguous datasets whose
    types are a dtype's bits and not (precision and bit offset, padding, a
    float's normalization), so mutations start at the type description."""
    def u8(v): return struct.pack("<B", v)
    def u64(v): return struct.pack("<Q", v)
    def text(b): return struct.pack("<I", len(b)) + b

    def dataset(name, cls, size, precision, offset, pads=(0, 0), norm=0, inner=0, at=0):
        fields = (31, 23, 8, 0, 23) if cls == 1 else (0,) * 5
        return (u8(ord("D")) + text(name) + u8(cls) + u64(size) + u8(0) + u8(1 if cls == 0 else 255)
                + b"".join(u64(f) for f in fields) + u64(127 if cls == 1 else 0) + u64(precision) + u64(offset)
                + u8(pads[0]) + u8(pads[1]) + u8(norm if cls == 1 else 255) + u8(inner if cls == 1 else 255)
                + u8(0) + text(b"") + text(b"") + u8(1) + u64(4) + u8(1) + u8(0) + u64(at) + u64(4 * size))
    stream = (u8(ord("B")) + u64(512)
              + dataset(b"exact_f32", 1, 4, 32, 0)
              + dataset(b"no_implied_bit", 1, 4, 32, 0, norm=2, at=64)
              + dataset(b"i16_at_bit_8", 0, 4, 16, 8, at=128)
              + dataset(b"padded_ones", 0, 4, 24, 0, pads=(1, 1), at=192))
    path = pathlib.Path(folder) / "type_records"
    path.write_bytes(stream)
    return path


def ggml_seed(folder, name, write):
    """A legacy GGML file of `write`'s layout: a q4_0, a q5_0, a q5_1 and a q8_0 tensor, an f16 and an f32."""
    gl = hc.gl
    tensors = [(f"blk.{t}", t, [2, 32], gl.random_blocks(t, 64, t)) for t in (2, 6, 7, 8)]
    tensors += [("half", 1, [3, 2], gl.random_blocks(1, 6, 1)), ("norm", 0, [5], gl.random_blocks(0, 5, 0))]
    path = pathlib.Path(folder) / f"{name}.bin"
    path.write_bytes(write(tensors))
    return path


def paddle_seed(make):
    """A PaddlePaddle case as fuzz_paddle.cpp takes it: the program, then its
    .pdiparams after the marker when the case has one (a .pdparams as it is)."""
    def seed(folder):
        model = make(folder)
        params = model.with_suffix(".pdiparams")
        if model.suffix != ".pdmodel" or not params.exists():
            return model
        path = pathlib.Path(folder) / "seed"
        path.write_bytes(model.read_bytes() + b"\n--pdiparams--\n" + params.read_bytes())
        return path
    return seed


# Seeds that are no hostile case: name -> (targets, make(folder) -> path).
EXTRA_SEEDS = {
    "dcp_rows_and_columns": (("fuzz_dcp",), hc.dcp_fuzz_seed),
    "cache_record": (("fuzz_cache_record",), cache_record_seed),
    "hdf5_type_records": (("fuzz_hdf5",), hdf5_type_records),
    # Legacy GGML: each program's layout with block types (the real files have no ggjt or whisper blocks).
    "ggml_ggjt_v3_blocks": (("fuzz_ggml_legacy",), lambda d: ggml_seed(d, "ggjt", hc.gl.llama)),
    "ggml_whisper_blocks": (("fuzz_ggml_legacy",),
                            lambda d: ggml_seed(d, "whisper", lambda t: hc.gl.whisper(t, ftype=2008))),
    "ggml_rwkv_blocks": (("fuzz_ggml_legacy",), lambda d: ggml_seed(d, "rwkv", hc.gl.rwkv)),
    # --- issue 45, PaddlePaddle ---
    "paddle_truncated_stream": (("fuzz_paddle",), paddle_seed(hc.paddle_truncated_stream)),
    "paddle_dims_2_62": (("fuzz_paddle",), paddle_seed(hc.paddle_dims_2_62)),
    "paddle_missing_var_file": (("fuzz_paddle",), paddle_seed(hc.paddle_missing_var_file)),
    "paddle_stream_count_mismatch": (("fuzz_paddle",), paddle_seed(hc.paddle_stream_count_mismatch)),
    "paddle_100k_vars": (("fuzz_paddle",), paddle_seed(lambda d: hc.paddle_100k_vars(d, count=300))),
    "paddle_pdparams_text_lies": (("fuzz_paddle",), paddle_seed(hc.paddle_pdparams_text_lies)),
}
# The unpickler is given the pickles inside the torch cases.
PICKLE_TARGET = "fuzz_unpickler"


def make_seeds(root):
    """Writes every seed under `root`; returns [(target, path)]."""
    root = pathlib.Path(root)
    written = []
    with tempfile.TemporaryDirectory() as scratch:
        for case, (targets, make) in list(SEEDS.items()) + list(EXTRA_SEEDS.items()):
            if case in hc.CASES and hc.CASES[case][1] and hc.torch is None:
                print(f"make_seeds: {case} left out (needs torch)", file=sys.stderr)
                continue
            folder = pathlib.Path(scratch) / case
            folder.mkdir()
            model = make(folder)
            blobs = [(t, model.read_bytes()) for t in targets]
            if "fuzz_torch" in targets:
                try:
                    with zipfile.ZipFile(model) as z:
                        pickles = [n for n in z.namelist() if n.endswith("data.pkl")]
                        blobs += [(PICKLE_TARGET, z.read(n)) for n in pickles[:1]]
                except zipfile.BadZipFile:  # the truncated directory: the file only
                    pass
            for target, blob in blobs:
                if len(blob) > MAX_SEED_BYTES:
                    raise SystemExit(f"make_seeds: {case} for {target} is {len(blob)} bytes, "
                                     f"over {MAX_SEED_BYTES}")
                path = root / target / f"hostile-{case}"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(blob)
                written.append((target, path))
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    for target, path in make_seeds(sys.argv[1]):
        print(f"{target}: {path.name} ({path.stat().st_size} bytes)")
