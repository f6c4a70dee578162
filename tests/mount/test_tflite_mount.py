# SPDX-License-Identifier: Apache-2.0
"""TensorFlow Lite models (.tflite flatbuffers) through a real mount: the
test's own writer (python3-flatbuffers' Builder, tables built by field slot
as docs/formats.md, "TensorFlow Lite", gives them) with float32, int8
(per-tensor and per-channel quantized), int32, float16 and bool tensors,
two subgraphs, a shared buffer, an empty-buffer tensor, and the > 2 GB
layout (buffers after the flatbuffer, by offset/size); the real files of
realworld2 (tflite/, per its MANIFEST.md); a corrupt file refused;
--list/--info/--check.

Oracle: the writer's own numpy arrays, and for the real files a small
flatbuffer walker here in plain Python (struct) that finds each tensor's
bytes itself; never modelfs's own output."""
import re
import struct

import numpy as np
import pytest

from conftest import cat, index_paths, metadata, mounted, refused_by_every_command, run_modelfs, sidecar
from flatbuffer_walker import Walker

flatbuffers = pytest.importorskip("flatbuffers", reason="needs python3-flatbuffers (the test's writer)")

REAL = "fixtures/realworld2/files/tflite"
TYPES = {np.float32: 0, np.float16: 1, np.int32: 2, np.uint8: 3, np.int64: 4, np.bool_: 6, np.int16: 7,
         np.int8: 9, np.float64: 10}
# TensorType -> the sidecar's dtype name (docs/formats.md's table).
DTYPE_NAMES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16",
               8: "complex64", 9: "int8", 10: "float64", 11: "complex128", 12: "uint64", 15: "uint32",
               16: "uint16", 18: "bfloat16"}


# -- the writer ---------------------------------------------------------------

class T:
    """A tensor to write: `buffer` an index into the model's buffers."""

    def __init__(self, name, shape, type_, buffer, scale=None, zero_point=None, axis=0):
        self.name, self.shape, self.type, self.buffer = name, list(shape), type_, buffer
        self.scale, self.zero_point, self.axis = scale, zero_point, axis


def build(subgraphs, buffers, offsets=None):
    """A Model of `subgraphs` [(name or None, [T])] and `buffers` [bytes or
    None]; None is a buffer without data. `offsets` {index: (offset, size)}
    gives buffers by offset/size instead (the > 2 GB layout)."""
    b = flatbuffers.Builder(1024)
    offsets = offsets or {}

    def vector_of_offsets(items):
        b.StartVector(4, len(items), 4)
        for item in reversed(items):
            b.PrependUOffsetTRelative(item)
        return b.EndVector()

    def int_vector(values, fmt):
        arr = np.asarray(values, dtype=fmt)
        if not len(arr):
            b.StartVector(arr.itemsize, 0, arr.itemsize)
            return b.EndVector()
        return b.CreateNumpyVector(arr)

    graph_tables = []
    for name, tensors in subgraphs:
        tables = []
        for t in tensors:
            shape = int_vector(t.shape, "<i4")
            tname = b.CreateString(t.name)
            quant = None
            if t.scale is not None:
                scale = int_vector(t.scale, "<f4")
                zero = int_vector(t.zero_point, "<i8")
                b.StartObject(7)
                b.PrependUOffsetTRelativeSlot(2, scale, 0)
                b.PrependUOffsetTRelativeSlot(3, zero, 0)
                b.PrependInt32Slot(6, t.axis, 0)
                quant = b.EndObject()
            b.StartObject(11)
            b.PrependUOffsetTRelativeSlot(0, shape, 0)
            b.PrependInt8Slot(1, t.type, 0)
            b.PrependUint32Slot(2, t.buffer, 0)
            b.PrependUOffsetTRelativeSlot(3, tname, 0)
            if quant is not None:
                b.PrependUOffsetTRelativeSlot(4, quant, 0)
            tables.append(b.EndObject())
        tensor_vector = vector_of_offsets(tables)
        gname = b.CreateString(name) if name is not None else None
        b.StartObject(5)
        b.PrependUOffsetTRelativeSlot(0, tensor_vector, 0)
        if gname is not None:
            b.PrependUOffsetTRelativeSlot(4, gname, 0)
        graph_tables.append(b.EndObject())
    graphs = vector_of_offsets(graph_tables)
    buffer_tables = []
    for i, data in enumerate(buffers):
        vec = None
        if data is not None and i not in offsets:
            b.StartVector(1, len(data), 16)  # force_align: 16
            b.head = b.head - len(data)
            b.Bytes[b.head:b.head + len(data)] = data
            vec = b.EndVector()
        b.StartObject(3)
        if vec is not None:
            b.PrependUOffsetTRelativeSlot(0, vec, 0)
        if i in offsets:
            b.PrependUint64Slot(1, offsets[i][0], 0)
            b.PrependUint64Slot(2, offsets[i][1], 0)
        buffer_tables.append(b.EndObject())
    buffer_vector = vector_of_offsets(buffer_tables)
    description = b.CreateString("written by test_tflite_mount")
    b.StartObject(8)
    b.PrependUint32Slot(0, 3, 0)
    b.PrependUOffsetTRelativeSlot(2, graphs, 0)
    b.PrependUOffsetTRelativeSlot(3, description, 0)
    b.PrependUOffsetTRelativeSlot(4, buffer_vector, 0)
    b.Finish(b.EndObject(), file_identifier=b"TFL3")
    return bytes(b.Output())


def build_with_offsets(subgraphs, buffers, outside):
    """The > 2 GB layout: buffers `outside` appended after the flatbuffer
    (padded to 16), back to back, their Buffer.offset/size patched in."""
    placeholder = {i: (1 << 40, len(buffers[i])) for i in outside}
    head = build(subgraphs, buffers, placeholder)
    at = (len(head) + 15) // 16 * 16
    real, tail = {}, b""
    for i in outside:
        real[i] = (at + len(tail), len(buffers[i]))
        tail += buffers[i]
    head2 = build(subgraphs, buffers, real)
    assert len(head2) == len(head)
    return head2 + bytes(at - len(head2)) + tail, real


# -- the oracle for real files: flatbuffer_walker.Walker -----------------------

def expected_tensors(data):
    """[(name, dtype name, shape, bytes)] of the tensors with bytes, in
    file order: subgraph by subgraph, tensor by tensor."""
    w = Walker(data)
    model = w.ref(0)
    buffers = w.tables(model, 4)
    out = []
    for g, graph in enumerate(w.tables(model, 2)):
        gname = w.string(graph, 4) or ""
        prefix = "" if g == 0 else (gname or f"subgraph{g}") + "/"
        for t in w.tables(graph, 0):
            index = w.scalar(t, 2, "I")
            if index == 0:
                continue
            buf = buffers[index]
            start, n = w.vector(buf, 0)
            if start is not None:
                raw = data[start:start + n]
            else:
                offset, size = w.scalar(buf, 1, "Q"), w.scalar(buf, 2, "Q")
                raw = data[offset:offset + size] if offset > 1 else b""
            if not raw:
                continue
            s_start, s_n = w.vector(t, 0)
            shape = [w.u("i", s_start + 4 * i) for i in range(s_n)] if s_start is not None else []
            out.append((prefix + (w.string(t, 3) or ""), DTYPE_NAMES[w.scalar(t, 1, "b")], shape, raw))
    return out


def manifest_counts(shared):
    """{file stem: N} from MANIFEST.md's "mount exact, N tensors" rows for tflite/."""
    counts = {}
    for line in (shared / "fixtures/realworld2/MANIFEST.md").read_text().splitlines():
        m = re.search(r"`tflite/([^`]+)\.tflite`.*mount exact, (\d+) tensors", line)
        if m:
            counts[m.group(1)] = int(m.group(2))
    return counts


def npy_values(path):
    return np.load(str(path) + ".npy")


# -- tests -------------------------------------------------------------------

@pytest.fixture
def written(tmp):
    rng = np.random.default_rng(7)
    arrays = {
        "dense/kernel": rng.standard_normal((3, 4)).astype(np.float32),
        "dense/bias": np.arange(4, dtype=np.int32) - 2,
        "half": rng.standard_normal(5).astype(np.float16),
        "mask": np.array([True, False, True]),
        "conv/q": rng.integers(-128, 127, (2, 3), dtype=np.int8),
        "fc/q": rng.integers(-128, 127, (6,), dtype=np.int8),
        "conv/q1": rng.integers(-128, 127, (2, 3), dtype=np.int8),
    }
    buffers = [None,  # the sentinel
               arrays["dense/kernel"].tobytes(), arrays["dense/bias"].tobytes(), arrays["half"].tobytes(),
               arrays["mask"].tobytes(), arrays["conv/q"].tobytes(), arrays["fc/q"].tobytes(), b"",
               arrays["conv/q1"].tobytes()]
    main = [T("dense/kernel", (3, 4), 0, 1), T("dense/bias", (4,), 2, 2), T("half", (5,), 1, 3),
            T("mask", (3,), 6, 4),
            T("conv/q", (2, 3), 9, 5, scale=[0.5, 0.25], zero_point=[1, -3], axis=0),
            T("fc/q", (6,), 9, 6, scale=[0.125], zero_point=[-4]),
            T("conv/q1", (2, 3), 9, 8, scale=[0.5, 2.0, 0.03125], zero_point=[0, 7, -2], axis=1),
            T("activation", (1, 4), 0, 0), T("no_data", (2,), 0, 7),
            T("kernel_again", (3, 4), 0, 1)]
    second = [T("w", (3, 4), 0, 1)]
    path = tmp / "model.tflite"
    path.write_bytes(build([(None, main), ("cond_true", second), (None, [T("b", (4,), 2, 2)])], buffers))
    return path, arrays


def test_written_model_mounts_exactly(written):
    path, arrays = written
    with mounted(path) as mnt:
        paths, index = index_paths(mnt)
        names = [t["name"] for t in index["tensors"]]
        assert names == ["dense/kernel", "dense/bias", "half", "mask", "conv/q", "fc/q", "conv/q1", "kernel_again",
                         "cond_true/w", "subgraph2/b"]
        for name in ["dense/kernel", "dense/bias", "half", "mask", "conv/q", "fc/q", "conv/q1"]:
            arr = arrays[name]
            assert cat(paths[name]) == arr.tobytes(), name
            meta = sidecar(paths[name])
            assert meta["shape"] == list(arr.shape) and meta["format"] == "tflite"
        for name in ["dense/kernel", "dense/bias", "half", "mask"]:
            np.testing.assert_array_equal(npy_values(paths[name]), arrays[name])
            assert npy_values(paths[name]).dtype == arrays[name].dtype
        # Shared buffers: the same bytes under every name.
        assert cat(paths["kernel_again"]) == cat(paths["cond_true/w"]) == arrays["dense/kernel"].tobytes()
        assert cat(paths["subgraph2/b"]) == arrays["dense/bias"].tobytes()
        # Per channel along quantized_dimension: scale[c] x (q - zero_point[c]),
        # in float32, with c the index along that axis; the parameters in the sidecar.
        for name, axis, scale, zero in [("conv/q", 0, [0.5, 0.25], [1, -3]),
                                        ("conv/q1", 1, [0.5, 2.0, 0.03125], [0, 7, -2])]:
            shape = [1, 1]
            shape[axis] = len(scale)
            want = ((arrays[name].astype(np.int64) - np.array(zero).reshape(shape)).astype(np.float32)
                    * np.array(scale, dtype=np.float32).reshape(shape))
            got = npy_values(paths[name])
            assert got.dtype == np.float32, name
            np.testing.assert_array_equal(got, want)
            q = sidecar(paths[name])["tflite_quantization"]
            assert q["scale"] == scale and q["zero_point"] == zero and q["quantized_dimension"] == axis
        # Per tensor: (q - zero_point) x scale, in float32.
        want = (arrays["fc/q"].astype(np.int64) + 4).astype(np.float32) * np.float32(0.125)
        got = npy_values(paths["fc/q"])
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
        side = sidecar(paths["fc/q"])
        assert side["quantization"]["scale"] == 0.125 and side["quantization"]["zero_point"] == -4
        meta = metadata(mnt)
        assert meta["schema_version"] == 3 and meta["subgraph_count"] == 3
        assert meta["description"] == "written by test_tflite_mount"
        assert [g["name"] for g in meta["subgraphs"]] == ["", "cond_true", ""]


def test_offset_buffers_after_the_flatbuffer(tmp):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([7, 9, 11], dtype=np.int32)
    c = np.linspace(0, 1, 5).astype(np.float32)
    data, where = build_with_offsets([(None, [T("a", (2, 3), 0, 1), T("b", (3,), 2, 2), T("c", (5,), 0, 3)])],
                                     [None, a.tobytes(), b.tobytes(), c.tobytes()], outside=[1, 2])
    path = tmp / "big.tflite"
    path.write_bytes(data)
    with mounted(path) as mnt:
        paths, _ = index_paths(mnt)
        for name, arr in (("a", a), ("b", b), ("c", c)):
            assert cat(paths[name]) == arr.tobytes()
            np.testing.assert_array_equal(npy_values(paths[name]), arr)
        assert sidecar(paths["a"])["source"]["offset"] == where[1][0]
        assert sidecar(paths["b"])["source"]["offset"] == where[2][0]
    for option in ("--list", "--info", "--check"):
        assert run_modelfs(option, path).returncode == 0, option


def test_real_tflite_models(shared):
    counts = manifest_counts(shared)
    files = sorted((shared / REAL).glob("*.tflite"))
    assert len(files) == 9 and set(counts) == {f.stem for f in files}
    for model in files:
        data = model.read_bytes()
        want = expected_tensors(data)
        assert len(want) == counts[model.stem], model.name
        with mounted(model) as mnt:
            paths, index = index_paths(mnt)
            assert len(index["tensors"]) == counts[model.stem], model.name
            for (name, dtype, shape, raw), entry in zip(want, index["tensors"]):
                assert entry["name"] == name and entry["dtype"] == dtype and entry["shape"] == shape, (model, name)
                assert cat(mnt / entry["path"]) == raw, (model.name, name)
        for option in ("--list", "--info", "--check"):
            result = run_modelfs(option, model)
            assert result.returncode == 0, (model.name, option, result.stderr)


def test_corrupt_files_are_refused(tmp, shared):
    data = bytearray((shared / REAL / "tflm_hello_world_int8.tflite").read_bytes())
    root = struct.unpack_from("<I", data, 0)[0]
    struct.pack_into("<i", data, root, 0x7FFFFFFF)  # the root's vtable before the file
    cases = {"vtable": bytes(data)}
    cases["size"] = build([(None, [T("w", (3,), 0, 1)])], [None, b"\0" * 8])
    cases["index"] = build([(None, [T("w", (2,), 0, 9)])], [None, b"\0" * 8])
    cases["past"] = build([(None, [T("w", (2,), 0, 1)])], [None, b"\0" * 8], offsets={1: (1 << 40, 8)})
    cases["truncated"] = (shared / REAL / "tflm_hello_world_int8.tflite").read_bytes()[:600]
    for what, bytes_ in cases.items():
        path = tmp / f"{what}.tflite"
        path.write_bytes(bytes_)
        refused_by_every_command(path, tmp / f"mnt-{what}", "TensorFlow Lite")


# -- remote ----------------------------------------------------------------------

def test_url_mounts_lazily(tmp, nginx):
    """A .tflite by URL: the mount reads the tables, not the 8 MiB buffer
    inside the flatbuffer; a tensor's read fetches about its bytes."""
    rng = np.random.default_rng(3)
    big = rng.standard_normal((1024, 2048)).astype(np.float32)
    small = np.arange(16, dtype=np.int32)
    (nginx.root / "model.tflite").write_bytes(
        build([(None, [T("big", big.shape, 0, 1), T("small", small.shape, 2, 2)])],
              [None, big.tobytes(), small.tobytes()]))
    with mounted(f"{nginx.url}/model.tflite", "-o", f"cache_dir={tmp / 'cache'}") as mnt:
        paths, _ = index_paths(mnt)
        at_mount = nginx.bytes_sent("/model.tflite")
        assert at_mount < big.nbytes // 8, at_mount
        assert cat(paths["small"]) == small.tobytes()
        assert nginx.bytes_sent("/model.tflite") - at_mount < big.nbytes // 8
        assert cat(paths["big"]) == big.tobytes()
        np.testing.assert_array_equal(npy_values(paths["big"]), big)
