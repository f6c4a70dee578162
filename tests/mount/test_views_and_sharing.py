# SPDX-License-Identifier: Apache-2.0
"""Strided views and structure shared through the pickle's memo, checked
against torch.load: a view's .npy is gathered when read (an expand() of one
element to 2^26 elements costs the daemon no memory), a container reached
twice names its tensors under both paths, and a structure shared 60 levels
deep is listed in moments."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

from conftest import index_paths, metadata, mounted, run_modelfs


def daemon_rss_kib(mnt):
    """RssAnon of the daemon serving `mnt` (found by its command line)."""
    out = subprocess.run(["pgrep", "-f", f"modelfs .* {mnt}$"], capture_output=True, text=True).stdout.split()
    assert len(out) == 1, f"one daemon expected for {mnt}, found {out}"
    with open(f"/proc/{out[0]}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


def test_views_npy_are_gathered_on_read_and_equal_torch(tmp):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    views = {
        "column": base[:, 1],
        "transposed_slice": base.t()[1:4],
        "stepped": base[::2, ::3],
        "expanded": base[1:2, 2:5].expand(5, 3),
        "huge": base[3, 4:5].expand(64 * 1024 * 1024),  # 256 MiB of one float
        "int_permuted": torch.arange(60, dtype=torch.int16).reshape(3, 4, 5).permute(2, 0, 1),
    }
    model = tmp / "views.pt"
    torch.save(views, model)
    assert model.stat().st_size < 64 * 1024
    want = torch.load(model)
    with mounted(model) as mnt:
        before = daemon_rss_kib(mnt)
        for name, tensor in want.items():
            if name == "huge":
                continue
            got = np.load(mnt / f"{name}.npy")
            assert got.shape == tuple(tensor.shape), name
            assert np.array_equal(got, tensor.contiguous().numpy()), name
        huge = np.load(mnt / "huge.npy", mmap_mode="r")
        assert huge.shape == (64 * 1024 * 1024,)
        for at in (0, 1, 12_345_677, 64 * 1024 * 1024 - 1):
            assert huge[at] == want["huge"][at].item()
        # The whole 256 MiB read through: the daemon makes it range by range.
        digest = subprocess.run(f"cat '{mnt}/huge.npy' | tail -c 268435456 | sha256sum",
                                shell=True, check=True, capture_output=True, text=True).stdout.split()[0]
        import hashlib
        assert digest == hashlib.sha256(want["huge"].contiguous().numpy().tobytes()).hexdigest()
        assert daemon_rss_kib(mnt) - before < 32 * 1024, "the view was materialised in the daemon"


def test_a_container_shared_through_the_memo_names_its_tensors_under_each_path(tmp):
    shared = {"weight": torch.arange(6, dtype=torch.float32).reshape(2, 3), "scale": torch.ones(1)}
    config = {"depth": 3, "names": ["a", "b"]}
    model = tmp / "shared.pt"
    torch.save({"encoder": {"embed": shared, "cfg": config}, "decoder": {"embed": shared, "cfg": config}}, model)
    want = torch.load(model)
    with mounted(model) as mnt:
        paths, index = index_paths(mnt)
        assert sorted(paths) == sorted(["encoder.embed.weight", "encoder.embed.scale",
                                        "decoder.embed.weight", "decoder.embed.scale"])
        for name, path in paths.items():
            side, _, key = name.split(".")
            expected = want[side]["embed"][key].numpy()
            assert np.array_equal(np.load(str(path) + ".npy"), expected), name
        values = metadata(mnt)["values"]
        # The plain config is printed once, and by reference where seen again.
        assert values["encoder.cfg"] == config
        assert values["decoder.cfg"] == {"$ref": "encoder.cfg"}


@pytest.mark.skipif(os.environ.get("MODELFS_SANITIZED") == "1",
                    reason="peak memory is measured on the plain build (AddressSanitizer adds its own)")
@pytest.mark.parametrize("shape", ["dict", "list"])
def test_structure_shared_sixty_levels_deep_is_listed_at_once(tmp, shape):
    node = {} if shape == "dict" else []
    for _ in range(60):
        node = {"l": node, "r": node} if shape == "dict" else [node, node]
    model = tmp / f"{shape}.pt"
    torch.save({"w": torch.arange(2, dtype=torch.float32), "x": node}, model)
    result = subprocess.run(["/usr/bin/time", "-f", "%M", str(os.environ.get("MODELFS_BIN", "modelfs")),
                             "--list", "--json", str(model)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    peak_kib = int(result.stderr.strip().splitlines()[-1])
    assert peak_kib < 64 * 1024
    listed = json.loads(result.stdout)
    assert [t["name"] for t in listed["tensors"]] == ["w"]


def test_shared_tensors_past_the_pickles_length_are_refused(tmp):
    node = {"w": torch.arange(4, dtype=torch.float32), "b": torch.ones(1)}
    for _ in range(30):
        node = {"l": node, "r": node}  # 2^31 names for two tensors
    model = tmp / "names.pt"
    torch.save({"x": node}, model)
    result = run_modelfs("--list", model)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "names more tensors" in result.stderr
