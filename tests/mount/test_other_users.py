# SPDX-License-Identifier: Apache-2.0
"""modelfs run by a user other than root, and other users of a mount:
options only root may use are said so (-o readahead_kb), a FUSE device the
user may not open gets a hint, and others read a mount only with
-o allow_other, and never write. Every mount a test makes is undone."""
import contextlib
import os
import pathlib
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import safetensors_writer as st
import conftest
from conftest import MODELFS, is_mounted, unmount
from test_cli import small_model


def run_modelfs(*args, timeout=30):
    """modelfs with a deadline: a hang is a failure, not a stuck suite."""
    return conftest.run_modelfs(*args, timeout=timeout, errors="replace")


NOBODY = 65534


def run_as_nobody(script, *, timeout=60):
    """Runs `script` (sh) in a private mount namespace, where it may bind
    files over /dev/fuse without touching the machine's; `$AS_NOBODY CMD`
    runs CMD as nobody."""
    if not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.skip("needs unshare and setpriv (util-linux)")
    env = dict(os.environ, AS_NOBODY=f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups --")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-ec", script],
                          capture_output=True, text=True, timeout=timeout, env=env)


@contextlib.contextmanager
def open_to_all():
    """A folder nobody can read, holding a copy of the binary and library
    (the build folder may not be reachable to other users)."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="modelfs-nobody-"))
    try:
        folder.chmod(0o755)
        shutil.copy2(MODELFS, folder / "modelfs")
        build = MODELFS.parent
        for library in build.glob("libmodelfs.so*"):
            shutil.copy2(library, folder / library.name, follow_symlinks=False)
        (folder / "mnt").mkdir()
        os.chown(folder / "mnt", NOBODY, NOBODY)
        small_model(folder).chmod(0o644)
        yield folder
    finally:
        unmount(folder / "mnt")
        shutil.rmtree(folder, ignore_errors=True)


def test_readahead_kb_as_a_user_is_ignored_with_one_warning():
    with open_to_all() as d:
        script = f"""
mknod -m 0666 {d}/fuse c 10 229
mount --bind {d}/fuse /dev/fuse
trap 'umount -l {d}/mnt 2>/dev/null || true' EXIT
LD_LIBRARY_PATH={d} $AS_NOBODY {d}/modelfs -o readahead_kb=4096 {d}/m.safetensors {d}/mnt
$AS_NOBODY od -A n -t d2 {d}/mnt/enc/b
umount {d}/mnt
"""
        result = run_as_nobody(script)
        if ("mknod" in result.stderr and "Operation not permitted" in result.stderr) or \
                "cannot open /dev/fuse" in result.stderr:
            pytest.skip(f"no usable device node in {d} (nodev?): {result.stderr.strip()}")
        assert result.returncode == 0, result.stderr
        warnings = [line for line in result.stderr.splitlines() if "readahead_kb" in line]
        assert warnings == ["modelfs: warning: -o readahead_kb=4096 is ignored: only root may set a "
                            "mount's readahead (the kernel's 128 KiB stays)"], result.stderr
        assert result.stdout.split() == ["1", "1", "1"]


@pytest.mark.parametrize("mode, group, hint", [
    ("0600", "root", "sudo chmod 0666 /dev/fuse"),
    ("0660", "disk", "sudo usermod -aG disk"),
])
def test_dev_fuse_not_permitted_gets_a_hint(mode, group, hint):
    with open_to_all() as d:
        script = f"""
touch {d}/fuse && chmod {mode} {d}/fuse && chgrp {group} {d}/fuse
mount --bind {d}/fuse /dev/fuse
LD_LIBRARY_PATH={d} $AS_NOBODY {d}/modelfs {d}/m.safetensors {d}/mnt
"""
        result = run_as_nobody(script)
        assert result.returncode == 1, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "cannot open /dev/fuse: Permission denied" in lines[0] and hint in lines[0], lines[0]
        assert f"mode {mode}, group {group}" in lines[0]
        assert not is_mounted(d / "mnt")


def as_nobody(*command):
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command],
                          capture_output=True, text=True, timeout=30)


def test_other_users_read_only_with_allow_other():
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv")
    # Outside pytest's 0700 tmp folder, so that `nobody` can reach the mountpoint.
    top = pathlib.Path(tempfile.mkdtemp(prefix="modelfs-other-"))
    try:
        os.chmod(top, 0o755)
        values = np.arange(6, dtype=np.float32)
        model = st.write(top / "m.safetensors", {"w": values})
        os.chmod(model, 0o644)
        mnt = top / "mnt"
        mnt.mkdir(mode=0o755)
        os.chmod(mnt, 0o755)
        # The mountpoint itself is open to nobody before mounting.
        assert as_nobody("ls", str(mnt)).returncode == 0
        try:
            result = run_modelfs(model, mnt)
            assert result.returncode == 0, result.stderr
            assert (mnt / "w").read_bytes() == values.tobytes()  # the owner reads
            denied = as_nobody("cat", str(mnt / "w"))
            assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied
            assert as_nobody("ls", str(mnt)).returncode != 0
        finally:
            unmount(mnt)
        try:
            result = run_modelfs("-o", "allow_other", model, mnt)
            assert result.returncode == 0, result.stderr
            allowed = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                      "cat", str(mnt / "w")], capture_output=True, timeout=30)
            assert allowed.returncode == 0, allowed.stderr
            assert allowed.stdout == values.tobytes()
            # Read-only for them as for everyone.
            assert as_nobody("touch", str(mnt / "new")).returncode != 0
        finally:
            unmount(mnt)
    finally:
        shutil.rmtree(top)
