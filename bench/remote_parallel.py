# SPDX-License-Identifier: Apache-2.0
"""Remote models at the speed of a parallel downloader. nginx on 127.0.0.1
caps each connection at 20 MiB/s (`limit_rate 20m`, as object stores and
hubs cap theirs) behind a latency proxy of our own (tests/mount/
latency_proxy.py) holding each request 5 ms. For a 256 MiB and a 1 GiB
safetensors model, medians of --rounds:

  first      `cat` of every tensor file of a fresh mount (empty cache)
  aria2c     `aria2c -x16 -s16` of the same object (Debian's aria2)
  curl       `curl -o /dev/null` of the same object
  numpy      np.load(mmap_mode='r').sum() of the largest tensor's .npy
             through a fresh mount
  random     200 4 KiB preads at random offsets of random tensor files of
             a fresh mount (kernel readahead off: POSIX_FADV_RANDOM): p50,
             p99, bytes sent a read
and a 64-shard checkpoint mounted through a 40 ms proxy.

Usage: /usr/bin/python3 bench/remote_parallel.py [--rounds N] [--work DIR]
Writes bench/results/<date>_remote_parallel.md."""
import argparse
import datetime
import json
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "mount"))
import conftest  # noqa: E402
import safetensors_writer as st  # noqa: E402
from remote_servers import LatencyProxy, Nginx  # noqa: E402

MIB = 1 << 20


def write_model(path, total, tensors):
    each = total // tensors // 4
    rng = np.random.default_rng(1)
    block = rng.standard_normal(each, dtype=np.float32)
    st.write(path, {f"layer{i:03d}.weight": np.roll(block, i) for i in range(tensors)})


def write_shards(folder, shards):
    folder.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        st.write(folder / name, {f"layer{i}.weight": np.full(1024, i, dtype=np.float32)})
        weight_map[f"layer{i}.weight"] = name
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def timed(*args):
    start = time.perf_counter()
    subprocess.run([str(a) for a in args], check=True, capture_output=True)
    return time.perf_counter() - start


def tensor_files(mnt):
    out = []
    for dirpath, _, files in os.walk(mnt):
        if ".modelfs" not in dirpath:
            out += [os.path.join(dirpath, f) for f in files if not f.endswith((".json", ".npy"))]
    return sorted(out)


def first_pass(mnt):
    start = time.perf_counter()
    for f in tensor_files(mnt):
        subprocess.run(["cat", f], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def numpy_sum(mnt):
    largest = max(tensor_files(mnt), key=os.path.getsize)
    start = time.perf_counter()
    float(np.load(largest + ".npy", mmap_mode="r").sum(dtype=np.float64))
    return time.perf_counter() - start


def random_reads(mnt, reads=200):
    """4 KiB preads at random offsets of random tensor files of the model."""
    files = tensor_files(mnt)
    rng = random.Random(3)
    times = []
    handles = {f: os.open(f, os.O_RDONLY) for f in files}
    try:
        for fd in handles.values():
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for _ in range(reads):
            f = rng.choice(files)
            at = rng.randrange(0, os.path.getsize(f) - 4096) & ~4095
            start = time.perf_counter()
            os.pread(handles[f], 4096, at)
            times.append(time.perf_counter() - start)
    finally:
        for fd in handles.values():
            os.close(fd)
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99)], reads


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/modelfs-bench"))
    parser.add_argument("--modelfs", default=str(HERE.parent / "build" / "modelfs"))
    parser.add_argument("--sizes", default="256,1024", help="model sizes in MiB")
    args = parser.parse_args()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="modelfs-parallel-bench-"))
    www = scratch / "www"
    www.mkdir()
    sizes = [int(s) for s in args.sizes.split(",")]
    for mib in sizes:
        model = work / f"parallel_{mib}.safetensors"
        if not model.is_file():
            print(f"bench: generating {model.name}", file=sys.stderr, flush=True)
            write_model(model, mib * MIB, 64)
        (www / model.name).symlink_to(model)
    write_shards(www / "sharded", 64)
    server = Nginx(scratch / "nginx", www)
    near = LatencyProxy(scratch / "near", server.port, 5)
    far = LatencyProxy(scratch / "far", server.port, 40)
    mnt = scratch / "mnt"
    mnt.mkdir()
    load_before = os.getloadavg()
    results = {}

    def mount(url, cache):
        start = time.perf_counter()
        subprocess.run([args.modelfs, "-o", f"cache_dir={cache}", url, mnt], check=True, capture_output=True)
        return time.perf_counter() - start

    try:
        for mib in sizes:
            name = f"parallel_{mib}.safetensors"
            url = f"{near.url}/capped/{name}"
            rows = {k: [] for k in ("first", "aria2c", "curl", "numpy", "p50", "p99", "per_read")}
            for round_ in range(args.rounds):
                cache = scratch / f"cache-{mib}-{round_}"
                rows["curl"].append(timed("curl", "-s", "-o", "/dev/null", url))
                out = scratch / "aria2"
                rows["aria2c"].append(timed("aria2c", "-q", "-x16", "-s16", "-k1M", "--allow-overwrite=true",
                                            "--file-allocation=none", "-d", out, "-o", name, url))
                shutil.rmtree(out, ignore_errors=True)
                mount(url, cache)
                try:
                    rows["first"].append(first_pass(mnt))
                finally:
                    conftest.unmount(mnt)
                shutil.rmtree(cache)
                mount(url, cache)
                try:
                    rows["numpy"].append(numpy_sum(mnt))
                finally:
                    conftest.unmount(mnt)
                shutil.rmtree(cache)
                mount(url, cache)
                try:
                    server.clear_log()
                    p50, p99, reads = random_reads(mnt)
                    rows["p50"].append(p50)
                    rows["p99"].append(p99)
                    rows["per_read"].append(server.bytes_sent() / reads)
                finally:
                    conftest.unmount(mnt)
                shutil.rmtree(cache)
            results[mib] = {k: statistics.median(v) for k, v in rows.items()}
            results[mib]["all"] = rows
        shard_times = []
        for round_ in range(args.rounds):
            cache = scratch / f"shards-{round_}"
            shard_times.append(mount(f"{far.url}/sharded/model.safetensors.index.json", cache))
            conftest.unmount(mnt)
            shutil.rmtree(cache)
    finally:
        conftest.unmount(mnt)
        near.stop()
        far.stop()
        server.stop()
    load_after = os.getloadavg()
    lines = [
        f"# Remote models, parallel fetching ({datetime.date.today()}, {os.uname().nodename})",
        "",
        f"`bench/remote_parallel.py --rounds {args.rounds}`: nginx on 127.0.0.1, `limit_rate 20m` per "
        "connection, behind a proxy holding each request 5 ms (the shards: 40 ms); medians of the rounds; "
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after (2 CPUs, shared with other "
        "builds). modelfs with its defaults (`remote_parallel=16`, `remote_window=64M`).",
        "",
        "| model | first pass | aria2c -x16 -s16 | first / aria2c | curl | numpy .npy sum | "
        "4 KiB random read p50 / p99 | bytes sent a random read |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mib, r in results.items():
        lines.append(
            f"| {mib} MiB | {r['first']:.2f} s | {r['aria2c']:.2f} s | {r['aria2c'] / r['first']:.2f}× | "
            f"{r['curl']:.2f} s | {r['numpy']:.2f} s | {r['p50'] * 1000:.1f} / {r['p99'] * 1000:.1f} ms | "
            f"{r['per_read'] / 1024:.0f} KiB |")
    lines += ["", f"64-shard checkpoint mounted through the 40 ms proxy: {statistics.median(shard_times):.2f} s "
              f"(rounds: {', '.join(f'{t:.2f}' for t in shard_times)}).", ""]
    for mib, r in results.items():
        lines.append(f"{mib} MiB per round: " + "; ".join(
            f"{k} {', '.join(f'{x:.3g}' for x in v)}" for k, v in r["all"].items()))
    lines.append("")
    out = HERE / "results" / f"{datetime.date.today()}_remote_parallel.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
