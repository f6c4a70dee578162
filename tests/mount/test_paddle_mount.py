# SPDX-License-Identifier: Apache-2.0
"""PaddlePaddle through a real mount: the realworld4 models (paddle/, per
its MANIFEST.md: fluid __model__ with one file per var, a .pdmodel with its
.pdiparams, a paddle.save .pdparams), the test's own writers for what they
lack (int64, float16, int8, bool, float64, complex and uint8 streams, a LoD
level, legacy __model__ + __params__, protocol-2 and protocol-4 pickles,
a Fortran-order and a 0-d array, an array whose latin-1 text spans many
of the view's marks), refusals, --export, and a model by URL.

Oracles: paddle_files.py's parser (ProgramDesc field numbers and the
tensor stream layout from docs/formats.md, in plain Python) and the
writer's own arrays; the .pdparams values by pickle.load through a
restricted Unpickler that admits only numpy's array reconstruction (paddle
is not installed). Never modelfs's own output."""
import json
import os
import pickle
import re
import struct

import numpy as np
import pytest

import paddle_files as pf
from conftest import cat, index_paths, metadata, mounted, refused_by_every_command, run_modelfs, sidecar

REAL = "fixtures/realworld4/files/paddle"
MANIFEST = "fixtures/realworld4/MANIFEST.md"
NUMPY_GLOBALS = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                 ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
                 ("__builtin__", "bytes"), ("builtins", "bytes")}  # b"" under protocol 2


class ArraysOnly(pickle.Unpickler):
    """pickle.load that builds numpy arrays and nothing else."""

    def find_class(self, module, name):
        if (module, name) in NUMPY_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed")


def load_state(path):
    with open(path, "rb") as f:
        return ArraysOnly(f, encoding="latin1").load()


def manifest_rows(shared):
    """{mount path under paddle/: (count, dtypes, first names, not-tensor count)}."""
    rows = {}
    for line in (shared / MANIFEST).read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 6 or cells[2] != "PaddlePaddle":
            continue
        mount = re.fullmatch(r"`paddle/(.+)`", cells[3]).group(1)
        m = re.match(r"(\d+) tensors \(([^)]*)\): (.*?)(?:; not tensors: (\d+).*)?$", cells[5])
        names = re.findall(r"`([^`]+)`", m.group(3))
        rows[mount] = (int(m.group(1)), m.group(2).split(", "), names, int(m.group(4) or 0))
    return rows


def npy(path):
    return np.load(str(path) + ".npy")


def check_arrays(mnt, want):
    """`want`: [(name, array)] in the index's order; raw files and .npy exact."""
    paths, index = index_paths(mnt)
    assert [t["name"] for t in index["tensors"]] == [name for name, _ in want]
    for name, array in want:
        assert cat(paths[name]) == np.ascontiguousarray(array).tobytes(), name
        got = npy(paths[name])
        assert got.dtype == array.dtype and got.shape == array.shape, name
        np.testing.assert_array_equal(got, array)
    return paths


# -- realworld4 ---------------------------------------------------------------

def test_real_models_mount_as_manifest_says(shared):
    root = shared / REAL
    if not root.is_dir():
        pytest.skip(f"{root} not found (realworld4 fixtures)")
    rows = manifest_rows(shared)
    assert len(rows) == 5
    for mount, (count, dtypes, first, not_tensors) in rows.items():
        model = root / mount
        with mounted(model) as mnt:
            paths, index = index_paths(mnt)
            names = [t["name"] for t in index["tensors"]]
            assert len(names) == count and names[:len(first)] == first, mount
            assert sorted({t["dtype"] for t in index["tensors"]}) == sorted(dtypes), mount
            meta = metadata(mnt)
            assert meta.get("not_tensor_count", 0) == not_tensors, mount
            if model.suffix == ".pdparams":
                state = load_state(model)
                arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
                assert list(arrays) == names
                check_arrays(mnt, list(arrays.items()))
                assert [e["name"] for e in meta["not_tensors"]] == ["StructuredToParameterName@@"]
                continue
            want = pf.expected_model(model)
            assert [w[0] for w in want] == names, mount
            for (name, dtype, dims, raw), entry in zip(want, index["tensors"]):
                assert entry["shape"] == dims, name
                assert cat(paths[name]) == raw, (mount, name)
                np.testing.assert_array_equal(npy(paths[name]), np.frombuffer(raw, dtype).reshape(dims))
                side = sidecar(paths[name])
                assert side["format"] == "paddle" and side["source"]["file"] in (name, "model.pdiparams")
        for option in ("--list", "--info", "--check"):
            result = run_modelfs(option, model)
            assert result.returncode == 0, (mount, option, result.stderr)


def test_stale_files_no_var_names_are_not_read(shared):
    model = shared / REAL / "luotao1_example/__model__"
    if not model.exists():
        pytest.skip("realworld4 fixtures not found")
    assert (model.parent / "fc_3.w_0").exists()
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert "fc_3.w_0" not in paths and "fc_3.b_0" not in paths
        assert "fc_3.w_0" not in metadata(mnt)["files"]


# -- the test's own writers -----------------------------------------------------

def params():
    rng = np.random.default_rng(45)
    return {
        "fc_0.w_0": rng.standard_normal((5, 3)).astype(np.float32),
        "fc_0.b_0": rng.standard_normal(3).astype(np.float32),
        "embedding_0.w_0": rng.standard_normal((4, 2)).astype(np.float16),
        "step": np.array([7, -3, 1 << 40], dtype=np.int64),
        "q.scale": rng.integers(-128, 127, (2, 3), dtype=np.int8),
        "mask": np.array([True, False, True]),
        "double": rng.standard_normal((2, 2)),
        "ids": np.arange(6, dtype=np.int32).reshape(3, 2),
        "pixels": rng.integers(0, 255, 5, dtype=np.uint8),
        "cplx": (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(np.complex64),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }


@pytest.mark.parametrize("layout", ["combined", "legacy", "separate"])
def test_written_models_mount_exactly(tmp, layout):
    p = params()
    model = pf.write_model(tmp / layout, p, layout)
    order = sorted(p) if layout != "separate" else list(p)
    with mounted(model) as mnt:
        paths = check_arrays(mnt, [(name, p[name]) for name in order])
        meta = metadata(mnt)
        assert meta["parameters"] == ("separate" if layout == "separate" else "combined")
        assert meta["inputs"] == ["x"] and meta["outputs"] == ["y"] and meta["program_version"] == 2006000
        # Each tensor's data offset, from the writer's own layout.
        if layout != "separate":
            data = (model.parent / ("__params__" if layout == "legacy" else "model.pdiparams")).read_bytes()
            at = 0
            for name in order:
                _, _, start, _, at = pf.read_stream(data, at)
                assert sidecar(paths[name])["source"]["offset"] == start
    for option in ("--list", "--info", "--check"):
        assert run_modelfs(option, model).returncode == 0, option


def test_stream_with_lod_levels(tmp):
    a = np.arange(12, dtype=np.float32).reshape(6, 2)
    folder = tmp / "lod"
    folder.mkdir()
    (folder / "__model__").write_bytes(pf.program({"seq": a}))
    (folder / "seq").write_bytes(pf.stream(a, lod=[[0, 2, 6], [0, 1, 2, 4, 5, 6]]))
    with mounted(folder / "__model__") as mnt:
        paths = check_arrays(mnt, [("seq", a)])
        assert sidecar(paths["seq"])["paddle_lod_level_bytes"] == [24, 48]


def test_written_pdparams(tmp):
    rng = np.random.default_rng(7)
    big = rng.standard_normal(50_000).astype(np.float32)  # 200 KB: many of the view's 16 KiB marks
    state = {
        "linear.weight": rng.standard_normal((8, 3)).astype(np.float32),
        "linear.bias": np.arange(3, dtype=np.int64) - 1,
        "half": rng.standard_normal(7).astype(np.float16),
        "fortran": np.asfortranarray(rng.standard_normal((3, 4))),
        "zero_d": np.array(1.5, dtype=np.float64),
        "ascii": np.arange(10, dtype=np.uint8),  # every byte below 0x80: in place
        "empty": np.zeros(0, dtype=np.float32),
        "big": big,
        "StructuredToParameterName@@": {"linear.weight": "linear_0.w_0"},
        "tied": None,  # the same array as linear.weight: pickled once, through the memo
        "epoch": 3,
    }
    state["tied"] = state["linear.weight"]
    arrays = [(k, v) for k, v in state.items() if isinstance(v, np.ndarray)]
    for protocol in (2, 4):
        path = tmp / f"p{protocol}.pdparams"
        path.write_bytes(pickle.dumps(state, protocol=protocol))
        loaded = load_state(path)
        for name, array in arrays:
            np.testing.assert_array_equal(loaded[name], array)
        with mounted(path) as mnt:
            paths, index = index_paths(mnt)
            assert [t["name"] for t in index["tensors"]] == [k for k, _ in arrays]
            for name, array in arrays:
                raw = cat(paths[name])
                order = "F" if name == "fortran" else "C"
                assert raw == array.tobytes(order=order), (protocol, name)
                np.testing.assert_array_equal(npy(paths[name]), array)
            meta = metadata(mnt)
            assert sorted(e["name"] for e in meta["not_tensors"]) == ["StructuredToParameterName@@", "epoch"]
            assert meta["pickle_protocol"] == protocol
            assert sidecar(paths["tied"]).get("source") == sidecar(paths["linear.weight"]).get("source")
            assert run_modelfs("--check", path).returncode == 0
            # Reads that start and end anywhere: each range against numpy's bytes.
            want = big.tobytes()
            fd = os.open(paths["big"], os.O_RDONLY)
            try:
                for start, length in [(0, 1), (16383, 3), (16384, 16384), (99_999, 70_001), (199_990, 10),
                                      (12_345, 150_000)]:
                    assert os.pread(fd, length, start) == want[start:start + length], (protocol, start)
            finally:
                os.close(fd)
            side = sidecar(paths["half"])
            if protocol == 2:
                assert "offset" not in side["source"]
            else:
                data = path.read_bytes()
                at = side["source"]["offset"]
                assert data[at:at + 14] == state["half"].tobytes()


def test_pdparams_and_torch_pickles_told_apart(tmp):
    torch = pytest.importorskip("torch")
    legacy = tmp / "legacy.pt"
    torch.save({"w": torch.arange(4.0)}, legacy, _use_new_zipfile_serialization=False)
    result = run_modelfs("--list", legacy)
    assert result.returncode == 0 and "format pytorch" in result.stdout
    path = tmp / "state.pdparams"
    path.write_bytes(pickle.dumps({"w": np.arange(4.0)}, protocol=2))
    result = run_modelfs("--list", path)
    assert result.returncode == 0 and "format paddle" in result.stdout


def test_export_round_trip(tmp):
    p = params()
    model = pf.write_model(tmp / "m", p, "combined")
    out = tmp / "out.safetensors"
    result = run_modelfs("--export", out, model)
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    st_dtype = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64",
                np.dtype(np.int8): "I8", np.dtype(np.bool_): "BOOL", np.dtype(np.float64): "F64",
                np.dtype(np.int32): "I32", np.dtype(np.uint8): "U8"}
    for name, array in p.items():
        if array.dtype not in st_dtype:
            continue  # complex: safetensors has no type for it (named in export.json)
        entry = header[name]
        assert entry["dtype"] == st_dtype[array.dtype] and entry["shape"] == list(array.shape), name
        begin, end = entry["data_offsets"]
        assert body[begin:end] == array.tobytes(), name
    # A protocol-2 state dict: the export reads through the latin-1 view.
    state = {"w": np.random.default_rng(1).standard_normal((40, 30)).astype(np.float32)}
    path = tmp / "s.pdparams"
    path.write_bytes(pickle.dumps(state, protocol=2))
    out = tmp / "s.safetensors"
    assert run_modelfs("--export", out, path).returncode == 0
    data = out.read_bytes()
    (n,) = struct.unpack_from("<Q", data, 0)
    begin, end = json.loads(data[8:8 + n])["w"]["data_offsets"]
    assert data[8 + n + begin:8 + n + end] == state["w"].tobytes()


# -- refusals -----------------------------------------------------------------

def test_broken_models_are_refused(tmp):
    p = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(4, dtype=np.int64)}
    cases = {}

    def combined_case(name, data, prog=None):
        folder = tmp / name
        folder.mkdir()
        (folder / "model.pdiparams").write_bytes(data)
        (folder / "model.pdmodel").write_bytes(prog or pf.program(p))
        cases[name] = folder / "model.pdmodel"

    good = pf.combined(p)
    combined_case("truncated", good[:-5])
    combined_case("extra_stream", good + pf.stream(np.zeros(2, np.float32)))
    combined_case("missing_stream", pf.stream(p["a"]))
    combined_case("dims_lie", pf.stream(p["a"], dims=[2, 300]) + pf.stream(p["b"]))
    combined_case("negative_dim", pf.stream(p["a"], dims=[2, -3]) + pf.stream(p["b"]))
    combined_case("unknown_type", pf.stream(p["a"], code=99) + pf.stream(p["b"]))
    combined_case("declared_other", good, pf.program(p, declared={"a": (5, [3, 2])}))
    bad = bytearray(good)
    struct.pack_into("<I", bad, 0, 1)
    combined_case("version", bytes(bad))
    bad = bytearray(good)
    struct.pack_into("<Q", bad, 4, 1 << 40)
    combined_case("lod_levels", bytes(bad))
    folder = tmp / "missing_var"
    folder.mkdir()
    (folder / "__model__").write_bytes(pf.program(p))
    (folder / "a").write_bytes(pf.stream(p["a"]))
    cases["missing_var"] = folder / "__model__"
    folder = tmp / "trailing"
    folder.mkdir()
    (folder / "__model__").write_bytes(pf.program(p))
    (folder / "a").write_bytes(pf.stream(p["a"]) + b"\0")
    (folder / "b").write_bytes(pf.stream(p["b"]))
    cases["trailing"] = folder / "__model__"
    prog = tmp / "cut_program"
    prog.mkdir()
    (prog / "model.pdmodel").write_bytes(pf.program(p)[:40])
    cases["cut_program"] = prog / "model.pdmodel"
    for what, path in cases.items():
        refused_by_every_command(path, tmp / f"mnt-{what}", "PaddlePaddle")


def test_broken_pdparams_are_refused(tmp):
    a = np.arange(300, dtype=np.float32) * 1.7  # bytes >= 0x80: two bytes of text each
    good = pickle.dumps({"w": a}, protocol=2)
    text = a.tobytes().decode("latin1").encode("utf-8")
    at = good.index(text)
    cases = {
        "short_text": good[:at - 4] + struct.pack("<I", len(text) - 4) + text[:-4] + good[at + len(text):],
        "not_latin1": good[:at] + b"\xe2\x82\xac" + text[3:] + good[at + len(text):],
        "truncated": good[:len(good) // 2],
        "shape_lies": pickle.dumps({"w": a}, protocol=2).replace(b"M,\x01", b"M-\x01"),
        "shape_lies_p4": pickle.dumps({"w": a}, protocol=4).replace(b"M,\x01", b"M-\x01"),
    }
    assert cases["shape_lies"] != good
    for what, data in cases.items():
        path = tmp / f"{what}.pdparams"
        path.write_bytes(data)
        refused_by_every_command(path, tmp / f"mnt-{what}", "PaddlePaddle")


def test_model_by_url(tmp, nginx, www):
    """Each layout and a state dict by URL, against the writers' arrays."""
    p = params()
    separate = pf.write_model(www / "m", p, "separate")
    combined = pf.write_model(www / "m", p, "combined")
    w = np.linspace(0, 1, 5000, dtype=np.float32)
    (www / "s.pdparams").write_bytes(pickle.dumps({"w": w}, protocol=2))
    for path, want in ((separate, p), (combined, p), (www / "s.pdparams", {"w": w})):
        url = f"{nginx.url}/{path.relative_to(www)}"
        with mounted(url, "-o", f"cache_dir={tmp / 'cache'}") as mnt:
            paths, _ = index_paths(mnt)
            assert sorted(paths) == sorted(want), path
            for name, array in want.items():
                assert cat(paths[name]) == array.tobytes(), (path, name)


def test_truncated_state_dict_fails_reads_with_eio(tmp):
    """A .pdparams cut under the mount: the latin-1 view's reads fail with
    EIO (never other bytes), the daemon lives, the printed files still read."""
    from conftest import daemon_pids
    rng = np.random.default_rng(3)
    state = {"first": rng.standard_normal(1000).astype(np.float32),
             "last": rng.standard_normal(60_000).astype(np.float32)}
    path = tmp / "cut.pdparams"
    path.write_bytes(pickle.dumps(state, protocol=2))
    with mounted(path) as mnt:
        paths, _ = index_paths(mnt)
        meta = (mnt / ".modelfs" / "metadata.json").read_bytes()
        (pid,) = daemon_pids(mnt)
        os.truncate(path, path.stat().st_size // 2)
        for name in ("last", "last.npy"):
            with pytest.raises(OSError) as e:
                (mnt / name).read_bytes()
            assert e.value.errno == 5, name  # EIO
        assert cat(paths["first"]) == state["first"].tobytes()  # before the cut
        assert os.path.exists(f"/proc/{pid}") and (mnt / ".modelfs" / "metadata.json").read_bytes() == meta


def test_model_folder_mounts_as_its_program(tmp):
    """A folder holding __model__, or one .pdmodel, is that model; one with two
    .pdmodel files is refused, naming what a folder is looked for."""
    p = params()
    for layout in ("separate", "combined"):
        folder = tmp / layout
        pf.write_model(folder, p, layout)
        with mounted(folder) as mnt:
            check_arrays(mnt, [(name, p[name]) for name in (list(p) if layout == "separate" else sorted(p))])
    pf.write_model(tmp / "combined", p, "combined", stem="other")
    result = run_modelfs("--list", tmp / "combined")
    assert result.returncode == 2 and "*.pdmodel" in result.stderr
