# SPDX-License-Identifier: Apache-2.0
"""Export benchmark: converting the bench's 1 GiB torch.save model to
safetensors, as ratios taken in one run.

  /usr/bin/python3 bench/export.py [--work DIR] [--build DIR] [--rounds N]

In each round, one after the other, each after a `sync` (so no write-back
of the previous copy lands in the next):
  - `cp model.pt` (the model file itself, from the page cache): the reference;
  - `cp MNT/.modelfs/model.safetensors` from a fresh mount;
  - `modelfs --export OUT model.pt`.
The table gives each one's MiB/s and the median of its per-round ratio to
the reference (target >= 0.3x), and the largest RssAnon sampled every
20 ms of the mount's daemon during its copy, and of the --export process
(target < 64 MiB). Writes bench/results/<date>_export.{md,json}."""
import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench import cache_afresh, foreground, rss_anon_mib  # noqa: E402
from gen_models import write_torch  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


class PeakRss:
    """The largest RssAnon of `pid` while in the `with` block."""

    def __init__(self, pid):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_anon_mib(self.pid))
            except OSError:
                return
            time.sleep(0.02)

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def timed_copy(cmd, out):
    if out.exists():
        out.unlink()
    subprocess.run(["sync"], check=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", default="/var/tmp/modelfs-bench-export")
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    binary = pathlib.Path(args.build) / "modelfs"
    model = work / "model.pt"
    if not model.exists() or model.stat().st_size < GiB:
        write_torch(model)
    mnt = work / "mnt"
    out = work / "out.safetensors"
    cache_afresh([model])
    size = model.stat().st_size
    rows = {"cp model.pt": [], "cp from the mount": [], "--export": []}
    peaks = {"mount daemon": 0.0, "--export": 0.0}
    exported_size = 0
    for _ in range(args.rounds):
        rows["cp model.pt"].append(size / timed_copy(["cp", str(model), str(out)], out))
        with foreground([str(binary), "-f", str(model), str(mnt)], mnt, ".modelfs/index.json") as (pid, _):
            source = mnt / ".modelfs" / "model.safetensors"
            exported_size = source.stat().st_size
            with PeakRss(pid) as peak:
                rows["cp from the mount"].append(exported_size / timed_copy(["cp", str(source), str(out)], out))
            peaks["mount daemon"] = max(peaks["mount daemon"], peak.peak)
        mounted_copy = out.read_bytes()[:1 << 16]
        if out.exists():
            out.unlink()
        subprocess.run(["sync"], check=True)
        start = time.perf_counter()
        proc = subprocess.Popen([str(binary), "--export", str(out), str(model)])
        with PeakRss(proc.pid) as peak:
            assert proc.wait() == 0
        rows["--export"].append(exported_size / (time.perf_counter() - start))
        peaks["--export"] = max(peaks["--export"], peak.peak)
        assert out.read_bytes()[:1 << 16] == mounted_copy
    reference = rows["cp model.pt"]
    table = []
    for what, speeds in rows.items():
        ratios = [s / r for s, r in zip(speeds, reference)]
        table.append({"what": what, "MiB/s": statistics.median(speeds) / MiB,
                      "ratio": statistics.median(ratios), "runs": [round(s / MiB) for s in speeds]})
    stamp = datetime.datetime.now().strftime("%Y-%m-%d")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = HERE / "results" / f"{stamp}_export"
    result.with_suffix(".json").write_text(json.dumps(
        {"commit": commit, "cpus": os.cpu_count(), "model_bytes": size, "export_bytes": exported_size,
         "rows": table, "peak_rss_anon_mib": peaks}, indent=1) + "\n")
    lines = [f"# Export, {stamp} (commit {commit}, {os.cpu_count()} CPUs, {args.rounds} rounds)", "",
             f"model.pt {size / MiB:.0f} MiB (64 float32 tensors of 16 MiB, torch.save ZIP) to "
             f"safetensors ({exported_size / MiB:.0f} MiB); each output written to the same disk.", "",
             "| what | MiB/s (median) | ratio to cp model.pt (median) | runs, MiB/s |", "|---|---:|---:|---|"]
    lines += [f"| {r['what']} | {r['MiB/s']:.0f} | {r['ratio']:.2f}x | {r['runs']} |" for r in table]
    lines += ["", f"Peak RssAnon, sampled every 20 ms: mount daemon during its copy "
              f"{peaks['mount daemon']:.1f} MiB, --export {peaks['--export']:.1f} MiB (target < 64)."]
    result.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
