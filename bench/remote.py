# SPDX-License-Identifier: Apache-2.0
"""Remote models over loopback: nginx serves the benchmark's safetensors
models; modelfs mounts them by URL. One run measures, medians of --rounds:

  mount      seconds until `modelfs URL MNT` returns with the tree mounted,
             and the bytes nginx sent for it ($bytes_sent), cache empty
  first      one `cat` of every tensor file of a fresh mount over an empty
             cache, against `curl -o /dev/null` of the whole object from
             the same server right before it (the ratio is of throughputs)
  warm       the same pass on a second mount over the now full cache: the
             requests nginx saw besides the mount's one-byte probe, and the
             ratio to the same pass over a local mount of the model file
  small      the 100 000-tensor model: bytes sent at mount, and its header

Usage (root, after bench/run.sh or gen_models.py made the models):
  /usr/bin/python3 bench/remote.py [--rounds N] [--work DIR] [--modelfs PATH]
Writes bench/results/<date>_remote.md."""
import argparse
import datetime
import os
import pathlib
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "mount"))
sys.path.insert(0, str(HERE))
import conftest  # noqa: E402  (the tests' unmount, which waits)
import gen_models  # noqa: E402
from remote_servers import Nginx  # noqa: E402


def run(*args, **kwargs):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, **kwargs)


def unmount(mnt):
    """Unmounts and waits until the mount is gone (lazily if still busy)."""
    conftest.unmount(mnt)


def mount(modelfs, model, mnt, *options):
    start = time.perf_counter()
    run(modelfs, *options, model, mnt)
    return time.perf_counter() - start


def tensor_files(mnt):
    out = []
    for dirpath, _, files in os.walk(mnt):
        if ".modelfs" in dirpath:
            continue
        out += [os.path.join(dirpath, f) for f in files if not f.endswith((".json", ".npy"))]
    return sorted(out)


def cat_all(files):
    start = time.perf_counter()
    total = 0
    for f in files:
        with open(f, "rb") as src:
            while chunk := src.read(1 << 20):
                total += len(chunk)
    return time.perf_counter() - start, total


def drop_file_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/modelfs-bench"))
    parser.add_argument("--modelfs", default=str(HERE.parent / "build" / "modelfs"))
    args = parser.parse_args()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    for name, writer in (("big.safetensors", gen_models.write_big_safetensors),
                         ("small.safetensors", gen_models.write_small_safetensors)):
        if not (work / name).is_file():
            print(f"bench: generating {name}", file=sys.stderr, flush=True)
            writer(work / name)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="modelfs-remote-bench-"))
    www = scratch / "www"
    www.mkdir()
    for name in ("big.safetensors", "small.safetensors"):
        (www / name).symlink_to(work / name)
    server = Nginx(scratch / "nginx", www)
    mnt = scratch / "mnt"
    mnt.mkdir()
    rows = {k: [] for k in ("mount_s", "mount_bytes", "first_s", "first_bytes", "curl_s", "warm_s",
                            "warm_requests", "local_s", "small_mount_bytes")}
    big_url = f"{server.url}/big.safetensors"
    size = (work / "big.safetensors").stat().st_size
    try:
        for round_ in range(args.rounds):
            cache = scratch / f"cache{round_}"
            # curl of the whole object, the reference for the first pass.
            logged = len(server.requests())
            start = time.perf_counter()
            run("curl", "-s", "-o", "/dev/null", big_url)
            rows["curl_s"].append(time.perf_counter() - start)
            # nginx logs a request once it has sent it: waited for, so that
            # the curl's line is not counted as the mount's.
            deadline = time.time() + 10
            while len(server.requests()) == logged and time.time() < deadline:
                time.sleep(0.05)
            server.clear_log()
            rows["mount_s"].append(mount(args.modelfs, big_url, mnt, "-o", f"cache_dir={cache}"))
            rows["mount_bytes"].append(server.bytes_sent())
            try:
                files = tensor_files(mnt)
                seconds, total = cat_all(files)
                assert total == 64 * 16 * (1 << 20), total
                rows["first_s"].append(seconds)
                rows["first_bytes"].append(server.bytes_sent() - rows["mount_bytes"][-1])
            finally:
                unmount(mnt)
            server.clear_log()
            mount(args.modelfs, big_url, mnt, "-o", f"cache_dir={cache}")
            try:
                rows["warm_s"].append(cat_all(tensor_files(mnt))[0])
                rows["warm_requests"].append(sum(1 for r in server.requests() if r[3] != "bytes=0-0"))
            finally:
                unmount(mnt)
            # The local mount, its file as a file read from disk (dropped, then read back).
            drop_file_cache(work / "big.safetensors")
            subprocess.run(["cat", str(work / "big.safetensors")], stdout=subprocess.DEVNULL, check=True)
            mount(args.modelfs, work / "big.safetensors", mnt)
            try:
                rows["local_s"].append(cat_all(tensor_files(mnt))[0])
            finally:
                unmount(mnt)
            server.clear_log()
            small_cache = scratch / f"small{round_}"
            mount(args.modelfs, f"{server.url}/small.safetensors", mnt, "-o", f"cache_dir={small_cache}")
            unmount(mnt)
            rows["small_mount_bytes"].append(server.bytes_sent())
            shutil.rmtree(cache)
            shutil.rmtree(small_cache)
    finally:
        unmount(mnt)
        server.stop()
    with open(work / "small.safetensors", "rb") as f:
        small_header = 8 + struct.unpack("<Q", f.read(8))[0]
    med = {k: statistics.median(v) for k, v in rows.items()}
    mib = 1 << 20
    lines = [
        f"# Remote models over loopback ({datetime.date.today()}, {os.uname().nodename})",
        "",
        f"`bench/remote.py --rounds {args.rounds}`: nginx on 127.0.0.1 serving `big.safetensors` "
        f"(64 float32 tensors of 16 MiB, {size / mib:.0f} MiB) and `small.safetensors` (100 000 tensors); "
        "medians of the rounds; bytes from nginx's `$bytes_sent`.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| mount of big.safetensors by URL, empty cache | {med['mount_s']:.3f} s, {med['mount_bytes'] / 1024:.0f} KiB sent |",
        f"| first pass over every tensor file (cold cache) | {med['first_s']:.2f} s, "
        f"{1024 / med['first_s']:.0f} MiB/s, {med['first_bytes'] / mib:.0f} MiB sent |",
        f"| `curl -o /dev/null` of the whole object, same server | {med['curl_s']:.2f} s, {size / mib / med['curl_s']:.0f} MiB/s |",
        f"| first pass / curl (throughput) | {med['curl_s'] / med['first_s']:.2f}× |",
        f"| second mount over the warm cache: pass | {med['warm_s']:.2f} s, {1024 / med['warm_s']:.0f} MiB/s, "
        f"{med['warm_requests']:.0f} range requests |",
        f"| the same pass over a local mount of the file | {med['local_s']:.2f} s, {1024 / med['local_s']:.0f} MiB/s |",
        f"| warm remote / local (throughput) | {med['local_s'] / med['warm_s']:.2f}× |",
        f"| mount of small.safetensors (100 000 tensors) by URL | {med['small_mount_bytes'] / mib:.2f} MiB sent, "
        f"header {small_header / mib:.2f} MiB |",
        "",
        "Per round: " + "; ".join(f"{k} {', '.join(f'{x:.3g}' for x in v)}" for k, v in rows.items()),
        "",
    ]
    out = HERE / "results" / f"{datetime.date.today()}_remote.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
