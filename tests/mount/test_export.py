# SPDX-License-Identifier: Apache-2.0
"""The export file: .modelfs/model.safetensors and `modelfs --export`.

Every fixture of every format is exported both ways; the file is read by a
header reader written here that checks the reference rules one by one,
every tensor's bytes are compared with an independent oracle in C order
(torch, the onnx library, expected.json, the GGUF tests' own reader, a PT2
archive's members by zipfile), and no tensor goes without one; and
the exported file, mounted again, must show what the original mount shows.
"""
import contextlib
import hashlib
import http.server
import io
import json
import math
import os
import pathlib
import re
import signal
import struct
import subprocess
import threading
import time
import zipfile

import numpy as np
import onnx
import pytest
import torch

import gguf_writer as gw
import numeric_oracle
import safetensors_writer as st
from conftest import MODELFS, SHARED, cat, index_paths, metadata, mounted, run_modelfs, sidecar
from test_gguf_mount import every_type_tensors, oracle_read
from test_onnx_mount import collect, expected_bytes
from test_pt2_mount import LayeredWriter
from test_torch_mount import MLP, flatten, oracle_for, raw_values, walk_strided

# Bits of an element of each safetensors dtype, and modelfs's name of it.
BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
        "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
        "C64": 64, "F64": 64, "I64": 64, "U64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
MODELFS_DTYPE = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "F8_E5M2": "float8_e5m2",
                 "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
                 "F8_E5M2FNUZ": "float8_e5m2fnuz", "I16": "int16", "U16": "uint16", "F16": "float16",
                 "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64",
                 "F64": "float64", "I64": "int64", "U64": "uint64", "F4": "float4_e2m1",
                 "F6_E2M3": "float6_e2m3fn", "F6_E3M2": "float6_e3m2fn"}
TORCH_FORMATS = {"pytorch", "torchscript", "pt2"}


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), "a key twice in the header"
    return dict(pairs)


def parse_export(data):
    """The reference reader's rules, each checked: returns ({name: (dtype,
    shape, bytes)} in header order, __metadata__)."""
    assert len(data) >= 8
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0, "the data must start 8-byte aligned"
    assert n <= 100_000_000 and 8 + n <= len(data)
    text = data[8:8 + n]
    body = text.rstrip(b" ")
    assert body.startswith(b"{") and body.endswith(b"}"), "padding is spaces after the JSON"
    header = json.loads(text.decode("utf-8"), object_pairs_hook=no_duplicates)
    meta = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
    out, expect = {}, 0
    for name, entry in header.items():
        assert set(entry) == {"dtype", "shape", "data_offsets"}, name
        assert entry["dtype"] in BITS, entry["dtype"]
        assert all(isinstance(d, int) and d >= 0 for d in entry["shape"])
        begin, end = entry["data_offsets"]
        assert begin == expect, f"{name}: offsets contiguous from 0 in header order (no gap, no overlap)"
        bits = math.prod(entry["shape"]) * BITS[entry["dtype"]]
        assert bits % 8 == 0 and end - begin == bits // 8, f"{name}: size of its dtype and shape"
        out[name] = (entry["dtype"], entry["shape"], data[8 + n + begin:8 + n + end])
        expect = end
    assert 8 + n + expect == len(data), "nothing after the last tensor"
    return out, meta


def c_order(path, meta):
    """An original mount's tensor in C order (its raw file walked by strides
    where they are not C order)."""
    raw = path.read_bytes()
    strides, acc = [], 1
    for dim in reversed(meta["shape"]):
        strides.insert(0, acc)
        acc *= max(dim, 1)
    if meta.get("strides", strides) == strides:
        return raw
    return walk_strided(raw, meta).tobytes()


def export_both_ways(model, tmp, *options):
    """The export by `--export` and by `cp` from the mount (equal, byte for
    byte), the mount's index and export.json, and the original mount's
    tensors {name: (meta, C-order bytes)}."""
    out = tmp / "exported.safetensors"
    if out.exists():
        out.unlink()
    result = run_modelfs("--export", out, *options, model)
    assert result.returncode == 0, result.stderr
    copied = tmp / "copied.safetensors"
    with mounted(model, *options) as mnt:
        subprocess.run(["cp", str(mnt / ".modelfs" / "model.safetensors"), str(copied)], check=True)
        assert subprocess.run(["cmp", str(out), str(copied)]).returncode == 0
        report = json.loads((mnt / ".modelfs" / "export.json").read_text())
        paths, index = index_paths(mnt)
        original = {}
        for t in index["tensors"]:
            if t["name"] in original:
                continue  # the export keeps the first of a name
            meta = sidecar(mnt / t["path"])
            original[t["name"]] = (meta, c_order(mnt / t["path"], meta))
    return out, report, index, original


def check_export(model, tmp, oracle, *options):
    """Everything the export must be, for one model; returns its tensors."""
    out, report, index, original = export_both_ways(model, tmp, *options)
    data = out.read_bytes()
    tensors, meta = parse_export(data)
    # __metadata__: format for torch-origin files, then the source.
    fmt = index["format"]
    assert meta["source"] == index["files"][0] and meta["source_format"] == fmt
    if fmt in TORCH_FORMATS:
        assert meta["format"] == "pt"
    assert set(meta) <= {"format", "source", "source_format"}
    # Catalog order; every tensor written or listed with a reason.
    names = [t["name"] for t in index["tensors"]]
    first = list(dict.fromkeys(names))
    assert [n for n in first if n in tensors] == list(tensors)
    left_out, converted = report["left_out"], report["converted"]
    assert set(tensors) | set(left_out) == set(first), model
    # A repeated name (ONNX subgraphs may repeat one) is written once, its
    # later tensors listed; no other tensor is both written and left out.
    assert all(left_out[n].startswith("a second tensor") for n in set(tensors) & set(left_out))
    assert all(isinstance(why, str) and why for why in left_out.values())
    assert report["tensors"] == len(tensors)
    for name, (dtype, shape, raw) in tensors.items():
        side, want = original[name]
        assert shape == side["shape"], name
        if name in converted:
            continue
        assert MODELFS_DTYPE[dtype] == side["dtype"], name
        assert raw == want, f"{name}: differs from the mount's bytes in C order"
    # The independent oracle.
    checked = 0
    for name, expected in oracle.items():
        if name in tensors and name not in converted:
            got = tensors[name][2]
            ok = got in expected if isinstance(expected, (set, list)) else got == expected
            assert ok, f"{model}: {name} differs from the oracle"
            checked += 1
    # Mounted again: the same names, dtypes, shapes and bytes.
    with mounted(out) as mnt:
        paths, again = index_paths(mnt)
        assert [t["name"] for t in again["tensors"]] == list(tensors)
        for name, (dtype, shape, raw) in tensors.items():
            side = sidecar(paths[name])
            assert side["shape"] == shape and side["dtype"] == MODELFS_DTYPE[dtype], name
            assert paths[name].read_bytes() == raw, name
    return tensors, report, checked


# ---- the oracles: C-order bytes of each tensor, independent of modelfs --

def oracle_of(path, fmt):
    """{name: C-order bytes (or the set of the candidates where a name
    repeats)} from a reader that is not modelfs."""
    if fmt == "gguf":
        _, _, infos, blob = oracle_read(path)
        return {name: blob[offset:offset + gw.nbytes(type_id, ne)] for name, ne, type_id, offset in infos}
    if fmt == "onnx":
        return {name: {expected_bytes(t) for t in protos}
                for name, protos in collect(onnx.load(str(path))).items()}
    if fmt == "safetensors":
        tensors, _ = st.read_reference(path)
        return {name: raw for name, (_, _, raw) in tensors.items()}
    if fmt == "pt2":
        return pt2_oracle(path)
    loaded = oracle_for(path) or {}
    return {name: raw_values(t).tobytes() for name, t in loaded.items() if not t.is_quantized}


def pt2_oracle(path):
    """A PT2 archive's raw weights and constants as its configs name them
    (zipfile) and its sample inputs as torch.load reads them; a model's
    name prefixes its tensors where the archive holds more than one."""
    z = zipfile.ZipFile(path)
    configs = [m for m in z.namelist()
               if re.search(r"data/(weights/.*_weights|constants/.*_constants)_config\.json$", m)]
    samples = [m for m in z.namelist() if re.search(r"data/sample_inputs/[^/]*\.pt$", m)]
    models = {m.rsplit("/", 1)[1].rsplit("_", 2)[0] for m in configs}
    prefix = (lambda model: f"{model}.") if len(models) > 1 else (lambda model: "")
    out = {}
    for member in configs:
        folder, model = member.rsplit("/", 1)[0] + "/", member.rsplit("/", 1)[1].rsplit("_", 2)[0]
        for name, entry in json.loads(z.read(member))["config"].items():
            if not entry.get("use_pickle"):
                out[prefix(model) + name] = z.read(folder + entry["path_name"])
    for member in samples:
        model = member.rsplit("/", 1)[1][:-len(".pt")]
        args, kwargs = torch.load(io.BytesIO(z.read(member)))
        for name, t in flatten({"args": list(args), "kwargs": kwargs}, prefix(model) + "sample_inputs").items():
            out[name] = raw_values(t).tobytes()
    return out


def fixtures():
    root = SHARED / "fixtures"
    found = sorted((root / "generated").glob("*/*.pt")) + sorted((root / "generated").glob("*/*.onnx"))
    for folder in ["pt", "pt2", "safetensors", "gguf", "onnx"]:
        for p in sorted((root / "real" / folder).glob("*")):
            if folder == "onnx" and p.suffix != ".onnx":
                continue  # external data beside its model
            if p.name != "SOURCES.md":
                found.append(p)
    return [str(p.relative_to(root)) for p in found]


@pytest.mark.parametrize("relative", fixtures())
def test_every_fixture_exports_exactly(shared, tmp, relative):
    model = shared / "fixtures" / relative
    with mounted(model) as mnt:
        fmt = metadata(mnt)["format"]
    oracle = oracle_of(model, fmt)
    if relative.startswith("generated/"):
        expected = json.loads((shared / "fixtures" / "generated" / "expected.json").read_text())
        entry = expected[relative[len("generated/"):]]
        tensors, report, _ = check_export(model, tmp, oracle)
        for name, want in entry["tensors"].items():
            if name in tensors:
                assert hashlib.sha256(tensors[name][2]).hexdigest() == want["sha256"], name
    else:
        tensors, report, _ = check_export(model, tmp, oracle)
    # Every tensor written as it is stored was compared with the oracle
    # above, none only with the mount it came from.
    unchecked = set(tensors) - set(report["converted"]) - set(oracle)
    assert not unchecked, f"{relative}: no independent oracle for {sorted(unchecked)}"


def test_gguf_blocks_left_out_then_float32(tmp):
    tensors_in = [t for t in every_type_tensors() if gw.GGML_TYPES[t.type_id][1] > 1]
    tensors_in.append(gw.random_tensor("plain.weight", 0, [3, 4], seed=99))
    model = tmp / "blocks.gguf"
    blob, _ = gw.to_bytes([("general.architecture", gw.Value(gw.STRING, "test"))], tensors_in)
    model.write_bytes(blob)
    blocks = {t.name: t for t in tensors_in[:-1]}
    plain = {"plain.weight": tensors_in[-1].data}
    tensors, report, checked = check_export(model, tmp, plain)
    assert checked == 1 and set(tensors) == {"plain.weight"} and set(report["left_out"]) == set(blocks)
    assert all("safetensors has no type" in why for why in report["left_out"].values())
    assert report["float32"] is False
    tensors, report, _ = check_export(model, tmp, plain, "-o", "export=float32")
    assert report["float32"] is True
    for name, t in blocks.items():
        type_name = gw.GGML_TYPES[t.type_id][0]
        want = numeric_oracle.expected(type_name, t.data, t.shape)
        if want is None:  # modelfs has no dequantization for it: still left out
            assert name in report["left_out"], name
            continue
        dtype, shape, raw = tensors[name]
        assert dtype == "F32" and shape == list(t.shape) and report["converted"][name] == type_name + " as float32"
        numeric_oracle.assert_same(np.frombuffer(raw, "<f4").reshape(shape), want, name)
    assert len(report["converted"]) >= len(blocks) - 2


def test_string_complex128_quantized_and_int4_left_out_or_converted(tmp):
    from test_onnx_mount import simple_model, typed_tensor
    from onnx import TensorProto, helper, numpy_helper
    strings = helper.make_tensor("words", TensorProto.STRING, [2], [b"a", b"bc"])
    plain = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "plain")
    # INT4 (22) is newer than the onnx library: raw, low nibble first.
    int4 = TensorProto(name="nibbles", data_type=22, dims=[4], raw_data=bytes([0xE1, 0xC3]))
    path = tmp / "m.onnx"
    onnx.save(simple_model([strings, plain, int4]), str(path))
    tensors, report, _ = check_export(path, tmp, {"plain": np.arange(6, dtype="<f4").tobytes()})
    assert set(tensors) == {"plain"}
    assert set(report["left_out"]) == {"words", "nibbles"}
    tensors, report, _ = check_export(path, tmp, {}, "-o", "export=float32")
    assert tensors["nibbles"][0] == "I8" and np.frombuffer(tensors["nibbles"][2], np.int8).tolist() == [1, -2, 3, -4]
    assert "words" in report["left_out"] and report["converted"]["nibbles"] == "int4 as int8"

    q = torch.quantize_per_tensor(torch.tensor([0.5, 1.0, -1.5]), 0.5, 3, torch.qint8)
    model = tmp / "q.pt"
    torch.save({"q": q, "c": torch.tensor([1 + 2j], dtype=torch.complex128), "w": torch.ones(2)}, model)
    tensors, report, _ = check_export(model, tmp, {"w": torch.ones(2).numpy().tobytes()})
    assert set(tensors) == {"w"} and set(report["left_out"]) == {"q", "c"}
    assert "quantized" in report["left_out"]["q"] and "complex128" in report["left_out"]["c"]
    tensors, report, _ = check_export(model, tmp, {}, "-o", "export=float32")
    assert tensors["q"][0] == "F32"
    assert np.frombuffer(tensors["q"][2], "<f4").tolist() == q.dequantize().tolist()
    assert "c" in report["left_out"]


def test_views_ties_and_sharded_checkpoints(tmp):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    sd = {"base": base, "t": base.t(), "col": base[:, 1], "expanded": torch.ones(1).expand(5),
          "tied": base, "bf": torch.randn(3, 2).to(torch.bfloat16).t()}
    model = tmp / "views.pt"
    torch.save(sd, model)
    tensors, _, checked = check_export(model, tmp, {k: raw_values(v).tobytes() for k, v in sd.items()})
    assert checked == len(sd) and tensors["tied"][2] == tensors["base"][2]

    folder = tmp / "sharded"
    folder.mkdir()
    torch.manual_seed(3)
    state = MLP().state_dict()
    names = list(state)
    torch.save({n: state[n] for n in names[:3]}, folder / "pytorch_model-00001-of-00002.bin")
    torch.save({n: state[n] for n in names[3:]}, folder / "pytorch_model-00002-of-00002.bin")
    weight_map = {n: f"pytorch_model-0000{1 if i < 3 else 2}-of-00002.bin" for i, n in enumerate(names)}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    tensors, _, checked = check_export(folder, tmp, {k: raw_values(v).tobytes() for k, v in state.items()})
    assert checked == len(state) and list(tensors) == names

    folder = tmp / "st"
    folder.mkdir()
    shards = {"model-00001-of-00002.safetensors": {"a": np.arange(4, dtype=np.float16)},
              "model-00002-of-00002.safetensors": {"b": st.Raw("BF16", [2], b"\x01\x02\x03\x04")}}
    for shard, ts in shards.items():
        st.write(folder / shard, ts, metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    tensors, _, checked = check_export(folder, tmp, {"a": np.arange(4, dtype="<f2").tobytes(), "b": b"\x01\x02\x03\x04"})
    assert checked == 2 and tensors["b"][0] == "BF16"


def test_pt2_with_several_models_gets_one_file_each(tmp):
    enc = {"w": (torch.randn(3, 3), True), "b": (torch.randn(3), True)}
    dec = {"w": (torch.randn(2, 3), True)}
    path = tmp / "pair.pt2"
    writer = LayeredWriter(path)
    writer.model("encoder", enc)
    writer.model("decoder", dec)
    writer.close()
    tensors, _, _ = check_export(path, tmp, {})
    assert {"encoder.w", "encoder.b", "decoder.w"} <= set(tensors)
    with mounted(path) as mnt:
        for model, weights in (("encoder", enc), ("decoder", dec)):
            own, meta = parse_export((mnt / ".modelfs" / "models" / f"{model}.safetensors").read_bytes())
            assert meta["format"] == "pt"
            assert set(own) == {n[len(model) + 1:] for n in tensors if n.startswith(model + ".")}
            for name, (t, _) in weights.items():
                assert own[name][2] == t.numpy().tobytes()


def test_reads_at_odd_offsets_and_windows_across_many_tiny_tensors(tmp):
    # 5000 one- to three-byte tensors, a strided view among them: a 1 MiB
    # request spans thousands of parts, more than a reply's iovecs.
    rng = np.random.default_rng(5)
    tensors = {f"t{i}": rng.integers(0, 255, size=1 + i % 3, dtype=np.uint8) for i in range(5000)}
    tensors["big"] = rng.standard_normal(300_000).astype(np.float32)
    model = tmp / "tiny.safetensors"
    st.write(model, tensors)
    out, _, _, _ = export_both_ways(model, tmp)
    whole = out.read_bytes()
    parsed, _ = parse_export(whole)
    for name, value in tensors.items():
        assert parsed[name][2] == value.tobytes()
    with mounted(model) as mnt:
        with open(mnt / ".modelfs" / "model.safetensors", "rb", buffering=0) as f:
            for offset, size in [(0, 1 << 20), (3, 128 << 10), (7, 1 << 20), (12345, 131071),
                                 (len(whole) - 5, 100), (len(whole) // 2 + 1, 1 << 20)]:
                got = os.pread(f.fileno(), size, offset)
                assert got == whole[offset:offset + size], (offset, size)
            # Every odd window of the header and the tiny tensors.
            for offset in range(1, 40000, 997):
                assert os.pread(f.fileno(), 4099, offset) == whole[offset:offset + 4099], offset
    # dd's 1 MiB reads, on a fresh mount (nothing in the page cache).
    with mounted(model) as mnt:
        got = subprocess.run(["dd", f"if={mnt / '.modelfs' / 'model.safetensors'}", "bs=1M", "status=none"],
                             check=True, capture_output=True).stdout
        assert got == whole


def test_windows_across_thousands_of_gathered_views(tmp):
    # 3000 transposed 2x3 views of one storage: every tensor a computed
    # part, so a 1 MiB request fills the scratch with gathers and copies.
    base = torch.arange(3000 * 6, dtype=torch.float32).reshape(3000, 2, 3)
    sd = {f"v{i}": base[i].t() for i in range(3000)}
    model = tmp / "views.pt"
    torch.save(sd, model)
    out, _, _, _ = export_both_ways(model, tmp)
    whole = out.read_bytes()
    parsed, _ = parse_export(whole)
    assert all(parsed[k][2] == v.contiguous().numpy().tobytes() for k, v in sd.items())
    with mounted(model) as mnt:
        with open(mnt / ".modelfs" / "model.safetensors", "rb", buffering=0) as f:
            for offset, size in [(1, 1 << 20), (4097, 128 << 10), (len(whole) - 333, 1 << 20)]:
                assert os.pread(f.fileno(), size, offset) == whole[offset:offset + size], offset


def test_export_refuses_to_overwrite_without_force_and_leaves_no_partial_file(tmp):
    model = tmp / "m.safetensors"
    st.write(model, {"w": np.arange(3, dtype=np.float32)})
    out = tmp / "out.safetensors"
    out.write_bytes(b"keep")
    result = run_modelfs("--export", out, model)
    assert result.returncode == 1 and "--force" in result.stderr and out.read_bytes() == b"keep"
    assert run_modelfs("--export", out, "--force", model).returncode == 0
    parse_export(out.read_bytes())
    assert not (tmp / "out.safetensors.tmp").exists()
    bad = run_modelfs("--export", tmp / "x.safetensors", tmp / "missing.pt")
    assert bad.returncode == 2 and not (tmp / "x.safetensors.tmp").exists()
    assert "--export" in run_modelfs("--help").stdout
    alone = run_modelfs("--force", model, tmp)
    assert alone.returncode == 1 and "--force goes with --export" in alone.stderr


def test_real_safetensors_reader_loads_the_export(shared, tmp):
    safetensors = pytest.importorskip("safetensors.torch")  # no Debian package yet
    model = shared / "fixtures" / "generated" / "pt" / "views.pt"
    out, _, _, _ = export_both_ways(model, tmp)
    loaded = safetensors.load_file(str(out))
    for name, t in torch.load(model).items():
        assert torch.equal(loaded[name], t.contiguous())


# -- a model failing during the export -----------------------------------------

class RangeServer:
    """An HTTP server on 127.0.0.1 (a port the kernel picks) serving `data`
    by byte range as a model host does, until `fail_from`: a range starting
    there or later is answered 403, or with `stall`, held unanswered until
    the server stops. Every request is recorded as (range start, status)."""

    def __init__(self, data, fail_from, stall=False):
        self.data, self.fail_from, self.stall = data, fail_from, stall
        self.requests = []
        self.stopping = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                first, last = map(int, re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers["Range"]).groups())
                last = min(last, len(server.data) - 1)
                if first >= server.fail_from:
                    server.requests.append((first, "stalled" if server.stall else 403))
                    if server.stall:
                        server.stopping.wait(60)
                        return
                    self.send_response(403)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                server.requests.append((first, 206))
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(server.data)}")
                self.send_header("Content-Length", str(last + 1 - first))
                self.send_header("ETag", '"fixed"')
                self.end_headers()
                self.wfile.write(server.data[first:last + 1])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/m.safetensors"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@contextlib.contextmanager
def range_server(*args, **kwargs):
    server = RangeServer(*args, **kwargs)
    try:
        yield server
    finally:
        server.stop()


def remote_model():
    """A safetensors file whose header lies in the remote cache's first block
    (256 KiB) and whose tensor's bytes run far past it."""
    return {"w": np.arange(1 << 20, dtype=np.float32)}


def test_read_failure_during_export_exits_2_one_line_no_partial_file_and_out_untouched(tmp):
    model = tmp / "m.safetensors"
    st.write(model, remote_model())
    out = tmp / "out.safetensors"
    out.write_bytes(b"the export before")
    with range_server(model.read_bytes(), fail_from=256 << 10) as server:
        result = run_modelfs("-o", f"cache_dir={tmp / 'cache'}", "--export", out, "--force", server.url)
    # The header was served and the tree built; the tensor's bytes failed.
    assert (0, 206) in server.requests and any(status == 403 for _, status in server.requests), server.requests
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "403" in lines[0], result.stderr
    assert not (tmp / "out.safetensors.tmp").exists()
    assert out.read_bytes() == b"the export before"


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_export_ended_by_a_signal_leaves_no_partial_file(tmp, signal_number):
    model = tmp / "m.safetensors"
    st.write(model, remote_model())
    out = tmp / "out.safetensors"
    partial = tmp / "out.safetensors.tmp"
    with range_server(model.read_bytes(), fail_from=256 << 10, stall=True) as server:
        process = subprocess.Popen([str(MODELFS), "-o", f"cache_dir={tmp / 'cache'}", "--export", str(out),
                                    server.url], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            # The temporary file is made once the tree is built; the export
            # then waits on the stalled tensor bytes.
            deadline = time.monotonic() + 30
            while not (partial.exists() and any(s == "stalled" for _, s in server.requests)):
                assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
                time.sleep(0.02)
            process.send_signal(signal_number)
            assert process.wait(timeout=30) == -signal_number
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stderr.close()
    assert not partial.exists() and not out.exists()
