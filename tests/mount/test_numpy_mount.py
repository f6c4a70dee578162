# SPDX-License-Identifier: Apache-2.0
"""NumPy .npy and .npz through a real mount: every dtype, C and Fortran
order, 0-d and empty arrays, 1.0/2.0/3.0 headers, stored and deflated .npz
members (names with '/'), large deflated members read sequentially and at
random, --list/--info/--check/--export, refusals, and the real files of
realworld2 (numpy/ and hostile/, per its MANIFEST.md).

Oracle: numpy itself (np.save, np.savez, np.load, .tobytes() in the stored
order) and the tests' own safetensors reader; never modelfs's own output."""
import json
import os
import struct
import subprocess
import zipfile

import numpy as np
import pytest

import safetensors_writer as st
from conftest import cat, index_paths, metadata, mounted, refused, run_modelfs, sidecar

REAL = "fixtures/realworld2/files"

DTYPES = {
    "bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
    "complex64": np.complex64, "complex128": np.complex128,
}


def sample(dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    values = np.arange(n) * 7 % 11 - 3
    if np.dtype(dtype).kind == "c":
        return (values + 0.5j * values).astype(dtype).reshape(shape)
    if np.dtype(dtype).kind == "b":
        return (values % 2 == 0).reshape(shape)
    if np.dtype(dtype).kind == "u":
        values = np.abs(values)
    return values.astype(dtype).reshape(shape)


def elem_strides(arr):
    return [s // arr.itemsize for s in arr.strides] if arr.size else None


def check_array(path, arr, dtype_name):
    """Raw file, sidecar and .npy view of one array against numpy."""
    stored = arr.tobytes(order="F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C")
    assert cat(path) == stored
    meta = sidecar(path)
    assert meta["dtype"] == dtype_name
    assert meta["shape"] == list(arr.shape)
    assert meta["nbytes"] == arr.nbytes
    if arr.size > 1:
        assert meta["strides"] == elem_strides(arr)
    loaded = np.load(str(path) + ".npy")
    assert loaded.dtype == arr.dtype and loaded.shape == arr.shape
    np.testing.assert_array_equal(loaded, arr)


def write_npy(path, descr, shape, data, version=(1, 0), fortran=False, pad_to=0):
    """An .npy written by hand (for headers numpy's writer does not make)."""
    text = "{'descr': %r, 'fortran_order': %s, 'shape': %r, }" % (descr, fortran, tuple(shape))
    text = text.encode("utf-8" if version[0] == 3 else "latin-1")
    fixed = 10 if version[0] == 1 else 12
    total = max(len(text) + 1, pad_to)
    total += -(fixed + total) % 64
    header = text + b" " * (total - len(text) - 1) + b"\n"
    length = struct.pack("<H" if version[0] == 1 else "<I", len(header))
    path.write_bytes(b"\x93NUMPY" + bytes(version) + length + header + data)


def test_every_dtype_c_order(tmp):
    for name, dtype in DTYPES.items():
        arr = sample(dtype, (3, 4))
        path = tmp / f"{name}.npy"
        np.save(path, arr)
        with mounted(path) as mnt:
            paths, index = index_paths(mnt)
            assert index["format"] == "npy" and list(paths) == [name]
            check_array(paths[name], arr, name)
            assert sidecar(paths[name])["source"] == {"file": path.name, "offset": 128}
            assert metadata(mnt)["format_version"] == "1.0"


def test_fortran_order_0d_and_empty(tmp):
    cases = {
        "fortran": np.asfortranarray(sample(np.float32, (2, 3, 4))),
        "fortran_bool": np.asfortranarray(sample(np.bool_, (3, 5))),
        "scalar": np.array(3.25, dtype=np.float64),
        "empty": np.zeros((0, 3), dtype=np.int16),
        "one": np.array([7], dtype=np.uint8),
    }
    for name, arr in cases.items():
        path = tmp / f"{name}.npy"
        np.save(path, arr)
        with mounted(path) as mnt:
            check_array(mnt / name, arr, str(arr.dtype))
    with mounted(tmp / "fortran.npy") as mnt:
        assert sidecar(mnt / "fortran")["strides"] == [1, 2, 6]
        # The .npy view keeps the column-major bytes, as numpy wrote them.
        assert np.load(mnt / "fortran.npy", mmap_mode="r").flags.f_contiguous


def test_header_versions(tmp):
    arr = sample(np.float32, (5, 2))
    big = tmp / "big.npy"  # a 2.0 header over 64 KiB
    write_npy(big, "<f4", arr.shape, arr.tobytes(), version=(2, 0), pad_to=70000)
    assert len(big.read_bytes()) > 70000
    np.testing.assert_array_equal(np.load(big, allow_pickle=True), arr)
    v3 = tmp / "v3.npy"
    write_npy(v3, "<f4", arr.shape, arr.tobytes(), version=(3, 0))
    np.testing.assert_array_equal(np.load(v3), arr)
    for path, version in ((big, "2.0"), (v3, "3.0")):
        with mounted(path) as mnt:
            check_array(mnt / path.stem, arr, "float32")
            assert metadata(mnt)["format_version"] == version
    # 3.0 exists for UTF-8 field names, of structured dtypes: refused as such.
    structured = tmp / "fields.npy"
    np.save(structured, np.zeros(3, dtype=[("é€", "<f4"), ("b", "<i2")]))
    assert structured.read_bytes()[6] == 3
    refused(structured, "npy", "structured dtype")
    # The Python 2 long suffix of 1.0/2.0 headers, not of 3.0 ones.
    long2 = tmp / "long2.npy"
    text = b"{'descr': '<i2', 'fortran_order': False, 'shape': (3L,), }\n"
    long2.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text
                      + np.arange(3, dtype="<i2").tobytes())
    np.testing.assert_array_equal(np.load(long2), np.arange(3, dtype="<i2"))
    with mounted(long2) as mnt:
        check_array(mnt / "long2", np.arange(3, dtype="<i2"), "int16")


def test_npz_stored_and_compressed(tmp):
    arrays = {
        "layers/dense/kernel": sample(np.float32, (4, 3)),
        "layers/dense/bias": sample(np.float64, (3,)),
        "fortran": np.asfortranarray(sample(np.int32, (3, 2))),
        "scalar": np.array(2, dtype=np.int64),
        "empty": np.zeros((0,), dtype=np.complex64),
        "flag": sample(np.bool_, (5,)),
    }
    texts = {"label": np.array("abc"), "names": np.array([b"x", b"yz"])}
    for save, compression in ((np.savez, None), (np.savez_compressed, "deflate")):
        path = tmp / f"{save.__name__}.npz"
        save(path, **arrays, **texts)
        with mounted(path) as mnt:
            paths, index = index_paths(mnt)
            assert index["format"] == "npz"
            assert sorted(paths) == sorted(arrays)
            for name, arr in arrays.items():
                check_array(paths[name], arr, str(arr.dtype))
                meta = sidecar(paths[name])
                assert meta["zip_member"] == name + ".npy"
                assert meta.get("compression") == compression
            assert paths["layers/dense/kernel"] == mnt / "layers" / "dense" / "kernel"
            meta = metadata(mnt)
            assert meta["format_version"] == "1.0"
            assert sorted(e["name"] for e in meta["left_out"]) == sorted(texts)
            assert {e["name"]: e["descr"] for e in meta["left_out"]} == {"label": "<U3", "names": "|S2"}


def test_large_deflated_member_sequential_and_random(tmp):
    rng = np.random.default_rng(7)
    # Compressible but not trivially: small integers as float32.
    arr = rng.integers(0, 16, size=(4096, 2048)).astype(np.float32)  # 32 MiB
    path = tmp / "big.npz"
    np.savez_compressed(path, weights=arr)
    expected = arr.tobytes()
    with mounted(path) as mnt:
        raw = mnt / "weights"
        assert os.path.getsize(raw) == len(expected)
        assert cat(raw) == expected
        for block in (5000, 17, 7000, 2):  # 4 KiB blocks in the middle, back and forth
            got = subprocess.run(["dd", f"if={raw}", "bs=4096", f"skip={block}", "count=3", "status=none"],
                                 check=True, capture_output=True).stdout
            assert got == expected[block * 4096:(block + 3) * 4096]
        np.testing.assert_array_equal(np.load(str(raw) + ".npy"), arr)


def test_list_info_check_export(tmp):
    a = sample(np.float32, (3, 4))
    b = np.asfortranarray(sample(np.int16, (2, 5)))
    npy = tmp / "a.npy"
    np.save(npy, a)
    npz = tmp / "ab.npz"
    np.savez_compressed(npz, a=a, **{"sub/b": b})
    listing = json.loads(run_modelfs("--list", "--json", npz).stdout)
    assert json.dumps(listing).count('"sub/b"') >= 1
    for model in (npy, npz):
        for command in ("--list", "--info", "--check"):
            result = run_modelfs(command, model)
            assert result.returncode == 0, (command, result.stderr)
        out = tmp / (model.stem + ".safetensors")
        result = run_modelfs("--export", out, "--force", model)
        assert result.returncode == 0, result.stderr
        exported, _ = st.read_reference(out)
        assert exported["a"] == ("F32", [3, 4], a.tobytes())
        if model == npz:
            # Fortran order, deflated: exported in C order, or named in export.json.
            if "sub/b" in exported:
                assert exported["sub/b"] == ("I16", [2, 5], np.ascontiguousarray(b).tobytes())
    # A flipped byte in a deflated member: --check fails on the CRC, a read fails.
    blob = bytearray(npz.read_bytes())
    info = zipfile.ZipFile(npz).getinfo("a.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    bad = tmp / "bad.npz"
    blob[start + info.compress_size - 3] ^= 0x55
    bad.write_bytes(bytes(blob))
    check = run_modelfs("--check", bad)
    assert check.returncode == 2, check.stdout + check.stderr


def test_big_endian_arrays_are_served_little_endian(tmp):
    """Big-endian .npy files and stored .npz members: the raw file holds
    the values little-endian (swapped per read), the .npy too; the sidecar
    says the file's order. A deflated big-endian member is left out."""
    rng = np.random.default_rng(9)
    arrays = {"f4": rng.standard_normal((3, 5)).astype(">f4"), "i2": np.arange(-7, 8, dtype=">i2"),
              "c16": (np.arange(6) + 1j * np.arange(6)).astype(">c16"),
              "fortran": np.asfortranarray(rng.standard_normal((4, 3)).astype(">f8"))}
    for name, value in arrays.items():
        np.save(tmp / f"{name}.npy", value)
        with mounted(tmp / f"{name}.npy") as mnt:
            little = value.astype(value.dtype.newbyteorder("<"))
            check_array(mnt / name, little, str(little.dtype))
            assert sidecar(mnt / name)["byte_order_in_file"] == "big"
        assert run_modelfs("--check", tmp / f"{name}.npy").returncode == 0
    np.savez(tmp / "be.npz", **arrays)
    with mounted(tmp / "be.npz") as mnt:
        for name, value in arrays.items():
            check_array(mnt / name, value.astype(value.dtype.newbyteorder("<")), str(value.dtype.newbyteorder("<")))
    out = tmp / "be.safetensors"
    assert run_modelfs("--export", out, tmp / "be.npz").returncode == 0
    exported, _ = st.read_reference(out)
    assert exported["f4"] == ("F32", [3, 5], arrays["f4"].astype("<f4").tobytes())
    np.savez_compressed(tmp / "bez.npz", w=arrays["f4"], ok=np.arange(3, dtype="<i8"))
    with mounted(tmp / "bez.npz") as mnt:
        paths, _ = index_paths(mnt)
        assert sorted(paths) == ["ok"]
        left = {e["name"]: e["reason"] for e in metadata(mnt)["left_out"]}
        assert "big-endian" in left["w"] and "deflated" in left["w"]


def test_refusals(tmp):
    obj = tmp / "obj.npy"
    np.save(obj, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    refused(obj, "npy", "object array", "pickle", "never loaded")
    objz = tmp / "obj.npz"
    np.savez(objz, x=np.arange(3), y=np.array([1, "a"], dtype=object))
    refused(objz, "npz", "y.npy", "object array", "pickle", "never loaded")
    void = tmp / "void.npy"
    np.save(void, np.zeros(3, dtype="V2"))
    refused(void, "void")
    text = tmp / "text.npy"
    np.save(text, np.array(["ab", "c"]))
    refused(text, "string")
    arr = np.arange(6, dtype="<f4")
    trailing = tmp / "trailing.npy"
    np.save(trailing, arr)
    trailing.write_bytes(trailing.read_bytes() + b"xx")
    np.testing.assert_array_equal(np.load(trailing), arr)  # numpy ignores them
    refused(trailing, "2 bytes after")
    short = tmp / "short.npy"
    np.save(short, arr)
    short.write_bytes(short.read_bytes()[:-1])
    refused(short, "need 24")
    for text_header, why in (
        (b"{'descr': '<f4', 'fortran_order': False}", "lacks the key 'shape'"),
        (b"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", "unknown key"),
        (b"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", "twice"),
        (b"{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}", "True or False"),
        (b"{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}", "non-negative"),
        (b"{'descr': '<f4', 'fortran_order': False, 'shape': (3)}", "not a tuple"),
        (b"{'descr': '<f4', 'fortran_order': False, 'shape': ((3,),)}", "non-negative"),
        (b"__import__('os').system('true')", "expected '{'"),
    ):
        bad = tmp / "bad.npy"
        header = text_header + b" " * (-(10 + len(text_header) + 1) % 64) + b"\n"
        bad.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + arr.tobytes())
        refused(bad, "npy", why)


def test_real_numpy_files(shared):
    folder = shared / REAL / "numpy"
    if not folder.is_dir():
        pytest.skip(f"realworld2 fixtures not found at {folder}")
    for path in sorted(folder.iterdir()):
        expected = {}
        if path.suffix == ".npy":
            expected[path.stem] = np.load(path)
        else:
            with np.load(path) as z:
                expected = {k: z[k] for k in z.files if z[k].dtype.kind in "biufc"}
        with mounted(path) as mnt:
            paths, index = index_paths(mnt)
            assert sorted(paths) == sorted(expected), path.name
            for name, arr in expected.items():
                check_array(paths[name], arr, str(arr.dtype))
    with mounted(folder / "numpy_savez.npz") as mnt:
        assert [e["name"] for e in metadata(mnt)["left_out"]] == ["foo"]
    with mounted(folder / "mlx_cvae_mnist.npz") as mnt:
        assert len(index_paths(mnt)[0]) == 39


def test_real_hostile_files(shared):
    folder = shared / REAL / "hostile"
    if not folder.is_dir():
        pytest.skip(f"realworld2 fixtures not found at {folder}")
    refused(folder / "numpy_py3_objarr.npz", "npz", "object array", "pickle", "never loaded")
    refused(folder / "picklescan_object_array.npy", "npy", "object array", "pickle", "never loaded")


def test_remote_npy_and_npz_mount_lazily(tmp):
    """A URL of a .npy, a stored .npz and a deflated .npz (nginx): values
    as numpy's; mounting a stored .npz fetches its directory and member
    headers, not its members."""
    from remote_servers import Nginx

    www = tmp / "www"
    www.mkdir()
    big = {name: sample(np.float32, (1024, 1024)) for name in "abcd"}
    np.savez(www / "stored.npz", **big)
    np.savez_compressed(www / "deflated.npz", **big)
    fortran = np.asfortranarray(sample(np.float64, (64, 32)))
    np.save(www / "f.npy", fortran)
    server = Nginx(tmp / "nginx", www)
    try:
        cache = tmp / "cache"
        with mounted(f"{server.url}/f.npy", "-o", f"cache_dir={cache}") as mnt:
            paths, _ = index_paths(mnt)
            check_array(paths["f"], fortran, "float64")
        with mounted(f"{server.url}/stored.npz", "-o", f"cache_dir={cache}") as mnt:
            paths, _ = index_paths(mnt)
            # Mounted, the archive's directory and member headers read: a
            # small part of its 16 MiB fetched.
            fetched = sum(sent for uri, _, sent, _ in server.requests() if uri == "/stored.npz")
            assert fetched < 2 * 1024 * 1024, fetched
            np.testing.assert_array_equal(np.load(str(paths["a"]) + ".npy"), big["a"])
        with mounted(f"{server.url}/deflated.npz", "-o", f"cache_dir={cache}") as mnt:
            paths, _ = index_paths(mnt)
            for name, arr in big.items():
                np.testing.assert_array_equal(np.load(str(paths[name]) + ".npy"), arr)
    finally:
        server.stop()
