# SPDX-License-Identifier: Apache-2.0
"""A/B runs of modelfs daemons on the benchmark's models, for deciding
whether a mechanism earns its place: every variant mounted in turn, in an
order where each follows every other equally often, fresh mounts each round.

  /usr/bin/python3 bench/ab.py --variant NAME=BINARY[,ENV=VALUE...][,-s] ...
                               [--models small.safetensors small.pt model.pt]
                               [--rounds N] [--walk] [--read] [--work DIR]

Per model and variant, medians (and ranges) of: seconds from the command to
`.modelfs/index.json` being stat-able ("ready"), the daemon's RssAnon then,
with --walk the seconds of `find` over the fresh mount, the daemon's CPU
time and context switches (all threads) during it and RssAnon after it,
with --read the seconds of one `cat` of every tensor file (the first pass)
against a `cat` of the model file just before, and RssAnon after it.

small.pt (100 000 tensors of 16 float32, torch.save's ZIP format: 100 000
records and a pickle of as many rebuild calls) is made here when missing;
the other models come from gen_models.py."""
import argparse
import contextlib
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench  # noqa: E402
import gen_models  # noqa: E402

SMALL_PT = "small.pt"


def write_small_torch(path):
    import torch
    values = torch.randn(gen_models.SMALL_TENSORS, *gen_models.SMALL_SHAPE, generator=torch.Generator().manual_seed(8))
    # clone(): each tensor its own storage, as a real state dict holds them.
    state = {f"model.layers.{i // 100}.p{i % 100}.weight": values[i].clone()
             for i in range(gen_models.SMALL_TENSORS)}
    torch.save(state, path)


def model_file(work, name):
    path = work / name
    if name == SMALL_PT and not path.is_file():
        bench.log(f"ab: generating {name}")
        write_small_torch(path)
    if not path.is_file():
        gen_models.main(work)
    return path


def parse_variant(text):
    name, _, rest = text.partition("=")
    binary, *extras = rest.split(",")
    env = dict(e.split("=", 1) for e in extras if "=" in e and not e.startswith("-"))
    args = [e for e in extras if e.startswith("-")]
    return dict(name=name, binary=binary, env=env, args=args)


def daemon_effort(pid):
    """(CPU seconds, context switches) of every thread of the daemon so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, all threads
    switches = 0
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError), open(task / "status") as f:
            for line in f:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
    return cpu, switches


def measure(variant, model, mnt, walk, read):
    cmd = [variant["binary"], "-f", *variant["args"], str(model), str(mnt)]
    out = {}
    proc_env = os.environ.copy()
    os.environ.update(variant["env"])  # bench.foreground starts the daemon with our environment
    try:
        with bench.foreground(cmd, mnt, ".modelfs/index.json") as (pid, ready):
            out["ready (s)"] = ready
            time.sleep(0.2)  # what the daemon does after the tree is served (nothing, or trimming)
            out["RssAnon mounted (MiB)"] = bench.rss_anon_mib(pid)
            if walk:
                cpu, switches = daemon_effort(pid)
                out["find (s)"] = bench.timed(["find", str(mnt)])
                cpu_after, switches_after = daemon_effort(pid)
                out["daemon CPU during find (s)"] = cpu_after - cpu
                out["daemon context switches during find (k)"] = (switches_after - switches) / 1000
                out["daemon threads after find"] = len(os.listdir(f"/proc/{pid}/task"))
                out["RssAnon after find (MiB)"] = bench.rss_anon_mib(pid)
            if read:
                index = json.loads((mnt / ".modelfs/index.json").read_text())
                files = [mnt / t["path"] for t in index["tensors"]]
                direct = bench.cat([model])
                first = bench.timed(["cat", *map(str, files)])
                out["first pass (s)"] = first
                out["first pass / direct (x)"] = direct / first
                out["RssAnon after reading (MiB)"] = bench.rss_anon_mib(pid)
    finally:
        os.environ.clear()
        os.environ.update(proc_env)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", required=True, help="NAME=BINARY[,ENV=VALUE...][,-opt]")
    parser.add_argument("--models", nargs="*", default=["small.safetensors", SMALL_PT, "model.pt"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--walk", action="store_true")
    parser.add_argument("--read", action="store_true")
    parser.add_argument("--work", type=pathlib.Path, default=pathlib.Path(os.environ.get("BENCH_WORK", "/var/tmp/modelfs-bench")))
    parser.add_argument("--mnt", type=pathlib.Path, default=pathlib.Path("/tmp/modelfs-ab"))
    parser.add_argument("--json", type=pathlib.Path, help="write every measurement here")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    names = [v["name"] for v in variants]
    rows = {}
    for model_name in args.models:
        model = model_file(args.work, model_name)
        bench.cat([model])
        for index, measured in bench.balanced_order(list(range(len(variants))), args.rounds):
            result = measure(variants[index], model, args.mnt / "m", args.walk, args.read)
            if measured:
                for metric, value in result.items():
                    rows.setdefault((model_name, metric), {}).setdefault(names[index], []).append(value)
            bench.log(f"{model_name} {names[index]}{'' if measured else ' (lead-in)'}: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in result.items()))
    print(f"| model | measure | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for (model_name, metric), by_variant in rows.items():
        cells = []
        for name in names:
            values = by_variant.get(name, [])
            cells.append(f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})" if values else "")
        print(f"| {model_name} | {metric} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps({f"{m} | {k}": v for (m, k), v in rows.items()}, indent=1))


if __name__ == "__main__":
    main()
