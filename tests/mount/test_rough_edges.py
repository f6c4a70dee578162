"""Rough edges a user hits on the command line and through the mount:
libfuse's messages one line each, options that a non-root user cannot
use said so, `-u`, the FUSE device's permissions, `--check --json`,
`--info` of a long GGUF array, the names in `files`, and extended
attributes listed (empty) without -o xattr."""
import contextlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import gguf_writer as gw
import safetensors_writer as st
from conftest import MODELFS, is_mounted, mounted, run_modelfs, unmount

NOBODY = 65534


def small_model(folder):
    return st.write(pathlib.Path(folder) / "m.safetensors",
                    {"enc.w": np.arange(12, dtype=np.float32).reshape(3, 4), "enc.b": np.ones(3, np.int16)})


def test_libfuse_message_in_pieces_is_one_line(tmp):
    model = small_model(tmp)
    mnt = tmp / "mnt"
    mnt.mkdir()
    try:
        result = run_modelfs("-o", "bogus", model, mnt)
        assert result.returncode == 1, result
        lines = result.stderr.splitlines()
        assert lines == ["modelfs: error: fuse: unknown option(s): `-o bogus'"], result.stderr
        assert not is_mounted(mnt)
    finally:
        unmount(mnt)


def test_unmount_shorthand(tmp):
    model = small_model(tmp)
    with mounted(model) as mnt:
        result = run_modelfs("-u", mnt)
        assert result.returncode == 0, result.stderr
        assert not is_mounted(mnt)
    alone = run_modelfs("-u")
    assert alone.returncode == 1 and "-u MOUNTPOINT" in alone.stderr, alone
    two = run_modelfs("-u", tmp, tmp)
    assert two.returncode == 1 and "-u takes the mountpoint alone" in two.stderr, two
    not_mounted = run_modelfs("--unmount", tmp)
    assert not_mounted.returncode == 1 and "fusermount3" in not_mounted.stderr, not_mounted
    assert "-u MOUNTPOINT" in run_modelfs("--help").stdout


def test_check_json_reports_what_was_checked(tmp):
    model = small_model(tmp)
    result = run_modelfs("--check", "--json", model)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc == {"model": str(model), "format": "safetensors", "ok": True, "tensors_checked": 2,
                   "bytes_read": 12 * 4 + 3 * 2, "integrity_checks_passed": 0, "fault": None}
    text = run_modelfs("--check", model)
    assert text.returncode == 0 and "2 tensors, 54 bytes read back" in text.stdout


def test_check_json_names_the_first_fault(tmp):
    torch = pytest.importorskip("torch")
    path = tmp / "m.pt"
    torch.save({"a": torch.arange(1000, dtype=torch.float32), "b": torch.ones(8)}, path)
    blob = bytearray(path.read_bytes())
    data = bytes(np.arange(1000, dtype=np.float32).tobytes())
    at = blob.find(data)
    assert at > 0
    blob[at + 100] ^= 0xFF  # a stored member's bytes no longer match its CRC-32
    path.write_bytes(bytes(blob))
    result = run_modelfs("--check", "--json", path)
    assert result.returncode == 2, result
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["format"] == "pytorch"
    assert doc["tensors_checked"] == 2 and doc["bytes_read"] == 4000 + 32
    fault = doc["fault"]
    assert fault["file"] == str(path) and fault["format"] == "ZIP archive"
    assert "CRC-32 is" in fault["reason"] and fault["message"] in result.stderr
    # Checks before the fault passed: libzip's reading of the directory and
    # the members ahead of the broken one.
    assert doc["integrity_checks_passed"] >= 1
    assert len(result.stderr.strip().splitlines()) == 1

    bad = tmp / "bad.safetensors"
    bad.write_bytes(b"\x10" + b"\0" * 7 + b"{")
    result = run_modelfs("--check", "--json", bad)
    assert result.returncode == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["tensors_checked"] == 0 and doc["format"] is None
    assert doc["fault"]["file"] == str(bad) and doc["fault"]["format"] == "safetensors"
    refused = run_modelfs("--json", bad)
    assert refused.returncode == 1 and "--list, --info or --check" in refused.stderr


def test_info_shortens_long_arrays_but_json_keeps_them(tmp):
    vocab = [f"tok{i}" for i in range(32000)]
    model = gw.write(tmp / "vocab.gguf", [("general.architecture", gw.Value(gw.STRING, "llama")),
                                          ("tokenizer.ggml.tokens", gw.Array(gw.STRING, vocab)),
                                          ("small", gw.Array(gw.INT32, [1, 2, 3]))],
                     [gw.Tensor("w", 0, [2], np.ones(2, np.float32).tobytes())])
    result = run_modelfs("--info", model)
    assert result.returncode == 0, result.stderr
    assert max(map(len, result.stdout.splitlines())) < 1000
    assert '"tok0","tok1","tok2","tok3","tok4",… (32000 items)' in result.stdout.replace(", ", ",")
    assert "tok5" not in result.stdout
    assert re.search(r"1,\s*2,\s*3\]", result.stdout), "short arrays stay whole"
    whole = json.loads(run_modelfs("--info", "--json", model).stdout)
    assert len(re.findall(r"\"tok\d", json.dumps(whole))) == 32000
    with mounted(model) as mnt:
        assert len(re.findall(r"\"tok\d", (mnt / ".modelfs" / "metadata.json").read_text())) == 32000


def test_files_are_named_relative_to_the_model_however_it_was_given(tmp):
    """`files` holds the names each tensor's `source.file` uses: the model
    file's own name (shards and external data as the model names them), the
    same wherever the command runs and however the path was written."""
    model = small_model(tmp)
    (tmp / "sub").mkdir()
    for given, cwd in ((model, None), (pathlib.Path("m.safetensors"), tmp), (pathlib.Path("../m.safetensors"), tmp / "sub")):
        info = json.loads(run_modelfs("--info", "--json", given, cwd=cwd).stdout)
        assert info["files"] == ["m.safetensors"], (given, info["files"])
        listing = json.loads(run_modelfs("--list", "--json", given, cwd=cwd).stdout)
        assert {t["source"]["file"] for t in listing["tensors"]} <= set(info["files"])


def test_listxattr_answers_an_empty_list_without_the_xattr_option(tmp):
    model = small_model(tmp)
    with mounted(model) as mnt:
        assert os.listxattr(mnt / "enc" / "w") == []
        getfattr = subprocess.run(["getfattr", "-d", "-R", str(mnt)], capture_output=True, text=True)
        assert getfattr.returncode == 0 and getfattr.stdout == "" and getfattr.stderr == "", getfattr
        tar = subprocess.run(["tar", "--xattrs", "-cf", "/dev/null", "-C", str(mnt), "."],
                             capture_output=True, text=True)
        assert tar.returncode == 0 and tar.stderr == "", tar.stderr
        with pytest.raises(OSError):  # getxattr still ENOSYS: the kernel stops asking
            os.getxattr(mnt / "enc" / "w", "user.modelfs.dtype")
    with mounted(model, "-o", "xattr") as mnt:
        assert sorted(os.listxattr(mnt / "enc" / "w")) == ["user.modelfs.dtype", "user.modelfs.shape"]
        assert os.getxattr(mnt / "enc" / "w", "user.modelfs.dtype") == b"float32"


def test_ls_l_sends_no_attribute_request_per_file(tmp):
    tensors = {f"layer{i}.w": np.zeros(2, np.float32) for i in range(40)}
    model = st.write(tmp / "many.safetensors", tensors)
    mnt = tmp / "mnt"
    mnt.mkdir()
    log = tmp / "debug.log"
    with open(log, "w") as out:
        process = subprocess.Popen([str(MODELFS), "-d", "-s", str(model), str(mnt)], stdout=out, stderr=out)
    try:
        for _ in range(200):
            if is_mounted(mnt):
                break
            assert process.poll() is None, log.read_text()[-2000:]
            subprocess.run(["sleep", "0.05"])
        subprocess.run(["ls", "-lR", str(mnt)], check=True, capture_output=True)
        subprocess.run(["ls", "-lR", str(mnt)], check=True, capture_output=True)
    finally:
        unmount(mnt)
        process.wait(timeout=30)
    requests = re.findall(r"opcode: ((?:GET|LIST)XATTR)", log.read_text())
    # At most the first GETXATTR (answered ENOSYS, after which the kernel
    # stops asking); 40 folders of files list nothing.
    assert len(requests) <= 2, requests


# ----- as a user other than root -------------------------------------------

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
