# SPDX-License-Identifier: Apache-2.0
"""GGUF through a real mount: bytes of every ggml type with cat, sidecars,
.npy views with numpy, every key-value type in metadata.json, versions 1-3,
custom alignment, split sets, --list, refusals, and the real files.

Oracles: what the test writer wrote, and for real files a small independent
header reader below; never modelfs's own output."""
import json
import os
import shutil
import struct

import numpy as np
import pytest

import gguf_writer as gw
import numeric_oracle
from conftest import cat, index_paths, metadata, mounted, run_modelfs, sidecar

REAL = "fixtures/real/gguf"


def c_strides(shape):
    strides, acc = [], 1
    for dim in reversed(shape):
        strides.insert(0, acc)
        acc *= max(dim, 1)
    return strides


def check_tensor(path, tensor, source_file, offset):
    """Raw bytes, sidecar and .npy view of one tensor against what was written."""
    name, block, size = gw.GGML_TYPES[tensor.type_id]
    assert cat(path) == tensor.data, tensor.name
    meta = sidecar(path)
    assert meta["name"] == tensor.name
    assert meta["shape"] == tensor.shape
    assert meta["strides"] == c_strides(tensor.shape)
    assert meta["nbytes"] == len(tensor.data)
    assert meta["format"] == "gguf"
    assert meta["ggml_type"] == tensor.type_id
    assert meta["ggml_type_name"] == name
    assert meta["block_size"] == block and meta["type_size"] == size
    assert meta["source"] == {"file": source_file, "offset": offset}
    npy = str(path) + ".npy"
    plain = gw.PLAIN.get(tensor.type_id)
    assert meta["dtype"] == (plain[0] if plain else name)
    if plain and plain[1]:
        assert meta["numpy"] == plain[1]
        expected = np.frombuffer(tensor.data, dtype=plain[1]).reshape(tensor.shape)
        loaded = np.load(npy)
        assert loaded.dtype == np.dtype(plain[1]) and loaded.shape == tuple(tensor.shape)
        np.testing.assert_array_equal(loaded, expected)
        assert np.load(npy, mmap_mode="r").tobytes() == tensor.data
    else:
        assert "numpy" not in meta
        numeric_oracle.check_npy(npy, meta["dtype"], tensor.data, tensor.shape, meta)


def every_type_tensors():
    tensors = []
    for i, (type_id, (name, block, _)) in enumerate(sorted(gw.GGML_TYPES.items())):
        shape = [3, 2 * block] if i % 2 else [2, 1, 2, block]  # rank 2 and rank 4
        tensors.append(gw.random_tensor(f"blk.{i}.{name}.weight", type_id, shape, seed=i))
    return tensors


@pytest.mark.parametrize("version,alignment", [(3, None), (2, 64), (3, 1), (1, None), (2, 4096)])
def test_every_ggml_type_bytes_sidecar_and_npy(tmp, version, alignment):
    tensors = every_type_tensors()
    model = tmp / "all.gguf"
    blob, offsets = gw.to_bytes([("general.architecture", gw.Value(gw.STRING, "test"))], tensors,
                                version=version, alignment=alignment)
    model.write_bytes(blob)
    with mounted(model) as mnt:
        paths, index = index_paths(mnt)
        assert index["format"] == "gguf"
        assert [t["name"] for t in index["tensors"]] == [t.name for t in tensors]
        for t in tensors:
            assert paths[t.name] == mnt / t.name.replace(".", "/")
            check_tensor(paths[t.name], t, "all.gguf", offsets[t.name])
        header = metadata(mnt)["gguf"]
        assert header["version"] == version
        assert header["alignment"] == (alignment or 32)
        assert header["tensor_count"] == len(tensors)
        assert header["data_offset"] == min(offsets.values())
        assert header["data_offset"] % (alignment or 32) == 0


def test_gaps_any_order_and_empty_tensors(tmp):
    """A tolerant reader: tensors out of order with gaps between them, and
    zero-size tensors, mount with exact bytes."""
    a = gw.random_tensor("a", 0, [4, 8], seed=1)
    b = gw.random_tensor("b", 12, [2, 256], seed=2)
    empty = gw.Tensor("empty", 8, [32, 0], b"")
    scalar = gw.Tensor("scalar", 28, [], struct.pack("<d", 2.5))
    a.offset, b.offset, empty.offset, scalar.offset = 1024, 0, 96, 2048
    model = tmp / "gaps.gguf"
    blob, offsets = gw.to_bytes([], [a, b, empty, scalar])
    model.write_bytes(blob)
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        for t in (a, b, empty, scalar):
            check_tensor(paths[t.name], t, "gaps.gguf", offsets[t.name])
        assert sidecar(paths["scalar"])["shape"] == []
        assert float(np.load(str(paths["scalar"]) + ".npy")) == 2.5


def every_kv():
    return [
        ("t.u8", gw.Value(gw.UINT8, 255)), ("t.i8", gw.Value(gw.INT8, -128)),
        ("t.u16", gw.Value(gw.UINT16, 65535)), ("t.i16", gw.Value(gw.INT16, -32768)),
        ("t.u32", gw.Value(gw.UINT32, 4294967295)), ("t.i32", gw.Value(gw.INT32, -2147483648)),
        ("t.f32", gw.Value(gw.FLOAT32, 1e-5)), ("t.f32_third", gw.Value(gw.FLOAT32, 1 / 3)),
        ("t.true", gw.Value(gw.BOOL, True)), ("t.false", gw.Value(gw.BOOL, False)),
        ("t.str", gw.Value(gw.STRING, "llama ñ 模型")), ("t.empty_str", gw.Value(gw.STRING, "")),
        ("t.bad_utf8", gw.Value(gw.STRING, b"ok\xff\xfe")),
        ("t.u64", gw.Value(gw.UINT64, 2**64 - 1)), ("t.i64", gw.Value(gw.INT64, -2**63)),
        ("t.f64", gw.Value(gw.FLOAT64, 0.1)),
        ("t.arr_u8", gw.Array(gw.UINT8, [0, 1, 255])), ("t.arr_i8", gw.Array(gw.INT8, [-1, 2])),
        ("t.arr_u16", gw.Array(gw.UINT16, [7])), ("t.arr_i16", gw.Array(gw.INT16, [-7, 7])),
        ("t.arr_u32", gw.Array(gw.UINT32, [1, 2, 3])), ("t.arr_i32", gw.Array(gw.INT32, [-1])),
        ("t.arr_f32", gw.Array(gw.FLOAT32, [0.5, -1.25, 1e-6])),
        ("t.arr_bool", gw.Array(gw.BOOL, [True, False, True])),
        ("t.arr_str", gw.Array(gw.STRING, ["<s>", "</s>", "", "▁the"])),
        ("t.arr_u64", gw.Array(gw.UINT64, [2**63])), ("t.arr_i64", gw.Array(gw.INT64, [-5])),
        ("t.arr_f64", gw.Array(gw.FLOAT64, [1.5, -0.0])), ("t.arr_empty", gw.Array(gw.INT32, [])),
        ("t.nested", gw.Array(gw.ARRAY, [gw.Array(gw.INT32, [1, 2]), gw.Array(gw.STRING, ["x"]),
                                         gw.Array(gw.ARRAY, [gw.Array(gw.BOOL, [True])])])),
    ]


EXPECTED_KV = {
    "t.u8": 255, "t.i8": -128, "t.u16": 65535, "t.i16": -32768, "t.u32": 4294967295,
    "t.i32": -2147483648, "t.true": True, "t.false": False, "t.str": "llama ñ 模型",
    "t.empty_str": "", "t.u64": 2**64 - 1, "t.i64": -2**63, "t.f64": 0.1,
    "t.arr_u8": [0, 1, 255], "t.arr_i8": [-1, 2], "t.arr_u16": [7], "t.arr_i16": [-7, 7],
    "t.arr_u32": [1, 2, 3], "t.arr_i32": [-1], "t.arr_bool": [True, False, True],
    "t.arr_str": ["<s>", "</s>", "", "▁the"], "t.arr_u64": [2**63], "t.arr_i64": [-5],
    "t.arr_f64": [1.5, -0.0], "t.arr_empty": [], "t.nested": [[1, 2], ["x"], [[True]]],
}


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_kv_type_in_metadata_json(tmp, version):
    model = gw.write(tmp / "kv.gguf", every_kv(), [gw.random_tensor("w", 0, [2], seed=3)],
                     version=version)
    with mounted(model) as mnt:
        meta = metadata(mnt)
        assert meta["format"] == "gguf" and meta["files"] == ["kv.gguf"]
        kv, types = meta["kv"], meta["kv_types"]
        assert set(kv) == {key for key, _ in every_kv()}
        for key, value in EXPECTED_KV.items():
            assert kv[key] == value and type(kv[key]) is type(value), key
        # float32 values: the shortest text that reads back as the same float32
        assert kv["t.f32"] == 1e-05 and np.float32(kv["t.f32_third"]) == np.float32(1 / 3)
        assert [np.float32(x) for x in kv["t.arr_f32"]] == [np.float32(x) for x in (0.5, -1.25, 1e-6)]
        assert kv["t.bad_utf8"].startswith("ok") and "\ufffd" in kv["t.bad_utf8"]
        for key, value in every_kv():
            if isinstance(value, gw.Array):
                assert types[key] == f"array[{gw.TYPE_NAMES[value.element_type]}]", key
            else:
                assert types[key] == gw.TYPE_NAMES[value.type_id], key


def test_split_set_from_first_file_any_member_and_folder(tmp):
    folder = tmp / "split"
    folder.mkdir()
    tensors = [gw.random_tensor(f"blk.{i}.w", [0, 12, 1, 2][i % 4], [2, 256], seed=10 + i)
               for i in range(7)]
    kvs = [("general.architecture", gw.Value(gw.STRING, "llama")),
           ("tokenizer.ggml.tokens", gw.Array(gw.STRING, ["a", "b"]))]
    paths = gw.write_split(folder, "model", kvs, tensors, 3, alignment=64)
    expected_files = [p.name for p in paths]
    for model in (paths[0], paths[1], folder):
        with mounted(model) as mnt:
            found, index = index_paths(mnt)
            assert set(found) == {t.name for t in tensors}
            assert index["files"] == expected_files
            for t in tensors:
                assert cat(found[t.name]) == t.data
                meta = sidecar(found[t.name])
                assert meta["source"]["file"] == expected_files[tensors.index(t) % 3]
                assert meta["shape"] == t.shape
            meta = metadata(mnt)
            assert meta["kv"]["general.architecture"] == "llama"
            assert meta["kv"]["split.count"] == 3 and meta["kv"]["split.no"] == 0
            assert [s["file"] for s in meta["split_files"]] == expected_files[1:]
            assert [s["kv"]["split.no"] for s in meta["split_files"]] == [1, 2]


def test_folder_with_a_one_file_set_without_split_keys(tmp):
    folder = tmp / "solo"
    folder.mkdir()
    t = gw.random_tensor("w", 8, [2, 32], seed=5)
    gw.write(folder / gw.split_name("solo", 1, 1), [], [t])
    with mounted(folder) as mnt:
        paths, index = index_paths(mnt)
        assert index["files"] == ["solo-00001-of-00001.gguf"] and cat(paths["w"]) == t.data


def test_split_set_incomplete_or_inconsistent_is_refused(tmp):
    tensors = [gw.random_tensor(f"t{i}", 0, [4], seed=i) for i in range(4)]
    missing = tmp / "missing"
    missing.mkdir()
    paths = gw.write_split(missing, "m", [], tensors, 3)
    paths[2].unlink()
    result = run_modelfs("--list", paths[0])
    assert result.returncode == 2 and "m-00003-of-00003.gguf is missing" in result.stderr

    renamed = tmp / "renamed"
    renamed.mkdir()
    paths = gw.write_split(renamed, "m", [], tensors, 2)
    shutil.copy(paths[0], paths[1])  # the second file claims split.no 0
    result = run_modelfs("--list", renamed)
    assert result.returncode == 2 and "split.no is 0" in result.stderr

    counted = tmp / "counted"
    counted.mkdir()
    gw.write_split(counted, "m", [], tensors, 2)
    first = counted / gw.split_name("m", 1, 2)
    gw.write(first, [("split.no", gw.Value(gw.UINT16, 0)), ("split.count", gw.Value(gw.UINT16, 2)),
                     ("split.tensors.count", gw.Value(gw.INT32, 9))], tensors[0::2])
    result = run_modelfs("--list", first)
    assert result.returncode == 2 and "split.tensors.count" in result.stderr


def test_list_shows_ggml_types_and_bytes_per_type(tmp):
    tensors = [gw.random_tensor("a", 12, [4, 256], seed=1), gw.random_tensor("b", 12, [2, 256], seed=2),
               gw.random_tensor("c", 14, [1, 256], seed=3), gw.random_tensor("n", 0, [8], seed=4)]
    model = gw.write(tmp / "q.gguf", [], tensors)
    result = run_modelfs("--list", model)
    assert result.returncode == 0, result.stderr
    assert "q4_k" in result.stdout and "q6_k" in result.stdout
    total = 864 + 210 + 32
    assert f"q4_k: 2 tensors, 864 B (864 bytes, {100 * 864 / total:.1f}%)" in result.stdout
    assert f"q6_k: 1 tensor, 210 B (210 bytes, {100 * 210 / total:.1f}%)" in result.stdout
    assert f"float32: 1 tensor, 32 B (32 bytes, {100 * 32 / total:.1f}%)" in result.stdout
    summary = result.stdout[result.stdout.index("format gguf"):]
    assert summary.index("q4_k:") < summary.index("q6_k:") < summary.index("float32:")
    listing = json.loads(run_modelfs("--list", "--json", model).stdout)
    assert [(t["dtype"], t["ggml_type"]) for t in listing["tensors"]] == \
        [("q4_k", 12), ("q4_k", 12), ("q6_k", 14), ("float32", 0)]


@pytest.mark.parametrize("what,blob,reason", [
    ("truncated tensor data", None, "run past the end of the file"),
    ("big-endian", b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian GGUF file (version 3 written big-endian)"),
    # GGUF's development branch wrote the magic as the integer 0x47475546
    # little-endian: its draft files begin "FUGG", the version little-endian.
    ("pre-release draft", "draft", "not GGUF but a pre-release draft of it (magic \"FUGG\", version 1"),
    ("reversed magic, big-endian version", b"FUGG" + struct.pack(">IQQ", 3, 0, 0),
     "big-endian GGUF file (version 3 written big-endian, magic \"FUGG\")"),
    ("future version", b"GGUF" + struct.pack("<IQQ", 4, 0, 0), "version 4"),
    ("unknown type id", None, "unknown ggml type id 43"),
])
def test_bad_files_refused_before_mounting(tmp, what, blob, reason):
    if what == "truncated tensor data":
        blob, _ = gw.to_bytes([], [gw.random_tensor("w", 0, [64], seed=1)])
        blob = blob[:-1]
    elif what == "unknown type id":
        blob, _ = gw.to_bytes([], [gw.Tensor("w", 43, [4], bytes(16))])
    elif blob == "draft":  # a whole v1 file, its magic as the draft wrote it
        blob, _ = gw.to_bytes([("general.architecture", gw.Value(gw.STRING, "llama"))],
                              [gw.random_tensor("w", 0, [8], seed=2)], version=1)
        blob = struct.pack("<I", 0x47475546) + blob[4:]
        assert blob[:4] == b"FUGG"
    model = tmp / "bad.gguf"
    model.write_bytes(blob)
    mnt = tmp / "mnt"
    mnt.mkdir()
    result = run_modelfs(model, mnt)
    assert result.returncode == 2, what
    assert f"{model}: gguf: at byte " in result.stderr and reason in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not os.listdir(mnt)


# ---- real files, against an independent reader ---------------------------

def oracle_read(path):
    """GGUF header reader (v1-v3, little-endian), independent of modelfs:
    returns version, {key: (type id, array element type id or None, value)},
    [(name, ne, type id, absolute offset)], the file's bytes."""
    b = path.read_bytes()
    pos = 4
    assert b[:4] == b"GGUF"

    def take(fmt):
        nonlocal pos
        (value,) = struct.unpack_from("<" + fmt, b, pos)
        pos += struct.calcsize(fmt)
        return value

    version = take("I")
    width = "I" if version == 1 else "Q"
    n_tensors, n_kv = take(width), take(width)

    def string():
        nonlocal pos
        n = take(width)
        pos += n
        return b[pos - n:pos].decode("utf-8", "replace")

    def value(type_id):
        if type_id == gw.STRING:
            return string()
        if type_id == gw.ARRAY:
            element_type, n = take("I"), take(width)
            return [value(element_type) for _ in range(n)]
        return take(gw.SCALAR_FORMATS[type_id])

    kv = {}
    for _ in range(n_kv):
        key = string()
        type_id = take("I")
        element_type = struct.unpack_from("<I", b, pos)[0] if type_id == gw.ARRAY else None
        kv[key] = (type_id, element_type, value(type_id))
    infos = []
    for _ in range(n_tensors):
        name = string()
        ne = [take(width) for _ in range(take("I"))]
        infos.append((name, ne, take("I"), take("Q")))
    align = kv.get("general.alignment", (None, None, 32))[2]
    data_start = -(-pos // align) * align
    return version, kv, [(n, ne, t, data_start + off) for n, ne, t, off in infos], b


def same_value(type_id, element_type, got, want):
    if type_id == gw.FLOAT32:
        return np.float32(got) == np.float32(want)
    if type_id == gw.ARRAY:
        return len(got) == len(want) and all(
            same_value(element_type, None, g, w) for g, w in zip(got, want))
    return got == want and type(got) is type(want)


REAL_FILES = ["crabml_tinyllamas-stories-260k-f32_GGUFv1.gguf", "ggml_superpoint.gguf",
              "llama.cpp_ggml-vocab-bert-bge.gguf", "llama.cpp_ggml-vocab-llama-spm.gguf",
              "ollama_llama-2-tiny-random.gguf", "stories260K_v3_f32.gguf"]


def check_against_independent_reader(mnt, model):
    """Every key, every tensor's bytes and sidecar of the mounted `model`
    (local or by URL) against oracle_read's parse of the file itself."""
    version, kv, infos, blob = oracle_read(model)
    file_name = model.name
    meta = metadata(mnt)
    assert meta["gguf"]["version"] == version
    assert meta["gguf"]["tensor_count"] == len(infos)
    assert set(meta["kv"]) == set(kv)
    for key, (type_id, element, want) in kv.items():
        if type_id == gw.ARRAY:
            assert meta["kv_types"][key] == f"array[{gw.TYPE_NAMES[element]}]", key
        else:
            assert meta["kv_types"][key] == gw.TYPE_NAMES[type_id], key
        assert same_value(type_id, element, meta["kv"][key], want), key
    paths, index = index_paths(mnt)
    assert [t["name"] for t in index["tensors"]] == [n for n, _, _, _ in infos]
    for name, ne, type_id, offset in infos:
        size = gw.nbytes(type_id, ne)
        assert cat(paths[name]) == blob[offset:offset + size], name
        meta_t = sidecar(paths[name])
        assert meta_t["shape"] == list(reversed(ne)) and meta_t["ggml_type"] == type_id
        assert meta_t["source"] == {"file": file_name, "offset": offset}
        if type_id in (0, 1):
            array = np.load(str(paths[name]) + ".npy")
            assert array.shape == tuple(reversed(ne)) and array.tobytes() == blob[offset:offset + size]


@pytest.mark.parametrize("file_name", REAL_FILES)
def test_real_file_matches_independent_reader(shared, file_name):
    model = shared / REAL / file_name
    if not model.exists():
        pytest.skip(f"{model} not found")
    with mounted(model) as mnt:
        check_against_independent_reader(mnt, model)
