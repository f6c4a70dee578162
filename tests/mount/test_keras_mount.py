# SPDX-License-Identifier: Apache-2.0
"""HDF5 files and Keras 3 .keras archives through a real mount: files
written here by h5py (contiguous, chunked with gzip and shuffle+gzip, edge
chunks, chunks never written, compact, every numeric type, bool, bfloat16
as Keras marks it, scalars, empty datasets, deep groups, a user block), a
Keras-3-style .keras made with zipfile, --list/--info/--check/--export,
what is left out and why (strings, virtual and external datasets, soft and
external links, filters modelfs does not decode, big-endian types), the
sandbox's refusals (a truncated file, a file that is not HDF5), a remote
.h5 from nginx, and the real files of realworld2/keras (MANIFEST.md).

Oracle: h5py (Debian's, over libhdf5) reading the same files, and the
tests' own safetensors reader; never modelfs's own output."""
import errno
import io
import json
import os
import zipfile

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

import safetensors_writer as st  # noqa: E402
from conftest import cat, index_paths, metadata, mounted, one_line, run_modelfs, sidecar  # noqa: E402
from remote_servers import Nginx  # noqa: E402

REAL = "fixtures/realworld2/files/keras"
# realworld2/MANIFEST.md: "mount exact, N tensors".
REAL_COUNTS = {"hls4ml_prelu.h5": 1, "keras3_nested_container.keras": 5, "kotlindl_lstm_weights.h5": 11,
               "kotlindl_mnist_full.h5": 13, "kotlindl_toyresnet_weights.h5": 18}
NUMERIC = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
           "float64"]


def sample(dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    values = np.arange(n) * 7 % 11
    if np.dtype(dtype).kind == "b":
        return (values % 2 == 0).reshape(shape)
    return values.astype(dtype).reshape(shape)


def h5_datasets(h5):
    """{path: dataset} of every dataset h5py reaches by hard links."""
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out[name] = obj
    h5.visititems(visit)
    return out


def check_tensor(path, value, dtype_name):
    value = np.asarray(value)
    assert cat(path) == value.tobytes(), path
    meta = sidecar(path)
    assert meta["dtype"] == dtype_name, path
    assert meta["shape"] == list(value.shape), path
    loaded = np.load(str(path) + ".npy")
    assert loaded.shape == value.shape
    np.testing.assert_array_equal(loaded, value)


def write_contiguous(path, **kwargs):
    arrays = {}
    with h5py.File(path, "w", **kwargs) as f:
        for dtype in NUMERIC:
            arrays[f"types/{dtype}"] = f[f"types/{dtype}"] = sample(dtype, (3, 5))
        arrays["bool"] = f["bool"] = sample(np.bool_, (7,))
        arrays["scalar"] = f["scalar"] = np.float64(2.5)
        arrays["empty"] = f["empty"] = np.zeros((0, 4), np.float32)
        deep = "/".join(f"g{i}" for i in range(20)) + "/w"
        arrays[deep] = f[deep] = sample(np.float32, (2, 2))
        arrays["model_weights/dense/dense/kernel:0"] = f["model_weights/dense/dense/kernel:0"] = \
            sample(np.float32, (4, 3))
        f.attrs["keras_version"] = "2.4.0"
        f.attrs["backend"] = "tensorflow"
        f.attrs["model_config"] = json.dumps({"class_name": "Sequential", "config": {}}).encode()
    return arrays


def test_contiguous_datasets(tmp):
    model = tmp / "model.h5"
    arrays = write_contiguous(model)
    with h5py.File(model) as f:
        assert all(f[name].id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
                   for name in arrays if f[name].size)
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert sorted(paths) == sorted(arrays)
        for name, value in arrays.items():
            dtype = "bool" if value.dtype == np.bool_ else str(value.dtype)
            check_tensor(mnt / name, value, dtype)
        meta = metadata(mnt)
        assert meta["keras_version"] == "2.4.0" and meta["backend"] == "tensorflow"
        assert meta["model_config"]["class_name"] == "Sequential"
        assert (mnt / "model_weights" / "dense" / "dense" / "kernel:0").is_file()


def test_user_block(tmp):
    model = tmp / "ub.h5"
    arrays = write_contiguous(model, userblock_size=512)
    assert model.read_bytes()[512:520] == b"\x89HDF\r\n\x1a\n"
    with mounted(model) as mnt:
        for name, value in arrays.items():
            dtype = "bool" if value.dtype == np.bool_ else str(value.dtype)
            check_tensor(mnt / name, value, dtype)


def test_compact_and_bfloat16(tmp):
    model = tmp / "compact.h5"
    with h5py.File(model, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple((4, 6))
        ds = h5py.h5d.create(f.id, b"compact", h5py.h5t.NATIVE_INT32, space, dcpl=dcpl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, sample(np.int32, (4, 6)))
        # Keras' bfloat16 variable: a 2-byte opaque type and a dtype attribute.
        raw = np.frombuffer(np.arange(5, dtype=np.float32).tobytes(), dtype="<u2")[1::2].copy()
        f["bf16"] = raw.view("V2")
        f["bf16"].attrs["dtype"] = "bfloat16"
        f["void"] = raw.view("V2")
    with mounted(model) as mnt:
        check_tensor(mnt / "compact", sample(np.int32, (4, 6)), "int32")
        assert cat(mnt / "bf16") == raw.tobytes()
        assert sidecar(mnt / "bf16")["dtype"] == "bfloat16"
        widened = np.load(str(mnt / "bf16") + ".npy")
        np.testing.assert_array_equal(widened, np.arange(5, dtype=np.float32))
        left = {e["name"]: e["reason"] for e in metadata(mnt)["left_out"]}
        assert "opaque" in left["void"]


def write_chunked(path):
    arrays = {}
    with h5py.File(path, "w") as f:
        arrays["gzip"] = sample(np.float32, (1000,))
        f.create_dataset("gzip", data=arrays["gzip"], chunks=(100,), compression="gzip")
        arrays["shuffle_gzip"] = sample(np.int64, (40, 30))
        f.create_dataset("shuffle_gzip", data=arrays["shuffle_gzip"], chunks=(8, 7), shuffle=True,
                         compression="gzip", compression_opts=9)
        arrays["edge"] = sample(np.int16, (5, 7, 3))
        f.create_dataset("edge", data=arrays["edge"], chunks=(2, 3, 2))
        sparse = f.create_dataset("sparse", shape=(10, 10), dtype=np.float32, chunks=(4, 4), compression="gzip")
        sparse[0:4, 4:8] = 1.5
        arrays["sparse"] = sparse[()]
        arrays["bool_chunked"] = sample(np.bool_, (33,))
        f.create_dataset("bool_chunked", data=arrays["bool_chunked"], chunks=(10,), compression="gzip")
        arrays["empty_chunked"] = np.zeros((0, 3), np.float32)
        f.create_dataset("empty_chunked", shape=(0, 3), maxshape=(None, 3), dtype=np.float32, chunks=(4, 3))
    return arrays


def test_chunked_datasets(tmp):
    model = tmp / "chunked.h5"
    arrays = write_chunked(model)
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert sorted(paths) == sorted(arrays)
        for name, value in arrays.items():
            dtype = "bool" if value.dtype == np.bool_ else str(value.dtype)
            check_tensor(mnt / name, value, dtype)
        # Reads that start and end inside chunks.
        raw = arrays["shuffle_gzip"].tobytes()
        with open(mnt / "shuffle_gzip", "rb") as f:
            for at, n in ((1, 77), (555, 3000), (len(raw) - 9, 9)):
                f.seek(at)
                assert f.read(n) == raw[at:at + n]
        assert sidecar(mnt / "shuffle_gzip")["hdf5_filters"] == ["shuffle", "deflate"]


def test_keras_archive(tmp):
    weights = io.BytesIO()
    kernel, bias = sample(np.float32, (4, 3)), sample(np.float32, (3,))
    with h5py.File(weights, "w") as f:
        f["layers/dense/vars/0"] = kernel
        f["layers/dense/vars/1"] = bias
        f["layers/dense/vars"].attrs["name"] = "dense"
        f.create_group("optimizer/vars")
        f["optimizer/vars/0"] = np.int64(3)
    config = {"module": "keras", "class_name": "Sequential", "config": {"name": "seq"}}
    model = tmp / "model.keras"
    with zipfile.ZipFile(model, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.6.0", "date_saved": "2026-01-01@00:00:00"}))
        z.writestr("config.json", json.dumps(config))
        z.writestr("model.weights.h5", weights.getvalue())
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert sorted(paths) == ["layers/dense/vars/0", "layers/dense/vars/1", "optimizer/vars/0"]
        check_tensor(mnt / "layers/dense/vars/0", kernel, "float32")
        check_tensor(mnt / "layers/dense/vars/1", bias, "float32")
        check_tensor(mnt / "optimizer/vars/0", np.int64(3), "int64")
        meta = metadata(mnt)
        assert meta["format"] == "keras" and meta["keras_version"] == "3.6.0"
        assert json.loads((mnt / ".modelfs" / "config.json").read_text()) == config
        source = sidecar(mnt / "layers/dense/vars/0")["source"]
        data = model.read_bytes()
        assert data[source["offset"]:source["offset"] + kernel.nbytes] == kernel.tobytes()
    # Keras' npz weights are pickles: refused.
    npz = tmp / "npz.keras"
    with zipfile.ZipFile(npz, "w") as z:
        z.writestr("metadata.json", "{}")
        z.writestr("config.json", "{}")
        z.writestr("model.weights.npz", b"PK\x05\x06" + b"\0" * 18)
    result = run_modelfs("--list", npz)
    assert result.returncode == 2 and "pickle" in one_line(result.stderr)


def test_list_info_check_export(tmp):
    model = tmp / "model.h5"
    arrays = write_contiguous(model)
    chunked = tmp / "chunked.h5"
    write_chunked(chunked)
    for path in (model, chunked):
        for command in ("--list", "--info", "--check"):
            result = run_modelfs(command, path)
            assert result.returncode == 0, (command, result.stderr)
    listing = json.loads(run_modelfs("--list", "--json", model).stdout)
    assert "types/float32" in json.dumps(listing)
    out = tmp / "model.safetensors"
    result = run_modelfs("--export", out, "--force", model)
    assert result.returncode == 0, result.stderr
    exported, _ = st.read_reference(out)
    assert exported["types/float32"] == ("F32", [3, 5], arrays["types/float32"].tobytes())
    assert exported["types/int16"] == ("I16", [3, 5], arrays["types/int16"].tobytes())
    # A chunk's deflate stream damaged: --check finds it.
    with h5py.File(chunked) as f:
        info = f["gzip"].id.get_chunk_info(0)
    blob = bytearray(chunked.read_bytes())
    for i in range(info.byte_offset + 4, info.byte_offset + info.size - 4):
        blob[i] ^= 0x5A
    bad = tmp / "bad.h5"
    bad.write_bytes(bytes(blob))
    check = run_modelfs("--check", bad)
    assert check.returncode == 2, check.stdout + check.stderr


def test_fletcher32_chunks_are_checked_and_served(tmp):
    model = tmp / "fletcher.h5"
    values = {"alone": sample(np.float32, (100,)), "gzip": sample(np.int16, (30, 7)),
              "shuffled": sample(np.float64, (50,))}
    with h5py.File(model, "w") as f:
        f.create_dataset("alone", data=values["alone"], chunks=(10,), fletcher32=True)
        f.create_dataset("gzip", data=values["gzip"], chunks=(8, 4), compression="gzip", shuffle=True,
                         fletcher32=True)
        f.create_dataset("shuffled", data=values["shuffled"], chunks=(7,), shuffle=True, fletcher32=True)
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert sorted(paths) == sorted(values)
        for name, value in values.items():
            check_tensor(paths[name], value, str(value.dtype))
            assert sidecar(paths[name])["hdf5_filters"][-1] == "fletcher32"
            np.testing.assert_array_equal(np.load(str(paths[name]) + ".npy"), value)
    assert run_modelfs("--check", model).returncode == 0
    # One byte of a chunk changed: h5py refuses it, so do --check and a read.
    with h5py.File(model) as f:
        info = f["alone"].id.get_chunk_info(3)
    blob = bytearray(model.read_bytes())
    blob[info.byte_offset + 5] ^= 0x01
    bad = tmp / "bad.h5"
    bad.write_bytes(bytes(blob))
    with h5py.File(bad) as f, pytest.raises(OSError):
        f["alone"][()]
    check = run_modelfs("--check", bad)
    assert check.returncode == 2 and "Fletcher-32" in one_line(check.stderr), check.stderr
    with mounted(bad) as mnt:
        paths, _ = index_paths(mnt)
        for damaged in (paths["alone"], str(paths["alone"]) + ".npy"):
            with open(damaged, "rb") as f, pytest.raises(OSError) as raised:
                f.read()
            assert raised.value.errno == errno.EIO
        assert cat(paths["gzip"]) == values["gzip"].tobytes()


def test_metadata_checksum_mismatch_is_named(tmp):
    """libhdf5 checks the checksums of its version 2+ metadata itself; a
    mismatch is refused with what it says (not as a crashed sandbox)."""
    model = tmp / "latest.h5"
    with h5py.File(model, "w", libver="latest") as f:
        f["w"] = sample(np.float32, (4,))
    blob = bytearray(model.read_bytes())
    assert blob[8] >= 2  # superblock version 2 or 3: its checksum at bytes 44-47
    blob[45] ^= 0xFF
    model.write_bytes(bytes(blob))
    for command in ("--list", "--check"):
        result = run_modelfs(command, model, timeout=60)
        assert result.returncode == 2
        line = one_line(result.stderr)
        assert "checksum" in line and "signal" not in line, line


def test_big_endian_datasets_are_served_little_endian(tmp):
    """Contiguous and compact big-endian datasets: their raw files hold the
    values little-endian (swapped per read), as h5py reads them."""
    model = tmp / "be.h5"
    values = {"contiguous": sample(">f4", (6, 5)), "ints": sample(">i8", (9,)), "half": sample(">f2", (4, 4))}
    with h5py.File(model, "w") as f:
        for name, value in values.items():
            f[name] = value
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        ds = h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_U16BE, h5py.h5s.create_simple((3, 3)), dcpl=dcpl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, sample(np.uint16, (3, 3)))
    with h5py.File(model) as f:
        expected = {name: f[name][()] for name in f}
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert sorted(paths) == sorted(expected)
        for name, value in expected.items():
            little = value.astype(value.dtype.newbyteorder("<"))
            check_tensor(paths[name], little, str(little.dtype))
            assert sidecar(paths[name])["byte_order_in_file"] == "big"
            np.testing.assert_array_equal(np.load(str(paths[name]) + ".npy"), little)
    assert run_modelfs("--check", model).returncode == 0


def test_left_out_with_reasons(tmp):
    other = tmp / "other.h5"
    with h5py.File(other, "w") as f:
        f["v"] = sample(np.float32, (4,))
    model = tmp / "mixed.h5"
    with h5py.File(model, "w") as f:
        f["ok"] = sample(np.float32, (4,))
        f["text"] = b"hello"
        f["compound"] = np.zeros(3, dtype=[("a", "<i4"), ("b", "<f4")])
        f.create_dataset("big_endian", data=sample(">f4", (40,)), chunks=(10,))
        f.create_dataset("lzf", data=sample(np.float32, (100,)), chunks=(10,), compression="lzf")
        layout = h5py.VirtualLayout(shape=(4,), dtype=np.float32)
        layout[:] = h5py.VirtualSource(str(other), "v", shape=(4,))
        f.create_virtual_dataset("virtual", layout)
        f.create_dataset("external", shape=(4,), dtype=np.float32, external=[(str(tmp / "raw.bin"), 0, 16)])
        f["soft"] = h5py.SoftLink("/ok")
        f["elink"] = h5py.ExternalLink(str(other), "/v")
    (tmp / "raw.bin").write_bytes(b"\0" * 16)
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert sorted(paths) == ["ok"]
        left = {e["name"]: e["reason"] for e in metadata(mnt)["left_out"]}
        assert "string" in left["text"]
        assert "compound" in left["compound"]
        assert "big-endian" in left["big_endian"] and "chunks" in left["big_endian"]
        assert "lzf" in left["lzf"]
        assert "virtual" in left["virtual"]
        assert "external" in left["external"]
        assert "soft link" in left["soft"]
        assert "external link" in left["elink"]


def test_sandbox_refusals(tmp):
    model = tmp / "model.h5"
    write_contiguous(model)
    data = model.read_bytes()
    truncated = tmp / "truncated.h5"
    truncated.write_bytes(data[:len(data) // 2])
    result = run_modelfs("--list", truncated, timeout=60)
    assert result.returncode == 2
    assert "hdf5" in one_line(result.stderr)
    garbage = tmp / "garbage.h5"
    garbage.write_bytes(data[:8] + b"\xff" * 4000)
    result = run_modelfs("--list", garbage, timeout=60)
    assert result.returncode == 2
    assert "libhdf5" in one_line(result.stderr)


def test_remote_h5_and_keras_mount_lazily(tmp):
    """A URL of an .h5 and of a stored .keras (nginx), each with a 16 MiB
    dataset beside small ones: the sandboxed libhdf5 reads the structure
    through the parent, which fetches about that, not the big dataset,
    and a small tensor's read about its own bytes."""
    www = tmp / "www"
    www.mkdir()
    model = www / "model.h5"
    arrays = write_contiguous(model)
    big = sample(np.float32, (4096, 1024))
    with h5py.File(model, "a") as f:
        f["big"] = big
    with zipfile.ZipFile(www / "model.keras", "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.6.0"}))
        z.writestr("config.json", "{}")
        z.writestr("model.weights.h5", model.read_bytes())
    server = Nginx(tmp / "nginx", www)
    try:
        for name in ("model.h5", "model.keras"):
            server.clear_log()
            with mounted(f"{server.url}/{name}", "-o", f"cache_dir={tmp / name}") as mnt:
                at_mount = server.bytes_sent(f"/{name}")
                assert at_mount < big.nbytes // 8, (name, at_mount)
                for tensor in ("types/float32", "types/uint16", "bool"):
                    assert cat(mnt / tensor) == arrays[tensor].tobytes()
                assert server.bytes_sent(f"/{name}") - at_mount < big.nbytes // 8, name
                assert cat(mnt / "big") == big.tobytes()
    finally:
        server.stop()


def real_weights(path):
    """h5py's view of a real file: the file, or a .keras archive's member."""
    if path.suffix == ".keras":
        with zipfile.ZipFile(path) as z:
            return h5py.File(io.BytesIO(z.read("model.weights.h5")), "r")
    return h5py.File(path, "r")


@pytest.mark.parametrize("name", sorted(REAL_COUNTS))
def test_real_files(shared, name):
    path = shared / REAL / name
    if not path.exists():
        pytest.skip(f"realworld2 fixture not found at {path}")
    with real_weights(path) as h5, mounted(path) as mnt:
        expected = {n: d for n, d in h5_datasets(h5).items() if d.dtype.kind in "biuf"}
        paths, _ = index_paths(mnt)
        assert len(paths) == REAL_COUNTS[name]
        assert sorted(paths) == sorted(expected)
        for tensor, dataset in expected.items():
            value = dataset[()]
            assert cat(paths[tensor]) == np.asarray(value).tobytes(), tensor
            np.testing.assert_array_equal(np.load(str(paths[tensor]) + ".npy"), value)
        if name.endswith(".keras"):
            assert (mnt / ".modelfs" / "config.json").is_file()
        else:
            assert "keras_version" in metadata(mnt) or name.endswith("weights.h5")
    assert os.path.exists(path)
