# SPDX-License-Identifier: Apache-2.0
"""Hostile input, round two, at the command line: what a person reads
(the --list table, one-line messages), files that would block an open
(FIFOs), files a model names that lie outside its folder, and mountpoints
as they are found in practice (a volume's mount root, a mount whose daemon
was killed). Every mount a test makes is undone in its `finally`."""
import contextlib
import json
import os
import pathlib
import shutil
import signal
import struct
import subprocess
import tempfile
import time

import numpy as np
import pytest

import gguf_writer as gw
import safetensors_writer as st
import conftest
from conftest import is_mounted, one_line, unmount

ELLIPSIS = "\u2026"


def run_modelfs(*args, timeout=30):
    """modelfs with a deadline: a hang is a failure, not a stuck suite
    (subprocess kills the child when the deadline passes)."""
    return conftest.run_modelfs(*args, timeout=timeout, errors="replace")


def safetensors_header(header, data=b""):
    text = json.dumps(header).encode() if not isinstance(header, (bytes, str)) else header
    text = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(text)) + text + data


def top_mount(path):
    """(fstype, source) of the topmost mount at `path`, or None."""
    path = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4].encode().decode("unicode_escape") == path:
                rest = fields[fields.index("-") + 1:]
                found = (rest[0], rest[1])
    return found


def daemon_pid(log):
    """The serving daemon's pid, from its log file's first line."""
    for _ in range(100):
        text = log.read_text() if log.exists() else ""
        if " pid " in text:
            return int(text.split(" pid ")[1].split()[0])
        time.sleep(0.05)
    raise AssertionError(f"no pid in the log: {text!r}")


def kill_and_wait(pid):
    os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        if not os.path.exists(f"/proc/{pid}"):
            return
        time.sleep(0.05)
    raise AssertionError(f"daemon {pid} survived SIGKILL")


# --- 6. --list caps the name column -----------------------------------------

def test_list_caps_the_name_column_and_json_keeps_names_whole(tmp):
    long_name = "x" * 100_000
    tensors = {f"layer.{i}.w": np.zeros(1, np.float32) for i in range(1000)}
    tensors[long_name] = np.ones(2, np.float32)
    model = st.write(tmp / "long.safetensors", tensors)
    result = run_modelfs("--list", model)
    assert result.returncode == 0, result.stderr
    # About a hundred columns a row, not 100 000 (that was 100 MB).
    assert len(result.stdout) < 300_000, len(result.stdout)
    lines = result.stdout.split("\n")
    cut = [line for line in lines if line.startswith("x" * 79 + ELLIPSIS)]
    assert len(cut) == 1 and "float32" in cut[0] and "[2]" in cut[0], cut
    assert "x" * 80 not in result.stdout
    assert max(len(line) for line in lines) < 140
    # Aligned: every table row has its dtype in the same column.
    rows = [line for line in lines[1:] if line.startswith("layer.")]
    assert len({line.index("float32") for line in rows + cut}) == 1
    listed = json.loads(run_modelfs("--list", "--json", model).stdout)
    assert long_name in {t["name"] for t in listed["tensors"]}


# --- 7. a NUL in a name does not cut the message ----------------------------

def test_nul_in_a_tensor_name_keeps_the_reason(tmp):
    header = '{"a\\u0000b\\u001b[31m": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}'
    model = tmp / "nul.safetensors"
    model.write_bytes(safetensors_header(header, b"\0" * 4))
    for command in (("--list",), ("--check",), ()):
        mnt = tmp / "mnt"
        mnt.mkdir(exist_ok=True)
        result = run_modelfs(*command, model, *(() if command else (mnt,)))
        assert result.returncode == 2, (command, result.stderr)
        line = one_line(result.stderr)
        assert 'tensor "a\\x00b\\x1b[31m": data_offsets span 4 bytes but shape and dtype need 8' in line, line
        assert "\x1b" not in line and "\0" not in line
        assert not is_mounted(mnt)


def onnx_with_external_weight(path, location):
    """An .onnx whose one initializer "w" (4 float32) lies in external data at `location`."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    t = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in {"location": location, "offset": "0", "length": "16"}.items():
        t.external_data.add(key=key, value=value)
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])],
                              initializer=[t])
    path.write_bytes(helper.make_model(graph).SerializeToString())
    return path


def test_nul_in_an_onnx_external_location_keeps_the_reason(tmp):
    model = onnx_with_external_weight(tmp / "nul.onnx", "a\0b\x1b[31m.bin")
    result = run_modelfs("--list", model)
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert 'external data location "a\\x00b\\x1b[31m.bin" contains a NUL byte' in line, line


# --- 8. FIFOs are refused, never opened for reading -------------------------

def assert_refused_as_fifo(result, name):
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert name in line and "FIFO" in line and "not a regular file" in line, line


def test_fifo_as_the_model_is_refused(tmp):
    fifo = tmp / "model.safetensors"
    os.mkfifo(fifo)
    for command in ("--list", "--info", "--check"):
        assert_refused_as_fifo(run_modelfs(command, fifo), "model.safetensors")
    mnt = tmp / "mnt"
    mnt.mkdir()
    try:
        assert_refused_as_fifo(run_modelfs(fifo, mnt), "model.safetensors")
        assert not is_mounted(mnt)
    finally:
        unmount(mnt)


def test_fifo_named_by_a_sharded_index_is_refused(tmp):
    folder = tmp / "sharded"
    folder.mkdir()
    st.write(folder / "a.safetensors", {"x": np.zeros(4, np.float32)})
    os.mkfifo(folder / "b.safetensors")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}))
    # The index named, and its folder (the folder's only index names the FIFO).
    assert_refused_as_fifo(run_modelfs("--list", folder / "model.safetensors.index.json"), "b.safetensors")
    assert_refused_as_fifo(run_modelfs("--list", folder), "b.safetensors")
    torch_folder = tmp / "torch"
    torch_folder.mkdir()
    os.mkfifo(torch_folder / "pytorch_model-00001-of-00001.bin")
    (torch_folder / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {"w": "pytorch_model-00001-of-00001.bin"}}))
    assert_refused_as_fifo(run_modelfs("--list", torch_folder), "pytorch_model-00001-of-00001.bin")


def test_fifo_as_onnx_external_data_or_gguf_split_member_is_refused(tmp):
    onnx_with_external_weight(tmp / "m.onnx", "w.bin")
    os.mkfifo(tmp / "w.bin")
    result = run_modelfs("--list", tmp / "m.onnx")
    assert result.returncode == 2 and "w.bin" in result.stderr and "not a regular file" in result.stderr

    folder = tmp / "split"
    folder.mkdir()
    tensors = [gw.random_tensor(f"t{i}", 0, [4], i) for i in range(2)]
    paths = gw.write_split(folder, "m", [], tensors, 2)
    os.remove(paths[1])
    os.mkfifo(paths[1])
    for model in (paths[0], folder):
        assert_refused_as_fifo(run_modelfs("--list", model), "m-00002-of-00002.gguf")


# --- 10. files a model names stay inside its folder -------------------------

def outside_secret(tmp):
    outside = tmp / "outside"
    outside.mkdir()
    st.write(outside / "secret.safetensors", {"x": np.arange(4, dtype=np.float32)})
    return outside


def assert_refused_as_outside(result, name):
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert name in line and "outside the model's folder" in line, line


def test_shard_symlink_out_of_the_folder_is_refused(tmp):
    outside = outside_secret(tmp)
    folder = tmp / "model"
    folder.mkdir()
    (folder / "link.safetensors").symlink_to("../outside/secret.safetensors")
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"x": "link.safetensors"}}))
    assert_refused_as_outside(run_modelfs("--list", index), "link.safetensors")
    mnt = tmp / "mnt"
    mnt.mkdir()
    try:
        assert_refused_as_outside(run_modelfs(folder, mnt), "link.safetensors")
        assert not is_mounted(mnt)
    finally:
        unmount(mnt)
    # A link through a folder that leaves, too.
    (folder / "linkdir").symlink_to(outside)
    index.write_text(json.dumps({"weight_map": {"x": "linkdir/secret.safetensors"}}))
    assert_refused_as_outside(run_modelfs("--list", index), "linkdir/secret.safetensors")
    # A link that stays inside is followed.
    (folder / "real").mkdir()
    shutil.copy(outside / "secret.safetensors", folder / "real" / "a.safetensors")
    (folder / "inside.safetensors").symlink_to("real/a.safetensors")
    index.write_text(json.dumps({"weight_map": {"x": "inside.safetensors"}}))
    result = run_modelfs("--list", "--json", index)
    assert result.returncode == 0, result.stderr
    assert [t["name"] for t in json.loads(result.stdout)["tensors"]] == ["x"]


def test_hub_cache_snapshot_links_to_its_blobs_are_followed(tmp):
    """The Hugging Face hub cache: every file of a snapshot is a link to
    ../../blobs/HASH of its repository; those are inside, nothing else is."""
    repo = tmp / "hub" / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    expected = {}
    weight_map = {}
    for i in range(2):
        name = f"model-0000{i + 1}-of-00002.safetensors"
        values = np.full(3, i, np.float32)
        st.write(repo / "blobs" / f"blob{i}", {f"w{i}": values})
        (snapshot / name).symlink_to(f"../../blobs/blob{i}")
        expected[f"w{i}"] = values.tobytes()
        weight_map[f"w{i}"] = name
    (repo / "blobs" / "index").write_text(json.dumps({"weight_map": weight_map}))
    (snapshot / "model.safetensors.index.json").symlink_to("../../blobs/index")
    mnt = tmp / "mnt"
    mnt.mkdir()
    try:
        result = run_modelfs(snapshot, mnt)
        assert result.returncode == 0, result.stderr
        assert {name: (mnt / name).read_bytes() for name in expected} == expected
    finally:
        unmount(mnt)
    # Out of the repository's blobs/: refused as anywhere else.
    outside = outside_secret(tmp)
    (snapshot / "model-00002-of-00002.safetensors").unlink()
    (snapshot / "model-00002-of-00002.safetensors").symlink_to(outside / "secret.safetensors")
    assert_refused_as_outside(run_modelfs("--list", snapshot), "model-00002-of-00002.safetensors")


def test_torch_shard_and_gguf_member_symlinks_out_of_the_folder_are_refused(tmp):
    torch = pytest.importorskip("torch")
    outside = tmp / "outside"
    outside.mkdir()
    torch.save({"w": torch.zeros(2)}, outside / "secret.bin")
    folder = tmp / "torch"
    folder.mkdir()
    (folder / "pytorch_model-00001-of-00001.bin").symlink_to(outside / "secret.bin")
    (folder / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {"w": "pytorch_model-00001-of-00001.bin"}}))
    assert_refused_as_outside(run_modelfs("--list", folder), "pytorch_model-00001-of-00001.bin")

    split = tmp / "split"
    split.mkdir()
    tensors = [gw.random_tensor(f"t{i}", 0, [4], i) for i in range(2)]
    paths = gw.write_split(split, "m", [], tensors, 2)
    os.rename(paths[1], outside / "elsewhere.gguf")
    os.symlink(outside / "elsewhere.gguf", paths[1])
    for model in (paths[0], split):
        assert_refused_as_outside(run_modelfs("--list", model), "m-00002-of-00002.gguf")
    # The member the user names is theirs to place anywhere.
    os.remove(paths[1])
    os.rename(outside / "elsewhere.gguf", paths[1])
    os.rename(paths[0], outside / "first.gguf")
    os.symlink(outside / "first.gguf", paths[0])
    result = run_modelfs("--list", paths[0])
    assert result.returncode == 0, result.stderr


# --- 9. a mount root as mountpoint; 11. a mount whose daemon was killed -----

@contextlib.contextmanager
def tmpfs(path):
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "none", str(path)], check=True)
    try:
        yield path
    finally:
        if top_mount(path) and top_mount(path)[0].startswith("fuse"):
            subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True)
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_empty_mount_root_is_a_mountpoint_like_any_other(tmp):
    model = st.write(tmp / "m.safetensors", {"w": np.arange(3, dtype=np.float32)})
    with tmpfs(tmp / "volume") as mnt:
        for options in ((), ("-o", "nonempty")):
            result = run_modelfs(*options, model, mnt)
            try:
                assert result.returncode == 0, (options, result.stderr)
                assert top_mount(mnt)[0] == "fuse.modelfs"
                assert (mnt / "w").read_bytes() == np.arange(3, dtype=np.float32).tobytes()
                # modelfs itself there: refused, naming the mount and the fix.
                busy = run_modelfs(model, mnt)
                assert busy.returncode == 1
                line = one_line(busy.stderr)
                assert "already mounted" in line and f"fusermount3 -u {mnt}" in line, line
            finally:
                subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
            assert top_mount(mnt)[0] == "tmpfs"
        # A volume with files in it still needs -o nonempty.
        (mnt / "file").write_text("x")
        result = run_modelfs(model, mnt)
        assert result.returncode == 1 and "not empty" in one_line(result.stderr)
        assert top_mount(mnt)[0] == "tmpfs"


def test_mount_after_the_daemon_was_killed_names_the_fix(tmp):
    model = st.write(tmp / "m.safetensors", {"w": np.arange(3, dtype=np.float32)})
    mnt = tmp / "mnt"
    mnt.mkdir()
    log = tmp / "daemon.log"
    try:
        result = run_modelfs("-o", f"log_file={log}", model, mnt)
        assert result.returncode == 0, result.stderr
        assert (mnt / "w").read_bytes() == np.arange(3, dtype=np.float32).tobytes()
        kill_and_wait(daemon_pid(log))
        again = run_modelfs(model, mnt)
        assert again.returncode == 1
        line = one_line(again.stderr)
        assert "Transport endpoint is not connected" in line and f"fusermount3 -u {mnt}" in line, line
        assert "already mounted" not in line
        # The fix it names works, and then so does mounting.
        assert subprocess.run(["fusermount3", "-u", str(mnt)]).returncode == 0
        assert not is_mounted(mnt)
        result = run_modelfs(model, mnt)
        assert result.returncode == 0, result.stderr
        assert (mnt / "w").read_bytes() == np.arange(3, dtype=np.float32).tobytes()
    finally:
        unmount(mnt)


# --- a killed daemon under a reader; other users and allow_other ------------

def test_sigkill_mid_read_fails_the_reader_and_fusermount_recovers(tmp):
    size = 1 << 30  # sparse: no disk, and direct reads keep it out of the page cache
    model = tmp / "big.safetensors"
    with open(model, "wb") as f:
        f.write(safetensors_header({"big": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}))
        f.truncate(f.tell() + size)
    mnt = tmp / "mnt"
    mnt.mkdir()
    log = tmp / "daemon.log"
    reader = None
    try:
        result = run_modelfs("-o", f"log_file={log}", model, mnt)
        assert result.returncode == 0, result.stderr
        pid = daemon_pid(log)
        # Direct 4 KiB reads: every one a request to the daemon, so the read
        # is long (minutes for 1 GiB) and in flight when the daemon dies.
        reader = subprocess.Popen(["dd", f"if={mnt / 'big'}", "of=/dev/null", "bs=4k", "iflag=direct"],
                                  stderr=subprocess.PIPE, text=True)
        position = 0
        for _ in range(200):
            with contextlib.suppress(OSError):
                position = int(pathlib.Path(f"/proc/{reader.pid}/fdinfo/0").read_text().split()[1])
            if position >= 1 << 20:
                break
            time.sleep(0.05)
        assert 1 << 20 <= position < size, position
        kill_and_wait(pid)
        # The reader gets an error, promptly; it does not hang.
        _, err = reader.communicate(timeout=30)
        assert reader.returncode != 0, err
        # ECONNABORTED for the read in flight, ENOTCONN for any after it.
        assert ("Software caused connection abort" in err or "Transport endpoint is not connected" in err
                or "Input/output error" in err), err
        assert subprocess.run(["fusermount3", "-u", str(mnt)]).returncode == 0
        assert not is_mounted(mnt)
        result = run_modelfs(model, mnt)
        assert result.returncode == 0, result.stderr
        assert subprocess.run(["dd", f"if={mnt / 'big'}", "of=/dev/null", "bs=1M", "count=4"],
                              capture_output=True).returncode == 0
    finally:
        if reader is not None and reader.poll() is None:
            reader.kill()
            reader.wait()
        unmount(mnt)


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
