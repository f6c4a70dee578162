# SPDX-License-Identifier: Apache-2.0
"""TensorFlow.js models (model.json + weight shards) through a real mount:
every manifest dtype, groups cut into small shards so that weights span two
and three shards, uint8/uint16/float16 quantization (float32 and int32
originals), string weights, random reads across shard boundaries,
--list/--info/--check/--export, the folder and URL forms, refusals, and the
real files of realworld2 (tfjs/, per its MANIFEST.md).

Oracle: the test's own writer, which follows TensorFlow.js's
write_weights.py and quantization.py (docs/formats.md, "TensorFlow.js"),
and numpy decoding the bytes it wrote as tfjs-core's decodeWeight does;
never modelfs's own output."""
import json
import os
import random
import struct
import subprocess

import numpy as np
import pytest

import safetensors_writer as st
from conftest import cat, index_paths, metadata, mounted, refused, run_modelfs, sidecar

REAL = "fixtures/realworld2/files/tfjs"
# Tensor counts per realworld2's MANIFEST.md ("mount exact, N tensors").
REAL_COUNTS = {"tfjs_dense_model": 2, "tfjs_graph_model": 1, "tfjs_layers_model": 4, "tfjs_rn59_graph_model": 2}

PLAIN = {"float32": np.float32, "int32": np.int32, "bool": np.bool_, "complex64": np.complex64}


# -- the writer ------------------------------------------------------------------

def quantize(values, qdtype):
    """quantization.py's affine quantization: (bytes, min, scale)."""
    data = np.asarray(values, dtype=np.float64)
    qmax = np.iinfo(qdtype).max
    lo, hi = float(data.min()), float(data.max())
    if lo == hi:
        scale, lo = 1.0, lo
    else:
        scale = (hi - lo) / qmax
        if lo <= 0 <= hi:  # nudged so that 0 is exactly representable
            lo = -round(-lo / scale) * scale
    q = np.clip(np.round((data - lo) / scale), 0, qmax).astype(qdtype)
    return q.tobytes(), lo, scale


def string_bytes(elements):
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


class Weight:
    """One manifest entry: its entry, its stored bytes, and its values as
    tfjs-core decodes them (the .npy's)."""

    def __init__(self, name, values, dtype=None, quantization=None):
        self.name = name
        if dtype == "string":
            self.dtype = "string"
            self.shape = list(values.shape)
            self.elements = [bytes(e) for e in values.reshape(-1)]
            self.stored = string_bytes(self.elements)
            self.values = None
            self.entry = {"name": name, "shape": self.shape, "dtype": "string"}
            self.quantization = None
            return
        values = np.asarray(values)
        self.dtype = dtype or str(values.dtype)
        self.shape = list(values.shape)
        self.entry = {"name": name, "shape": self.shape, "dtype": self.dtype}
        if quantization is None:
            arr = values.astype(PLAIN[self.dtype])
            self.stored, self.values = arr.tobytes(), arr
        elif quantization == "float16":
            half = values.astype(np.float16)
            self.stored, self.values = half.tobytes(), half.astype(np.float32)
            self.entry["quantization"] = {"dtype": "float16", "original_dtype": self.dtype}
        else:
            qdtype = np.uint8 if quantization == "uint8" else np.uint16
            self.stored, lo, scale = quantize(values, qdtype)
            q = np.frombuffer(self.stored, dtype=qdtype).reshape(self.shape).astype(np.float64)
            dequantized = q * scale + lo  # in float64, as JavaScript
            if self.dtype == "int32":  # Math.round: half up
                self.values = np.floor(dequantized + 0.5).astype(np.int32)
            else:
                self.values = dequantized.astype(np.float32)
            self.entry["quantization"] = {"dtype": quantization, "min": lo, "scale": scale,
                                          "original_dtype": self.dtype}
        self.quantization = quantization


def write_model(folder, groups, shard_size=4 * 1024 * 1024, extra=None, name="model.json"):
    """model.json and its shards as write_weights.py lays them out: each
    group's weights concatenated in order, cut into `shard_size` pieces
    named group{g}-shard{i}of{n}.bin. Returns {name: (group stream, offset)}."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest, placed = [], {}
    for g, weights in enumerate(groups, 1):
        stream, offset = b"", {}
        for w in weights:
            offset[w.name] = len(stream)
            stream += w.stored
        count = max(1, -(-len(stream) // shard_size))
        paths = []
        for i in range(count):
            path = f"group{g}-shard{i + 1}of{count}.bin"
            (folder / path).write_bytes(stream[i * shard_size:(i + 1) * shard_size])
            paths.append(path)
        manifest.append({"paths": paths, "weights": [w.entry for w in weights]})
        for w in weights:
            placed[w.name] = (stream, offset[w.name])
    model = {"format": "layers-model", "generatedBy": "keras v2.15.0", "convertedBy": "TensorFlow.js Converter v4.17.0",
             "modelTopology": {"class_name": "Sequential", "config": {"name": "seq", "layers": [{"class_name": "Dense"}]}},
             "weightsManifest": manifest}
    model.update(extra or {})
    (folder / name).write_text(json.dumps(model))
    return folder / name


def sample_weights():
    rng = np.random.default_rng(7)
    return [
        Weight("dense/kernel", rng.standard_normal((7, 5)).astype(np.float32)),  # spans shards
        Weight("dense/bias", np.arange(5, dtype=np.float32) - 2),
        Weight("counts", np.arange(-6, 6, dtype=np.int32).reshape(3, 4)),
        Weight("mask", np.array([True, False, True, True, False])),
        Weight("phase", (np.arange(6) + 0.5j * np.arange(6)).astype(np.complex64)),
        Weight("big/three_shards", rng.standard_normal(60).astype(np.float32)),  # 240 bytes: 3+ shards of 96
        Weight("q8/kernel", rng.standard_normal((4, 9)) * 3, "float32", "uint8"),
        Weight("q16/kernel", rng.uniform(0.5, 4.0, (3, 7)), "float32", "uint16"),
        Weight("q8/ints", np.arange(-40, 60, 7), "int32", "uint8"),
        Weight("half", rng.standard_normal((2, 11)), "float32", "float16"),
        Weight("vocab", np.array([b"hello", b"", "na\u00efve".encode(), b"\xff\xfebytes"], dtype=object),
               "string"),
        Weight("scalar", np.array(3.25, dtype=np.float32)),
        Weight("empty", np.zeros((0, 3), dtype=np.float32)),
    ]


def decoded_strings(raw):
    """The JSON Lines of a string tensor, back to bytes."""
    lines = raw.decode("utf-8").split("\n")
    assert lines[-1] == ""
    return [json.loads(line).encode("utf-8", "surrogateescape") for line in lines[:-1]]


def check_weight(path, w):
    meta = sidecar(path)
    assert meta["shape"] == w.shape, w.name
    if w.dtype == "string":
        assert meta["dtype"] == "string"
        assert decoded_strings(cat(path)) == w.elements
        return
    stored_dtype = w.quantization if w.quantization else w.dtype
    assert meta["dtype"] == stored_dtype, w.name
    assert meta["nbytes"] == len(w.stored), w.name
    assert cat(path) == w.stored, w.name
    loaded = np.load(str(path) + ".npy")
    assert loaded.shape == tuple(w.shape), w.name
    assert loaded.dtype == w.values.dtype, w.name
    np.testing.assert_array_equal(loaded, w.values, err_msg=w.name)
    q = w.quantization
    if q in ("uint8", "uint16"):
        typed = meta["quantization"]
        assert typed["qscheme"] == "min_scale_affine"
        assert typed["scale"] == w.entry["quantization"]["scale"]
        assert typed["min"] == w.entry["quantization"]["min"]
        assert typed["values_dtype"] == w.dtype
    elif q == "float16":
        assert meta["quantization"]["qscheme"] == "widened"


# -- mounts ----------------------------------------------------------------------

SHARD = 96  # bytes: weights span two and three shards


def test_every_dtype_sharded_and_quantized(tmp):
    weights = sample_weights()
    model = write_model(tmp / "m", [weights[:6], weights[6:]], shard_size=SHARD)
    placed_shards = sorted(p.name for p in (tmp / "m").glob("group1-*"))
    assert len(placed_shards) >= 3
    # The writer's layout puts dense/kernel (140 bytes) over two shards and
    # big/three_shards (240 bytes) over three or more.
    with mounted(model) as mnt:
        paths, index = index_paths(mnt)
        assert sorted(paths) == sorted(w.name for w in weights)
        assert paths["dense/kernel"] == mnt / "dense" / "kernel"
        for w in weights:
            check_weight(paths[w.name], w)
        meta = metadata(mnt)
        assert meta["format"] == "layers-model"
        assert meta["convertedBy"].startswith("TensorFlow.js Converter")
        assert "weightsManifest" not in meta and "modelTopology" not in meta
        topology = json.loads((mnt / ".modelfs" / "model_topology.json").read_text())
        assert topology["class_name"] == "Sequential"


def test_folder_form_and_spanning_reads(tmp):
    rng = np.random.default_rng(3)
    weights = [Weight("a", rng.standard_normal(50).astype(np.float32)),
               Weight("b", rng.standard_normal((30, 10)).astype(np.float32)),
               Weight("c", rng.standard_normal(77).astype(np.float32))]
    write_model(tmp / "m", [weights], shard_size=1000)
    stream = b"".join(w.stored for w in weights)
    boundaries = list(range(1000, len(stream), 1000))
    with mounted(tmp / "m") as mnt:
        paths, _ = index_paths(mnt)
        for w in weights:
            check_weight(paths[w.name], w)
        # Reads that start before a shard boundary and end after it.
        raw = paths["b"]
        start_b = len(weights[0].stored)
        fd = os.open(raw, os.O_RDONLY)
        try:
            r = random.Random(11)
            for _ in range(200):
                at = max(0, r.choice(boundaries) - start_b - r.randrange(64))
                if at >= len(weights[1].stored):
                    continue
                n = r.randrange(1, 300)
                assert os.pread(fd, n, at) == weights[1].stored[at:at + n]
        finally:
            os.close(fd)
        subprocess.run(["cmp", str(raw), "-"], input=weights[1].stored, check=True)


def test_list_info_check_export(tmp):
    weights = sample_weights()
    model = write_model(tmp / "m", [weights], shard_size=SHARD)
    listing = run_modelfs("--list", "--json", model)
    assert listing.returncode == 0, listing.stderr
    assert "big/three_shards" in listing.stdout
    for command in ("--list", "--info", "--check"):
        result = run_modelfs(command, model)
        assert result.returncode == 0, (command, result.stderr)
    out = tmp / "out.safetensors"
    result = run_modelfs("--export", out, "--force", model)
    assert result.returncode == 0, result.stderr
    exported, _ = st.read_reference(out)
    for w in weights:
        if w.dtype == "float32" and w.quantization is None:
            assert exported[w.name] == ("F32", w.shape, w.stored), w.name
    # A shard one byte short: refused (its weights need the byte).
    shard = sorted((tmp / "m").glob("group1-shard2of*.bin"))[0]
    shard.write_bytes(shard.read_bytes()[:-1])
    check = run_modelfs("--check", model)
    assert check.returncode == 2 and "TensorFlow.js" in check.stderr


def test_real_tfjs_models(shared):
    folder = shared / REAL
    if not folder.is_dir():
        pytest.skip(f"realworld2 fixtures not found at {folder}")
    for name, count in REAL_COUNTS.items():
        model = folder / name / "model.json"
        manifest = json.loads(model.read_text())["weightsManifest"]
        expected = {}
        for group in manifest:
            stream = b"".join((folder / name / p).read_bytes() for p in group["paths"])
            at = 0
            for entry in group["weights"]:
                assert entry["dtype"] == "float32" and "quantization" not in entry
                n = int(np.prod(entry["shape"])) * 4
                expected[entry["name"]] = np.frombuffer(stream[at:at + n], "<f4").reshape(entry["shape"])
                at += n
        assert len(expected) == count
        for source in (model, folder / name):
            with mounted(source) as mnt:
                paths, _ = index_paths(mnt)
                assert sorted(paths) == sorted(expected), name
                for tensor, values in expected.items():
                    assert cat(paths[tensor]) == values.tobytes(), (name, tensor)
                    np.testing.assert_array_equal(np.load(str(paths[tensor]) + ".npy"), values)
                assert metadata(mnt)["generatedBy"]


# -- refusals --------------------------------------------------------------------

def plain_model(folder, **changes):
    w = [Weight("a", np.arange(10, dtype=np.float32)), Weight("b", np.arange(6, dtype=np.int32))]
    model = write_model(folder, [w], shard_size=24)
    doc = json.loads(model.read_text())
    for key, value in changes.items():
        doc[key] = value
    model.write_text(json.dumps(doc))
    return model, doc


def edit(model, change):
    doc = json.loads(model.read_text())
    change(doc)
    model.write_text(json.dumps(doc))


def test_refusals(tmp):
    model, doc = plain_model(tmp / "r")
    paths = doc["weightsManifest"][0]["paths"]
    assert len(paths) == 3

    def case(change, *words):
        edit(model, change)
        try:
            return refused(model, "TensorFlow.js", *words)
        finally:
            model.write_text(json.dumps(doc))

    w0 = lambda d: d["weightsManifest"][0]["weights"][0]  # noqa: E731
    case(lambda d: d["weightsManifest"][0]["paths"].append(paths[0]), "again", "twice")
    case(lambda d: d["weightsManifest"][0]["paths"].pop(), "need", "hold 48")
    case(lambda d: d["weightsManifest"][0]["weights"].pop(), "left over")
    case(lambda d: d["weightsManifest"][0]["paths"].__setitem__(1, "missing.bin"), "missing.bin")
    case(lambda d: d["weightsManifest"][0]["paths"].__setitem__(1, "../outside.bin"), "../outside.bin")
    case(lambda d: w0(d).__setitem__("shape", [-10]), "negative")
    case(lambda d: w0(d).__setitem__("shape", [2.5, 4]), "not an integer")
    case(lambda d: w0(d).__setitem__("shape", [1 << 62, 1 << 62]), "overflows")
    case(lambda d: w0(d).__setitem__("dtype", "float64"), "unknown dtype")
    case(lambda d: w0(d).__setitem__("quantization", {"dtype": "int4"}), "unknown quantization")
    case(lambda d: w0(d).__setitem__("quantization", {"dtype": "uint8", "min": 0}), "scale")
    case(lambda d: d["weightsManifest"][0]["weights"][1].__setitem__("name", "a"), "another weight")
    case(lambda d: d.__setitem__("weightsManifest", {}), "weightsManifest")
    case(lambda d: w0(d).__setitem__("dtype", "string"), "runs past")
    # A shard shorter than the manifest says.
    shard = tmp / "r" / paths[2]
    full = shard.read_bytes()
    shard.write_bytes(full[:-4])
    refused(model, "TensorFlow.js", "hold 60")
    shard.write_bytes(full)
    # A model.json that does not parse.
    model.write_text('{"modelTopology": {"class_name": "Sequential", ')
    refused(model, "TensorFlow.js", "JSON")
    model.write_text(json.dumps(doc))
    assert run_modelfs("--list", model).returncode == 0


# -- remote ----------------------------------------------------------------------

def test_remote_model_json(tmp, nginx):
    weights = sample_weights()
    write_model(nginx.root / "m", [weights], shard_size=SHARD)
    cache = tmp / "cache"
    for url in (f"{nginx.url}/m/model.json", f"{nginx.url}/m/"):
        with mounted(url, "-o", f"cache_dir={cache}") as mnt:
            paths, _ = index_paths(mnt)
            assert sorted(paths) == sorted(w.name for w in weights)
            for w in weights:
                check_weight(paths[w.name], w)


def test_remote_model_json_mounts_lazily(tmp, nginx):
    """A 16 MiB weight in shards of 4 MiB beside a small one: a mount
    fetches the manifest and little of the shards, a read of the small
    weight about its own bytes."""
    big = Weight("big", np.random.default_rng(3).standard_normal((4096, 1024)).astype(np.float32))
    small = Weight("small", np.arange(8, dtype=np.float32))
    write_model(nginx.root / "lazy", [[small, big]])
    nginx.clear_log()
    with mounted(f"{nginx.url}/lazy/model.json", "-o", f"cache_dir={tmp / 'lazy-cache'}") as mnt:
        at_mount = nginx.bytes_sent("/lazy/")
        assert at_mount < big.values.nbytes // 8, at_mount
        paths, _ = index_paths(mnt)
        check_weight(paths["small"], small)
        assert nginx.bytes_sent("/lazy/") - at_mount < big.values.nbytes // 8
        check_weight(paths["big"], big)
