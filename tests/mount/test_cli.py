# SPDX-License-Identifier: Apache-2.0
"""The command line: bad models refused before mounting (exit 2, one line
naming file, format, offset and reason), libfuse's messages one line each,
`-u`, `--check --json`, the names in `files`, mountpoint mistakes and
mountpoints as found in practice (a volume's mount root, a mount whose
daemon was killed), signals, and a daemon killed under a reader."""
import contextlib
import json
import os
import pathlib
import signal
import struct
import subprocess
import threading
import time

import numpy as np
import pytest

import safetensors_writer as st
from conftest import MODELFS, is_mounted, mounted, one_line, run_modelfs, unmount


def header_file(header, data=b""):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


BAD_MODELS = {
    "truncated.safetensors": lambda good: good[:-3],
    "header_past_end.safetensors": lambda good: struct.pack("<Q", 10**6) + good[8:],
    "not_json.safetensors": lambda good: struct.pack("<Q", 5) + b"{nope",
    "hole.safetensors": lambda good: header_file(
        {"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
    "overlap.safetensors": lambda good: header_file(
        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
    "bad_dtype.safetensors": lambda good: header_file(
        {"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"\0"),
    "wrong_size.safetensors": lambda good: header_file(
        {"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8),
    "overflow.safetensors": lambda good: header_file(
        {"w": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 4]}}, b"\0" * 4),
    "random.bin": lambda good: os.urandom(4096),
    "empty.safetensors": lambda good: b"",
}


@pytest.mark.parametrize("name", sorted(BAD_MODELS))
def test_bad_model_exits_2_names_the_file_and_mounts_nothing(tmp, name):
    good = st.to_bytes({"w": np.arange(4, dtype=np.float32)})
    model = tmp / name
    model.write_bytes(BAD_MODELS[name](good))
    mnt = tmp / "mnt"
    mnt.mkdir()
    try:
        result = run_modelfs(model, mnt)
        assert result.returncode == 2, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert str(model) in lines[0]
        assert ": at byte " in lines[0], lines[0]
        assert not is_mounted(mnt)
        for command in ("--list", "--info", "--check"):
            result = run_modelfs(command, model)
            assert result.returncode == 2 and str(model) in result.stderr, (command, result)
    finally:
        unmount(mnt)


def test_missing_model_and_folder_without_model(tmp):
    mnt = tmp / "mnt"
    mnt.mkdir()
    result = run_modelfs(tmp / "nope.safetensors", mnt)
    assert result.returncode == 2 and "nope.safetensors" in result.stderr
    empty = tmp / "empty_folder"
    empty.mkdir()
    result = run_modelfs(empty, mnt)
    assert result.returncode == 2 and "empty_folder" in result.stderr
    assert not is_mounted(mnt)


def test_mountpoint_mistakes_get_clear_messages(tmp):
    model = st.write(tmp / "m.safetensors", {"w": np.zeros(2, np.float32)})
    missing = run_modelfs(model, tmp / "does-not-exist")
    assert missing.returncode == 1 and "does-not-exist" in missing.stderr
    a_file = tmp / "file"
    a_file.write_text("x")
    not_dir = run_modelfs(model, a_file)
    assert not_dir.returncode == 1 and "not a directory" in not_dir.stderr
    full = tmp / "full"
    full.mkdir()
    (full / "something").write_text("x")
    nonempty = run_modelfs(model, full)
    assert nonempty.returncode == 1 and "not empty" in nonempty.stderr
    assert not is_mounted(full)
    with mounted(model, "-o", "nonempty", mountpoint=full):
        assert (full / "w").is_file()
    with mounted(model) as mnt:
        busy = run_modelfs(model, mnt)
        assert busy.returncode == 1 and "already mounted" in busy.stderr
    usage = run_modelfs(model)
    assert usage.returncode == 1 and "mountpoint" in usage.stderr


def test_check_reads_everything_and_says_ok(tmp):
    model = st.write(tmp / "m.safetensors", {"a.w": np.ones((300, 300), np.float32), "b": np.zeros(3, np.int8)})
    result = run_modelfs("--check", model)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout and "2 tensors" in result.stdout and str(300 * 300 * 4 + 3) in result.stdout
    info = run_modelfs("--info", "--json", model)
    assert info.returncode == 0
    doc = json.loads(info.stdout)
    assert (doc["format"], doc["tensors"], doc["nbytes"]) == ("safetensors", 2, 300 * 300 * 4 + 3)


def test_help_and_version():
    result = run_modelfs("--help")
    assert result.returncode == 0 and "MODEL MOUNTPOINT" in result.stdout and "--list" in result.stdout
    version = run_modelfs("--version")
    assert version.returncode == 0 and version.stdout.startswith("modelfs ")


def wait_mounted(path, process, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if is_mounted(path):
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    raise AssertionError("mount did not appear")


@contextlib.contextmanager
def foreground(model, mnt, *options, prefix=()):
    """modelfs -f serving `model` at `mnt` (run under `prefix`, a command such
    as taskset); yields the process once mounted, and unmounts and reaps it
    at the end, also when the mount never appeared."""
    process = subprocess.Popen([*prefix, str(MODELFS), "-f", *options, str(model), str(mnt)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_mounted(mnt, process)
        yield process
    finally:
        unmount(mnt)
        if process.poll() is None:
            process.kill()
        process.wait()


@contextlib.contextmanager
def busy_reading(mnt, names, expected):
    """Threads reading `names` under `mnt` over and over until the block
    ends (the mount may go away under them: that ends a reader quietly).
    A read that completes with bytes other than `expected` is a failure."""
    stop = threading.Event()
    wrong = []

    def reader():
        while not stop.is_set():
            for name in names:
                try:
                    data = (mnt / name).read_bytes()
                except OSError:
                    return
                if data != expected:
                    wrong.append(name)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.3)  # requests in flight on every worker
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not wrong, f"reads returned wrong bytes: {wrong[:5]}"


BIG = np.arange(1 << 20, dtype=np.float32)  # 4 MiB: each read is many requests


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "reading"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_unmount_cleanly(tmp, sig, busy):
    model = st.write(tmp / "m.safetensors", {"w": np.arange(8, dtype=np.float32), "big": BIG})
    mnt = tmp / "mnt"
    mnt.mkdir()
    with foreground(model, mnt) as process:
        assert (mnt / "w").read_bytes() == np.arange(8, dtype=np.float32).tobytes()
        with busy_reading(mnt, ["big"], BIG.tobytes()) if busy else contextlib.nullcontext():
            process.send_signal(sig)
            assert process.wait(timeout=20) == 0, process.communicate()
        assert not is_mounted(mnt)


@pytest.mark.parametrize("loop", [[], ["-s"]], ids=["per-cpu", "single"])
def test_unmount_ends_the_daemon(tmp, loop):
    model = st.write(tmp / "m.safetensors", {"w": np.arange(8, dtype=np.float32)})
    mnt = tmp / "mnt"
    mnt.mkdir()
    with foreground(model, mnt, *loop) as process:
        # A just-closed file can keep the mount busy for a moment (the kernel
        # finishes the release asynchronously): retry as a script would.
        for _ in range(40):
            if subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        assert process.wait(timeout=20) == 0


def test_lazy_unmount_while_reading_ends_the_daemon(tmp):
    model = st.write(tmp / "m.safetensors", {"big": BIG})
    mnt = tmp / "mnt"
    mnt.mkdir()
    with foreground(model, mnt) as process:
        with busy_reading(mnt, ["big"], BIG.tobytes()):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=True, capture_output=True)
        assert process.wait(timeout=20) == 0, process.communicate()


def thread_names(pid):
    return [(task / "comm").read_text().strip() for task in pathlib.Path(f"/proc/{pid}/task").iterdir()]


@pytest.mark.parametrize("options, most", [((), 10), (("-o", "max_threads=2"), 2), (("-s",), 0)],
                         ids=["default", "max_threads=2", "single"])
def test_requests_are_served_by_at_most_max_threads_workers(tmp, options, most):
    model = st.write(tmp / "m.safetensors", {"big": BIG})
    mnt = tmp / "mnt"
    mnt.mkdir()
    with foreground(model, mnt, "-o", "readahead_kb=0", *options) as process:
        with busy_reading(mnt, ["big"], BIG.tobytes()):
            names = thread_names(process.pid)
        # Beside the workers: the main thread and the read-ahead thread.
        assert len(names) == 2 + names.count("worker"), names
        assert names.count("worker") <= most, names
        if most:
            assert names.count("worker") >= 1, names


def test_a_tree_walk_is_served_by_one_thread(tmp):
    values = {f"layer{i}.w{j}": np.full(4, i, np.float32) for i in range(50) for j in range(20)}
    model = st.write(tmp / "m.safetensors", {**values, "big": BIG})
    mnt = tmp / "mnt"
    mnt.mkdir()
    with foreground(model, mnt) as process:
        walk = subprocess.run(["find", str(mnt)], capture_output=True, text=True, check=True)
        assert len(walk.stdout.splitlines()) > 3 * len(values)
        subprocess.run(["ls", "-lR", str(mnt)], capture_output=True, check=True)
        # Lookups, attributes and listings come one at a time: one worker
        # answers them all.
        assert thread_names(process.pid).count("worker") == 1
        # Reads are served side by side: another worker waits for requests
        # while one reads.
        with busy_reading(mnt, ["big"], BIG.tobytes()):
            assert thread_names(process.pid).count("worker") >= 2


@pytest.mark.parametrize("options, threads", [((), 1), (("-o", "noprefetch"), 0)], ids=["default", "noprefetch"])
def test_one_read_ahead_thread_unless_noprefetch(tmp, options, threads):
    model = st.write(tmp / "m.safetensors", {"big": BIG})
    mnt = tmp / "mnt"
    mnt.mkdir()
    with foreground(model, mnt, *options) as process:
        with busy_reading(mnt, ["big"], BIG.tobytes()):
            names = [(task / "comm").read_text().strip()
                     for task in pathlib.Path(f"/proc/{process.pid}/task").iterdir()]
        assert names.count("read-ahead") == threads, names


def test_max_threads_of_zero_is_refused(tmp):
    model = st.write(tmp / "m.safetensors", {"w": np.arange(8, dtype=np.float32)})
    mnt = tmp / "mnt"
    mnt.mkdir()
    result = run_modelfs("-o", "max_threads=0", model, mnt)
    assert result.returncode == 1
    assert "max_threads" in result.stderr
    assert not is_mounted(mnt)


@pytest.mark.parametrize("option", ["clone_fd", "max_idle_threads=4"])
def test_options_of_libfuses_multithreaded_loop_are_refused(tmp, option):
    model = st.write(tmp / "m.safetensors", {"w": np.arange(8, dtype=np.float32)})
    mnt = tmp / "mnt"
    mnt.mkdir()
    result = run_modelfs("-o", option, model, mnt)
    assert result.returncode == 1
    assert option.split("=")[0] in result.stderr and "max_threads" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not is_mounted(mnt)


def test_log_file_receives_messages_after_detaching(tmp):
    folder = tmp / "ckpt"
    folder.mkdir()
    st.write(folder / "s1.safetensors", {"a": np.zeros(1, np.float32), "extra": np.zeros(1, np.float32)})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "s1.safetensors"}}))
    log = tmp / "modelfs.log"
    with mounted(folder, "-o", f"log_file={log}") as mnt:
        assert (mnt / "extra").is_file(), "a tensor missing from weight_map is still mounted"
        assert "serving" in log.read_text()
    for _ in range(100):
        if "unmounted" in log.read_text():
            break
        time.sleep(0.05)
    assert "unmounted" in log.read_text()
    # the warning about "extra" was written before detaching: it went to stderr
    result = run_modelfs("--list", folder)
    assert "extra" in result.stderr and "weight_map" in result.stderr


# ---- messages, -u, --check --json, the names in `files` ----------------------

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


def test_sigkill_mid_read_fails_the_reader_and_fusermount_recovers(tmp):
    size = 1 << 30  # sparse: no disk, and direct reads keep it out of the page cache
    model = tmp / "big.safetensors"
    with open(model, "wb") as f:
        f.write(header_file({"big": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}))
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
