# SPDX-License-Identifier: Apache-2.0
"""Serving within a memory bound (issue 42, "Serving has no memory bound").

An HDF5 file of a few MB whose chunks each inflate to 256 MiB, read 4 KiB at
a time by eight threads at scattered offsets, must be served right (the
test's own writer says what each byte is) while the daemon's peak resident
memory (VmHWM) stays within the serving bound README states: decoded
pieces are shared by the threads and bounded in all, a piece too large to
keep whole is read as a stream. `--check` and `--stats` of such a file stay
within the same bound (peak RSS from /usr/bin/time -f %M)."""
import concurrent.futures
import os
import pathlib
import random
import subprocess
import time
import zlib

import numpy as np
import pytest

from conftest import MODELFS, daemon_pids, mounted

h5py = pytest.importorskip("h5py")

MiB = 1 << 20
CHUNK = 256 * MiB  # what one chunk inflates to (kMaxDecodedPiece)
CHUNKS = 8
# Every MARK bytes of the big dataset, its own offset as a little-endian
# uint64; zeros elsewhere: a read of the wrong place, or a short one, shows.
MARK = 1 << 16
# README's serving bound (decoded pieces, the deflate index, a worker's
# buffers) plus the program itself (binary, libraries, allocator slack).
SERVING_BOUND_MIB = 64 + 22 + 10 * 3
PROGRAM_MIB = 48
BOUND_KIB = (SERVING_BOUND_MIB + PROGRAM_MIB) * 1024
# Under the sanitizers a process's memory is AddressSanitizer's too (shadow
# memory, the freed blocks it quarantines): the bound is the plain pass's to
# check, the sanitizer pass checks the bytes and the lack of reports.
SANITIZED = os.environ.get("MODELFS_SANITIZED") == "1"


def assert_within_bound(peak, what):
    if not SANITIZED:
        assert peak < BOUND_KIB, f"{what} peak {peak // 1024} MiB, bound {BOUND_KIB // 1024} MiB"
# The shuffled dataset: float32 with shuffle, deflate and fletcher32,
# chunks past what is decoded whole (16 MiB), values i % 1000.
SHUFFLED = 2 * (8 << 20)
SHUFFLED_CHUNK = 8 << 20


def marked(start, n):
    """Bytes [start, start + n) of the big dataset, as the writer made them."""
    first = start // MARK * MARK
    values = np.zeros(start + n - first + 8, np.uint8)
    for m in range(first, start + n, MARK):
        values[m - first:m - first + 8] = np.frombuffer(np.uint64(m).tobytes(), np.uint8)
    return values[start - first:start - first + n].tobytes()


def write_model(path):
    with h5py.File(path, "w") as f:
        big = f.create_dataset("big", shape=(CHUNKS * CHUNK,), dtype="u1", chunks=(CHUNK,), compression="gzip")
        chunk = np.zeros(CHUNK, np.uint8)
        for k in range(CHUNKS):
            chunk.view("<u8")[::MARK // 8] = np.arange(k * CHUNK, (k + 1) * CHUNK, MARK, dtype=np.uint64)
            big.id.write_direct_chunk((k * CHUNK,), zlib.compress(chunk, 6))
        f.create_dataset("shuffled", data=np.arange(SHUFFLED, dtype=np.float32) % 1000,
                         chunks=(SHUFFLED_CHUNK,), shuffle=True, fletcher32=True, compression="gzip")
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("serving") / "big_chunks.h5")


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def peak_kib(*args):
    """Runs modelfs under /usr/bin/time; its exit code, stderr and peak RSS."""
    result = subprocess.run(["/usr/bin/time", "-f", "%M", str(MODELFS), *args], capture_output=True, text=True,
                            timeout=300)
    lines = result.stderr.strip().splitlines()
    return result.returncode, "\n".join(lines[:-1]), int(lines[-1])


def test_model_is_small(model):
    assert model.stat().st_size < 4 * MiB


def test_eight_readers_of_big_chunks_stay_bounded(model):
    rng = random.Random(42)
    size = CHUNKS * CHUNK
    # Each read straddles a mark, at offsets all over the chunks.
    reads = [(rng.randrange(size // MARK) * MARK - rng.randrange(1, 4096), 4096) for _ in range(8 * 24)]
    reads = [(max(0, at), n) for at, n in reads]
    values = (np.arange(SHUFFLED, dtype=np.float32) % 1000).tobytes()
    shuffled_reads = [(rng.randrange(SHUFFLED * 4 - 4096), 4096) for _ in range(8 * 4)]
    with mounted(model) as mnt:
        (pid,) = daemon_pids(mnt)

        def read_big(job):
            at, n = job
            with open(mnt / "big", "rb") as f:
                f.seek(at)
                return f.read(n) == marked(at, n)

        def read_shuffled(job):
            at, n = job
            with open(mnt / "shuffled", "rb") as f:
                f.seek(at)
                return f.read(n) == values[at:at + n]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            assert all(pool.map(read_big, reads))
            assert all(pool.map(read_shuffled, shuffled_reads))
        # The end of the last chunk, where its stream must end.
        with open(mnt / "big", "rb") as f:
            f.seek(size - 4096)
            assert f.read() == marked(size - 4096, 4096)
        peak = vm_hwm_kib(pid)
    assert_within_bound(peak, "daemon")


def test_check_streams_chunks(model):
    code, stderr, peak = peak_kib("--check", str(model))
    assert code == 0, stderr
    assert_within_bound(peak, "--check")


def test_check_finds_a_chunk_that_inflates_short(tmp_path):
    path = tmp_path / "short.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("d", shape=(CHUNK,), dtype="u1", chunks=(CHUNK,), compression="gzip")
        d.id.write_direct_chunk((0,), zlib.compress(bytes(CHUNK - 1), 6))
    code, stderr, peak = peak_kib("--check", str(path))
    assert code != 0 and "does not inflate to its" in stderr, stderr
    assert_within_bound(peak, "--check")


def test_stats_stays_bounded(model):
    code, stderr, peak = peak_kib("--stats", "--json", str(model))
    assert code == 0, stderr
    assert_within_bound(peak, "--stats")


# A deflated .npz member that inflates to 512 MiB: float32 zeros with every
# 1024th element its own index, so a read of the wrong place shows.
NPZ_ELEMENTS = 128 << 20
NPZ_READS = 32
# What the random reads may take in all once the member has been passed
# through: each inflates at most one span of the deflate index (4 MiB,
# about 10 ms); without the index each starts from the nearest of a few
# places earlier reads stopped, 100 MiB and more (0.2-0.5 s each).
NPZ_READS_SECONDS = 4.0


def test_random_reads_of_a_big_npz_member_inflate_one_span(tmp_path):
    values = np.zeros(NPZ_ELEMENTS, np.float32)
    values[::1024] = np.arange(NPZ_ELEMENTS // 1024, dtype=np.float32)
    path = tmp_path / "big_member.npz"
    np.savez_compressed(path, a=values)
    raw = values.view(np.uint8)
    rng = random.Random(9)
    size = NPZ_ELEMENTS * 4
    reads = [rng.randrange(size - 4096) for _ in range(NPZ_READS)]
    with mounted(path) as mnt:
        with open(mnt / "a", "rb") as f:
            f.seek(size - 4096)  # the whole member passed through once
            assert f.read() == raw[size - 4096:].tobytes()
            start = time.monotonic()
            for at in reads:
                f.seek(at)
                assert f.read(4096) == raw[at:at + 4096].tobytes(), at
            took = time.monotonic() - start
        assert took < NPZ_READS_SECONDS, f"{NPZ_READS} random 4 KiB reads took {took:.1f} s"
        # The .npy view reads through the same member: numpy loads it whole.
        np.testing.assert_array_equal(np.load(mnt / "a.npy", mmap_mode="r")[-5000:], values[-5000:])
