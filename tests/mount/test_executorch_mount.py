# SPDX-License-Identifier: Apache-2.0
"""ExecuTorch programs (.pte) and external tensor data (.ptd) through a real
mount: the test's own writer (python3-flatbuffers' Builder, tables built by
field slot as docs/formats.md, "ExecuTorch", gives them) with a
constant_segment program (extended header, segments after the flatbuffer),
an inline constant_buffer program, and a program whose weights are EXTERNAL
in a .ptd beside it; float32, int8, int64, float16 and bool tensors, a
channels-last dim_order, two methods sharing constants. The real files of
realworld2 (executorch/, per its MANIFEST.md); corrupt files refused;
--list/--info/--check; a program and its .ptd by URL.

Oracle: the writer's own numpy arrays, and for the real files a small
flatbuffer walker here in plain Python (struct) that finds each constant's
bytes itself; never modelfs's own output."""
import re
import struct

import numpy as np
import pytest

from conftest import cat, index_paths, metadata, mounted, one_line, refused_by_every_command, run_modelfs, sidecar
from flatbuffer_walker import Walker

flatbuffers = pytest.importorskip("flatbuffers", reason="needs python3-flatbuffers (the test's writer)")

REAL = "fixtures/realworld2/files/executorch"
SCALAR = {np.dtype(np.uint8): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.int32): 3,
          np.dtype(np.int64): 4, np.dtype(np.float16): 5, np.dtype(np.float32): 6, np.dtype(np.float64): 7,
          np.dtype(np.bool_): 11}
# ScalarType -> (numpy dtype, the sidecar's dtype name).
NUMPY = {0: ("u1", "uint8"), 1: ("i1", "int8"), 2: ("<i2", "int16"), 3: ("<i4", "int32"), 4: ("<i8", "int64"),
         5: ("<f2", "float16"), 6: ("<f4", "float32"), 7: ("<f8", "float64"), 11: ("?", "bool"),
         12: ("i1", "int8"), 13: ("u1", "uint8"), 14: ("<i4", "int32")}


# -- the writer ---------------------------------------------------------------

class C:
    """A constant: `array` in logical order; `order` a dim_order (memory order
    outer to inner); `external` puts it in the .ptd, found by `name`."""

    def __init__(self, name, array, order=None, external=False):
        self.name, self.array, self.order, self.external = name, np.asarray(array), order, external

    def stored(self):
        a = self.array if self.order is None else np.ascontiguousarray(self.array.transpose(self.order))
        return a.tobytes()


def _vec_offsets(b, items):
    b.StartVector(4, len(items), 4)
    for item in reversed(items):
        b.PrependUOffsetTRelative(item)
    return b.EndVector()


def _np_vec(b, values, fmt):
    arr = np.asarray(values, dtype=fmt)
    if not len(arr):
        b.StartVector(arr.itemsize, 0, arr.itemsize)
        return b.EndVector()
    return b.CreateNumpyVector(arr)


def _bytes_vec(b, data, align=16):
    b.StartVector(1, len(data), align)
    b.head = b.head - len(data)
    b.Bytes[b.head:b.head + len(data)] = data
    return b.EndVector()


def _segment_table(b, offset, size):
    b.StartObject(2)
    b.PrependUint64Slot(0, offset, 0)
    b.PrependUint64Slot(1, size, 0)
    return b.EndObject()


def _tensor(b, c, index):
    shape = _np_vec(b, list(c.array.shape), "<i4")
    order = _np_vec(b, c.order if c.order is not None else list(range(c.array.ndim)), "u1")
    extra = None
    if c.name is not None:
        fqn = b.CreateString(c.name)
        b.StartObject(3)
        b.PrependUOffsetTRelativeSlot(1, fqn, 0)
        b.PrependInt8Slot(2, 1 if c.external else 0, 0)
        extra = b.EndObject()
    b.StartObject(10)
    b.PrependInt8Slot(0, SCALAR[c.array.dtype], -1)
    b.PrependUOffsetTRelativeSlot(2, shape, 0)
    b.PrependUOffsetTRelativeSlot(3, order, 0)
    b.PrependUint32Slot(5, index, 0)
    if extra is not None:
        b.PrependUOffsetTRelativeSlot(9, extra, 0)
    return b.EndObject()


def _evalue(b, kind, value):
    b.StartObject(2)
    b.PrependUint8Slot(0, kind, 0)
    b.PrependUOffsetTRelativeSlot(1, value, 0)
    return b.EndObject()


def _planned_tensor(b):
    """An activation: memory-planned (allocation_info), no data."""
    shape = _np_vec(b, [4], "<i4")
    b.StartObject(3)
    b.PrependUint32Slot(1, 64, 0)
    alloc = b.EndObject()
    b.StartObject(10)
    b.PrependInt8Slot(0, 6, -1)
    b.PrependUOffsetTRelativeSlot(2, shape, 0)
    b.PrependUOffsetTRelativeSlot(6, alloc, 0)
    return b.EndObject()


def build_pte(methods, layout, corrupt=None):
    """A .pte of `methods` [(name, [C])]: constants numbered in first-seen
    order from 1. layout: "segment" (constant_segment, extended header,
    segments after the program), "inline" (Program.constant_buffer) or
    "external" (every C external). Returns (bytes, {C name or index: file
    offset of its bytes}) ; the .ptd of externals is build_ptd's."""
    consts, index_of = [], {}
    for _, cs in methods:
        for c in cs:
            if id(c) not in index_of and not c.external:
                index_of[id(c)] = len(consts) + 1
                consts.append(c)
    blobs = [c.stored() for c in consts]
    offsets = [0]
    seg = b""
    for raw in blobs:
        seg += bytes(-len(seg) % 16)
        offsets.append(len(seg))
        seg += raw
    corrupt = corrupt or {}
    b = flatbuffers.Builder(1024)
    plans = []
    for name, cs in methods:
        values = []
        for c in cs:
            values.append(_evalue(b, 5, _tensor(b, c, 0 if c.external else corrupt.get("index", index_of[id(c)]))))
        values.append(_evalue(b, 5, _planned_tensor(b)))
        b.StartObject(1)
        b.PrependInt64Slot(0, 7, 0)
        values.append(_evalue(b, 2, b.EndObject()))  # an Int
        vals = _vec_offsets(b, values)
        pname = b.CreateString(name)
        b.StartObject(9)
        b.PrependUOffsetTRelativeSlot(0, pname, 0)
        b.PrependUOffsetTRelativeSlot(2, vals, 0)
        plans.append(b.EndObject())
    plan_vec = _vec_offsets(b, plans)
    buffers = segments = constant_segment = None
    if layout == "inline":
        tables = []
        for raw in [b""] + blobs:
            v = _bytes_vec(b, raw)
            b.StartObject(1)
            b.PrependUOffsetTRelativeSlot(0, v, 0)
            tables.append(b.EndObject())
        buffers = _vec_offsets(b, tables)
    elif layout == "segment":
        segments = _vec_offsets(b, [_segment_table(b, corrupt.get("segment_offset", 0), len(seg))])
        offs = _np_vec(b, offsets, "<u8")
        b.StartObject(2)
        b.PrependUint32Slot(0, 0, 0)
        b.PrependUOffsetTRelativeSlot(1, offs, 0)
        constant_segment = b.EndObject()
    b.StartObject(8)
    b.PrependUint32Slot(0, 0, 0)
    b.PrependUOffsetTRelativeSlot(1, plan_vec, 0)
    if buffers is not None:
        b.PrependUOffsetTRelativeSlot(2, buffers, 0)
    if segments is not None:
        b.PrependUOffsetTRelativeSlot(4, segments, 0)
        b.PrependUOffsetTRelativeSlot(5, constant_segment, 0)
    b.Finish(b.EndObject(), file_identifier=b"ET12")
    fb = bytes(b.Output())
    where = {}
    if layout != "segment":
        if layout == "inline":
            # Find each buffer's storage by walking what was written.
            w = Walker(fb)
            for c, t in zip(consts, w.tables(w.root(), 2)[1:]):
                where[c.name or index_of[id(c)]] = w.vector(t, 0)[0]
        return fb, where
    return with_header(fb, seg, b"eh00", offsets, consts, index_of, where)


def with_header(fb, seg, magic, offsets, consts, index_of, where):
    """The extended header inserted at byte 8 (32 bytes; the root offset moved
    by as much), the segment after the program at a 128-byte boundary."""
    head_len = 32
    program_size = len(fb) + head_len
    base = (program_size + 127) // 128 * 128
    root = struct.unpack_from("<I", fb, 0)[0] + head_len
    header = magic + struct.pack("<IQQQ", head_len, program_size, base, len(seg))
    out = struct.pack("<I", root) + fb[4:8] + header + fb[8:]
    out += bytes(base - len(out)) + seg
    for c in consts:
        where[c.name or index_of[id(c)]] = base + offsets[index_of[id(c)]]
    return out, where


def build_ptd(consts):
    """A .ptd (FlatTensor, header FH01) of `consts`, one segment each."""
    seg, entries = b"", []
    for c in consts:
        seg += bytes(-len(seg) % 16)
        entries.append((c, len(seg), len(c.stored())))
        seg += c.stored()
    b = flatbuffers.Builder(1024)
    segs = _vec_offsets(b, [_segment_table(b, off, size) for _, off, size in entries])
    named = []
    for i, (c, _, _) in enumerate(entries):
        key = b.CreateString(c.name)
        shape = _np_vec(b, list(c.array.shape), "<i4")
        order = _np_vec(b, c.order if c.order is not None else list(range(c.array.ndim)), "u1")
        b.StartObject(3)
        b.PrependInt8Slot(0, SCALAR[c.array.dtype], -1)
        b.PrependUOffsetTRelativeSlot(1, shape, 0)
        b.PrependUOffsetTRelativeSlot(2, order, 0)
        layout = b.EndObject()
        b.StartObject(3)
        b.PrependUOffsetTRelativeSlot(0, key, 0)
        b.PrependUint32Slot(1, i, 0)
        b.PrependUOffsetTRelativeSlot(2, layout, 0)
        named.append(b.EndObject())
    named_vec = _vec_offsets(b, named)
    b.StartObject(3)
    b.PrependUOffsetTRelativeSlot(1, segs, 0)
    b.PrependUOffsetTRelativeSlot(2, named_vec, 0)
    b.Finish(b.EndObject(), file_identifier=b"FT01")
    fb = bytes(b.Output())
    head_len = 48  # 40 padded to 16
    base = (len(fb) + head_len + 127) // 128 * 128
    root = struct.unpack_from("<I", fb, 0)[0] + head_len
    header = b"FH01" + struct.pack("<IQQQQ", 40, head_len, len(fb), base, len(seg)) + bytes(8)
    out = struct.pack("<I", root) + fb[4:8] + header + fb[8:]
    out += bytes(base - len(out)) + seg
    return out, {c.name: base + off for c, off, _ in entries}


# -- the oracle for real files: flatbuffer_walker.Walker -----------------------

def expected_ptd(data):
    """{key: (numpy dtype, shape, file offset)} of a .ptd's tensors."""
    w = Walker(data)
    base = w.u("Q", 32)
    segs = [(w.scalar(t, 0, "Q"), w.scalar(t, 1, "Q")) for t in w.tables(w.root(), 1)]
    out = {}
    for n in w.tables(w.root(), 2):
        layout = w.table(n, 2)
        if layout is not None:
            out[w.string(n, 0)] = (NUMPY[w.scalar(layout, 0, "b")], w.scalars(layout, 1, "i"),
                                   base + segs[w.scalar(n, 1, "I")][0])
    return out


def expected_pte(data, ptd=None):
    """[(name, (numpy dtype, dtype name), shape, bytes)] of a program's
    constants, first seen first, one per buffer (or external name)."""
    w = Walker(data)
    root = w.root()
    base = w.u("Q", 24) if data[8:12] == b"eh00" else 0
    segs = [(w.scalar(t, 0, "Q"), w.scalar(t, 1, "Q")) for t in w.tables(root, 4)]
    buffers = w.tables(root, 2)
    cs = w.table(root, 5)
    offsets = w.scalars(cs, 1, "Q") if cs is not None else []
    cs_base = base + segs[w.scalar(cs, 0, "I")][0] if offsets else None
    out, seen = [], set()
    for plan in w.tables(root, 1):
        for ev in w.tables(plan, 2):
            if w.scalar(ev, 0, "B") != 5:
                continue
            t = w.table(ev, 1)
            if w.field(t, 6) is not None:
                continue
            extra = w.table(t, 9)
            fqn = w.string(extra, 1) if extra is not None else None
            external = extra is not None and w.scalar(extra, 2, "b") == 1
            idx = w.scalar(t, 5, "I")
            if not external and idx == 0:
                continue
            key = ("x", fqn) if external else ("c", idx)
            if key in seen:
                continue
            seen.add(key)
            st = w.scalar(t, 0, "b")
            shape = w.scalars(t, 2, "i")
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(NUMPY[st][0]).itemsize
            if external:
                ptd_data, entries = ptd
                start = entries[fqn][2]
                raw = ptd_data[start:start + nbytes]
            elif buffers:
                start, _ = w.vector(buffers[idx], 0)
                raw = data[start:start + nbytes]
            else:
                start = cs_base + offsets[idx]
                raw = data[start:start + nbytes]
            out.append((fqn or f"constant.{idx}", NUMPY[st], shape, raw))
    return out


def manifest_rows(shared):
    """{file (under executorch/): (N tensors, [not-tensor names])} from MANIFEST.md."""
    rows = {}
    for line in (shared / "fixtures/realworld2/MANIFEST.md").read_text().splitlines():
        m = re.search(r"`executorch/([^`]+\.pte)`.*mount exact, (\d+) tensors(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), re.findall(r"`([0-9a-f]{64})`", m.group(3)))
    return rows


def npy(path):
    return np.load(str(path) + ".npy")


# -- tests -------------------------------------------------------------------

def arrays():
    rng = np.random.default_rng(11)
    return [
        C("linear.weight", rng.standard_normal((3, 4)).astype(np.float32)),
        C("linear.bias", np.arange(4, dtype=np.int64) - 2),
        C(None, rng.integers(-128, 127, (2, 5), dtype=np.int8)),
        C("half", rng.standard_normal(5).astype(np.float16)),
        C("mask", np.array([True, False, True, True])),
        C("conv.weight", rng.standard_normal((2, 3, 2, 2)).astype(np.float32), order=[0, 2, 3, 1]),
    ]


def check_mount(path, consts, where):
    with mounted(path) as mnt:
        paths, index = index_paths(mnt)
        names = [t["name"] for t in index["tensors"]]
        want = [c.name or f"constant.{i + 1}" for i, c in enumerate(consts)]
        assert names == want
        for c, name in zip(consts, want):
            assert cat(paths[name]) == c.stored(), name
            got = npy(paths[name])
            assert got.dtype == c.array.dtype and got.shape == c.array.shape, name
            np.testing.assert_array_equal(got, c.array)
            side = sidecar(paths[name])
            assert side["format"] == "executorch" and side["shape"] == list(c.array.shape)
            assert side["source"]["offset"] == where[c.name or want.index(name) + 1], name
        return metadata(mnt)


@pytest.mark.parametrize("layout", ["segment", "inline"])
def test_written_program_mounts_exactly(tmp, layout):
    consts = arrays()
    # Two methods; the second names two of the first's constants again.
    data, where = build_pte([("forward", consts), ("other", [consts[1], consts[0]])], layout)
    path = tmp / "model.pte"
    path.write_bytes(data)
    meta = check_mount(path, consts, where)
    assert [m["name"] for m in meta["methods"]] == ["forward", "other"]
    assert meta["constant_tensor_count"] == len(consts) and meta["extended_header"] == (layout == "segment")
    for option in ("--list", "--info", "--check"):
        assert run_modelfs(option, path).returncode == 0, option


def test_written_external_ptd(tmp):
    consts = [C(c.name or "fc.w", c.array, c.order, external=True) for c in arrays()]
    data, _ = build_pte([("forward", consts)], "external")
    ptd, where = build_ptd(consts)
    (tmp / "model.pte").write_bytes(data)
    (tmp / "model.ptd").write_bytes(ptd)
    meta = check_mount(tmp / "model.pte", consts, where)
    assert meta["external_tensor_count"] == len(consts)
    # The .ptd alone: the same tensors by name.
    check_mount(tmp / "model.ptd", consts, where)
    for option in ("--list", "--info", "--check"):
        assert run_modelfs(option, tmp / "model.pte").returncode == 0, option
    # Without its .ptd, the program is refused, saying so.
    (tmp / "model.ptd").unlink()
    result = run_modelfs("--list", tmp / "model.pte")
    assert result.returncode == 2 and "ExecuTorch" in one_line(result.stderr) and ".ptd" in result.stderr


def test_real_programs(shared):
    rows = manifest_rows(shared)
    files = sorted((shared / REAL).rglob("*.pte"))
    assert len(files) == 5 and {str(f.relative_to(shared / REAL)) for f in files} == set(rows)
    for model in files:
        count, not_tensors = rows[str(model.relative_to(shared / REAL))]
        data = model.read_bytes()
        ptd = None
        ptd_path = model.parent / "_default_external_constant.ptd"
        if ptd_path.exists():
            ptd_data = ptd_path.read_bytes()
            ptd = (ptd_data, expected_ptd(ptd_data))
        want = expected_pte(data, ptd)
        assert len(want) == count, model.name
        with mounted(model) as mnt:
            paths, index = index_paths(mnt)
            assert len(index["tensors"]) == count, model.name
            for (name, (np_dtype, dtype), shape, raw), entry in zip(want, index["tensors"]):
                assert entry["name"] == name and entry["dtype"] == dtype and entry["shape"] == shape, (model, name)
                assert cat(mnt / entry["path"]) == raw, (model.name, name)
                np.testing.assert_array_equal(npy(mnt / entry["path"]),
                                              np.frombuffer(raw, np_dtype).reshape(shape))
            meta = metadata(mnt)
            assert sorted(e["name"] for e in meta.get("not_tensors", [])) == sorted(not_tensors), model.name
        for option in ("--list", "--info", "--check"):
            result = run_modelfs(option, model)
            assert result.returncode == 0, (model.name, option, result.stderr)
    ptd_path = shared / REAL / "etrs_data_map/_default_external_constant.ptd"
    with mounted(ptd_path) as mnt:
        paths, _ = index_paths(mnt)
        data = ptd_path.read_bytes()
        entries = expected_ptd(data)
        assert sorted(paths) == sorted(entries)
        for key, ((np_dtype, _), shape, start) in entries.items():
            n = int(np.prod(shape)) * np.dtype(np_dtype).itemsize
            assert cat(paths[key]) == data[start:start + n]


def test_corrupt_files_are_refused(tmp, shared):
    real = (shared / REAL / "et_arduino_keyword_spotting.pte").read_bytes()
    cases = {}
    bad = bytearray(real)
    struct.pack_into("<i", bad, struct.unpack_from("<I", bad, 0)[0], 0x7FFFFFFF)  # the root's vtable
    cases["vtable"] = bytes(bad)
    bad = bytearray(real)
    struct.pack_into("<Q", bad, 24, 1 << 40)  # segment_base_offset past the file
    cases["base"] = bytes(bad)
    cases["truncated"] = real[:20000]
    consts = arrays()[:2]
    cases["index"] = build_pte([("forward", consts)], "segment", corrupt={"index": 9})[0]
    cases["segment"] = build_pte([("forward", consts)], "segment", corrupt={"segment_offset": 1 << 20})[0]
    bad = bytearray(build_pte([("forward", consts)], "inline")[0])
    w = Walker(bytes(bad))
    t = w.table(w.tables(w.tables(w.root(), 1)[0], 2)[0], 1)
    bad[w.field(t, 0)] = 42  # an unknown ScalarType
    cases["dtype"] = bytes(bad)
    for what, bytes_ in cases.items():
        path = tmp / f"{what}.pte"
        path.write_bytes(bytes_)
        refused_by_every_command(path, tmp / f"mnt-{what}", "ExecuTorch")


def test_program_and_ptd_by_url(tmp, shared):
    from remote_servers import Nginx
    root = tmp / "www"
    root.mkdir()
    (root / "fixtures").symlink_to(shared / "fixtures")
    server = Nginx(tmp / "nginx", root)
    try:
        for name in ("et_arduino_keyword_spotting.pte", "etrs_data_map/model.pte"):
            local = shared / REAL / name
            with mounted(local) as mnt:
                _, index = index_paths(mnt)
                want = {t["name"]: cat(mnt / t["path"]) for t in index["tensors"]}
            url = f"{server.url}/{REAL}/{name}"
            with mounted(url, "-o", f"cache_dir={tmp / 'cache'}") as mnt:
                _, index = index_paths(mnt)
                got = {t["name"]: cat(mnt / t["path"]) for t in index["tensors"]}
            assert got == want, name
    finally:
        server.stop()
