# SPDX-License-Identifier: Apache-2.0
"""modelfs benchmark (issue 7): the model file read directly from the page
cache is the reference; squashfuse (uncompressed image) and fuse-zip (stored
member) are the peers; everything is measured in one run, medians of rounds.
For the 1 GiB models a third peer serves what modelfs serves: squashfuse over
an image of modelfs's tensor files, read by the same paths (the first two
serve one file, the model file, which the kernel reads faster than many).

  /usr/bin/python3 bench/bench.py [--work DIR] [--rounds N] [--build DIR]

bench/run.sh installs, builds and generates the models first. Writes
bench/results/<date>_<host>.{csv,png,md} and prints the Markdown table.
Every mount is made in a `with` block that unmounts in its `finally`."""
import argparse
import contextlib
import csv
import datetime
import gc
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import gen_models  # noqa: E402

FS = ["direct", "modelfs", "squashfuse", "fuse-zip", "squashfuse, tensor files"]
# Serves the tensor files under modelfs's paths, not the model file.
TENSOR_PEER = "squashfuse, tensor files"
# The file systems read by modelfs's tensor paths (the others: the model file).
BY_TENSOR_PATH = ("modelfs", TENSOR_PEER)
# mksquashfs's options for an image that stores every byte as it is.
UNCOMPRESSED_SQUASHFS = ["-noI", "-noD", "-noF", "-noX", "-no-xattrs", "-quiet", "-no-progress"]
# Sequential passes over the same mount: the first fills its page cache.
PASSES = ("first", "second", "third")
MiB = 1 << 20


class Refused(Exception):
    """A daemon exited before its tree was ready."""


# ---------------------------------------------------------------- mounts
def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4].encode().decode("unicode_escape") == path for line in f)


def unmount(path):
    if not is_mounted(path):
        return
    if subprocess.run(["fusermount3", "-u", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True)
    for _ in range(200):
        if not is_mounted(path):
            return
        time.sleep(0.05)


@contextlib.contextmanager
def foreground(cmd, mnt, ready_path, timeout=300):
    """Runs a FUSE daemon in the foreground (so its PID is known) and yields
    (pid, seconds from command start to `ready_path` being stat-able)."""
    mnt.mkdir(parents=True, exist_ok=True)
    unmount(mnt)
    start = time.perf_counter()
    # Own session: a Ctrl-C reaches only us, and we unmount in order.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        while True:
            try:
                os.stat(mnt / ready_path)
                break
            except OSError:
                pass
            if proc.poll() is not None:
                raise Refused(f"exit {proc.returncode}: {proc.stderr.read().decode().strip()}")
            if time.perf_counter() - start > timeout:
                raise Refused(f"not ready after {timeout} s")
            time.sleep(0.001)
        yield proc.pid, time.perf_counter() - start
    finally:
        unmount(mnt)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stderr.close()


def rss_anon_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------- timing
def timed(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def cat(files):
    return timed(["cat", *map(str, files)])


def cache_afresh(files):
    """Drops the files from the page cache and reads them back, as a file
    read from the disk is cached: on Linux 6.18's ext4, in large folios (of
    the 1 GiB safetensors' 262 144 pages, 261 000 in multi-page folios),
    where the same file as its writer left it sat mostly in 4 KiB pages and
    `cat` took 0.15–0.20 s instead of 0.09. The reference's speed must not
    hang on how the generator or the previous run left it. Returns the
    seconds of the second read (the first comes from the disk): a direct
    file's own second read."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    cat(files)
    return cat(files)


def randread(tool, path, offset, length, threads, seed):
    out = subprocess.run([str(tool), str(path), str(offset), str(length), str(threads), str(seed)],
                         capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout)


def numpy_pass(arrays):
    """Touches every byte (an integer max: memory-bound, no float traps)."""
    start = time.perf_counter()
    for a in arrays:
        np.max(a.reshape(-1).view(np.uint32))
    return time.perf_counter() - start


def euler_circuit(places):
    """A closed walk through every ordered pair of distinct places (0 ..
    places-1) exactly once, as the list of places visited (Hierholzer's
    algorithm on the complete directed graph). Each place appears places-1
    times; with one place, just [0]."""
    if places < 2:
        return [0]
    unused = {v: [u for u in range(places) if u != v] for v in range(places)}
    stack, walk = [0], []
    while stack:
        v = stack[-1]
        if unused[v]:
            stack.append(unused[v].pop())
        else:
            walk.append(stack.pop())
    walk.reverse()
    return walk[:-1]  # the walk ends where it began


def per_circuit(places):
    return max(1, places - 1)


def mounts_per_name(rounds, places):
    """`rounds` rounded up to whole circuits (`balanced_order`)."""
    return -(-rounds // per_circuit(places)) * per_circuit(places)


def balanced_order(names, rounds):
    """Yields (name, measured): every name `mounts_per_name` times, measured,
    in an order where each name follows every other equally often (whole
    Euler circuits), after one unmeasured lead-in that gives the first
    measured mount the predecessor the circuit assumes.

    Why: a mount gets the pages the previous unmount freed, and in which
    physical order decides how fast the kernel later serves them. A
    kernel-served pass over pages in ascending physical order took 0.10 s,
    over descending ones 0.13 s; reading a descending file backwards was 22 %
    faster than forwards (pagemap). With the file systems merely rotated,
    modelfs followed fuse-zip and squashfuse modelfs in 4 of 6 rounds, and
    squashfuse's pages came out ascending far more often; alternating the
    two over 10 rounds, balanced, gave both the same (0.115 against 0.116 s
    per GiB, 63 % and 54 % of pages ascending)."""
    circuit = [names[i] for i in euler_circuit(len(names))]
    yield circuit[-1], False
    for _ in range(mounts_per_name(rounds, len(names)) // per_circuit(len(names))):
        for name in circuit:
            yield name, True


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# ---------------------------------------------------------------- the bench
class Bench:
    def __init__(self, args):
        self.work = pathlib.Path(args.work)
        self.rounds = args.rounds
        self.build = pathlib.Path(args.build)
        self.modelfs = self.build / "modelfs"
        self.randread_tool = self.build / "randread"
        # Per run, so that two runs never unmount each other's trees.
        self.mnt = self.work / "mnt" / str(os.getpid())
        self.rows = []
        self.modelfs_opts = args.modelfs_opt or []
        self.parts = set(args.parts.split(","))
        self.peers = [fs for fs in FS[1:] if fs == "modelfs" or not args.no_peers]
        # Per model file: the tensor peer's image and the paths it serves.
        self.tensor_images = {}
        self.tensor_paths = {}

    def add(self, model, metric, fs, value, unit, note=""):
        self.rows.append(dict(model=model, metric=metric, fs=fs, value=value, unit=unit, note=note))

    # How each file system is mounted, in the foreground; None = read directly.
    def mount(self, fs, model_files, ready):
        if fs == "modelfs":
            cmd = [str(self.modelfs), "-f", *self.modelfs_opts, str(model_files[0]), str(self.mnt / fs)]
            return foreground(cmd, self.mnt / fs, ".modelfs/index.json")
        if fs == "squashfuse":
            image = self.peer_image(model_files, "sqfs")
            return foreground(["squashfuse_ll", "-f", str(image), str(self.mnt / fs)], self.mnt / fs, ready)
        if fs == "fuse-zip":
            archive = self.peer_image(model_files, "zip")
            return foreground(["fuse-zip", "-r", "-f", str(archive), str(self.mnt / fs)], self.mnt / fs, ready)
        if fs == TENSOR_PEER:
            image = self.tensor_images[model_files[0].name]
            return foreground(["squashfuse_ll", "-f", str(image), str(self.mnt / fs)], self.mnt / fs,
                              self.tensor_paths[model_files[0].name][0])
        raise ValueError(fs)

    def kept_image(self, files, suffix, make, also_keyed=()):
        """peers/<model file><suffix>, made by `make(path)` once and kept
        while the model's files (and `also_keyed`) stay as they were."""
        path = self.work / "peers" / (files[0].name + suffix)
        stamp = path.with_suffix(path.suffix + ".ok")
        key = json.dumps([[f.name, f.stat().st_size, f.stat().st_mtime] for f in files] + list(also_keyed))
        if path.exists() and stamp.exists() and stamp.read_text() == key:
            return path
        path.parent.mkdir(exist_ok=True)
        path.unlink(missing_ok=True)
        log(f"making {path.name}")
        make(path)
        stamp.write_text(key)
        return path

    def tensor_image(self, files, paths):
        """An uncompressed squashfs image of modelfs's tensor files (its tree
        without sidecars, .npy views and .modelfs/), made from the mounted
        tree."""
        def make(path):
            with self.mount("modelfs", files, None):
                subprocess.run(["mksquashfs", str(self.mnt / "modelfs"), str(path), *UNCOMPRESSED_SQUASHFS,
                                "-wildcards", "-e", "... *.json", "... *.npy", ".modelfs"],
                               check=True, stdout=subprocess.DEVNULL)
            listed = set(subprocess.run(["unsquashfs", "-d", "", "-lc", str(path)], capture_output=True,
                                        text=True, check=True).stdout.split("\n"))
            missing = [p for p in paths if "/" + p not in listed]
            if missing:  # a tensor named *.json or *.npy would be excluded
                path.unlink()
                raise RuntimeError(f"{path.name} lacks tensor files: {missing[:3]}")
        return self.kept_image(files, ".tensors.sqfs", make, [paths])

    def peer_image(self, files, kind):
        """The model's files in an uncompressed squashfs image or a stored ZIP."""
        def make(path):
            if kind == "sqfs":
                subprocess.run(["mksquashfs", *map(str, files), str(path), *UNCOMPRESSED_SQUASHFS],
                               check=True, stdout=subprocess.DEVNULL)
            else:
                subprocess.run(["zip", "-0", "-j", "-q", str(path), *map(str, files)], check=True)
        return self.kept_image(files, "." + kind, make)

    def refused(self, model_file):
        out = subprocess.run([str(self.modelfs), "--list", str(model_file)], capture_output=True, text=True)
        if out.returncode == 0:
            return None
        return out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"

    # -------------------------------------------------------- 1 GiB models
    def big_model(self, name):
        files = [self.work / f for f in gen_models.MODELS[name][0]]
        why = self.refused(files[0])
        if why:
            log(f"{name}: skipped ({why})")
            self.add(name, "skipped", "modelfs", None, "", why)
            return
        # The tensors, as modelfs lists them; offsets in the model's files.
        with self.mount("modelfs", files, None) as _:
            root = self.mnt / "modelfs"
            index = json.loads((root / ".modelfs/index.json").read_text())
            tensors = []
            for t in index["tensors"]:
                side = json.loads((root / (t["path"] + ".json")).read_text())
                tensors.append(dict(path=t["path"], nbytes=t["nbytes"], shape=t["shape"], dtype=side.get("numpy"),
                                    file=side["source"]["file"], offset=side["source"].get("offset")))
        data_files = sorted({t["file"] for t in tensors})
        self.tensor_paths[files[0].name] = [t["path"] for t in tensors]
        if TENSOR_PEER in self.peers:
            self.tensor_images[files[0].name] = self.tensor_image(files, self.tensor_paths[files[0].name])
        log(f"{name}: {len(tensors)} tensors in {data_files}; caching the model and the peers' images afresh")
        # Nothing maps them now (every mount is down): each is dropped from
        # the page cache and read back, so all sit in the page cache alike.
        second_reads = [cache_afresh(files) for _ in range(self.rounds)]
        self.add(name, "read all bytes, second read after caching afresh", "direct", median(second_reads), "s")
        for fs, kind in (("squashfuse", "sqfs"), ("fuse-zip", "zip")):
            if fs in self.peers:
                cache_afresh([self.peer_image(files, kind)])
        if TENSOR_PEER in self.peers:
            cache_afresh([self.tensor_images[files[0].name]])

        if "seq" in self.parts:
            self.sequential(name, files, tensors, data_files)
        else:
            direct = [cat([self.work / f for f in data_files]) for _ in range(self.sequential_rounds())]
            self.add(name, "read all bytes", "direct", median(direct), "s")
        if "rand" in self.parts:
            self.random_reads(name, files, tensors)
        if "numpy" in self.parts:
            self.numpy_reads(name, files, tensors)

    def sequential_rounds(self):
        """At least 5 per file system, in whole circuits (`balanced_order`)."""
        return mounts_per_name(max(5, self.rounds), len(self.peers))

    def numpy_rounds(self):
        return mounts_per_name(self.rounds, len(self.numpy_ways()))

    def numpy_ways(self):
        """(file system, how) of each numpy measure: np.memmap on the model
        file and on every file system, and np.load of modelfs's .npy views."""
        ways = [(fs, "np.memmap") for fs in ["direct", *self.peers]]
        if "modelfs" in self.peers:
            ways.append(("modelfs", "np.load of the .npy"))
        return ways

    def sequential(self, name, files, tensors, data_files):
        """First, second and third pass of every file system, mounted in an
        order balanced for predecessors (`balanced_order`), each pass right
        after a direct read of the model file: a pass's ratio is taken to the
        direct read just before it, and the median of those ratios is kept,
        so a noisy moment of the machine weighs on both sides alike. The
        third pass is there because the second pays the kernel's promotion of
        each page to the active list (a page's second access), which the
        model file, read many times already, no longer pays; a mount's cache
        is in 4 KiB folios (Linux 6.18's FUSE), so it pays that 262 144 times
        a GiB where the model file, in large folios, paid it a few hundred
        times (`cache_afresh`)."""
        direct_files = [self.work / f for f in data_files]
        direct = []
        runs = {fs: {key: [] for label in PASSES for key in (label, "ratio_" + label)} | {"rss": []}
                for fs in self.peers}
        for fs, measured in balanced_order(self.peers, self.sequential_rounds()):
            run = runs[fs]
            with self.mount(fs, files, data_files[0]) as (pid, _):
                root = self.mnt / fs
                paths = ([root / t["path"] for t in tensors] if fs in BY_TENSOR_PATH
                         else [root / f for f in data_files])
                if not measured:
                    cat(paths)
                    continue
                for label in PASSES:
                    before = cat(direct_files)
                    taken = cat(paths)
                    direct.append(before)
                    run[label].append(taken)
                    run["ratio_" + label].append(before / taken)
                run["rss"].append(rss_anon_mib(pid))
        self.add(name, "read all bytes", "direct", median(direct), "s")
        for fs, run in runs.items():
            for label in PASSES:
                self.add(name, f"read all bytes, {label} pass", fs, median(run[label]), "s")
                self.add(name, f"{label} pass ÷ direct (×)", fs, median(run["ratio_" + label]), "x")
            self.add(name, "anon RSS after reading all", fs, max(run["rss"]), "MiB")
            passes = " ".join(f"{label} {median(run[label]):.3f}s ({median(run['ratio_' + label]):.2f}×)"
                              for label in PASSES)
            log(f"{name}: {fs} {passes} (direct {median(direct):.3f}s)")

    def random_reads(self, name, files, tensors):
        big = max(tensors, key=lambda t: t["nbytes"])
        length = big["nbytes"]
        for threads in (1, 8):
            for fs in ["direct", *self.peers]:
                p50, p99 = [], []
                for r in range(self.rounds):
                    if fs == "direct":
                        res = randread(self.randread_tool, self.work / big["file"], big["offset"], length, threads, r)
                    else:
                        with self.mount(fs, files, big["file"]):
                            if fs in BY_TENSOR_PATH:
                                res = randread(self.randread_tool, self.mnt / fs / big["path"], 0, length, threads, r)
                            else:
                                res = randread(self.randread_tool, self.mnt / fs / big["file"], big["offset"],
                                               length, threads, r)
                    p50.append(res["p50_us"])
                    p99.append(res["p99_us"])
                self.add(name, f"4 KiB random read, {threads} thread{'s' if threads > 1 else ''}, p50", fs,
                         median(p50), "µs")
                self.add(name, f"4 KiB random read, {threads} thread{'s' if threads > 1 else ''}, p99", fs,
                         median(p99), "µs")
            log(f"{name}: random reads with {threads} threads done")

    def numpy_reads(self, name, files, tensors):
        """np.memmap of every tensor (the model file at its offset; on modelfs
        the raw tensor file), then for modelfs also np.load(P.npy,
        mmap_mode="r"), which parses each .npy header in Python as well; and
        a full pass over the arrays, twice."""
        usable = [t for t in tensors if t["dtype"] and t["offset"] is not None]

        def memmaps(fs, root):
            if fs in BY_TENSOR_PATH:
                return [np.memmap(root / t["path"], dtype=t["dtype"], mode="r", shape=tuple(t["shape"]))
                        for t in usable]
            return [np.memmap(root / t["file"], dtype=t["dtype"], mode="r", offset=t["offset"],
                              shape=tuple(t["shape"])) for t in usable]

        def npy_loads(fs, root):
            return [np.load(root / (t["path"] + ".npy"), mmap_mode="r") for t in usable]

        openers = {"np.memmap": memmaps, "np.load of the .npy": npy_loads}
        ways = self.numpy_ways()
        timings = [([], [], []) for _ in ways]
        for way, measured in balanced_order(list(range(len(ways))), self.numpy_rounds()):
            fs, how = ways[way]
            open_all = openers[how]
            load, first, second = timings[way] if measured else ([], [], [])
            with contextlib.ExitStack() as stack:
                if fs != "direct":
                    stack.enter_context(self.mount(fs, files, usable[0]["file"]))
                root = self.work if fs == "direct" else self.mnt / fs
                start = time.perf_counter()
                arrays = open_all(fs, root)
                load.append(time.perf_counter() - start)
                first.append(numpy_pass(arrays))
                second.append(numpy_pass(arrays))
                del arrays  # the mappings must go before the unmount
                gc.collect()
        for (fs, how), (load, first, second) in zip(ways, timings):
            self.add(name, f"numpy: open every tensor ({how})", fs, median(load) * 1e3, "ms")
            self.add(name, f"numpy: full pass, first ({how})", fs, median(first), "s")
            self.add(name, f"numpy: full pass, second ({how})", fs, median(second), "s")
        log(f"{name}: numpy done")

    # -------------------------------------------------------- 100 000 tensors
    def small_model(self, name):
        files = [self.work / f for f in gen_models.MODELS[name][0]]
        why = self.refused(files[0])
        if why:
            self.add(name, "skipped", "modelfs", None, "", why)
            return
        cat(files)
        # Peers serve the same tree: an image made from the mounted tree.
        trees = {}
        for fs, kind in (("squashfuse", "sqfs"), ("fuse-zip", "zip")):
            if fs in self.peers:
                trees[fs], seconds = self.tree_image(files, kind)
                # What the peers' mount times stand on: an image of the tree,
                # made once beforehand (timed when it was made).
                self.add(name, "image of the tree, made beforehand", fs, seconds, "s")
        # Its squashfuse peer is already an image of modelfs's tree.
        for fs in [fs for fs in self.peers if fs != TENSOR_PEER]:
            ready, find, lsr, rss = [], [], [], []
            for _ in range(self.rounds):
                for walk, times in ((["find"], find), (["ls", "-lR"], lsr)):
                    with self.tree_mount(fs, files, trees) as (pid, seconds):
                        ready.append(seconds)
                        rss.append(rss_anon_mib(pid))
                        times.append(timed([*walk, str(self.mnt / fs)]))
                        rss.append(rss_anon_mib(pid))
            self.add(name, "mount: command to tree ready", fs, median(ready), "s")
            self.add(name, "find over the tree (fresh mount)", fs, median(find), "s")
            self.add(name, "ls -lR over the tree (fresh mount)", fs, median(lsr), "s")
            self.add(name, "anon RSS, mounted and walked", fs, max(rss), "MiB")
            log(f"{name}: {fs} ready {median(ready):.3f}s find {median(find):.3f}s ls -lR {median(lsr):.3f}s "
                f"rss {max(rss):.1f} MiB")

    def tree_mount(self, fs, files, trees):
        if fs == "modelfs":
            return self.mount(fs, files, None)
        cmd = (["squashfuse_ll", "-f"] if fs == "squashfuse" else ["fuse-zip", "-r", "-f"])
        return foreground([*cmd, str(trees[fs]), str(self.mnt / fs)], self.mnt / fs, ".modelfs/index.json")

    def tree_image(self, files, kind):
        path = self.work / "peers" / (files[0].name + ".tree." + kind)
        stamp = path.with_suffix(path.suffix + ".ok")
        with self.mount("modelfs", files, None):
            src = self.mnt / "modelfs"
            key = str((src / ".modelfs/index.json").stat().st_size) + json.dumps(
                [files[0].stat().st_size, files[0].stat().st_mtime])
            if path.exists() and stamp.exists():
                made_for, _, seconds = stamp.read_text().partition("\n")
                if made_for == key and seconds:
                    return path, float(seconds)
            path.parent.mkdir(exist_ok=True)
            path.unlink(missing_ok=True)
            log(f"making {path.name} from the mounted tree")
            start = time.perf_counter()
            if kind == "sqfs":
                subprocess.run(["mksquashfs", str(src), str(path), *UNCOMPRESSED_SQUASHFS], check=True,
                               capture_output=True)
            else:
                subprocess.run(["zip", "-0", "-r", "-q", "-y", str(path), "."], cwd=src, check=True)
            seconds = time.perf_counter() - start
        stamp.write_text(f"{key}\n{seconds}")
        return path, seconds


# ---------------------------------------------------------------- output
def log(message):
    print(f"bench: {message}", file=sys.stderr, flush=True)


def fmt(value, unit):
    if value is None:
        return "–"
    if unit == "x":
        return f"{value:.2f}×"
    if unit == "s":
        return f"{value:.3f}"
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def markdown(rows, header):
    lines = header + [""]
    models = list(dict.fromkeys(r["model"] for r in rows))
    for model in models:
        lines += [f"### {model}", "", "| measure | " + " | ".join(FS) + " |", "|---|" + "---:|" * len(FS)]
        mine = [r for r in rows if r["model"] == model]
        for r in mine:
            if r["metric"] == "skipped":
                lines.append(f"| skipped: {r['note']} |" + " |" * len(FS))
        for metric in dict.fromkeys(r["metric"] for r in mine if r["metric"] != "skipped"):
            cells = {r["fs"]: r for r in mine if r["metric"] == metric}
            unit = next(iter(cells.values()))["unit"]
            label = metric if unit == "x" else f"{metric} ({unit})"
            lines.append(f"| {label} | " + " | ".join(fmt(cells[f]["value"], unit) if f in cells else ""
                                                      for f in FS) + " |")
        lines.append("")
    return "\n".join(lines)


def chart(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"direct": "#555555", "modelfs": "#1f77b4", "squashfuse": "#ff7f0e", "fuse-zip": "#2ca02c",
              TENSOR_PEER: "#ffbb78"}
    panels = [
        ("Sequential read of all tensors\n(throughput ÷ direct; higher is better)",
         lambda r: r["unit"] == "x", False),
        ("4 KiB random reads (µs; lower is better)", lambda r: r["metric"].startswith("4 KiB"), True),
        ("100 000-tensor tree (s; lower is better)",
         lambda r: r["model"] == "small.safetensors" and r["unit"] == "s", True),
        ("Daemon anon RSS (MiB; lower is better)", lambda r: r["unit"] == "MiB", True),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(15, 10))
    for ax, (heading, keep, log_scale) in zip(axes.flat, panels):
        chosen = [r for r in rows if keep(r) and r["value"] is not None]
        groups = list(dict.fromkeys((r["model"], r["metric"]) for r in chosen))
        width = 0.8 / len(FS)
        for i, fs in enumerate(FS):
            values = [next((r["value"] for r in chosen if (r["model"], r["metric"]) == g and r["fs"] == fs), 0)
                      for g in groups]
            ax.bar([x + i * width for x in range(len(groups))], values, width, label=fs, color=colors[fs])
        labels = [(m.replace(".safetensors", "") + ": " + metric.replace(" ÷ direct (×)", "")
                   .replace("4 KiB random read, ", "").replace(" over the tree (fresh mount)", "")
                   .replace("mount: command to tree ready", "mount ready")
                   .replace("image of the tree, made beforehand", "image made beforehand")) for m, metric in groups]
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(groups))], labels, rotation=30, ha="right",
                      fontsize=8)
        ax.set_title(heading, fontsize=10)
        if log_scale:
            ax.set_yscale("log")
        if heading.startswith("Sequential"):
            for bar, style in ((0.3, ":"), (0.8, "--")):
                ax.axhline(bar, color="red", linestyle=style, linewidth=0.8)
        ax.legend(fontsize=8)
    fig.suptitle(textwrap.fill(title, 190), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def git_commit():
    def git(*a):
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/modelfs-bench"))
    parser.add_argument("--build", default=str(ROOT / "build-bench"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", nargs="*", default=list(gen_models.MODELS))
    parser.add_argument("--modelfs-opt", action="append", help="extra modelfs argument (A/B tuning)")
    parser.add_argument("--tag", default="", help="added to the result file names")
    parser.add_argument("--parts", default="seq,rand,numpy", help="of the 1 GiB models: seq,rand,numpy")
    parser.add_argument("--no-peers", action="store_true", help="modelfs only (quick A/B while tuning)")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, through every `finally` that unmounts.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))

    bench = Bench(args)
    now = datetime.datetime.now(datetime.timezone.utc)
    host = socket.gethostname()
    commit = git_commit()
    try:
        for name in args.models:
            if name == "small.safetensors":
                bench.small_model(name)
            else:
                bench.big_model(name)
    finally:
        for d in sorted(bench.mnt.glob("*"), reverse=True) + [bench.mnt]:
            with contextlib.suppress(OSError):
                d.rmdir()  # only empty folders: never a live mount's contents

    results = HERE / "results"
    results.mkdir(exist_ok=True)
    stem = f"{now:%Y-%m-%d_%H%M}_{host}" + (f"_{args.tag}" if args.tag else "")
    meta = dict(date=now.strftime("%Y-%m-%d %H:%M UTC"), host=host, commit=commit, cpus=os.cpu_count(),
                kernel=os.uname().release, rounds=args.rounds, modelfs_opts=" ".join(bench.modelfs_opts))
    with open(results / f"{stem}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*meta, "model", "metric", "fs", "value", "unit", "note"])
        writer.writeheader()
        for r in bench.rows:
            writer.writerow({**meta, **r})
    header = [f"modelfs benchmark — {meta['date']}, {host} ({meta['cpus']} CPUs, Linux {meta['kernel']}), "
              f"commit {commit}, medians of {args.rounds} rounds (sequential: of {bench.sequential_rounds()}, each pass against a direct read just before it; "
              f"numpy: of {bench.numpy_rounds()}; mounts in an order where each file system follows every other equally often)"
              + (f", modelfs {meta['modelfs_opts']}" if meta["modelfs_opts"] else "")]
    table = markdown(bench.rows, header)
    (results / f"{stem}.md").write_text(table + "\n")
    chart(bench.rows, results / f"{stem}.png", header[0])
    print(table)
    log(f"wrote {results / stem}.{{csv,md,png}}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        log("interrupted; every mount was unmounted")
        sys.exit(130)
