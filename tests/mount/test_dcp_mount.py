# SPDX-License-Identifier: Apache-2.0
"""torch.distributed.checkpoint folders (.metadata + __R_0.distcp) through a
real mount: tensors sharded by rows, by columns and on a 2x2 grid over 4
ranks, a replicated (unsharded) tensor, bfloat16/float16/int64 tensors, a
nested FQN, a bytes entry; the folder and the .metadata forms, --list,
--info, --check, random reads across chunk boundaries, the URL form, and the
refusals (overlap, hole, path escape, a slice past its file, a slice that is
no archive, a dtype or size mismatch, an unknown class).

Oracle: the unsharded tensors the test wrote (torch, Debian's 1.13) and the
test's own writer (dcp_writer.py), which records where it put every chunk;
never modelfs's own output."""
import io
import json
import pickle
import random
import struct
import subprocess
import zipfile

import numpy as np
import pytest
import torch

import dcp_writer as w
from conftest import cat, index_paths, metadata, mounted, one_line, refused, run_modelfs, sidecar

RANKS = 4


def state():
    g = torch.Generator().manual_seed(7)
    return {
        "rows.weight": torch.randn(10, 6, generator=g),                       # by rows, uneven
        "cols.weight": torch.randn(5, 12, generator=g).to(torch.float16),     # by columns
        "grid.weight": torch.randn(6, 8, generator=g).to(torch.bfloat16),     # 2x2 grid
        "layers.0.attn.w": torch.randn(4, 4, 3, generator=g),                 # nested FQN, 3-d by rows
        "replicated.bias": torch.arange(7, dtype=torch.int64) * 1000003,      # one chunk, rank 0
        "step": torch.tensor(42, dtype=torch.int64),                          # 0-d
        "empty": torch.zeros(0, 3),                                           # no elements
    }


def plans(tensors):
    return {
        "rows.weight": w.by_rows((10, 6), RANKS),
        "cols.weight": w.by_cols((5, 12), RANKS),
        "grid.weight": w.by_grid((6, 8), 2, 2),
        "layers.0.attn.w": w.by_rows((4, 4, 3), RANKS),
        "replicated.bias": w.whole((7,)),
        "step": w.whole(()),
        "empty": w.whole((0, 3)),
    }


def raw(t):
    """The C-order bytes of `t` (as numpy would store them)."""
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def npy_values(t):
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


@pytest.fixture
def checkpoint(tmp):
    tensors = state()
    folder = tmp / "ckpt"
    written = w.write_checkpoint(folder, tensors, plans(tensors), bytes_items={"extra_state": {"lr": 0.1}},
                                 ranks=RANKS)
    return folder, tensors, written


def check_tensors(mnt, tensors):
    paths, _ = index_paths(mnt)
    assert sorted(paths) == sorted(tensors)
    for name, t in tensors.items():
        path = paths[name]
        meta = sidecar(path)
        assert meta["shape"] == list(t.shape), name
        assert cat(path) == raw(t), name
        loaded = np.load(str(path) + ".npy")
        assert loaded.shape == tuple(t.shape), name
        np.testing.assert_array_equal(loaded, npy_values(t), err_msg=name)
    return paths


def test_mount_folder_and_metadata_file(checkpoint):
    folder, tensors, written = checkpoint
    for model in (folder, folder / ".metadata"):
        with mounted(model) as mnt:
            paths = check_tensors(mnt, tensors)
            # The nested FQN is split into folders at '.'.
            assert (mnt / "layers" / "0" / "attn" / "w").is_file()
            # A sharded tensor's sidecar lists its chunks (pieces) where the
            # writer put them: the stored bytes of each chunk's archive lie
            # inside that chunk's slice.
            meta = sidecar(paths["cols.weight"])
            assert meta["chunks"] == RANKS
            pieces = meta["pieces"]
            assert len(pieces) == RANKS
            for piece in pieces:
                key = ("cols.weight", tuple(piece["start"]))
                file, at, length = written[key]
                assert piece["file"] == file
                assert at <= piece["offset"] and piece["offset"] + piece["size"] <= at + length
            md = metadata(mnt)
            assert md["dcp"]["version"] == "1.0.0"
            assert md["dcp"]["counts"] == {"tensors": len(tensors), "bytes_entries": 1,
                                           "chunks": sum(len(p) for p in plans(tensors).values()),
                                           "files": RANKS}
            assert md["dcp"]["storage_meta"]["checkpoint_id"] == str(folder)
            assert md["dcp"]["storage_meta"]["save_id"] == "save-1"
            assert "extra_state" in md["dcp"]["planner_data_keys"]
            file, at, length = written[("extra_state", None)]
            assert md["bytes_entries"] == [{"fqn": "extra_state", "file": file, "offset": at, "length": length}]


def test_random_reads_across_chunks(checkpoint):
    folder, tensors, _ = checkpoint
    rng = random.Random(3)
    with mounted(folder) as mnt:
        paths, _ = index_paths(mnt)
        for name in ("rows.weight", "cols.weight", "grid.weight", "layers.0.attn.w"):
            want = raw(tensors[name])
            with open(paths[name], "rb") as f:
                for _ in range(40):
                    start = rng.randrange(len(want))
                    length = rng.randrange(1, len(want) - start + 1)
                    f.seek(start)
                    assert f.read(length) == want[start:start + length], (name, start, length)


def test_list_info_check(checkpoint):
    folder, tensors, _ = checkpoint
    for command in ("--list", "--info", "--check"):
        result = run_modelfs(command, folder)
        assert result.returncode == 0, result.stderr
        assert result.stderr == "", result.stderr
    listing = run_modelfs("--list", folder).stdout
    for name in tensors:
        assert name in listing
    info = run_modelfs("--info", folder).stdout
    assert "torch.distributed.checkpoint" in info and "__3_0.distcp" in info


def test_overlap_and_hole_refused(tmp):
    t = {"w": torch.arange(24, dtype=torch.float32).reshape(4, 6)}
    overlap = tmp / "overlap"
    w.write_checkpoint(overlap, t, {"w": [((0, 0), (3, 6), 0), ((2, 0), (2, 6), 1)]}, ranks=2)
    refused(overlap, "DCP chunks overlap", '"w"')
    same_start = tmp / "same_start"
    w.write_checkpoint(same_start, t, {"w": [((0, 0), (2, 6), 0), ((2, 0), (2, 6), 1)]}, ranks=2,
                       chunk_override={"w": [((0, 0), (2, 6)), ((0, 0), (2, 6))]})
    refused(same_start, "DCP chunks overlap", '"w"')
    hole = tmp / "hole"
    w.write_checkpoint(hole, t, {"w": [((0, 0), (1, 6), 0), ((2, 0), (2, 6), 1)]}, ranks=2)
    refused(hole, "DCP chunks leave a hole", '"w"')
    # Volumes that add up but do not tile: overlap in one place, hole in another.
    skew = tmp / "skew"
    w.write_checkpoint(skew, t, {"w": [((0, 0), (2, 6), 0), ((1, 0), (2, 6), 1)]}, ranks=2,
                       chunk_override={"w": [((0, 0), (2, 6)), ((1, 0), (2, 6)), ((3, 0), (1, 6))]})
    # (the third chunk has no storage record: but coverage is checked first)
    line = refused(skew, "DCP chunks", '"w"')
    assert "overlap" in line or "hole" in line or "tile" in line
    # Outside the tensor's size.
    outside = tmp / "outside"
    w.write_checkpoint(outside, t, {"w": w.by_rows((4, 6), 2)}, ranks=2,
                       chunk_override={"w": [((0, 0), (2, 6)), ((2, 0), (3, 6))]})
    refused(outside, "outside the tensor's size", '"w"')


def test_path_escape_refused(tmp):
    t = {"w": torch.ones(4, 2)}
    folder = tmp / "inner" / "ckpt"
    (tmp / "inner").mkdir()
    w.write_checkpoint(folder, t, {"w": w.whole((4, 2))}, ranks=1, relative_paths={"w": "../secret.distcp"})
    (tmp / "inner" / "secret.distcp").write_bytes((folder / "__0_0.distcp").read_bytes())
    refused(folder, "torch.distributed.checkpoint", "../secret.distcp", "not a file inside")
    w.write_checkpoint(folder, t, {"w": w.whole((4, 2))}, ranks=1, relative_paths={"w": "/etc/passwd"})
    refused(folder, "torch.distributed.checkpoint", "not a file inside")


def rewrite_metadata(folder, change):
    meta = pickle.loads((folder / ".metadata").read_bytes())
    change(meta)
    (folder / ".metadata").write_bytes(pickle.dumps(meta))


def test_bad_slices_refused(tmp):
    t = {"w": torch.arange(8, dtype=torch.float32).reshape(4, 2)}
    folder = tmp / "ckpt"
    w.write_checkpoint(folder, t, {"w": w.by_rows((4, 2), 2)}, ranks=2)
    original = (folder / ".metadata").read_bytes()

    def storage(meta, rank=1):
        return [v for k, v in meta.storage_data.items() if v.relative_path == f"__{rank}_0.distcp"][0]

    def past(meta):
        storage(meta).length += 1
    rewrite_metadata(folder, past)
    refused(folder, "torch.distributed.checkpoint", "past the end")

    def shifted(meta):
        s = storage(meta)
        s.offset, s.length = s.offset + 1, s.length - 1
    (folder / ".metadata").write_bytes(original)
    rewrite_metadata(folder, shifted)
    refused(folder, "torch.distributed.checkpoint", "not a torch.save archive")

    def dtype(meta):
        meta.state_dict_metadata["w"].properties.dtype = torch.float64
    (folder / ".metadata").write_bytes(original)
    rewrite_metadata(folder, dtype)
    refused(folder, "torch.distributed.checkpoint", "float64")

    def no_record(meta):
        del meta.storage_data[[k for k in meta.storage_data if k.offset == torch.Size([2, 0])][0]]
    (folder / ".metadata").write_bytes(original)
    rewrite_metadata(folder, no_record)
    refused(folder, "torch.distributed.checkpoint", "no storage_data record")

    # A class not on the list, named.
    class Evil:
        def __reduce__(self):
            return (subprocess.check_call, (["true"],))
    (folder / ".metadata").write_bytes(original)
    rewrite_metadata(folder, lambda meta: setattr(meta, "planner_data", Evil()))
    refused(folder, "torch.distributed.checkpoint", "subprocess.check_call", "refused, never called")


def test_export_matches(checkpoint, tmp):
    folder, tensors, _ = checkpoint
    out = tmp / "export.safetensors"
    result = run_modelfs("--export", out, folder)
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    for name, t in tensors.items():
        begin, end = header[name]["data_offsets"]
        assert data[8 + n + begin:8 + n + end] == raw(t), name


def test_remote_folder(tmp, nginx):
    tensors = state()
    w.write_checkpoint(nginx.root / "ckpt", tensors, plans(tensors), ranks=RANKS)
    cache = tmp / "cache"
    for url in (f"{nginx.url}/ckpt/.metadata", f"{nginx.url}/ckpt/"):
        with mounted(url, "-o", f"cache_dir={cache}") as mnt:
            check_tensors(mnt, tensors)


def test_check_reads_every_chunk_crc(tmp):
    """--check verifies each chunk archive's CRC-32s (a mount and --list do
    not read them): one flipped byte of a chunk's stored tensor bytes."""
    t = {"w": torch.arange(16, dtype=torch.float32).reshape(4, 4)}
    folder = tmp / "ckpt"
    written = w.write_checkpoint(folder, t, {"w": w.by_cols((4, 4), 2)}, ranks=2)
    name, at, length = written[("w", (0, 2))]
    data = bytearray((folder / name).read_bytes())
    # The stored member data/0 of that archive, found by the test's own
    # reading: zipfile over the slice for its local header, whose name and
    # extra lengths (bytes 26..30) give where its data starts.
    archive = zipfile.ZipFile(io.BytesIO(bytes(data[at:at + length])))
    member = [i for i in archive.infolist() if i.filename.endswith("data/0")][0]
    header = at + member.header_offset
    assert data[header:header + 4] == b"PK\x03\x04"
    n, e = struct.unpack("<HH", data[header + 26:header + 30])
    start = header + 30 + n + e
    data[start] ^= 0xFF
    (folder / name).write_bytes(bytes(data))
    assert run_modelfs("--list", folder).returncode == 0
    check = run_modelfs("--check", folder)
    assert check.returncode == 2
    line = one_line(check.stderr)
    assert "CRC" in line and name in line, line
