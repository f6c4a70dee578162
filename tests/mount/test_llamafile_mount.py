# SPDX-License-Identifier: Apache-2.0
"""llamafile through a real mount: the GGUF stored in the ZIP behind an
executable (zipalign's layout: ZIP64 extras, data on 64 KiB) or in a plain
ZIP (Python's zipfile), served in place; the other members as documents;
several GGUFs side by side; a deflated GGUF refused; --export; a URL.

Oracles: the test's own writers (a GGUF from gguf_writer with known bytes,
the ZIP laid out here from the ZIP specification and zipalign's source),
and for the real files Python's zipfile (where the member lies, its
bytes) with the GGUF parsed by test_gguf_mount's independent reader;
never modelfs's own output."""
import json
import struct
import zipfile
import zlib

import numpy as np
import pytest

import gguf_writer as gw
import safetensors_writer
from conftest import cat, index_paths, metadata, mounted, refused, run_modelfs, sidecar
from test_gguf_mount import oracle_read

REAL = "fixtures/realworld4/files/llamafile"
STUB = b"#!/bin/sh\n# stands in for the APE runtime\nexit 1\n"
ARGS = b"-m\nmodel.gguf\n--host\n0.0.0.0\n...\n"


def gguf_model(seed=0):
    """A GGUF with float32, float16, int32 and q8_0 tensors of known bytes."""
    tensors = [gw.Tensor("token_embd.weight", 0, [8, 5], np.arange(40, dtype="<f4").tobytes()),
               gw.Tensor("blk.0.attn_norm.weight", 1, [8], (np.arange(8, dtype="<f2") / 4).tobytes()),
               gw.Tensor("blk.0.ids", 26, [3, 2], (np.arange(6, dtype="<i4") - seed).tobytes()),
               gw.random_tensor("blk.0.ffn_up.weight", 8, [4, 64], seed=seed)]
    blob, offsets = gw.to_bytes([("general.architecture", gw.Value(gw.STRING, "llama")),
                                 ("llama.block_count", gw.Value(gw.UINT32, 1))], tensors)
    return blob, tensors, offsets


def zipalign(members, alignment=65536, stub=STUB):
    """A llamafile as zipalign writes one (llamafile/zipalign.c): `stub`
    (the executable), then each (name, bytes) stored with its data on
    `alignment`, 0xFFFFFFFF sizes and offsets with the real ones in ZIP64
    extras, offsets from the file's first byte, a ZIP64 end record and
    locator. Returns (file bytes, {name: data offset})."""
    out, central, where = bytearray(stub), bytearray(), {}
    for name, data in members:
        name_b, crc = name.encode(), zlib.crc32(data)
        local_extra = struct.pack("<HHQQ", 1, 16, len(data), len(data))
        header_at = -(-(len(out) + 30 + len(name_b) + len(local_extra)) // alignment) * alignment
        header_at -= 30 + len(name_b) + len(local_extra)
        out += b"\0" * (header_at - len(out))
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                           len(name_b), len(local_extra)) + name_b + local_extra
        where[name] = len(out)
        out += data
        central_extra = struct.pack("<HHQQQ", 1, 24, len(data), len(data), header_at)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF,
                               0xFFFFFFFF, len(name_b), len(central_extra), 0, 0, 0, 0o100644 << 16,
                               0xFFFFFFFF) + name_b + central_extra
    directory_at = len(out)
    out += central
    end64_at = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(members), len(members),
                       len(central), directory_at)
    out += struct.pack("<IIQI", 0x07064B50, 0, end64_at, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return bytes(out), where


def member_offsets(path):
    """{name: offset of its data in the file}, by Python's zipfile and the
    local headers it points at."""
    blob, out = path.read_bytes(), {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            name_length, extra_length = struct.unpack_from("<HH", blob, info.header_offset + 26)
            out[info.filename] = info.header_offset + 30 + name_length + extra_length
    return out


def check_written(mnt, tensors, gguf_at, prefix=""):
    """Every tensor's bytes, sidecar and plain .npy against what was written."""
    paths, index = index_paths(mnt)
    assert index["format"] == "llamafile"
    for t in tensors:
        path = paths[prefix + t.name]
        assert cat(path) == t.data, t.name
        meta = sidecar(path)
        assert meta["shape"] == t.shape and meta["ggml_type"] == t.type_id
        plain = gw.PLAIN.get(t.type_id)
        if plain and plain[1]:
            np.testing.assert_array_equal(np.load(str(path) + ".npy"),
                                          np.frombuffer(t.data, plain[1]).reshape(t.shape))
    return paths


def test_zipalign_layout_served_in_place(tmp):
    blob, tensors, offsets = gguf_model()
    model = tmp / "model.llamafile"
    data, where = zipalign([("model.gguf", blob), (".args", ARGS), ("LICENSE", b"Apache-2.0\n")])
    model.write_bytes(data)
    assert where["model.gguf"] % 65536 == 0
    with mounted(model) as mnt:
        paths = check_written(mnt, tensors, where["model.gguf"])
        for t in tensors:
            # In place: the source is the GGUF's offset in the file plus the tensor's.
            assert sidecar(paths[t.name])["source"] == {"file": model.name,
                                                        "offset": where["model.gguf"] + offsets[t.name]}
        meta = metadata(mnt)
        assert meta["kv"] == {"general.architecture": "llama", "llama.block_count": 1}
        assert meta["llamafile"]["gguf_member"] == "model.gguf"
        assert meta["llamafile"]["gguf_offset"] == where["model.gguf"]
        assert [m["name"] for m in meta["llamafile"]["members"]] == ["model.gguf", ".args", "LICENSE"]
        assert (mnt / ".modelfs" / "llamafile" / ".args").read_bytes() == ARGS
        assert (mnt / ".modelfs" / "llamafile" / "LICENSE").read_bytes() == b"Apache-2.0\n"


@pytest.mark.parametrize("stub", [b"", STUB])
def test_plain_stored_member_python_zipfile(tmp, stub):
    """A GGUF stored by Python's zipfile, at the file's head or appended to
    an executable; the .args deflated (a document all the same)."""
    blob, tensors, offsets = gguf_model(seed=3)
    model = tmp / "model.llamafile"
    model.write_bytes(stub)
    with zipfile.ZipFile(model, "a") as z:
        z.writestr(zipfile.ZipInfo("weights/model.gguf"), blob)
        z.writestr(".args", ARGS, compress_type=zipfile.ZIP_DEFLATED)
    at = member_offsets(model)["weights/model.gguf"]
    with mounted(model) as mnt:
        paths = check_written(mnt, tensors, at)
        assert sidecar(paths["blk.0.ids"])["source"]["offset"] == at + offsets["blk.0.ids"]
        assert (mnt / ".modelfs" / "llamafile" / ".args").read_bytes() == ARGS


def test_several_ggufs_each_under_its_stem(tmp):
    """A model and its multimodal projector (llava's llamafiles): both
    served, each under its member's name without .gguf."""
    first, first_tensors, _ = gguf_model(seed=1)
    second, second_tensors, _ = gguf_model(seed=2)
    model = tmp / "llava.llamafile"
    model.write_bytes(zipalign([("llava.gguf", first), ("mmproj.gguf", second), (".args", ARGS)])[0])
    with mounted(model) as mnt:
        check_written(mnt, first_tensors, 0, prefix="llava/")
        check_written(mnt, second_tensors, 0, prefix="mmproj/")
        meta = metadata(mnt)["llamafile"]
        assert meta["gguf_member"] == "llava.gguf"
        assert [o["gguf_member"] for o in meta["other_ggufs"]] == ["mmproj.gguf"]


def test_deflated_gguf_member_is_refused(tmp):
    blob, _, _ = gguf_model()
    model = tmp / "deflated.llamafile"
    model.write_bytes(STUB)
    with zipfile.ZipFile(model, "a") as z:
        z.writestr("model.gguf", blob, compress_type=zipfile.ZIP_DEFLATED)
    for command in ("--list", "--check"):
        refused(model, "model.gguf", "compressed", "deflate", command=command)


def test_truncated_and_lying_gguf_refused(tmp):
    """The GGUF ends inside its member: the tensors' bytes run past it (not
    into the next member), and a ZIP with no GGUF is not a llamafile."""
    blob, _, _ = gguf_model()
    model = tmp / "short.llamafile"
    model.write_bytes(zipalign([("model.gguf", blob[:-100]), (".args", ARGS + b"\0" * 4096)])[0])
    refused(model, "llamafile", "past the end")
    model.write_bytes(zipalign([(".args", ARGS)])[0])
    refused(model, "no .gguf member")


def test_export_round_trip(tmp):
    blob, tensors, _ = gguf_model()
    model = tmp / "model.llamafile"
    model.write_bytes(zipalign([("model.gguf", blob), (".args", ARGS)])[0])
    out = tmp / "out.safetensors"
    result = run_modelfs("--export", out, model)
    assert result.returncode == 0, result.stderr
    exported, _ = safetensors_writer.read_reference(out)
    for t in tensors:
        plain = gw.PLAIN.get(t.type_id)
        if plain and plain[1]:
            assert exported[t.name][1] == t.shape and exported[t.name][2] == t.data, t.name
    # q8_0 has no safetensors type: left out, and named in export.json.
    assert "blk.0.ffn_up.weight" not in exported


def check_real(mnt, model):
    """The real llamafile against zipfile's member and the independent GGUF reader."""
    at = member_offsets(model)["superpoint.gguf"]
    gguf = model.parent / "superpoint.gguf"
    with zipfile.ZipFile(model) as z:
        assert z.getinfo("superpoint.gguf").compress_type == zipfile.ZIP_STORED
        args = z.read(".args")
    version, kv, infos, blob = oracle_read(gguf)
    meta = metadata(mnt)
    assert meta["gguf"]["version"] == version and set(meta["kv"]) == set(kv)
    paths, index = index_paths(mnt)
    assert [t["name"] for t in index["tensors"]] == [n for n, _, _, _ in infos]
    assert len(infos) == 24
    for name, ne, type_id, offset in infos:
        size = gw.nbytes(type_id, ne)
        assert cat(paths[name]) == blob[offset:offset + size], name
        assert sidecar(paths[name])["source"] == {"file": model.name, "offset": at + offset}
        assert sidecar(paths[name])["dtype"] in ("float16", "float32")
        array = np.load(str(paths[name]) + ".npy")
        assert array.shape == tuple(reversed(ne)) and array.tobytes() == blob[offset:offset + size]
    assert (mnt / ".modelfs" / "llamafile" / ".args").read_bytes() == args


@pytest.mark.parametrize("file_name", ["superpoint_zipalign.llamafile", "superpoint_pyzip.llamafile"])
def test_real_llamafiles(shared, tmp, file_name):
    model = shared / REAL / file_name
    if not model.exists():
        pytest.skip(f"{model} not found")
    # The GGUF as zipfile extracts it, for the independent reader.
    with zipfile.ZipFile(model) as z:
        (tmp / "superpoint.gguf").write_bytes(z.read("superpoint.gguf"))
    local = tmp / file_name
    local.write_bytes(model.read_bytes())
    with mounted(local) as mnt:
        check_real(mnt, local)


def test_real_llamafile_by_url(shared, tmp, nginx):
    model = shared / REAL / "superpoint_zipalign.llamafile"
    if not model.exists():
        pytest.skip(f"{model} not found")
    served = nginx.root / model.name
    served.write_bytes(model.read_bytes())
    with zipfile.ZipFile(model) as z:
        (nginx.root / "superpoint.gguf").write_bytes(z.read("superpoint.gguf"))
    with mounted(f"{nginx.url}/{model.name}", "-o", f"cache_dir={tmp / 'cache'}") as mnt:
        check_real(mnt, served)
        assert json.loads((mnt / ".modelfs" / "index.json").read_text())["format"] == "llamafile"
