# SPDX-License-Identifier: Apache-2.0
"""The README's quick start, tried as a new user would: the two commands
are read from the README, the first is run in a fresh copy of the project
(what a clone of this commit holds), and the mounted sample model is read
with numpy and compared with the arrays its generator writes."""
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import REPO, is_mounted, unmount

# This module builds the project (or packages) again; the sanitizer pass of
# scripts/test.sh leaves it to the plain pass.
pytestmark = pytest.mark.skipif(os.environ.get("MODELFS_SANITIZED") == "1",
                                reason="rebuilds the project; run in the plain pass")



def quickstart_commands():
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## Quick start.*?```(?:sh|bash|console)?\n(.*?)```", readme, re.S)
    assert block, "README has no Quick start code block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    return [c for c in commands if c]


def fresh_copy(target):
    """The files a clone would hold: tracked plus new, not ignored."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, files):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            destination = target / os.fsdecode(name)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)


def test_readme_has_exactly_two_commands_and_ci_runs_the_second():
    commands = quickstart_commands()
    assert len(commands) == 2, commands
    ci = (REPO / ".ci" / "run").read_text()
    assert commands[1] in ci, "CI must run the README's test command"


def test_bundled_sample_model_is_what_its_generator_writes():
    spec = importlib.util.spec_from_file_location("make_sample", REPO / "examples" / "make_sample_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (REPO / "examples" / "sample-model.safetensors").read_bytes() == module.sample_model_bytes()


@pytest.fixture
def clone_dir():
    """A folder for the fresh copy inside the build folder: scripts/test.sh
    puts ccache's base at the checkout, so the copy's compilations, made
    from the same relative paths, are the plain build's (a copy elsewhere
    compiles everything again)."""
    build = pathlib.Path(os.environ.get("MODELFS_BUILD_DIR", REPO / "build"))
    folder = build / "quickstart-copy"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_first_command_builds_and_mounts_the_sample_model(clone_dir):
    clone = clone_dir / "modelfs"
    fresh_copy(clone)
    first = quickstart_commands()[0]
    mnt = clone / "mnt" / "sample"
    try:
        result = subprocess.run(first, shell=True, cwd=clone, capture_output=True, text=True, timeout=1500)
        assert result.returncode == 0, result.stdout + result.stderr
        output = result.stdout + result.stderr
        assert str(mnt) in output and f"fusermount3 -u {mnt}" in output
        assert is_mounted(mnt)
        spec = importlib.util.spec_from_file_location("make_sample", clone / "examples" / "make_sample_model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, dtype, shape, data in module.tensors():
            path = mnt / name.replace(".", "/")
            assert path.read_bytes() == data, name
            if dtype != "BF16":
                loaded = np.load(str(path) + ".npy", mmap_mode="r")
                assert list(loaded.shape) == shape or (shape == [] and loaded.size == 1)
                assert loaded.tobytes() == data
        listing = subprocess.run(["ls", str(mnt / "model" / "layers" / "0" / "self_attn")],
                                 capture_output=True, text=True, check=True).stdout.split()
        assert listing == ["k_proj", "o_proj", "q_proj", "v_proj"]
    finally:
        unmount(mnt)
