# SPDX-License-Identifier: Apache-2.0
"""`modelfs --stats` and `modelfs --diff` against numpy doing the same work,
as ratios taken in one run (issue 37's bars).

  /usr/bin/python3 bench/stats_diff.py [--work DIR] [--build DIR] [--rounds N]

1. --stats of a 1 GiB float32 safetensors model (64 tensors of 16 MiB)
   against numpy computing the same fields (min, max, mean, std over the
   finite values, NaN, inf and zero counts) from np.memmap of the file,
   tensor by tensor (target >= 3x).
2. --diff of that model against a copy with one tensor changed, against
   numpy comparing the two memmaps the same way: bytes first, the figures
   (max |a-b|, RMSE, relative error, cosine) for a tensor that differs
   (target >= 3x).
3. --diff of a q4_k GGUF against its float32 source, against numpy
   dequantizing the blocks (the tests' decoder, numeric_oracle.q4_k) and
   computing the figures.

Every model file is dropped from the page cache and read back first, so
both sides read it from memory. Times are medians of --rounds; modelfs's
peak RssAnon (its heap and stacks; the model's pages are the page cache's)
is sampled from /proc every 10 ms. Writes bench/results/<date>_stats_diff.{md,json}."""
import argparse
import datetime
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "mount"))
from bench import cache_afresh, rss_anon_mib  # noqa: E402
import gguf_writer as gw  # noqa: E402
import numeric_oracle as oracle  # noqa: E402
import safetensors_writer as st  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


def float_model(path):
    """64 float32 tensors of 16 MiB (4 Mi normal values each)."""
    if path.exists() and path.stat().st_size > GiB:
        return
    rng = np.random.default_rng(1)
    tensors = {f"model.layers.{i // 4}.mlp.w{i % 4}.weight": rng.standard_normal((2048, 2048), np.float32)
               for i in range(64)}
    st.write(path, tensors)


def layout(path):
    """{name: (dtype code, shape, absolute offset, nbytes)} of a safetensors file."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], 8 + n + v["data_offsets"][0], v["data_offsets"][1] - v["data_offsets"][0])
            for k, v in header.items()}


def changed_copy(source, path):
    """`source` with one tensor's values changed (the same layout)."""
    shutil.copyfile(source, path)
    name, (_, shape, offset, nbytes) = list(layout(source).items())[17]
    with open(path, "r+b") as f:
        f.seek(offset)
        values = np.frombuffer(f.read(nbytes), np.float32).copy()
        values[::97] += np.float32(0.25)
        f.seek(offset)
        f.write(values.tobytes())


def q4_k_pair(gguf, source):
    """A q4_k GGUF of random blocks (ordinary float16 scales) and a float32
    safetensors of its dequantized values plus noise: a source it could have
    been made from. 8 tensors of 4096 x 2048 (36 MiB of blocks, 256 MiB of float32)."""
    if gguf.exists() and source.exists() and gguf.with_suffix(".layout.json").exists():
        return
    rng = np.random.default_rng(3)
    blocks, floats = [], {}
    for i in range(8):
        data = rng.integers(0, 256, (4096 * 8, 144), dtype=np.uint8)
        data[:, 0:4] = rng.integers(0x2000, 0x2C00, (4096 * 8, 2), dtype=np.uint16).view(np.uint8)
        name = f"blk.{i}.ffn_up.weight"
        blocks.append(gw.Tensor(name, 12, [2048, 4096], data.tobytes()))
        values = oracle.dequantize("q4_k", data.tobytes()).reshape(4096, 2048)
        floats[name] = values + rng.standard_normal(values.shape, np.float32) * np.float32(1e-3)
    blob, offsets = gw.to_bytes([("general.architecture", gw.Value(gw.STRING, "llama"))], blocks)
    gguf.write_bytes(blob)
    gguf.with_suffix(".layout.json").write_text(json.dumps({t.name: (offsets[t.name], len(t.data)) for t in blocks}))
    st.write(source, floats)


def gguf_layout(path):
    """{name: (absolute offset, nbytes)} of the q4_k GGUF, as its writer placed them."""
    return {k: tuple(v) for k, v in json.loads(path.with_suffix(".layout.json").read_text()).items()}


def numpy_stats(path):
    mm = np.memmap(path, np.uint8, "r")
    out = {}
    for name, (_, shape, offset, nbytes) in layout(path).items():
        a = mm[offset:offset + nbytes].view(np.float32)
        finite = a[np.isfinite(a)]
        out[name] = (int(np.isnan(a).sum()), int(np.isinf(a).sum()), int((a == 0).sum()), float(finite.min()),
                     float(finite.max()), float(finite.mean(dtype=np.float64)),
                     float(finite.std(dtype=np.float64)))
    return out


def figures(x, y):
    x = x.astype(np.float64)
    y = y.astype(np.float64)
    both = np.isfinite(x) & np.isfinite(y)
    x, y = x[both], y[both]
    d = x - y
    sq = float(d @ d)
    return (float(np.abs(d).max()), (sq / d.size) ** 0.5, sq / float(y @ y),
            float(x @ y) / (float(x @ x) ** 0.5 * float(y @ y) ** 0.5))


def numpy_diff(path_a, path_b):
    ma, mb = np.memmap(path_a, np.uint8, "r"), np.memmap(path_b, np.uint8, "r")
    la, lb = layout(path_a), layout(path_b)
    out = {}
    for name, (_, _, offset, nbytes) in la.items():
        _, _, offset_b, nbytes_b = lb[name]
        a, b = ma[offset:offset + nbytes], mb[offset_b:offset_b + nbytes_b]
        if np.array_equal(a, b):
            out[name] = "identical"
            continue
        out[name] = figures(a.view(np.float32), b.view(np.float32))
    return out


def numpy_q4k_diff(gguf, source):
    mg, ms = np.memmap(gguf, np.uint8, "r"), np.memmap(source, np.uint8, "r")
    ls = layout(source)
    out = {}
    for name, (offset, nbytes) in gguf_layout(gguf).items():
        values = oracle.dequantize("q4_k", bytes(mg[offset:offset + nbytes]))
        _, _, offset_s, nbytes_s = ls[name]
        out[name] = figures(values, ms[offset_s:offset_s + nbytes_s].view(np.float32))
    return out


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_modelfs(binary, *args):
    """Seconds and peak anonymous memory (MiB: the heap and stacks, not the
    model's mapped pages) of one modelfs run, sampled every 10 ms; its stdout
    discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen([str(binary), *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0.0
    while proc.poll() is None:
        try:  # the process may end between poll() and the read
            peak = max(peak, rss_anon_mib(proc.pid))
        except OSError:
            pass
        time.sleep(0.01)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"modelfs {args} exited {proc.returncode}: {proc.stderr.read().decode()}")
    return seconds, peak


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", default="/var/tmp/modelfs-bench-stats")
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    binary = pathlib.Path(args.build) / "modelfs"
    rows = []

    def row(what, value, unit, note=""):
        rows.append({"what": what, "value": value, "unit": unit, "note": note})
        print(f"{what}: {value:.3f} {unit} {note}", flush=True)

    def compare(label, modelfs_args, numpy_fn, files, target):
        cache_afresh(files)
        ours, rss, theirs = [], [], []
        for _ in range(args.rounds):
            seconds, peak = run_modelfs(binary, *modelfs_args)
            ours.append(seconds)
            rss.append(peak)
            theirs.append(timed(numpy_fn))
        o, t = statistics.median(ours), statistics.median(theirs)
        row(f"{label}: modelfs", o, "s", f"peak RssAnon {max(rss):.0f} MiB")
        row(f"{label}: numpy", t, "s")
        row(f"{label}: numpy / modelfs", t / o, "x", target)

    big = work / "big.safetensors"
    float_model(big)
    changed = work / "big-changed.safetensors"
    changed_copy(big, changed)
    compare("--stats, 1 GiB float32", ["--stats", "--json", big], lambda: numpy_stats(big), [big], "target >= 3")
    compare("--diff, 1 GiB float32, one tensor changed", ["--diff", "--json", big, changed],
            lambda: numpy_diff(big, changed), [big, changed], "target >= 3")
    gguf, source = work / "q4k.gguf", work / "q4k-source.safetensors"
    q4_k_pair(gguf, source)
    compare("--diff, q4_k GGUF against its float32 source", ["--diff", "--json", "--atol", "1e-2", gguf, source],
            lambda: numpy_q4k_diff(gguf, source), [gguf, source], "")

    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    out = HERE / "results" / f"{stamp[:10]}_stats_diff"
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    out.with_suffix(".json").write_text(json.dumps({"commit": commit, "cpus": os.cpu_count(), "rounds": args.rounds,
                                                    "rows": rows}, indent=1) + "\n")
    lines = [f"# --stats and --diff against numpy, {stamp} (commit {commit}, {os.cpu_count()} CPUs, "
             f"medians of {args.rounds})", "", "| what | value | unit | note |", "|---|---:|---|---|"]
    lines += [f"| {r['what']} | {r['value']:.3f} | {r['unit']} | {r['note']} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
