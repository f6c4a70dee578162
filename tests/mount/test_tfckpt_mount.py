# SPDX-License-Identifier: Apache-2.0
"""TensorFlow checkpoint bundles through a real mount: every dtype, DT_STRING,
partitioned variables (by rows and by columns), several data shards, snappy
and raw index blocks, SavedModel folders, --list/--info/--check/--export,
refusals, a remote .index, and the real bundles of realworld2/tfckpt (per
its MANIFEST.md).

Oracle: the tests' own bundle writer and reader (tfckpt_bundle.py, written
from the format's description) and numpy; never modelfs's own output."""
import json
import struct

import numpy as np
import pytest

import tfckpt_bundle as tb
import conftest
from conftest import cat, index_paths, metadata, mounted, one_line, run_modelfs, sidecar

REAL = "fixtures/realworld2/files/tfckpt"
# MANIFEST.md: tensors each real bundle mounts with.
REAL_COUNTS = {"serving_half_plus_two_cpu": 5, "serving_half_plus_two_tf2": 4,
               "serving_tf_text_regression": 1, "tfjs_node_int64_multiply": 3,
               "tfjs_node_uint8_multiply": 3}

NUMERIC = ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "uint16",
           "uint32", "uint64", "bool", "complex64", "complex128"]


def sample(dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    values = np.arange(n) * 7 % 11 - 3
    kind = np.dtype(dtype).kind
    if kind == "c":
        return (values + 0.5j * values).astype(dtype).reshape(shape)
    if kind == "b":
        return (values % 2 == 0).reshape(shape)
    if kind == "u":
        values = np.abs(values)
    return values.astype(dtype).reshape(shape)


def lines_of(strings):
    """What the raw file of a DT_STRING tensor must hold: JSON Lines."""
    return [s.decode("utf-8", "surrogateescape") for s in strings]


def read_strings(path):
    return [json.loads(line).encode("utf-8", "surrogateescape")
            for line in cat(path).decode("utf-8", "surrogatepass").splitlines()]


def refused(model, *words, command="--list"):
    line = conftest.refused(model, *words, command=command)
    assert "tensorflow checkpoint" in line.lower(), line
    return line


@pytest.mark.parametrize("compress", [False, True])
def test_every_dtype_and_strings(tmp, compress):
    if compress and tb.snappy is None:
        pytest.skip("python3-snappy is not installed")
    bundle = tb.Bundle()
    arrays = {}
    for i, name in enumerate(NUMERIC):
        shape = [(2, 3), (5,), (), (2, 2, 2)][i % 4]
        arrays[f"model/{name}/.ATTRIBUTES/VARIABLE_VALUE"] = sample(name, shape)
    # Enough keys for restarts every 16 and shared prefixes across them.
    for i in range(40):
        arrays[f"layer_{i:02d}/kernel"] = np.full((3,), i, np.float32)
    for name, array in arrays.items():
        bundle.add(name, array)
    bf16 = np.array([0x3F80, 0x4000, 0xC040], np.uint16)  # 1, 2, -3 as bfloat16 bits
    bundle.add("bf16", bf16, dtype=tb.DT["bfloat16"])
    strings = [b"hello", b"", "caf\u00e9".encode(), b"\xff\x00bin"]
    bundle.add_strings("words", strings)
    bundle.add_strings("scalar_string", [b"just one"], shape=[])
    index = bundle.write(tmp, compress=compress, block_entries=20)
    with mounted(index) as mnt:
        paths, idx = index_paths(mnt)
        assert len(idx["tensors"]) == len(arrays) + 3
        for name, array in arrays.items():
            path = paths[name]
            assert cat(path) == array.tobytes(), name
            meta = sidecar(path)
            assert meta["shape"] == list(array.shape)
            assert meta["dtype"] == str(array.dtype).replace("bool", "bool")
            loaded = np.load(str(path) + ".npy")
            np.testing.assert_array_equal(loaded, array)
        assert sidecar(paths["bf16"])["dtype"] == "bfloat16"
        assert cat(paths["bf16"]) == bf16.tobytes()
        assert read_strings(paths["words"]) == strings
        assert sidecar(paths["words"])["dtype"] == "string"
        assert read_strings(paths["scalar_string"]) == [b"just one"]
        meta = metadata(mnt)
        assert meta["bundle"]["num_shards"] == 1 and meta["bundle"]["endianness"] == "little"
        assert meta["saved_model"] is False


def test_names_split_into_folders(tmp):
    bundle = tb.Bundle()
    bundle.add("a/.ATTRIBUTES/VARIABLE_VALUE", np.arange(4, dtype=np.float32))
    bundle.add("_CHECKPOINTABLE_OBJECT_GRAPH", np.zeros(1, np.int8))
    index = bundle.write(tmp)
    with mounted(index) as mnt:
        assert (mnt / "a").is_dir()
        paths, _ = index_paths(mnt)
        assert set(paths) == {"a/.ATTRIBUTES/VARIABLE_VALUE", "_CHECKPOINTABLE_OBJECT_GRAPH"}
        assert cat(paths["a/.ATTRIBUTES/VARIABLE_VALUE"]) == np.arange(4, dtype=np.float32).tobytes()


def test_several_data_shards(tmp):
    bundle = tb.Bundle(num_shards=3)
    arrays = {f"w{i}": sample("float32", (4, i + 1)) for i in range(6)}
    for i, (name, array) in enumerate(arrays.items()):
        bundle.add(name, array, shard=i % 3)
    index = bundle.write(tmp)
    with mounted(index) as mnt:
        paths, _ = index_paths(mnt)
        for i, (name, array) in enumerate(arrays.items()):
            assert cat(paths[name]) == array.tobytes()
            assert sidecar(paths[name])["source"]["file"] == f"model.data-{i % 3:05d}-of-00003"
        assert metadata(mnt)["bundle"]["num_shards"] == 3


def partitioned_bundle(tmp):
    bundle = tb.Bundle(num_shards=2)
    rows = sample("float32", (6, 4))
    cols = sample("int32", (3, 5))
    bundle.add_partitioned("emb/rows", rows, [[(0, 2), (0, None)], [(2, 4), (0, None)]], shards=[0, 1])
    bundle.add_partitioned("dense/cols", cols, [[(0, None), (0, 3)], [(0, None), (3, 2)]], shards=[1, 0])
    bundle.add("plain", np.arange(3, dtype=np.float64))
    return bundle, {"emb/rows": rows, "dense/cols": cols}


def test_partitioned_variables(tmp):
    bundle, arrays = partitioned_bundle(tmp)
    index = bundle.write(tmp)
    with mounted(index) as mnt:
        paths, idx = index_paths(mnt)
        # The slices are not tensors of their own.
        assert set(paths) == {"emb/rows", "dense/cols", "plain"}
        for name, array in arrays.items():
            assert cat(paths[name]) == array.tobytes(), name
            assert sidecar(paths[name])["shape"] == list(array.shape)
            np.testing.assert_array_equal(np.load(str(paths[name]) + ".npy"), array)
    result = run_modelfs("--check", index)
    assert result.returncode == 0, result.stderr
    # Slices that overlap (rows 1 and 2 twice) and leave row 3 out: as many
    # elements as the tensor, so only the overlap tells.
    folder = tmp / "overlap"
    folder.mkdir()
    bundle = tb.Bundle()
    bundle.add_partitioned("p", sample("float32", (4, 2)), [[(0, 3), (0, None)], [(1, 1), (0, None)]])
    refused(bundle.write(folder), "\"p\"")


def test_saved_model_folder_and_variables_folder(tmp):
    saved = tmp / "saved"
    (saved / "variables").mkdir(parents=True)
    (saved / "saved_model.pb").write_bytes(b"")
    bundle = tb.Bundle()
    bundle.add("v/.ATTRIBUTES/VARIABLE_VALUE", np.arange(5, dtype=np.int64))
    bundle.write(saved / "variables", prefix="variables")
    for model in (saved, saved / "variables", saved / "variables" / "variables.index"):
        with mounted(model) as mnt:
            paths, _ = index_paths(mnt)
            assert cat(paths["v/.ATTRIBUTES/VARIABLE_VALUE"]) == np.arange(5, dtype=np.int64).tobytes()
            assert metadata(mnt)["saved_model"] is True
    other = tmp / "plain"
    other.mkdir()
    bundle.write(other, prefix="ckpt-7")
    with mounted(other) as mnt:
        assert metadata(mnt)["saved_model"] is False
    bundle.write(other, prefix="ckpt-8")
    result = run_modelfs("--list", other)
    assert result.returncode == 2 and "2 *.index files" in one_line(result.stderr)


def test_list_info_check_export(tmp):
    bundle = tb.Bundle()
    w = sample("float32", (3, 4))
    bundle.add("dense/kernel", w)
    bundle.add_strings("names", [b"x", b"yz"])
    index = bundle.write(tmp)
    result = run_modelfs("--list", index)
    assert result.returncode == 0 and "dense/kernel" in result.stdout and "names" in result.stdout
    result = run_modelfs("--info", index)
    assert result.returncode == 0 and "tensorflow checkpoint" in result.stdout.lower()
    result = run_modelfs("--check", index)
    assert result.returncode == 0, result.stderr
    out = tmp / "out.safetensors"
    result = run_modelfs("--export", out, index)
    assert result.returncode == 0, result.stderr
    header_len = struct.unpack("<Q", out.read_bytes()[:8])[0]
    header = json.loads(out.read_bytes()[8:8 + header_len])
    start, end = header["dense/kernel"]["data_offsets"]
    assert out.read_bytes()[8 + header_len + start:8 + header_len + end] == w.tobytes()


def test_corrupted_byte_fails_check_naming_the_tensor(tmp):
    bundle = tb.Bundle()
    bundle.add("good", np.arange(4, dtype=np.float32))
    bundle.add("bad/weights", np.arange(8, dtype=np.float32))
    bundle.add_strings("text", [b"abc", b"def"])
    index = bundle.write(tmp)
    data = tmp / "model.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[16 + 5] ^= 0x40  # inside bad/weights
    data.write_bytes(bytes(raw))
    line = refused(index, "bad/weights", "CRC-32C", command="--check")
    assert "good" not in line.replace("bad/weights", "")
    raw[16 + 5] ^= 0x40
    raw[-1] ^= 1  # the last string byte
    data.write_bytes(bytes(raw))
    refused(index, "text", command="--check")


def test_refusals(tmp):
    def fresh(name):
        folder = tmp / name
        folder.mkdir()
        return folder

    # An entry past its data file.
    folder = fresh("past")
    bundle = tb.Bundle()
    bundle.add("w", np.arange(4, dtype=np.float32))
    index = bundle.write(folder)
    (folder / "model.data-00000-of-00001").write_bytes(b"\0" * 8)
    refused(index, "\"w\"", "not inside")
    # A shard_id past num_shards.
    folder = fresh("shard")
    bundle = tb.Bundle(num_shards=2)
    bundle.add("w", np.arange(4, dtype=np.float32), shard=1)
    index = bundle.write(folder, header=tb.header_proto(num_shards=1))
    refused(index, "shard 1")
    # A missing data file.
    folder = fresh("missing")
    bundle = tb.Bundle()
    bundle.add("w", np.arange(4, dtype=np.float32))
    index = bundle.write(folder)
    (folder / "model.data-00000-of-00001").unlink()
    refused(index, "model.data-00000-of-00001")
    # A size that does not match dtype and shape.
    folder = fresh("size")
    bundle = tb.Bundle()
    bundle.add("w", np.arange(4, dtype=np.float32))
    bundle.entries[b"w"] = tb.entry_proto(2, [4], size=16)
    index = bundle.write(folder)
    refused(index, "\"w\"", "needs 32")
    # Keys out of order (written by hand, unsorted).
    folder = fresh("order")
    entries = [(b"", tb.header_proto()), (b"b", tb.entry_proto(1, [0])), (b"a", tb.entry_proto(1, [0]))]
    raw = tb.block(entries)
    meta = tb.block([])
    out = raw + tb.trailer(raw, 0)
    meta_at = len(out)
    out += meta + tb.trailer(meta, 0)
    idx = tb.block([(b"b", tb.varint(0) + tb.varint(len(raw)))], 1)
    idx_at = len(out)
    out += idx + tb.trailer(idx, 0)
    handles = tb.varint(meta_at) + tb.varint(len(meta)) + tb.varint(idx_at) + tb.varint(len(idx))
    out += handles.ljust(40, b"\0") + struct.pack("<Q", tb.MAGIC)
    (folder / "model.index").write_bytes(out)
    (folder / "model.data-00000-of-00001").write_bytes(b"")
    refused(folder / "model.index", "out of order")
    # Big-endian.
    folder = fresh("big")
    bundle = tb.Bundle()
    bundle.add("w", np.arange(4, dtype=np.float32))
    index = bundle.write(folder, header=tb.header_proto(endianness=1))
    refused(index, "big-endian")
    # Slices that leave a hole.
    folder = fresh("hole")
    bundle = tb.Bundle()
    bundle.add_partitioned("p", sample("float32", (4, 2)), [[(0, 1), (0, None)], [(2, 2), (0, None)]])
    index = bundle.write(folder)
    refused(index, "\"p\"")
    # A corrupt index block.
    folder = fresh("crc")
    bundle = tb.Bundle()
    bundle.add("w", np.arange(4, dtype=np.float32))
    index = bundle.write(folder)
    raw = bytearray(index.read_bytes())
    raw[12] ^= 1
    index.write_bytes(bytes(raw))
    refused(index, "checksum")


def test_variant_entries_are_left_out_and_listed(tmp):
    bundle = tb.Bundle()
    bundle.add("w", np.arange(4, dtype=np.float32))
    bundle.entries[b"iterator"] = tb.entry_proto(21, [], size=3)
    index = bundle.write(tmp)
    with mounted(index) as mnt:
        paths, _ = index_paths(mnt)
        assert set(paths) == {"w"}
        assert metadata(mnt)["left_out"] == [{"key": "iterator", "dtype": "DT_VARIANT"}]


def test_real_bundles(shared):
    for name, count in REAL_COUNTS.items():
        index = shared / REAL / name / "variables.index"
        want, header = tb.read_bundle(index)
        with mounted(index) as mnt:
            paths, idx = index_paths(mnt)
            assert len(idx["tensors"]) == count, name
            assert set(paths) == set(want)
            for key, value in want.items():
                if isinstance(value, list):
                    assert read_strings(paths[key]) == value, (name, key)
                else:
                    assert cat(paths[key]) == value.tobytes(), (name, key)
                    np.testing.assert_array_equal(np.load(str(paths[key]) + ".npy"), value)
            assert metadata(mnt)["bundle"]["num_shards"] == header[1]
        result = run_modelfs("--check", index)
        assert result.returncode == 0, (name, result.stderr)


def test_remote_index_mounts_lazily(tmp):
    from remote_servers import Nginx

    www = tmp / "www"
    www.mkdir()
    bundle = tb.Bundle(num_shards=2)
    big = sample("float32", (256, 1024))  # 1 MiB in shard 1, never read
    small = np.arange(10, dtype=np.int64)
    bundle.add("big", big, shard=1)
    bundle.add("small", small, shard=0)
    bundle.write(www)
    (www / "saved" / "variables").mkdir(parents=True)
    bundle.write(www / "saved" / "variables", prefix="variables")
    server = Nginx(tmp / "nginx", www)
    try:
        url = f"{server.url}/model.index"
        with mounted(url, "-o", f"cache_dir={tmp / 'cache'}") as mnt:
            paths, _ = index_paths(mnt)
            assert cat(paths["small"]) == small.tobytes()
            assert server.bytes_sent("/model.data-00001-of-00002") < big.nbytes // 4
            assert cat(paths["big"]) == big.tobytes()
        # A SavedModel folder's URL: its variables/variables.index.
        with mounted(f"{server.url}/saved/", "-o", f"cache_dir={tmp / 'cache2'}") as mnt:
            paths, _ = index_paths(mnt)
            assert cat(paths["small"]) == small.tobytes()
    finally:
        server.stop()
