# SPDX-License-Identifier: Apache-2.0
"""The remote block cache is input, not memory (issue 42): its folder may be
shared or writable by others, a file in it may be a planted link, a user's
file, or cached bytes cut or overwritten between two mounts. Served by the
test's own http.server (test_remote_faults.RangeServer), which records every
range asked for. Oracles: the bytes the test wrote and served
(safetensors_writer, numpy), a victim file's own bytes, the ranges the
server saw."""
import os
import socket
import threading
import time

import numpy as np
import pytest

import safetensors_writer as st
from conftest import cat, index_paths, mounted, one_line, run_modelfs
from remote_servers import free_port, wait_for_port
from test_remote_faults import RangeServer, run_measured, served  # noqa: F401 (fixture)

MIB = 1 << 20
BLOCK = 256 << 10


def model(tensors=4, each=MIB, seed=5):
    rng = np.random.default_rng(seed)
    values = {f"layer{i}.weight": rng.integers(0, 255, size=each, dtype=np.uint8) for i in range(tensors)}
    return values, st.to_bytes(values, None)


def read_all(mnt, values):
    """Every tensor read through the mount with cat, compared with the values written."""
    paths, _ = index_paths(mnt)
    for name, value in values.items():
        assert cat(paths[name]) == value.tobytes(), name


def cache_object(cache):
    """The (only) object in the cache folder: (KEY.data, KEY.blocks)."""
    data = [p for p in cache.iterdir() if p.suffix == ".data"]
    assert len(data) == 1, list(cache.iterdir())
    return data[0], data[0].with_suffix(".blocks")


def check(url, cache, *options):
    return run_modelfs("-o", f"cache_dir={cache}", *options, "--check", url)


# -- links planted in the cache are never followed ------------------------------

@pytest.mark.parametrize("planted", ["data symlink", "record symlink", "data hard link"])
def test_a_link_planted_in_the_cache_is_never_followed(served, tmp, planted):
    values, data = model(tensors=2)
    server = served(data)
    cache = tmp / "cache"
    assert check(server.url, cache).returncode == 0
    data_file, record = cache_object(cache)
    data_file.unlink()
    record.unlink()
    victim = tmp / "victim"
    kept = b"a file of the same user, outside the cache\n" * 1000
    victim.write_bytes(kept)
    victim.chmod(0o600)
    target = record if planted == "record symlink" else data_file
    if planted.endswith("symlink"):
        target.symlink_to(victim)
    else:
        os.link(victim, target)
    result = check(server.url, cache)
    assert victim.read_bytes() == kept, "the planted link was followed: the victim was written"
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert ("symbolic link" if planted.endswith("symlink") else "hard link") in line, line


# -- a folder others own or may write to is refused -----------------------------

def test_a_cache_folder_open_to_others_is_refused(served, tmp):
    values, data = model(tensors=1)
    server = served(data)
    cache = tmp / "cache"
    assert check(server.url, cache).returncode == 0
    cache.chmod(0o777)
    result = check(server.url, cache)
    assert result.returncode == 2, result.stderr
    assert "writable by group or others" in one_line(result.stderr)
    cache.chmod(0o700)
    os.chown(cache, 65534, 65534)
    result = check(server.url, cache)
    assert result.returncode == 2, result.stderr
    assert "owned by user 65534" in one_line(result.stderr)
    os.chown(cache, os.geteuid(), os.getegid())
    with mounted(server.url, "-o", f"cache_dir={cache}") as mnt:
        read_all(mnt, values)


def test_a_missing_cache_folder_is_made_for_the_user_alone(served, tmp):
    _, data = model(tensors=1)
    server = served(data)
    old = os.umask(0o002)  # a umask that would leave group write on a folder
    try:
        assert check(server.url, tmp / "made" / "cache").returncode == 0
    finally:
        os.umask(old)
    for folder in (tmp / "made", tmp / "made" / "cache"):
        assert folder.stat().st_mode & 0o077 == 0, oct(folder.stat().st_mode)


# -- eviction deletes only objects the cache made --------------------------------

def test_eviction_removes_only_objects_the_cache_made(served, tmp):
    _, first = model(tensors=2, seed=1)
    _, second = model(tensors=2, seed=2)
    one, two = served(first), served(second)
    cache = tmp / "cache"
    assert check(one.url, cache).returncode == 0
    earlier, _ = cache_object(cache)
    # A user's files that look like an object by their names only.
    report = {cache / "report.data": os.urandom(MIB), cache / "report.blocks": b"\x01" * 64,
              cache / ("0" * 40 + ".blocks"): b"\x01" * 8, cache / ("0" * 40 + ".data"): os.urandom(MIB)}
    for path, content in report.items():
        path.write_bytes(content)
    assert check(two.url, cache, "-o", "cache_max=1M").returncode == 0
    for path, content in report.items():
        assert path.exists() and path.read_bytes() == content, f"{path.name} was deleted or changed"
    assert not earlier.exists(), "the earlier object (the cache's own) was not evicted"


# -- each block checked against its checksum when read back -----------------------

@pytest.mark.parametrize("damage", ["overwritten", "cut"])
def test_cached_bytes_changed_between_mounts_are_fetched_again(served, tmp, damage):
    values, data = model(tensors=4)
    server = served(data)
    cache = tmp / "cache"
    log = tmp / "modelfs.log"
    with mounted(server.url, "-o", f"cache_dir={cache}") as mnt:
        read_all(mnt, values)
    data_file, _ = cache_object(cache)
    assert data_file.read_bytes() == data
    damaged = len(data) // 2  # inside a tensor, away from the header
    if damage == "overwritten":
        with open(data_file, "r+b") as f:
            f.seek(damaged)
            f.write(b"\xa5" * 4096)
    else:
        os.truncate(data_file, damaged)
    server.ranges.clear()
    time.sleep(0.2)  # the first daemon's lock is gone with it
    with mounted(server.url, "-o", f"cache_dir={cache}", "-o", f"log_file={log}") as mnt:
        read_all(mnt, values)
    fetched = [(first, last) for first, last in server.ranges if last > 0]
    assert any(first <= damaged <= last for first, last in fetched), ("not fetched again", fetched)
    if damage == "overwritten":
        # Only what was damaged: the other blocks came from the cache.
        assert sum(last + 1 - first for first, last in fetched) <= 2 * BLOCK, fetched
    assert data_file.read_bytes() == data
    if damage == "overwritten":
        assert "do not match the checksum" in log.read_text()


# -- two daemons sharing one cache ------------------------------------------------

def test_two_mounts_sharing_one_cache_read_concurrently(served, tmp):
    values, data = model(tensors=8, each=MIB // 2)
    server = served(data)
    cache = tmp / "cache"
    failures = []
    with mounted(server.url, "-o", f"cache_dir={cache}") as a, mounted(server.url, "-o", f"cache_dir={cache}") as b:
        def reader(mnt, order):
            try:
                paths, _ = index_paths(mnt)
                for name in order:
                    got = np.fromfile(paths[name], dtype=np.uint8)
                    if not np.array_equal(got, values[name]):
                        failures.append((mnt, name))
            except Exception as e:  # reported by the test, not lost in a thread
                failures.append((mnt, repr(e)))
        names = list(values)
        threads = [threading.Thread(target=reader, args=(mnt, order))
                   for mnt in (a, b) for order in (names, names[::-1])]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
    assert not failures, failures
    data_file, _ = cache_object(cache)
    assert data_file.read_bytes() == data
    # One daemon's blocks are served by the next from the cache: their marks
    # and checksums agree with the bytes, nothing is fetched again.
    server.ranges.clear()
    with mounted(server.url, "-o", f"cache_dir={cache}") as mnt:
        read_all(mnt, values)
    assert [r for r in server.ranges if r[1] > 0] == [], server.ranges


# -- probes and logs ---------------------------------------------------------------

class ClaimingServer:
    """Answers every request 206 for byte 0 of a 1000-byte object, with a
    Content-Length of 10^15, sends the one byte and holds the connection."""

    def __init__(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/model.safetensors"
        self.stopping = threading.Event()
        self.requests = 0
        self.sock = socket.create_server(("127.0.0.1", self.port))
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        self.sock.settimeout(0.2)
        held = []
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(2)
            try:
                conn.recv(65536)
                self.requests += 1
                conn.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-0/1000\r\n"
                             b"Content-Length: 1000000000000000\r\nETag: \"v1\"\r\n\r\n\x00")
            except OSError:
                pass
            held.append(conn)
        for conn in held:
            conn.close()

    def stop(self):
        self.stopping.set()
        self.thread.join(timeout=10)
        self.sock.close()


def test_a_probe_claiming_a_huge_content_length_is_refused_at_once(tmp):
    server = ClaimingServer()
    try:
        status, _, err, took, _ = run_measured("-o", f"cache_dir={tmp / 'cache'}", "--list", server.url, timeout=60)
    finally:
        server.stop()
    assert status == 2, err
    line = one_line(err)
    assert "Content-Length" in line, line
    assert took < 10, f"took {took:.1f} s"


def test_failed_remote_reads_say_what_happened_and_are_rate_limited(served, tmp):
    values, data = model(tensors=8, each=MIB // 2)
    server = served(data)
    log = tmp / "modelfs.log"
    with mounted(server.url, "-o", f"cache_dir={tmp / 'cache'}", "-o", f"log_file={log}") as mnt:
        paths, _ = index_paths(mnt)
        server.validated = 0  # from now: answers without the pinned ETag
        for _ in range(12):
            for name in list(values)[1:]:
                try:
                    with open(paths[name], "rb") as f:
                        f.read()
                except OSError as e:
                    assert e.errno == 5
        time.sleep(0.5)
    text = log.read_text()
    assert "truncated" not in text, text
    assert "ETag" in text, text
    lines = [line for line in text.splitlines() if "model.safetensors" in line or "read" in line]
    assert len(lines) <= 15, f"{len(lines)} lines:\n" + "\n".join(lines[:40])
    assert "counted, not logged" in text, text
