# SPDX-License-Identifier: Apache-2.0
"""safetensors through a real mount: bytes with cat, sidecars, .npy views
with numpy, sharded checkpoints, real files, read-only behaviour.

Oracles: the arrays the test writer wrote (numpy), and for real files an
independent header parse in Python; never modelfs's own output."""
import errno
import hashlib
import json
import os
import struct
import subprocess
import threading
import time

import numpy as np
import pytest

import numeric_oracle
import safetensors_writer as st
from conftest import MODELFS, cat, index_paths, is_mounted, mounted, run_modelfs, sidecar, unmount


def rng_bytes(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def every_dtype_tensors():
    rng = np.random.default_rng(7)
    tensors = {
        "bool.t": rng.integers(0, 2, (3, 5)).astype(bool),
        "u8.t": rng.integers(0, 256, (4, 3), dtype=np.uint8),
        "i8.t": rng.integers(-128, 128, (7,), dtype=np.int8),
        "i16.t": rng.integers(-30000, 30000, (2, 3, 4), dtype=np.int16),
        "u16.t": rng.integers(0, 65535, (5,), dtype=np.uint16),
        "f16.t": rng.standard_normal((6, 4)).astype(np.float16),
        "i32.t": rng.integers(-2**31, 2**31 - 1, (3, 3), dtype=np.int32),
        "u32.t": rng.integers(0, 2**32 - 1, (4,), dtype=np.uint32),
        "f32.t": rng.standard_normal((8, 16)).astype(np.float32),
        "c64.t": (rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(np.complex64),
        "f64.t": rng.standard_normal((3, 2)).astype(np.float64),
        "i64.t": rng.integers(-2**62, 2**62, (2, 2), dtype=np.int64),
        "u64.t": rng.integers(0, 2**63, (3,), dtype=np.uint64),
        "bf16.t": st.Raw("BF16", [4, 4], rng_bytes(32, 1)),
        "f8e4m3.t": st.Raw("F8_E4M3", [3, 5], rng_bytes(15, 2)),
        "f8e5m2.t": st.Raw("F8_E5M2", [15], rng_bytes(15, 3)),
        "f8e8m0.t": st.Raw("F8_E8M0", [2, 3], rng_bytes(6, 4)),
        "f8e4m3fnuz.t": st.Raw("F8_E4M3FNUZ", [9], rng_bytes(9, 5)),
        "f8e5m2fnuz.t": st.Raw("F8_E5M2FNUZ", [9], rng_bytes(9, 6)),
        "f4.t": st.Raw("F4", [4, 6], rng_bytes(12, 7)),
        "f6e2m3.t": st.Raw("F6_E2M3", [8], rng_bytes(6, 8)),
        "f6e3m2.t": st.Raw("F6_E3M2", [4, 4], rng_bytes(12, 9)),
    }
    return tensors


def check_tensor(path, name, value):
    """The raw file, sidecar and .npy view of one tensor against what was written."""
    code, shape, data = st.entry(value)
    dtype_name, bits = st.CODES[code]
    assert cat(path) == data, name
    meta = sidecar(path)
    assert meta["name"] == name
    assert meta["dtype"] == dtype_name
    assert meta["shape"] == shape
    strides, acc = [], 1
    for dim in reversed(shape):
        strides.insert(0, acc)
        acc *= max(dim, 1)
    assert meta["strides"] == strides
    assert meta["nbytes"] == len(data)
    assert meta["byte_order"] == "little"
    assert meta["format"] == "safetensors"
    npy = str(path) + ".npy"
    if isinstance(value, st.Raw):
        assert "numpy" not in meta
        numeric_oracle.check_npy(npy, dtype_name, data, shape, meta)
    else:
        array = np.asarray(value)
        assert meta["numpy"] == array.dtype.newbyteorder("<").str.replace("=", "<")
        loaded = np.load(npy, mmap_mode="r")
        if array.ndim == 0:  # numpy memory-maps a 0-d array as shape (1,)
            assert loaded.reshape(()) == array
            loaded = np.load(npy)
        assert loaded.dtype == array.dtype and loaded.shape == array.shape, name
        np.testing.assert_array_equal(loaded, array)
        assert np.load(npy).tobytes() == data


def test_every_dtype_bytes_sidecar_and_npy(tmp):
    tensors = every_dtype_tensors()
    model = st.write(tmp / "all.safetensors", tensors, metadata={"format": "pt", "note": "every dtype"})
    with mounted(model) as mnt:
        paths, index = index_paths(mnt)
        assert set(paths) == set(tensors)
        assert index["format"] == "safetensors"
        for name, value in tensors.items():
            assert paths[name] == mnt / name.replace(".", "/")
            check_tensor(paths[name], name, value)
        meta = json.loads((mnt / ".modelfs" / "metadata.json").read_text())
        assert meta["__metadata__"] == {"format": "pt", "note": "every dtype"}


def test_scalars_and_zero_size_tensors(tmp):
    tensors = {
        "scalar": np.array(3.5, dtype=np.float64),
        "count": np.array(42, dtype=np.int64),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "empty_bf16": st.Raw("BF16", [3, 0], b""),
        "after": np.arange(6, dtype=np.int16).reshape(2, 3),
    }
    model = st.write(tmp / "edge.safetensors", tensors)
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        for name, value in tensors.items():
            check_tensor(paths[name], name, value)
        assert os.path.getsize(paths["empty"]) == 0
        assert np.load(str(paths["scalar"]) + ".npy").shape == ()


def test_null_metadata_as_mlx_writes_it(tmp):
    """MLX writes "__metadata__": null when a file has none: no metadata."""
    rng = np.random.default_rng(11)
    tensors = {"model.embed.weight": rng.standard_normal((4, 3)).astype(np.float32),
               "model.norm.weight": rng.standard_normal(3).astype(np.float16)}
    model = st.write(tmp / "mlx.safetensors", tensors, metadata=st.NULL)
    assert b'"__metadata__": null' in model.read_bytes()[:200]
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert set(paths) == set(tensors)
        for name, value in tensors.items():
            check_tensor(paths[name], name, value)
        meta = json.loads((mnt / ".modelfs" / "metadata.json").read_text())
        assert meta["__metadata__"] == {}
    # Only null: another non-object is still refused, before mounting.
    bad = st.write(tmp / "bad.safetensors", tensors, metadata=[])
    result = run_modelfs("--list", bad)
    assert result.returncode == 2
    assert "__metadata__ is not an object of strings" in result.stderr


def test_clashing_dotted_empty_and_non_ascii_names_all_reachable(tmp):
    rng = np.random.default_rng(3)
    names = ["a.b", "a.b.c", "a.b~1", "..", "x..y", ".hidden", "trailing.", "", "50%.w",
             "模型.层.0.权重", "ñandú.peso", "dir.file.json", "dir.file", "a/b.c", "w" * 300]
    tensors = {n: rng.standard_normal(i + 1).astype(np.float32) for i, n in enumerate(names)}
    model = st.write(tmp / "names.safetensors", tensors)
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert set(paths) == set(names)
        assert len(set(paths.values())) == len(names), "two tensors share a path"
        for name, value in tensors.items():
            assert paths[name].is_file(), name
            check_tensor(paths[name], name, value)
        # the documented layout for the plain cases
        assert paths["模型.层.0.权重"] == mnt / "模型/层/0/权重"
        assert paths["x..y"] == mnt / "x/%/y"
        assert (mnt / "a" / "b").is_dir() and paths["a.b.c"] == mnt / "a/b/c"


def test_flat_option_keeps_names_whole(tmp):
    tensors = {"model.layers.0.weight": np.ones((2, 2), np.float32), "x.json": np.zeros(1, np.int8),
               "x": np.ones(3, np.uint8)}
    model = st.write(tmp / "flat.safetensors", tensors)
    with mounted(model, "-o", "flat") as mnt:
        paths, _ = index_paths(mnt)
        assert paths["model.layers.0.weight"] == mnt / "model.layers.0.weight"
        assert paths["x.json"] == mnt / "x.json"
        for name, value in tensors.items():
            check_tensor(paths[name], name, value)


def test_sharded_folder_and_index_file(tmp):
    rng = np.random.default_rng(11)
    shards = {
        "model-00001-of-00003.safetensors": {"embed.weight": rng.standard_normal((10, 4)).astype(np.float32)},
        "model-00002-of-00003.safetensors": {"layers.0.w": rng.standard_normal((4, 4)).astype(np.float16),
                                             "layers.0.b": rng.standard_normal(4).astype(np.float16)},
        "model-00003-of-00003.safetensors": {"head.weight": st.Raw("BF16", [2, 4], rng_bytes(16, 12))},
    }
    folder = tmp / "ckpt"
    folder.mkdir()
    weight_map = {}
    for shard, tensors in shards.items():
        st.write(folder / shard, tensors, metadata={"format": "pt"})
        weight_map.update({name: shard for name in tensors})
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 248}, "weight_map": weight_map}))
    for source in (folder, index):
        with mounted(source) as mnt:
            paths, listing = index_paths(mnt)
            assert set(paths) == set(weight_map)
            for shard, tensors in shards.items():
                for name, value in tensors.items():
                    check_tensor(paths[name], name, value)
                    assert sidecar(paths[name])["source"]["file"] == shard
            meta = json.loads((mnt / ".modelfs" / "metadata.json").read_text())
            assert meta["index"]["total_size"] == 248
            assert set(listing["files"]) >= set(shards)


def test_real_safetensors_files(shared):
    files = sorted((shared / "fixtures" / "real" / "safetensors").glob("*.safetensors"))
    assert files, "no real safetensors fixtures"
    for model in files:
        expected, metadata = st.read_reference(model)
        with mounted(model) as mnt:
            paths, _ = index_paths(mnt)
            assert set(paths) == set(expected), model.name
            for name, (code, shape, data) in expected.items():
                raw = cat(paths[name])
                assert hashlib.sha256(raw).digest() == hashlib.sha256(data).digest(), (model.name, name)
                meta = sidecar(paths[name])
                assert (meta["dtype"], meta["shape"]) == (st.CODES[code][0], shape)
                npy = str(paths[name]) + ".npy"
                if code in ("BF16", "F8_E4M3", "F8_E5M2"):
                    numeric_oracle.check_npy(npy, st.CODES[code][0], data, shape, meta)
                else:
                    assert np.load(npy, mmap_mode="r").tobytes() == data
            meta = json.loads((mnt / ".modelfs" / "metadata.json").read_text())
            assert meta["__metadata__"] == (metadata or {})


def test_shell_tools_od_dd_sha256sum(tmp):
    values = np.arange(1024, dtype=np.float32)
    model = st.write(tmp / "m.safetensors", {"layer.weight": values})
    with mounted(model) as mnt:
        path = mnt / "layer" / "weight"
        od = subprocess.run(["od", "-A", "n", "-t", "f4", "-N", "16", str(path)],
                            check=True, capture_output=True, text=True).stdout.split()
        assert [float(x) for x in od] == [0.0, 1.0, 2.0, 3.0]
        dd = subprocess.run(["dd", f"if={path}", "bs=4", "skip=100", "count=3", "status=none"],
                            check=True, capture_output=True).stdout
        assert np.frombuffer(dd, np.float32).tolist() == [100.0, 101.0, 102.0]
        digest = subprocess.run(["sha256sum", str(path)], check=True, capture_output=True,
                                text=True).stdout.split()[0]
        assert digest == hashlib.sha256(values.tobytes()).hexdigest()


def test_xattrs_name_dtype_and_shape_with_o_xattr(tmp):
    model = st.write(tmp / "m.safetensors", {"w": np.zeros((3, 7), np.float16)})
    with mounted(model, "-o", "xattr") as mnt:
        for path in (mnt / "w", mnt / "w.npy"):
            assert os.getxattr(path, "user.modelfs.dtype") == b"float16"
            assert os.getxattr(path, "user.modelfs.shape") == b"[3,7]"
            assert set(os.listxattr(path)) == {"user.modelfs.dtype", "user.modelfs.shape"}
        with pytest.raises(OSError):
            os.getxattr(mnt / "w", "user.other")


def test_no_xattrs_by_default_and_ls_l_still_works(tmp):
    model = st.write(tmp / "m.safetensors", {"w": np.zeros((3, 7), np.float16)})
    with mounted(model) as mnt:
        with pytest.raises(OSError) as unsupported:
            os.getxattr(mnt / "w", "user.modelfs.dtype")
        assert unsupported.value.errno == errno.EOPNOTSUPP
        listing = subprocess.run(["ls", "-l", str(mnt)], check=True, capture_output=True,
                                 text=True).stdout
        assert "-r--r--r--" in listing and " w.npy" in listing


def test_debug_option_mounts_in_the_foreground_and_logs_requests(tmp):
    model = st.write(tmp / "m.safetensors", {"w": np.arange(4, dtype=np.float32)})
    mnt = tmp / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([str(MODELFS), "-d", str(model), str(mnt)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(500):
            if is_mounted(mnt) or proc.poll() is not None:
                break
            time.sleep(0.01)
        assert is_mounted(mnt), f"not mounted; exit {proc.poll()}"
        assert np.fromfile(mnt / "w", np.float32).tolist() == [0, 1, 2, 3]
    finally:
        unmount(mnt)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "opcode: READ" in err


def test_every_write_is_refused_with_erofs(tmp):
    model = st.write(tmp / "m.safetensors", {"a.w": np.zeros(4, np.float32)})
    with mounted(model) as mnt:
        target = mnt / "a" / "w"
        attempts = [
            lambda: open(target, "r+b"),
            lambda: open(target, "wb"),
            lambda: open(mnt / "new", "w"),
            lambda: os.mkdir(mnt / "d"),
            lambda: os.unlink(target),
            lambda: os.rmdir(mnt / "a"),
            lambda: os.rename(target, mnt / "a" / "v"),
            lambda: os.chmod(target, 0o644),
            lambda: os.truncate(target, 0),
            lambda: os.symlink("x", mnt / "link"),
            lambda: os.link(target, mnt / "hard"),
            lambda: os.setxattr(target, "user.x", b"1"),
            lambda: os.utime(target, (0, 0)),
        ]
        for attempt in attempts:
            with pytest.raises(OSError) as info:
                attempt()
            assert info.value.errno == errno.EROFS, info.value
        assert cat(target) == np.zeros(4, np.float32).tobytes()
        mode = os.stat(target).st_mode & 0o777
        assert mode == 0o444 and os.stat(mnt / "a").st_mode & 0o777 == 0o555
        assert os.statvfs(mnt).f_flag & os.ST_RDONLY


def test_times_are_the_model_files_mtime(tmp):
    model = st.write(tmp / "m.safetensors", {"w": np.zeros(2, np.float32)})
    os.utime(model, (1_600_000_000, 1_600_000_000))
    with mounted(model) as mnt:
        assert os.stat(mnt / "w").st_mtime == 1_600_000_000
        assert os.stat(mnt).st_mtime == 1_600_000_000


def test_concurrent_readers_see_exact_bytes(tmp):
    rng = np.random.default_rng(5)
    tensors = {f"layers.{i}.w": rng.standard_normal((256, 256)).astype(np.float32) for i in range(8)}
    model = st.write(tmp / "big.safetensors", tensors)
    errors = []
    with mounted(model) as mnt:
        def reader(i):
            try:
                for round_ in range(3):
                    name = f"layers.{(i + round_) % 8}.w"
                    with open(mnt / name.replace(".", "/"), "rb") as f:
                        f.seek(4096 * i)
                        chunk = f.read(65536)
                    assert chunk == tensors[name].tobytes()[4096 * i:4096 * i + 65536]
                    assert np.array_equal(np.load(str(mnt / name.replace(".", "/")) + ".npy"), tensors[name])
            except Exception as e:  # collected and reported by the main thread
                errors.append(e)
        threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors


@pytest.mark.parametrize("options", [(), ("-o", "noprefetch")], ids=["read-ahead", "noprefetch"])
def test_large_tensors_read_sequentially_exact_with_and_without_read_ahead(tmp, options):
    """Tensors of tens of MiB, where the daemon reads ahead of sequential
    readers from a thread of its own: whole reads, two readers at once, a
    reader that stops early and starts again, and np.memmap, all exact."""
    rng = np.random.default_rng(11)
    tensors = {"big.a": rng.standard_normal((10, 1024, 1024)).astype(np.float32),  # 40 MiB
               "big.b": rng.integers(0, 2**31, (6, 1024, 1024), dtype=np.int32)}  # 24 MiB
    model = st.write(tmp / "large.safetensors", tensors)
    digests = {name: hashlib.sha256(array.tobytes()).hexdigest() for name, array in tensors.items()}
    with mounted(model, *options) as mnt:
        paths = {name: mnt / name.replace(".", "/") for name in tensors}
        first_5_mib = subprocess.run(["head", "-c", str(5 << 20), str(paths["big.a"])], check=True,
                                     capture_output=True).stdout
        assert first_5_mib == tensors["big.a"].tobytes()[:5 << 20]
        results = {}

        def whole(name):
            out = subprocess.run(["sha256sum", str(paths[name])], capture_output=True, text=True)
            results[name] = out.stdout.split()[0] if out.returncode == 0 else out.stderr

        readers = [threading.Thread(target=whole, args=(name,)) for name in tensors]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        assert results == digests
        for name, array in tensors.items():
            mapped = np.memmap(paths[name], dtype=array.dtype, mode="r", shape=array.shape)
            assert np.array_equal(mapped, array)
            del mapped


def test_list_and_json_without_mounting(tmp):
    tensors = {"b.w": np.zeros((2, 3), np.float32), "a.s": np.array(1, np.int64)}
    model = st.write(tmp / "m.safetensors", tensors)
    table = run_modelfs("--list", model)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "DTYPE", "SHAPE", "BYTES", "SIZE"]
    assert lines[1].split() == ["b.w", "float32", "[2,", "3]", "24", "24", "B"]
    assert lines[2].split() == ["a.s", "int64", "[]", "8", "8", "B"]
    assert "2 tensors" in table.stdout
    listing = run_modelfs("--list", "--json", model)
    assert listing.returncode == 0, listing.stderr
    doc = json.loads(listing.stdout)
    assert [(t["name"], t["dtype"], t["shape"], t["nbytes"]) for t in doc["tensors"]] == [
        ("b.w", "float32", [2, 3], 24), ("a.s", "int64", [], 8)]


def test_100000_tensors_mount_under_the_default_budget(tmp):
    # A large MoE checkpoint's shape (DeepSeek-V3 has ~91 000 tensors): 100 000
    # tensors of 16 float32 under 1000 layers of 100 experts, an 11 MB header.
    # Reading it and building its tree must fit the default budget (64 MiB + 8
    # bytes per header byte, README "Limits"), no -o max_parse_mb.
    count = 100_000
    values = np.random.default_rng(32).standard_normal((count, 16), dtype=np.float32)
    names = [f"model.layers.{i // 100}.mlp.experts.{i % 100}.weight" for i in range(count)]
    model = st.write(tmp / "moe.safetensors", dict(zip(names, values)))
    with mounted(model) as mnt:
        index = json.loads((mnt / ".modelfs" / "index.json").read_text())
        assert len(index["tensors"]) == count
        paths = {t["name"]: t["path"] for t in index["tensors"]}
        assert paths[names[0]] == "model/layers/0/mlp/experts/0/weight"
        assert sorted(os.listdir(mnt / "model" / "layers")) == sorted(str(i) for i in range(1000))
        assert sorted(os.listdir(mnt / "model/layers/999/mlp/experts/99")) == [
            "weight", "weight.json", "weight.npy"]
        for i in list(range(0, count, 997)) + [count - 1]:
            path = mnt / paths[names[i]]
            assert cat(path) == values[i].tobytes(), names[i]
            assert np.array_equal(np.load(str(path) + ".npy"), values[i]), names[i]
            assert sidecar(path)["shape"] == [16]
        # The export holds every tensor, in the header's order.
        export = (mnt / ".modelfs" / "model.safetensors").read_bytes()
        (length,) = struct.unpack("<Q", export[:8])
        header = json.loads(export[8:8 + length])
        assert len(header) == count + 1  # and __metadata__
        begin, end = header[names[12345]]["data_offsets"]
        assert export[8 + length + begin:8 + length + end] == values[12345].tobytes()
