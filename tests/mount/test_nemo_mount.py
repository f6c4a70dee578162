# SPDX-License-Identifier: Apache-2.0
"""NeMo .nemo archives through a real mount: the tar's model_weights.ckpt
(a torch.save ZIP) served in place at its offset inside the tar, the
config as .modelfs/model_config.yaml, other small members as documents,
model-parallel mp_rank_XX/ checkpoints, PAX, GNU and ustar headers; the
gzip-compressed .nemo of NeMo before 1.7 served through the inflate index
(each read inflated from the nearest seek point, nothing held whole).

Oracles: torch.load of the checkpoint Python's tarfile extracts (the real
files), and what the test's own writer saved (tarfile + torch.save, as
NeMo's save_restore_connector does); never modelfs's own output."""
import gzip
import io
import tarfile

import numpy as np
import pytest

from conftest import cat, index_paths, metadata, mounted, refused, run_modelfs, sidecar

torch = pytest.importorskip("torch")

REAL = "fixtures/realworld4/files"
CONFIG = b"target: nemo.collections.asr.models.EncDecClassificationModel\nsample_rate: 16000\n"


def npy_of(t):
    """The values torch holds, as numpy (bfloat16 as its raw 16 bits)."""
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy()
    return t.contiguous().numpy()


def check_tensors(mnt, state, nemo_bytes, prefix=""):
    """Every tensor's raw file, .npy and sidecar against `state` (name ->
    torch tensor); each served in place: its source offset in the .nemo
    holds its bytes (a gzip .nemo's tensors have none: they are inflated)."""
    paths, index = index_paths(mnt)
    assert index["format"] == "nemo"
    assert sorted(paths) == sorted(prefix + k for k in state)
    for name, t in state.items():
        path = paths[prefix + name]
        meta = sidecar(path)
        assert meta["shape"] == list(t.shape), name
        want = npy_of(t)
        if t.is_contiguous():
            raw = cat(path)
            assert raw == want.tobytes(), name
            if nemo_bytes[:2] == b"\x1f\x8b":
                assert "offset" not in meta["source"], name
            else:
                at = meta["source"]["offset"]
                assert nemo_bytes[at:at + len(raw)] == raw, name
        if t.dtype != torch.bfloat16:
            got = np.load(str(path) + ".npy")
            assert got.dtype == want.dtype and got.shape == want.shape, name
            np.testing.assert_array_equal(got, want)


def write_nemo(path, checkpoints, extra=(), tar_format=tarfile.PAX_FORMAT, compress=False):
    """A .nemo as NeMo writes one: a "." directory entry, then ./NAME
    members; `checkpoints` maps a folder ("" or mp_rank_XX) to a state_dict."""
    members = [("model_config.yaml", CONFIG)]
    for folder, state in checkpoints.items():
        buffer = io.BytesIO()
        torch.save(state, buffer)
        members.append((f"{folder}/model_weights.ckpt" if folder else "model_weights.ckpt", buffer.getvalue()))
    members += list(extra)
    with tarfile.open(path, "w:gz" if compress else "w:", format=tar_format) as tar:
        root = tarfile.TarInfo(".")
        root.type, root.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(root)
        for folder in sorted({name.rsplit("/", 1)[0] for name, _ in members if "/" in name}):
            info = tarfile.TarInfo("./" + folder)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo("./" + name)
            info.size, info.mtime = len(data), 1648687736.5
            tar.addfile(info, io.BytesIO(data))
    return path


def state_dict(seed=0):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(6, 4, generator=g)
    return {"encoder.0.weight": weight,
            "encoder.0.bias": torch.randn(6, generator=g).half(),
            "encoder.0.scale": torch.randn(3, generator=g).to(torch.bfloat16),
            "encoder.0.num_batches_tracked": torch.tensor(7 + seed, dtype=torch.int64),
            "decoder.weight_t": weight.t(),  # a view of the same storage, strided
            "decoder.ids": torch.arange(10, dtype=torch.int32) - seed}


@pytest.mark.parametrize("tar_format", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_written_nemo_served_in_place(tmp, tar_format):
    state = state_dict()
    model = write_nemo(tmp / "model.nemo", {"": state}, extra=[("tokenizer/vocab.txt", b"a\nb\nc\n")],
                       tar_format=tar_format)
    with mounted(model) as mnt:
        check_tensors(mnt, state, model.read_bytes())
        # The strided view shares its storage's bytes and reads as torch does.
        np.testing.assert_array_equal(np.load(mnt / "decoder" / "weight_t.npy"), state["decoder.weight_t"].numpy())
        assert (mnt / ".modelfs" / "model_config.yaml").read_bytes() == CONFIG
        assert (mnt / ".modelfs" / "nemo" / "tokenizer" / "vocab.txt").read_bytes() == b"a\nb\nc\n"
        meta = metadata(mnt)["nemo"]
        assert [c["member"] for c in meta["checkpoints"]] == ["model_weights.ckpt"]
        with tarfile.open(model) as tar:
            at = {m.name.removeprefix("./"): m.offset_data for m in tar.getmembers() if m.isfile()}
        assert {m["name"]: m["offset"] for m in meta["members"] if m["name"] in at} == at


def test_long_member_names(tmp):
    """Names past ustar's 100 bytes: PAX path records, GNU 'L' headers."""
    state = {"w": torch.arange(4, dtype=torch.float32)}
    long = "artifacts/" + "x" * 150 + ".txt"
    for tar_format in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        model = write_nemo(tmp / f"long{tar_format}.nemo", {"": state}, extra=[(long, b"long")],
                           tar_format=tar_format)
        with mounted(model) as mnt:
            check_tensors(mnt, state, model.read_bytes())
            assert (mnt / ".modelfs" / "nemo" / long).read_bytes() == b"long"


def test_model_parallel_ranks_under_their_folders(tmp):
    ranks = {"mp_rank_00": state_dict(1), "mp_rank_01": state_dict(2)}
    model = write_nemo(tmp / "tp2.nemo", ranks)
    blob = model.read_bytes()
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert len(paths) == 2 * len(state_dict())
        for folder, state in ranks.items():
            for name, t in state.items():
                if t.is_contiguous():
                    assert cat(paths[f"{folder}/{name}"]) == npy_of(t).tobytes()
                    at = sidecar(paths[f"{folder}/{name}"])["source"]["offset"]
                    assert blob[at:at + t.numel() * t.element_size()] == npy_of(t).tobytes()
        assert (mnt / "mp_rank_01" / "decoder" / "ids").read_bytes() == (torch.arange(10, dtype=torch.int32) - 2).numpy().tobytes()
        assert [c["member"] for c in metadata(mnt)["nemo"]["checkpoints"]] == [
            "mp_rank_00/model_weights.ckpt", "mp_rank_01/model_weights.ckpt"]


def test_one_rank_folder_keeps_plain_names(tmp):
    state = state_dict(3)
    model = write_nemo(tmp / "tp1.nemo", {"mp_rank_00": state})
    with mounted(model) as mnt:
        check_tensors(mnt, state, model.read_bytes())


def test_refusals(tmp):
    no_ckpt = tmp / "empty.nemo"
    with tarfile.open(no_ckpt, "w:") as tar:
        info = tarfile.TarInfo("./model_config.yaml")
        info.size = len(CONFIG)
        tar.addfile(info, io.BytesIO(CONFIG))
    refused(no_ckpt, "nemo", "no model_weights.ckpt")
    legacy = tmp / "legacy.nemo"
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(3)}, buffer, _use_new_zipfile_serialization=False)
    with tarfile.open(legacy, "w:") as tar:
        info = tarfile.TarInfo("./model_weights.ckpt")
        info.size = len(buffer.getvalue())
        tar.addfile(info, io.BytesIO(buffer.getvalue()))
    refused(legacy, "nemo", "model_weights.ckpt", "legacy")


def test_gzip_nemo_served_through_the_inflate_index(tmp):
    """NeMo before 1.7: the tar gzip-compressed. Every tensor (a strided
    view too, by its .npy), two ranks, the config and a small member."""
    ranks = {"mp_rank_00": state_dict(4), "mp_rank_01": state_dict(5)}
    model = write_nemo(tmp / "old.nemo", ranks, extra=[("tokenizer/vocab.txt", b"x\ny\n")], compress=True)
    with mounted(model) as mnt:
        for folder, state in ranks.items():
            for name, t in state.items():
                path = mnt / folder / name.replace(".", "/")
                if t.is_contiguous():
                    assert cat(path) == npy_of(t).tobytes(), name
                    if t.dtype != torch.bfloat16:
                        np.testing.assert_array_equal(np.load(str(path) + ".npy"), npy_of(t))
        assert (mnt / ".modelfs" / "model_config.yaml").read_bytes() == CONFIG
        assert (mnt / ".modelfs" / "nemo" / "tokenizer" / "vocab.txt").read_bytes() == b"x\ny\n"
        gz = metadata(mnt)["nemo"]["gzip"]
        assert gz["tar_bytes"] == len(gzip.decompress(model.read_bytes()))
    assert run_modelfs("--check", model).returncode == 0


def test_gzip_nemo_cut_or_corrupt_refused(tmp):
    model = write_nemo(tmp / "old.nemo", {"": state_dict()}, compress=True)
    blob = model.read_bytes()
    (tmp / "cut.nemo").write_bytes(blob[:len(blob) // 2])
    refused(tmp / "cut.nemo", "nemo", "gzip")
    flipped = bytearray(blob)
    flipped[-8] ^= 0xFF  # the trailer's CRC-32
    (tmp / "crc.nemo").write_bytes(bytes(flipped))
    refused(tmp / "crc.nemo", "nemo", "CRC-32")


def real_checkpoint(path):
    """torch.load of the model_weights.ckpt Python's tarfile extracts (from
    the gzip stream too), and the config's bytes."""
    with tarfile.open(path) as tar:
        ckpt = tar.extractfile("./model_weights.ckpt").read()
        config = tar.extractfile("./model_config.yaml").read()
    return torch.load(io.BytesIO(ckpt), map_location="cpu"), config


def check_real(shared, tmp, name, count):
    model = shared / REAL / "nemo" / name
    if not model.exists():
        pytest.skip(f"{model} not found")
    blob = model.read_bytes()
    state, config = real_checkpoint(model)
    assert len(state) == count
    with mounted(model) as mnt:
        check_tensors(mnt, state, blob)
        assert (mnt / ".modelfs" / "model_config.yaml").read_bytes() == config


def test_real_plain_tar_with_pax_headers(shared, tmp):
    check_real(shared, tmp, "vad_multilingual_marblenet.nemo", 84)


@pytest.mark.parametrize("name,count", [("vad_marblenet.nemo", 85), ("vad_telephony_marblenet.nemo", 84)])
def test_real_gzip_nemo(shared, tmp, name, count):
    check_real(shared, tmp, name, count)


def test_real_empty_gzip_nemo_refused(shared):
    model = shared / REAL / "hostile" / "megatron_retro_chunk_tp1.nemo"
    if not model.exists():
        pytest.skip(f"{model} not found")
    for command in ("--list", "--check"):
        refused(model, "nemo", command=command)


@pytest.mark.parametrize("compress", [False, True])
def test_export_round_trip(tmp, compress):
    """--export of a .nemo (a gzip one reads through the inflate views)
    against the state_dict the test saved: every contiguous tensor's bytes,
    the strided view gathered into C order."""
    import safetensors_writer

    state = state_dict(6)
    model = write_nemo(tmp / "m.nemo", {"": state}, compress=compress)
    out = tmp / "out.safetensors"
    result = run_modelfs("--export", out, model)
    assert result.returncode == 0, result.stderr
    exported, meta = safetensors_writer.read_reference(out)
    for name, t in state.items():
        if t.is_contiguous():
            assert exported[name][1] == list(t.shape) and exported[name][2] == npy_of(t).tobytes(), name
    if not compress:
        assert exported["decoder.weight_t"][2] == state["decoder.weight_t"].contiguous().numpy().tobytes()
    else:
        # A strided view of a stream decoded per read is not gathered: left out, and named.
        assert "decoder.weight_t" not in exported


@pytest.mark.parametrize("name,count", [("vad_multilingual_marblenet.nemo", 84), ("vad_marblenet.nemo", 85)])
def test_real_nemo_by_url(shared, tmp, nginx, name, count):
    """A plain and a gzip .nemo by URL: the tar (or the stream) read
    through the remote cache, every tensor as torch.load gives it."""
    model = shared / REAL / "nemo" / name
    if not model.exists():
        pytest.skip(f"{model} not found")
    served = nginx.root / name
    served.write_bytes(model.read_bytes())
    state, config = real_checkpoint(served)
    assert len(state) == count
    with mounted(f"{nginx.url}/{name}", "-o", f"cache_dir={tmp / 'cache'}") as mnt:
        check_tensors(mnt, state, served.read_bytes())
        assert (mnt / ".modelfs" / "model_config.yaml").read_bytes() == config
