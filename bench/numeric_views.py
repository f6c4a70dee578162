# SPDX-License-Identifier: Apache-2.0
"""Numeric views benchmark: what converting on read costs, as ratios taken
in one run.

  /usr/bin/python3 bench/numeric_views.py [--work DIR] [--build DIR]

1. A 1 GiB bfloat16 safetensors model (Llama-shaped tensor names): the
   first pass over every .npy (float32, 2 GiB) against the first pass over
   the raw files, in bytes/s of what each serves (target >= 0.5x).
2. A GGUF of q4_k and q8_0 tensors (>= 256 MiB of blocks): float32 bytes/s
   of the .npy files against `cat` of the raw blocks through the mount, and
   against a plain C loop dequantizing the same blocks in memory
   (bench/dequant_limit.c; target >= 0.3x of that limit).
3. The daemon's RssAnon after every converted view was read (< 64 MiB).

"First pass": a fresh mount for each file system pass, so the mount's page
cache is cold while the model file itself is cached (read twice first).
Writes bench/results/<date>_numeric_views.{md,json} and prints the table."""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "mount"))
from bench import cache_afresh, foreground, rss_anon_mib  # noqa: E402
import gguf_writer as gw  # noqa: E402
import safetensors_writer as st  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


def bf16_model(path):
    """1 GiB of bfloat16 tensors named and shaped like a Llama's layers."""
    if path.exists() and path.stat().st_size > GiB:
        return
    hidden, inter, vocab = 2048, 5632, 32000
    shapes = {"model.embed_tokens.weight": (vocab, hidden), "lm_head.weight": (vocab, hidden)}
    layer = 0
    total = 2 * vocab * hidden * 2
    while total < GiB:
        p = f"model.layers.{layer}."
        for name, shape in ((p + "self_attn.q_proj.weight", (hidden, hidden)),
                            (p + "self_attn.k_proj.weight", (hidden // 8, hidden)),
                            (p + "self_attn.v_proj.weight", (hidden // 8, hidden)),
                            (p + "self_attn.o_proj.weight", (hidden, hidden)),
                            (p + "mlp.gate_proj.weight", (inter, hidden)),
                            (p + "mlp.up_proj.weight", (inter, hidden)),
                            (p + "mlp.down_proj.weight", (hidden, inter)),
                            (p + "input_layernorm.weight", (hidden,))):
            shapes[name] = shape
            total += 2 * int(np.prod(shape))
        layer += 1
    rng = np.random.default_rng(1)
    tensors = {}
    for name, shape in shapes.items():
        # normal-ish values: a random sign and mantissa, exponents near 1
        n = int(np.prod(shape))
        bits = (rng.integers(0x3C00, 0x4000, n, dtype=np.uint16) | (rng.integers(0, 2, n, dtype=np.uint16) << 15))
        tensors[name] = st.Raw("BF16", list(shape), bits.tobytes())
    st.write(path, tensors)


def random_blocks(type_name, blocks, rng):
    """Random blocks whose float16 scales are ordinary numbers (a subnormal
    scale would make the CPU, not modelfs, the subject)."""
    size = {"q8_0": 34, "q4_k": 144}[type_name]
    data = rng.integers(0, 256, (blocks, size), dtype=np.uint8)
    scales = rng.integers(0x2000, 0x2C00, (blocks, 2), dtype=np.uint16).view(np.uint8)
    data[:, 0:4 if type_name == "q4_k" else 2] = scales[:, :4 if type_name == "q4_k" else 2]
    return data.tobytes()


def gguf_model(path):
    """q4_k and q8_0 tensors of 4096 x 4096: 14 x 9 MiB and 8 x 17 MiB of
    blocks (262 MiB; 1.4 GiB of float32 values)."""
    if path.exists() and path.stat().st_size > 256 * MiB:
        return
    rng = np.random.default_rng(2)
    tensors = []
    for i in range(14):
        tensors.append(gw.Tensor(f"blk.{i}.ffn_up.weight", 12, [4096, 4096], random_blocks("q4_k", 4096 * 16, rng)))
    for i in range(8):
        tensors.append(gw.Tensor(f"blk.{i}.attn_q.weight", 8, [4096, 4096], random_blocks("q8_0", 4096 * 128, rng)))
    blob, _ = gw.to_bytes([("general.architecture", gw.Value(gw.STRING, "llama"))], tensors)
    path.write_bytes(blob)


def read_all(files):
    """Reads every file in 1 MiB calls, as a loader would; returns (bytes, seconds)."""
    total = 0
    start = time.perf_counter()
    buffer = bytearray(MiB)
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while n := fh.readinto(buffer):
                total += n
    return total, time.perf_counter() - start


def tensor_files(mnt):
    index = json.loads((mnt / ".modelfs" / "index.json").read_text())
    return [mnt / t["path"] for t in index["tensors"]], index


def first_pass(binary, model, mnt, which):
    """A fresh mount, one pass over the raw files or the .npy files."""
    with foreground([str(binary), "-f", str(model), str(mnt)], mnt, ".modelfs/index.json") as (pid, _):
        raws, _ = tensor_files(mnt)
        files = raws if which == "raw" else [pathlib.Path(str(p) + ".npy") for p in raws]
        nbytes, seconds = read_all(files)
        return nbytes, seconds, rss_anon_mib(pid)


def limit(tool, model, tensors_of_type):
    """The plain C loop over the same blocks: float32 bytes/s, one call per tensor."""
    total_bytes, total_seconds = 0, 0.0
    for offset, length, type_name in tensors_of_type:
        out = subprocess.run([str(tool), str(model), str(offset), str(length), type_name],
                             capture_output=True, text=True, check=True)
        result = json.loads(out.stdout)
        total_bytes += result["bytes"]
        total_seconds += result["seconds"]
    return total_bytes, total_seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", default="/tmp/modelfs-bench-numeric")
    parser.add_argument("--build", default=str(ROOT / "build"))
    args = parser.parse_args()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    binary = pathlib.Path(args.build) / "modelfs"
    tool = work / "dequant_limit"
    subprocess.run(["cc", "-O2", "-o", str(tool), str(HERE / "dequant_limit.c")], check=True)
    mnt = work / "mnt"
    rows = []

    def row(what, value, unit, note=""):
        rows.append({"what": what, "value": value, "unit": unit, "note": note})
        print(f"{what}: {value:.3f} {unit} {note}", flush=True)

    # 1. bfloat16 safetensors
    bf16 = work / "llama-bf16.safetensors"
    bf16_model(bf16)
    cache_afresh([bf16])
    raw_bytes, raw_s, _ = first_pass(binary, bf16, mnt, "raw")
    npy_bytes, npy_s, rss = first_pass(binary, bf16, mnt, "npy")
    row("bf16 raw files, first pass", raw_bytes / raw_s / MiB, "MiB/s", f"{raw_bytes / MiB:.0f} MiB")
    row("bf16 .npy (float32), first pass", npy_bytes / npy_s / MiB, "MiB/s", f"{npy_bytes / MiB:.0f} MiB")
    row("bf16 .npy / raw, bytes/s", (npy_bytes / npy_s) / (raw_bytes / raw_s), "x", "target >= 0.5")
    row("daemon RssAnon after every bf16 .npy", rss, "MiB", "target < 64")

    # 2. GGUF q4_k + q8_0
    gguf = work / "q4k-q80.gguf"
    gguf_model(gguf)
    cache_afresh([gguf])
    raw_bytes, raw_s, _ = first_pass(binary, gguf, mnt, "raw")
    npy_bytes, npy_s, rss = first_pass(binary, gguf, mnt, "npy")
    with foreground([str(binary), "-f", str(gguf), str(mnt)], mnt, ".modelfs/index.json") as (pid, _):
        _, index = tensor_files(mnt)
        where = []
        for t in index["tensors"]:
            meta = json.loads((mnt / (t["path"] + ".json")).read_text())
            where.append((meta["source"]["offset"], meta["nbytes"], meta["dtype"]))
    limit_bytes, limit_s = limit(tool, gguf, where)
    row("gguf raw blocks (cat), first pass", raw_bytes / raw_s / MiB, "MiB/s", f"{raw_bytes / MiB:.0f} MiB")
    row("gguf .npy (float32), first pass", npy_bytes / npy_s / MiB, "MiB/s", f"{npy_bytes / MiB:.0f} MiB")
    row("C loop dequantizing in memory", limit_bytes / limit_s / MiB, "MiB/s", "float32 bytes")
    row("gguf .npy / raw blocks, bytes/s", (npy_bytes / npy_s) / (raw_bytes / raw_s), "x")
    row("gguf .npy / C loop, float32 bytes/s", (npy_bytes / npy_s) / (limit_bytes / limit_s), "x", "target >= 0.3")
    row("raw blocks through the mount / C loop, bytes/s", (raw_bytes / raw_s) / (limit_bytes / limit_s), "x",
        "what FUSE itself allows")
    row("daemon RssAnon after every gguf .npy", rss, "MiB", "target < 64")

    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H%M")
    out = HERE / "results" / f"{stamp}_numeric_views"
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    out.with_suffix(".json").write_text(json.dumps({"commit": commit, "cpus": os.cpu_count(), "rows": rows},
                                                   indent=1) + "\n")
    lines = [f"# Numeric views, {stamp} (commit {commit}, {os.cpu_count()} CPUs)", "",
             "| what | value | unit | note |", "|---|---:|---|---|"]
    lines += [f"| {r['what']} | {r['value']:.3f} | {r['unit']} | {r['note']} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
