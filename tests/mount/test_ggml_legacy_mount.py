# SPDX-License-Identifier: Apache-2.0
"""The legacy GGML family through a real mount: every realworld4 'ggml' /
'ggmf' / 'ggjt' file mounted or refused as its MANIFEST says, and the
variants the real files lack (whisper f16/f32 and quantized, llama.cpp
'ggjt' v3 with q4_0 on 32-byte boundaries, unversioned llama.cpp, rwkv.cpp
with each of its quantized codes) written here; refusals of layouts that
match none, of blocks in layouts older than ggml's current ones, and of
versions no program wrote; an --export round trip.

Oracles: ggml_legacy_files.py's parser, writers and dequantization, written
from the format's documentation (never modelfs's own output); bytes read
with cat, values with numpy; the export's safetensors parsed here."""
import json
import re
import struct

import numpy as np
import pytest

import ggml_legacy_files as gf
from conftest import cat, index_paths, metadata, mounted, refused, run_modelfs, sidecar

REAL = "fixtures/realworld4"
GGML_FORMAT = "GGML / GGMF / GGJT (legacy)"


def c_strides(shape):
    """C-order element strides, as numpy gives them for one-byte elements."""
    return list(np.empty(shape, np.int8).strides)


def check_mounted(model, info=None):
    """Mounts `model` and checks every tensor against the oracle's parse:
    names in file order, dtypes, shapes, raw bytes (cat) at their offsets,
    sidecars, .npy values; then metadata.json. Returns metadata.json."""
    data = model.read_bytes()
    info = info or gf.parse(data)
    with mounted(model) as mnt:
        paths, index = index_paths(mnt)
        assert index["format"] == "ggml"
        assert [t["name"] for t in index["tensors"]] == [r.name for r in info["records"]], model.name
        for rec, entry in zip(info["records"], index["tensors"]):
            path = paths[rec.name]
            assert entry["dtype"] == rec.dtype and entry["shape"] == rec.shape, (model.name, rec.name)
            raw = data[rec.offset:rec.offset + rec.nbytes]
            assert cat(path) == raw, (model.name, rec.name)
            meta = sidecar(path)
            assert meta["source"] == {"file": model.name, "offset": rec.offset}
            assert meta["nbytes"] == rec.nbytes and meta["strides"] == c_strides(rec.shape)
            assert meta["ggml_type"] == rec.type_id and meta["ggml_type_name"] == rec.type_name
            if info["layout"] == "rwkv":
                assert meta["rwkv_type"] == rec.code
            loaded = np.load(str(path) + ".npy")
            want = gf.values(rec, data)
            assert loaded.dtype == want.dtype and loaded.shape == want.shape, rec.name
            np.testing.assert_array_equal(loaded, want, err_msg=f"{model.name} {rec.name}")
        meta = metadata(mnt)
    header = meta["ggml"]
    assert header["magic"] == info["magic"] and header["layout"] == info["layout"]
    assert header["records_offset"] == info["records_at"]
    assert header["tensor_count"] == len(info["records"])
    assert header.get("version") == info["version"]
    if "vocab_size" in info:
        assert meta["vocab_size"] == info["vocab_size"]
    not_tensors = meta.get("not_tensors", [])
    assert len(not_tensors) == (1 if info["arrays"] else 0)
    for entry in not_tensors:
        assert entry["offset"] == 4 and entry["size"] == info["records_at"] - 4
    return meta


# ---- the real files ------------------------------------------------------------

def manifest_rows(shared):
    """[(key, path under files/, what a correct reader sees)] of the legacy GGML rows."""
    rows = []
    for line in (shared / REAL / "MANIFEST.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1] == GGML_FORMAT:
            rows.append((cells[0], cells[2].strip("`"), cells[4]))
    return rows


def test_every_realworld4_ggml_file(shared):
    rows = manifest_rows(shared)
    assert len(rows) == 16, rows
    files = shared / REAL / "files"
    on_disk = {p.relative_to(files).as_posix() for p in (files / "ggml").iterdir()}
    assert on_disk <= {path for _, path, _ in rows}
    for key, path, sees in rows:
        model = files / path
        if sees.startswith("REFUSE"):
            refused(model, "ggml" if model.read_bytes()[:4] in gf.MAGIC else "not a model file")
            result = run_modelfs("--check", model)
            assert result.returncode == 2, key
            continue
        m = re.match(r"(\d+) tensors(?: \(([^)]*)\))?:?(.*?)(?:; not tensors: (\d+).*)?$", sees)
        assert m, sees
        count, dtypes, names = int(m.group(1)), m.group(2), re.findall(r"`([^`]+)`", m.group(3) or "")
        info = gf.parse(model.read_bytes())
        assert len(info["records"]) == count, key
        if dtypes:
            assert sorted({r.dtype for r in info["records"]}) == sorted(dtypes.split(", ")), key
        assert [r.name for r in info["records"][:len(names)]] == names, key
        listed = json.loads(run_modelfs("--list", "--json", model).stdout)
        tensors = listed["tensors"] if isinstance(listed, dict) else listed
        assert [t["name"] for t in tensors] == [r.name for r in info["records"]], key
        meta = check_mounted(model, info)
        assert len(meta.get("not_tensors", [])) == int(m.group(4) or 0), key
        assert run_modelfs("--check", model).returncode == 0, key


def test_bad_ndims_is_refused_naming_the_record(shared):
    model = shared / REAL / "files/hostile/whispercpp_for-tests-ggml-whisper-bad-ndims.bin"
    line = refused(model, "ggml", "n_dims is 64", "whisper")
    assert "at byte 69" in line


def test_rwkv_codes_are_its_own(shared):
    """rwkv.cpp's 7 is q5_0 (ggml's 6), its 8 q5_1 (ggml's 7)."""
    files = shared / REAL / "files/ggml"
    for name, code, dtype in (("rwkvcpp_tiny-rwkv-5v2-730K-Q5_0.bin", 7, "q5_0"),
                              ("rwkvcpp_tiny-rwkv-5v1-730K-Q5_1.bin", 8, "q5_1")):
        listed = json.loads(run_modelfs("--list", "--json", files / name).stdout)
        tensors = listed["tensors"] if isinstance(listed, dict) else listed
        assert {t["dtype"] for t in tensors} == {"float32", dtype}
        assert gf.RWKV_TO_GGML[code] == {"q5_0": 6, "q5_1": 7}[dtype]


# ---- written variants ------------------------------------------------------------

def plain_tensors(seed=0):
    return [("encoder.conv1.weight", 1, [4, 3, 3], gf.random_blocks(1, 36, seed)),
            ("encoder.conv1.bias", 0, [4], gf.random_blocks(0, 4, seed + 1)),
            ("decoder.scale", 0, [], gf.random_blocks(0, 1, seed + 2)),
            ("decoder.big", 1, [2, 3, 5, 7], gf.random_blocks(1, 210, seed + 3))]


def quantized_tensors(types, seed=10):
    return [(f"blk.{i}.{gf.GGML[t][0]}", t, [3, 64], gf.random_blocks(t, 192, seed + i))
            for i, t in enumerate(types)] + [("norm", 0, [64], gf.random_blocks(0, 64, seed + 99))]


def test_whisper_f16_f32_odd_offsets_and_a_scalar(tmp):
    model = tmp / "ggml-tiny.bin"
    model.write_bytes(gf.whisper(plain_tensors()))
    info = gf.parse(model.read_bytes())
    assert info["layout"] == "whisper" and any(r.offset % 2 for r in info["records"])
    meta = check_mounted(model, info)
    assert meta["hparams"]["ftype"] == 1 and meta["hparams"]["mel_filters"] == [2, 3]


def test_whisper_quantized_current_layout(tmp):
    """ftype 2008: quantization version 2 (ggml's current blocks), q5_0 and q8_0 tensors."""
    model = tmp / "ggml-q.bin"
    model.write_bytes(gf.whisper(quantized_tensors([6, 8, 2]), ftype=2008))
    assert {r.dtype for r in gf.parse(model.read_bytes())["records"]} == {"q5_0", "q8_0", "q4_0", "float32"}
    meta = check_mounted(model)
    assert meta["hparams"]["quantization_version"] == 2


def test_whisper_old_quantization_is_refused(tmp):
    model = tmp / "ggml-old-q.bin"
    model.write_bytes(gf.whisper(quantized_tensors([6]), ftype=8))
    refused(model, "ggml", "q5_0", "quantization version 0")


def test_llama_ggjt_v3_q4_0_on_32_byte_boundaries(tmp):
    model = tmp / "ggml-model-q4_0.bin"
    tensors = [("tok_embeddings.weight", 1, [3, 64], gf.random_blocks(1, 192, 1))] + quantized_tensors([2, 3])
    model.write_bytes(gf.llama(tensors, magic=b"tjgg", version=3))
    info = gf.parse(model.read_bytes())
    assert all(r.offset % 32 == 0 for r in info["records"])
    meta = check_mounted(model, info)
    assert meta["ggml"]["data_alignment"] == 32 and meta["vocab_size"] == 2
    assert meta["hparams"]["n_vocab"] == 2 and meta["hparams"]["n_embd"] == 64


@pytest.mark.parametrize("magic,version", [(b"tjgg", 1), (b"fmgg", 1), (b"lmgg", None)])
def test_llama_before_ggjt_v3_plain_mounts_blocks_refused(tmp, magic, version):
    tensors = [("norm.weight", 0, [64], gf.random_blocks(0, 64, 5)),
               ("output.weight", 1, [2, 64], gf.random_blocks(1, 128, 6))]
    model = tmp / "plain.bin"
    model.write_bytes(gf.llama(tensors, magic=magic, version=version))
    info = gf.parse(model.read_bytes())
    assert info["layout"] == "llama"
    check_mounted(model, info)
    quantized = tmp / "q4_0.bin"
    quantized.write_bytes(gf.llama(quantized_tensors([2]), magic=magic, version=version))
    if magic == b"lmgg":  # an unversioned file's q4_0 is no layout's: named as none
        refused(quantized, "ggml", "none of the layouts", "q4_0")
    else:
        refused(quantized, "ggml", "q4_0", "older than ggml's current")


def test_rwkv_every_quantized_code(tmp):
    model = tmp / "rwkv-q.bin"
    model.write_bytes(gf.rwkv(quantized_tensors([2, 3, 6, 7, 8]) +
                              [("blocks.0.att.time_first", 0, [8, 1, 8], gf.random_blocks(0, 64, 3))]))
    info = gf.parse(model.read_bytes())
    assert [r.code for r in info["records"][:5]] == [2, 3, 7, 8, 9]
    check_mounted(model, info)


def test_rwkv_100_blocks_refused(tmp):
    model = tmp / "rwkv-100.bin"
    model.write_bytes(gf.rwkv(quantized_tensors([6]), version=100))
    refused(model, "ggml", "q5_0", "version 100")


@pytest.mark.parametrize("head,words", [
    (b"fmgg" + struct.pack("<I", 2), ("'ggmf' version 2",)),
    (b"tjgg" + struct.pack("<I", 4), ("'ggjt' version 4",)),
])
def test_versions_no_program_wrote_are_refused(tmp, head, words):
    model = tmp / "v.bin"
    model.write_bytes(head + bytes(64))
    refused(model, "ggml", *words)


def test_records_must_end_at_the_end_of_the_file(tmp):
    data = gf.whisper(plain_tensors())
    for name, blob, words in (("extra.bin", data + b"\0", ("none of the layouts",)),
                              ("cut.bin", data[:-3], ("none of the layouts", "past the end"))):
        model = tmp / name
        model.write_bytes(blob)
        refused(model, "ggml", *words)
    rwkv = gf.rwkv(quantized_tensors([6]))
    (tmp / "rwkv-cut.bin").write_bytes(rwkv[:-1])
    refused(tmp / "rwkv-cut.bin", "ggml", "rwkv.cpp", "past the end")


# ---- export --------------------------------------------------------------------

def read_safetensors(path):
    data = path.read_bytes()
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    kinds = {"F32": np.float32, "F16": np.float16}
    return {name: np.frombuffer(body[e["data_offsets"][0]:e["data_offsets"][1]], kinds[e["dtype"]])
            .reshape(e["shape"]) for name, e in header.items()}


def test_export_round_trip(shared, tmp):
    """A q5_0 rwkv.cpp file exported with its blocks as float32: every tensor
    back, the plain ones bit for bit, the q5_0 ones as the test dequantizes them."""
    model = shared / REAL / "files/ggml/rwkvcpp_tiny-rwkv-5v2-730K-Q5_0.bin"
    data = model.read_bytes()
    info = gf.parse(data)
    out = tmp / "out.safetensors"
    result = run_modelfs("--export", out, "-o", "export=float32", model)
    assert result.returncode == 0, result.stderr
    exported = read_safetensors(out)
    assert sorted(exported) == sorted(r.name for r in info["records"])
    for rec in info["records"]:
        want = gf.values(rec, data)
        got = exported[rec.name]
        assert got.dtype == want.dtype and got.shape == want.shape, rec.name
        np.testing.assert_array_equal(got, want, err_msg=rec.name)


# ---- remote --------------------------------------------------------------------

def test_url_mounts_reading_records_not_data(tmp, nginx):
    """A whisper file by URL: each 'ggml' layout is tried over the records'
    headers, never the 8 MiB tensor between them; a tensor's read fetches
    about its bytes."""
    big = np.random.default_rng(4).standard_normal((1024, 2048)).astype(np.float32)
    tensors = [("encoder.big", 0, list(big.shape), big.tobytes())] + quantized_tensors([6])
    (nginx.root / "ggml-base.bin").write_bytes(gf.whisper(tensors, ftype=2001))
    info = gf.parse((nginx.root / "ggml-base.bin").read_bytes())
    with mounted(f"{nginx.url}/ggml-base.bin", "-o", f"cache_dir={tmp / 'cache'}") as mnt:
        paths, index = index_paths(mnt)
        assert [t["name"] for t in index["tensors"]] == [r.name for r in info["records"]]
        at_mount = nginx.bytes_sent("/ggml-base.bin")
        assert at_mount < big.nbytes // 8, at_mount
        data = (nginx.root / "ggml-base.bin").read_bytes()
        q = info["records"][1]
        np.testing.assert_array_equal(np.load(str(paths[q.name]) + ".npy"), gf.values(q, data))
        assert nginx.bytes_sent("/ggml-base.bin") - at_mount < big.nbytes // 8
        assert cat(paths["encoder.big"]) == big.tobytes()
        np.testing.assert_array_equal(np.load(str(paths["encoder.big"]) + ".npy"), big)
