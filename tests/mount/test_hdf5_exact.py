# SPDX-License-Identifier: Apache-2.0
"""HDF5 datasets served exactly or not at all (issue 42), through a real
mount:

- a file with a user block: every layout (contiguous, chunked plain, gzip,
  shuffle+gzip, fletcher32, compact, chunks never written) served from the
  bytes libhdf5 reads, although libhdf5 1.10 gives chunk addresses from the
  base address and contiguous ones from the file's start;
- a file whose local heap's free list is a cycle refused in one line
  naming libhdf5's memory limit, the sandboxed child held to the model's
  budget (it grew to 593 MB before);
- integer and float types whose bits are not exactly a dtype's (precision
  and bit offset inside a wider word, a float without IEEE's implied
  mantissa bit) left out and named in metadata.json, never served as raw
  words; exact ones beside them served.

Oracle: h5py (libhdf5) reading the same files; never modelfs's output."""
import os
import subprocess
import sys

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from conftest import MODELFS, REPO, cat, index_paths, metadata, mounted, one_line, run_modelfs  # noqa: E402

SANITIZED = os.environ.get("MODELFS_SANITIZED") == "1"
sys.path.insert(0, str(REPO / "tests" / "mount"))
import hostile_corpus as hc  # noqa: E402


def values(dtype, shape):
    n = int(np.prod(shape))
    return (np.arange(n) * 37 % 1000 - 300).astype(dtype).reshape(shape)


def write_user_block_file(path, userblock):
    with h5py.File(path, "w", userblock_size=userblock) as f:
        f["contiguous"] = values("<f4", (30, 7))
        f.create_dataset("chunked", data=values("<i4", (50, 40)), chunks=(16, 16))
        f.create_dataset("gzip", data=values("<f8", (200,)), chunks=(64,), compression="gzip")
        f.create_dataset("shuffle_gzip", data=values("<i2", (40, 30)), chunks=(8, 7), shuffle=True,
                         compression="gzip")
        f.create_dataset("fletcher32", data=values("<u2", (100,)), chunks=(32,), fletcher32=True)
        sparse = f.create_dataset("sparse", shape=(20, 20), dtype="<f4", chunks=(8, 8))
        sparse[8:16, 0:8] = 2.5
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        ds = h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I32LE, h5py.h5s.create_simple((5, 3)), dcpl=dcpl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, values("<i4", (5, 3)))
    with h5py.File(path, "r") as f:
        assert f.userblock_size == userblock
        return {name: f[name][()] for name in f}


@pytest.mark.parametrize("userblock", [512, 2048, 4096, 16384])
def test_user_block_every_layout(tmp, userblock):
    """Fails before the fix: "chunked" and "fletcher32" were served from
    bytes `userblock` earlier than their chunks (wrong values, exit 0), and
    the gzip ones failed with EIO. A user block of 4096 bytes or more put
    the signature past the 4 KiB every reader probes: the file was "not a
    model file modelfs recognises" (exit 2) until detection looked further,
    at the powers of two libhdf5 tries."""
    model = tmp / "ub.h5"
    expected = write_user_block_file(model, userblock)
    assert model.read_bytes()[userblock:userblock + 8] == b"\x89HDF\r\n\x1a\n"
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert sorted(paths) == sorted(expected)
        for name, value in expected.items():
            assert cat(paths[name]) == value.tobytes(), name
            np.testing.assert_array_equal(np.load(str(paths[name]) + ".npy"), value)
    assert run_modelfs("--check", model).returncode == 0


def custom(f, name, file_type, data):
    """A dataset of `file_type`, written by libhdf5 from `data` (converted)."""
    ds = h5py.h5d.create(f.id, name.encode(), file_type, h5py.h5s.create_simple(data.shape))
    ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))


def test_inexact_types_are_left_out_and_named(tmp):
    """Fails before the fix: "int16_in_int32" was served as the raw 32-bit
    words (h5py reads other numbers), "float_no_implied_bit" as IEEE floats
    (other numbers), both in the tree with exit 0."""
    model = tmp / "odd.h5"
    with h5py.File(model, "w") as f:
        t = h5py.h5t.STD_I32LE.copy()
        t.set_precision(16)
        t.set_offset(8)
        custom(f, "int16_in_int32", t, values("<i4", (4, 5)))
        t = h5py.h5t.STD_U16LE.copy()
        t.set_precision(8)
        custom(f, "uint8_in_uint16", t, values("<u2", (9,)) % 200)
        t = h5py.h5t.IEEE_F32LE.copy()
        t.set_norm(h5py.h5t.NORM_NONE)
        custom(f, "float_no_implied_bit", t, values("<f4", (6,)) / 8)
        t = h5py.h5t.IEEE_F64LE.copy()
        t.set_norm(h5py.h5t.NORM_NONE)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((4,))
        ds = h5py.h5d.create(f.id, b"chunked_no_implied_bit", t, h5py.h5s.create_simple((8,)), dcpl=dcpl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, values("<f8", (8,)) / 4)
        f["exact_int"] = values("<i4", (4, 5))
        f["exact_float"] = values("<f4", (6,)) / 8
    with h5py.File(model, "r") as f:
        stored = {name: f[name][()] for name in f}
        offsets = {name: f[name].id.get_offset() for name in f}
    odd = ["int16_in_int32", "uint8_in_uint16", "float_no_implied_bit", "chunked_no_implied_bit"]
    # The files really differ from a dtype's bytes (else the test proves nothing).
    blob = model.read_bytes()
    for name in ("int16_in_int32", "float_no_implied_bit"):
        at = offsets[name]
        assert blob[at:at + stored[name].nbytes] != stored[name].tobytes()
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert sorted(paths) == ["exact_float", "exact_int"]
        for name in paths:
            assert cat(paths[name]) == stored[name].tobytes(), name
        left = {e["name"]: e["reason"] for e in metadata(mnt)["left_out"]}
        assert sorted(left) == sorted(odd)
        assert "16-bit values at bit 8 of 4-byte words" in left["int16_in_int32"]
        assert "8-bit values at bit 0 of 2-byte words" in left["uint8_in_uint16"]
        assert "implied" in left["float_no_implied_bit"]
        assert "implied" in left["chunked_no_implied_bit"]


def test_heap_cycle_is_refused_within_the_budget(tmp):
    """Fails before the fix: the child grew to 593 MB (the budget is 64 MiB
    for a 2 KB file) and the refusal said only that the walk failed."""
    model = hc.hdf5_heap_cycle(tmp)
    assert model.stat().st_size < 4096
    rusage = tmp / "rusage"
    result = subprocess.run(["/usr/bin/time", "-o", str(rusage), "-f", "%M", str(MODELFS), "--list", str(model)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    if SANITIZED:
        return  # AddressSanitizer's allocator ends the child where malloc would fail: a refusal all the same
    assert "MiB it may use" in line and "memory allocation failed" in line, line
    peak_mib = int(rusage.read_text().split()[-1]) / 1024
    assert peak_mib < 64 + 32 + 48, peak_mib  # the budget, libhdf5's margin, the program
