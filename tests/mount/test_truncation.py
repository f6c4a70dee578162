# SPDX-License-Identifier: Apache-2.0
"""A model file truncated under a live mount (to half, and to nothing), then
read by 32 concurrent readers over every kind of file the mount has: raw
tensors and sidecars, bfloat16 .npy (converted in the daemon), strided views
(gathered in the daemon), ggml q8_0 / q4_0 (dequantized in the daemon), a
deflated .npz member and gzipped HDF5 chunks (decoded in the daemon), the
export file (held parts, a gathered view, and a read spanning more tensors
than one reply has iovecs, whose rest the daemon copies), index.json and
metadata.json. Every read either succeeds or fails with EIO, none hangs,
and the daemon lives on (README, "Safety"). The oracles are numpy and torch
over the values the test wrote."""
import concurrent.futures
import errno
import io
import os
import random
import subprocess
import zipfile

import numpy as np
import pytest
import torch

import gguf_writer as gw
import safetensors_writer as st
from conftest import daemon_pids, mounted

READERS = 32
ROUNDS = 3
READ_TIMEOUT = 60  # seconds for one dd or cat: past it, a read hung


def bfloat16_bytes(values):
    """float32 values rounded down to bfloat16 (their top halves)."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()


def safetensors_model(path):
    """A float32 tensor, a bfloat16 one (its .npy converted) and 1200 tiny
    tensors last: one read of the export file spans them all, more parts
    than a reply has iovecs."""
    rng = np.random.default_rng(7)
    raw = rng.standard_normal((512, 512)).astype(np.float32)
    bf = rng.standard_normal((512, 1024)).astype(np.float32)
    tensors = {"raw": raw, "bf": st.Raw("BF16", bf.shape, bfloat16_bytes(bf))}
    for i in range(1200):
        tensors[f"tiny.t{i}"] = np.full(4, i, np.float32)
    st.write(path, tensors)
    bf_values = (np.frombuffer(bfloat16_bytes(bf), "<u2").astype(np.uint32) << 16).view(np.float32)
    return {"raw": raw, "bf.npy": bf_values.reshape(bf.shape), "tiny/t5": np.full(4, 5, np.float32)}


def torch_model(path):
    """A transposed and an expanded view (their .npy and export parts are
    gathered), a bfloat16 tensor and a plain one."""
    base = torch.arange(256 * 512, dtype=torch.float32).reshape(256, 512)
    tensors = {
        "plain": torch.linspace(-1, 1, 128 * 1024),
        "transposed": base.t(),
        "expanded": torch.arange(4, dtype=torch.float32).reshape(4, 1).expand(4, 65536),
        "half": torch.linspace(-2, 2, 256 * 1024).to(torch.bfloat16),
    }
    torch.save(tensors, path)
    return {"plain": tensors["plain"].numpy(), "transposed.npy": base.t().numpy(),
            "expanded.npy": tensors["expanded"].numpy(), "half.npy": tensors["half"].float().numpy()}


def q8_0_values(data, count):
    """q8_0 as ggml defines it: per 32 values a float16 scale, then 32 int8."""
    blocks = np.frombuffer(data, np.uint8).reshape(-1, 34)
    scales = blocks[:, :2].copy().view("<f2").astype(np.float32)
    quants = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    return (quants * scales).reshape(-1)[:count]


def gguf_model(path):
    """q8_0 and q4_0 blocks (their .npy dequantized) and a float32 tensor."""
    rng = np.random.default_rng(3)
    scales = rng.uniform(-1, 1, 64 * 1024 // 32).astype("<f2")
    quants = rng.integers(-128, 128, (64 * 1024 // 32, 32)).astype(np.int8)
    blocks = np.concatenate([scales.view(np.uint8).reshape(-1, 2), quants.view(np.uint8)], axis=1).tobytes()
    # The blocks last, past the half of the file.
    tensors = [
        gw.Tensor("f", 0, [64 * 1024], np.arange(64 * 1024, dtype="<f4").tobytes()),
        gw.Tensor("q8", 8, [1024, 64], blocks),
        gw.random_tensor("q4", 2, [64, 1024], seed=4),
    ]
    gw.write(path, [("general.architecture", gw.Value(gw.STRING, "test"))], tensors)
    return {"q8.npy": q8_0_values(blocks, 64 * 1024).reshape(64, 1024)}


def npz_model(path):
    """A stored member (held) first, then a deflated one (its raw file and
    .npy inflated in the daemon), past the half of the file."""
    rng = np.random.default_rng(5)
    held = np.arange(4096, dtype=np.float32)
    deflated = rng.integers(0, 16, (512, 512)).astype(np.int32)
    with zipfile.ZipFile(path, "w") as z:
        for name, value, method in (("held", held, zipfile.ZIP_STORED), ("deflated", deflated, zipfile.ZIP_DEFLATED)):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, value)
            z.writestr(zipfile.ZipInfo(f"{name}.npy"), buf.getvalue(), compress_type=method)
    return {"held": held, "deflated": deflated, "deflated.npy": deflated}


def hdf5_model(path):
    """A contiguous dataset (held) first, then a shuffled and gzipped
    chunked one (its chunks decoded in the daemon), past the half."""
    import h5py

    held = np.arange(4096, dtype=np.float32)
    chunked = np.random.default_rng(6).standard_normal((256, 512)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f["held"] = held
        f.create_dataset("chunked", data=chunked, chunks=(32, 64), compression="gzip", shuffle=True)
    return {"held": held, "chunked": chunked, "chunked.npy": chunked}


MODELS = {
    "safetensors": ("m.safetensors", safetensors_model),
    "torch": ("m.pt", torch_model),
    "gguf": ("m.gguf", gguf_model),
    "npz": ("m.npz", npz_model),
    "hdf5": ("m.h5", hdf5_model),
}


def same(relative, got, want):
    """Whether a file's bytes are the oracle's array: as a .npy, or raw."""
    if not relative.endswith(".npy"):
        return got == want.tobytes()
    array = np.load(io.BytesIO(got))
    return array.dtype == want.dtype and array.shape == want.shape and np.array_equal(array, want)


def every_file(mnt):
    """Every file of the mount, but only a few of the tiny tensors' (the
    export file reads them all)."""
    out = []
    for folder, _, names in os.walk(mnt):
        for name in sorted(names):
            path = os.path.join(folder, name)
            if os.sep + "tiny" + os.sep in path and name not in ("t5", "t5.json", "t5.npy"):
                continue
            out.append(path)
    return sorted(out)


def daemon_pid(mnt):
    """The pid of the modelfs process serving `mnt`, found by its command line."""
    found = daemon_pids(mnt)
    assert len(found) == 1, f"one daemon expected for {mnt}, found {found}"
    return found[0]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def drop_cached_pages(paths):
    """Drops the kernel's cached pages of the mount's files, so that reads
    reach the daemon again (the mount keeps its page cache: keep_cache)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_with(tool, path):
    """(exit status, stderr) of reading `path` whole with `tool`."""
    if tool == "cat":
        command = ["cat", path]
    else:
        command = ["dd", f"if={path}", "of=/dev/null", f"bs={tool}", "status=none"]
    try:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=READ_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, f"no answer within {READ_TIMEOUT} s"
    return done.returncode, done.stderr.decode(errors="replace")


def reader(files, seed):
    """Every file, in a shuffled order, each with cat or dd of some block size."""
    rng = random.Random(seed)
    order = list(files)
    rng.shuffle(order)
    return [(path, *read_with(rng.choice(["cat", "4k", "128k", "1M"]), path)) for path in order]


@pytest.mark.parametrize("cut", ["half", "zero"])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_truncated_model_fails_reads_with_eio_and_the_daemon_survives(tmp, kind, cut):
    name, make = MODELS[kind]
    model = tmp / name
    oracle = make(model)
    size = model.stat().st_size
    with mounted(model) as mnt:
        files = every_file(mnt)
        assert str(mnt / ".modelfs" / "model.safetensors") in files
        before = {}
        for path in files:
            with open(path, "rb") as f:
                before[path] = f.read()
        for relative, want in oracle.items():
            assert same(relative, before[str(mnt / relative)], want), relative
        pid = daemon_pid(mnt)

        os.truncate(model, size // 2 if cut == "half" else 0)
        results = []
        with concurrent.futures.ThreadPoolExecutor(READERS) as pool:
            for round_ in range(ROUNDS):
                drop_cached_pages(files)
                futures = [pool.submit(reader, files, 1000 * round_ + i) for i in range(READERS)]
                for future in futures:
                    results.extend(future.result())

        assert alive(pid), "the daemon died"
        listing = subprocess.run(["ls", "-la", str(mnt)], capture_output=True, text=True, timeout=30)
        assert listing.returncode == 0, listing.stderr
        assert ".modelfs" in listing.stdout
        wrong = [(p, rc, err.strip()) for p, rc, err in results if rc != 0 and "Input/output error" not in err]
        assert not wrong, f"{len(wrong)} reads failed other than with EIO, e.g. {wrong[:5]}"
        failed = {p for p, rc, _ in results if rc != 0}
        # What the tree prints from the catalog is served whole and unchanged.
        printed = [p for p in files if p.endswith(".json")]
        assert printed and not failed & set(printed), sorted(failed & set(printed))[:5]
        for path in printed:
            with open(path, "rb") as f:
                assert f.read() == before[path], path
        # The daemon computed these, and they reach bytes past the cut.
        computed = {"safetensors": ["bf.npy", ".modelfs/model.safetensors"],
                    "torch": ["transposed.npy", ".modelfs/model.safetensors"],
                    "gguf": ["q8.npy", "q4.npy"],
                    "npz": ["deflated", "deflated.npy", ".modelfs/model.safetensors"],
                    "hdf5": ["chunked", "chunked.npy", ".modelfs/model.safetensors"]}[kind]
        for relative in computed:
            assert str(mnt / relative) in failed, f"{relative} read whole past the cut"
        if cut == "zero":
            npy = {p for p in files if p.endswith(".npy")}
            assert npy and npy <= failed, sorted(npy - failed)[:5]
            # Served as iovecs into the mapping: the kernel's copy fails,
            # the reader gets EIO, the daemon is untouched.
            held = {"safetensors": "raw", "torch": "plain", "gguf": "f", "npz": "held", "hdf5": "held"}[kind]
            assert str(mnt / held) in failed
        # After the cut, a tensor reads as it was written or fails with EIO:
        # never other bytes.
        drop_cached_pages(files)
        for relative, want in oracle.items():
            try:
                with open(mnt / relative, "rb") as f:
                    got = f.read()
            except OSError as e:
                assert e.errno == errno.EIO, (relative, e)
                continue
            assert same(relative, got, want), relative
        assert alive(pid), "the daemon died"
        with open(mnt / ".modelfs" / "metadata.json", "rb") as f:
            assert f.read() == before[str(mnt / ".modelfs" / "metadata.json")]


def test_a_cut_inside_the_last_page_fails_the_reads_past_it(tmp):
    """The rest of a truncated file's last page reads as zeros, without a
    fault: a tensor whose bytes the cut removed still fails with EIO there
    (raw file and .npy), never reads as zeros."""
    model = tmp / "tail.safetensors"
    tensors = {f"t{i:03d}": np.full(256, i + 1, np.float32) for i in range(64)}
    st.write(model, tensors)
    with open(model, "rb") as f:
        header = int.from_bytes(f.read(8), "little")
    start = 8 + header
    cut = start + 20 * 1024 + 700  # inside t020, not at a page's end
    assert cut % 4096 != 0
    with mounted(model) as mnt:
        pid = daemon_pid(mnt)
        os.truncate(model, cut)
        drop_cached_pages([str(p) for p in mnt.iterdir() if p.is_file()])
        for i, (name, value) in enumerate(tensors.items()):
            end = start + (i + 1) * 1024
            for path, want in ((mnt / name, value.tobytes()), (mnt / f"{name}.npy", None)):
                try:
                    with open(path, "rb") as f:
                        got = f.read()
                except OSError as e:
                    assert e.errno == errno.EIO, (path, e)
                    assert end > cut, f"{path} lies before the cut yet failed"
                    continue
                assert end <= cut, f"{path} read whole though the cut removed its bytes"
                if want is not None:
                    assert got == want, path
                else:
                    np.testing.assert_array_equal(np.load(io.BytesIO(got)), value)
        assert alive(pid), "the daemon died"
