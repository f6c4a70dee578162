# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures for the mount tests.

Every test that mounts does so through `mounted(...)`, a context manager
that unmounts in its `finally`, so no mount outlives a failing test.
The tests run under Debian's /usr/bin/python3 (numpy, torch, onnx).
"""
import contextlib
import json
import os
import pathlib
import subprocess
import tempfile
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
MODELFS = pathlib.Path(os.environ.get("MODELFS_BIN", REPO / "build" / "modelfs"))
SHARED = pathlib.Path(os.environ.get("MODELFS_SHARED", REPO.parent / "shared")).resolve()


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if line.split()[4].encode().decode("unicode_escape") == path:
                return True
    return False


def unmount(path):
    """Unmounts `path`, lazily if a reader still holds it; waits until gone."""
    if not is_mounted(path):
        return
    if subprocess.run(["fusermount3", "-u", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True)
    for _ in range(100):
        if not is_mounted(path):
            return
        time.sleep(0.05)


def cat(path):
    """A file's bytes as `cat` reads them through the mount."""
    return subprocess.run(["cat", str(path)], check=True, capture_output=True).stdout


def sidecar(path):
    """The JSON sidecar of the tensor file at `path`."""
    return json.loads(cat(str(path) + ".json"))


def index_paths(mnt):
    """({tensor name: path of its raw file}, the whole index.json)."""
    index = json.loads((mnt / ".modelfs" / "index.json").read_text())
    return {t["name"]: mnt / t["path"] for t in index["tensors"]}, index


def metadata(mnt):
    return json.loads((mnt / ".modelfs" / "metadata.json").read_text())


def run_modelfs(*args, timeout=120, **kwargs):
    return subprocess.run([str(MODELFS), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def one_line(stderr):
    """The one line a refusal prints (asserted to be one, and not empty)."""
    lines = stderr.rstrip("\n").split("\n")
    assert len(lines) == 1 and lines[0], f"expected one line, got {stderr!r}"
    return lines[0]


def refused(model, *words, command="--list"):
    """`command` on `model` is refused: exit 2 and one line, holding each of
    `words`; returns the line."""
    result = run_modelfs(command, model)
    assert result.returncode == 2, result.stdout + result.stderr
    line = one_line(result.stderr)
    for word in words:
        assert word in line, line
    return line


def refused_by_every_command(model, mnt, *words):
    """--list and --check refused as `refused` says, and a mount on `mnt`
    (made here) exits 2, nothing left mounted."""
    for command in ("--list", "--check"):
        refused(model, *words, command=command)
    mnt.mkdir()
    result = run_modelfs(model, mnt)
    if result.returncode == 0:
        unmount(mnt)
    assert result.returncode == 2, (model, result.stderr)


def daemon_pids(mnt):
    """Pids of modelfs processes whose command line names `mnt`."""
    pids, want, binary = [], os.fsencode(str(mnt)), os.fsencode(str(MODELFS))
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0] == binary and want in argv:
            pids.append(int(entry))
    return pids


@contextlib.contextmanager
def mounted(model, *options, mountpoint=None):
    """Mounts `model` with modelfs (daemonized, as a user would) and yields the
    mountpoint; always unmounts and removes the folder it made."""
    made = mountpoint is None
    mnt = pathlib.Path(tempfile.mkdtemp(prefix="modelfs-mnt-")) if made else pathlib.Path(mountpoint)
    try:
        result = run_modelfs(*options, model, mnt)
        assert result.returncode == 0, f"mount failed ({result.returncode}): {result.stderr}"
        assert is_mounted(mnt), "modelfs exited 0 but nothing is mounted"
        yield mnt
    finally:
        unmount(mnt)
        if made:
            os.rmdir(mnt)


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


@pytest.fixture
def shared():
    if not SHARED.is_dir():
        pytest.skip(f"shared fixtures not found at {SHARED}")
    return SHARED


@pytest.fixture
def www(tmp):
    """The folder the `nginx` fixture serves (empty; a test adds to it)."""
    root = tmp / "www"
    root.mkdir()
    return root


@pytest.fixture
def nginx(tmp, www):
    """nginx on 127.0.0.1 serving `www` (its `.root`, `.url`), stopped in
    teardown."""
    from remote_servers import Nginx

    server = Nginx(tmp / "nginx", www)
    try:
        yield server
    finally:
        server.stop()


def pytest_sessionstart(session):
    if not MODELFS.exists():
        raise pytest.UsageError(f"modelfs binary not found at {MODELFS}; build first or set MODELFS_BIN")
