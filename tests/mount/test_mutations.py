# SPDX-License-Identifier: Apache-2.0
"""Every fixture mutated, end to end: seeded mutations and truncations of
every fixture (and of the bundled sample) make `--list`, `--check` and a mount
answer cleanly — exit 0 or 2, never a crash, a hang or a half-mounted
tree. Mutations are seeded, so a failure names an input that can be
rebuilt."""
import os
import random
import shutil
import subprocess

import pytest

from conftest import MODELFS, REPO, SHARED, is_mounted, unmount

MUTATIONS_PER_FILE = 12


def is_companion(path):
    """Not a model: the sources list, the oracle, ONNX external-data files."""
    return (path.suffix == ".md" or path.name == "expected.json"
            or (path.parent.name == "onnx" and path.suffix in (".data", ".bin")))


def fixture_files():
    files = [REPO / "examples" / "sample-model.safetensors"]
    if SHARED.is_dir():
        for folder in ("real", "generated"):
            files += sorted(p for p in (SHARED / "fixtures" / folder).rglob("*")
                            if p.is_file() and not is_companion(p))
    return files


def mutate(data, rng):
    """One of: a truncation, a few flipped bytes, a run of 0xff, a copied chunk."""
    data = bytearray(data)
    kind = rng.randrange(4)
    if kind == 0 or len(data) < 16:
        return bytes(data[:rng.randrange(max(len(data), 1))]), "truncated"
    if kind == 1:
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data), "bit flips"
    if kind == 2:
        # Headers live near the start: aim there half of the time.
        start = rng.randrange(min(len(data), 4096) if rng.random() < 0.5 else len(data))
        length = rng.randrange(1, 9)
        data[start:start + length] = b"\xff" * len(data[start:start + length])
        return bytes(data), "0xff run"
    a, b = rng.randrange(len(data)), rng.randrange(len(data))
    n = rng.randrange(1, 64)
    data[a:a + n] = data[b:b + n]
    return bytes(data), "copied chunk"


def run_modelfs(*args):
    """Names in mutated files may hold any bytes: output is decoded leniently."""
    return subprocess.run([str(MODELFS), *map(str, args)], capture_output=True, timeout=120,
                          text=True, errors="replace")


def answers_cleanly(result, what):
    assert result.returncode in (0, 2), (
        f"{what}: exit {result.returncode} (negative = killed by a signal)\n{result.stderr[-2000:]}")
    if result.returncode == 2:
        assert result.stderr.strip(), f"{what}: refused without a message"


@pytest.mark.parametrize("source", fixture_files(), ids=lambda p: p.name)
def test_mutated_fixtures_are_listed_checked_and_mounted_cleanly(tmp, source):
    rng = random.Random(f"modelfs:{source.name}")
    original = source.read_bytes()
    # Keep external-data companions next to an ONNX model, as the model expects.
    for sibling in source.parent.iterdir():
        if sibling != source and is_companion(sibling) and sibling.suffix != ".md":
            shutil.copy(sibling, tmp / sibling.name)
    mnt = tmp / "mnt"
    mnt.mkdir()
    for i in range(MUTATIONS_PER_FILE):
        data, kind = mutate(original, rng)
        model = tmp / source.name
        model.write_bytes(data)
        what = f"{source.name} mutation {i} ({kind}, {len(data)} bytes)"
        for command in ("--list", "--check"):
            answers_cleanly(run_modelfs(command, model), f"{what} {command}")
        if i < 2:
            try:
                result = run_modelfs(model, mnt)
                answers_cleanly(result, f"{what} mount")
                assert is_mounted(mnt) == (result.returncode == 0), f"{what}: half-mounted"
                if result.returncode == 0:
                    # every file of the tree is readable or fails with EIO, never hangs
                    for root, _, files in os.walk(mnt):
                        for name in files:
                            try:
                                with open(os.path.join(root, name), "rb") as f:
                                    f.read(1 << 16)
                            except OSError as e:
                                assert e.errno == 5, (what, name, e)
            finally:
                unmount(mnt)


