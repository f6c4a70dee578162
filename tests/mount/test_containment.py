# SPDX-License-Identifier: Apache-2.0
"""Files a model names are read from what was checked: each shard of a
weight_map, each member of a GGUF split set, each ONNX external data file
is opened once, inside the model's folder, and mapped from that
descriptor. A link swapped in under the name after the check must never
be what modelfs serves.

The swaps are made while modelfs runs: once at a point inotify reports
(the first shard opened: the other shards' names have been checked by
then), and by a thread that exchanges a member with a link out of the
folder over and over (renameat2 RENAME_EXCHANGE, atomic) while modelfs
opens the set again and again. Every answer must be the file that was
there or a one-line refusal (exit 2); the outside file's tensors, which
differ in shape and bytes, must never appear.

Without a race: a FIFO as the model or as a file it names is refused,
never opened for reading (which would wait for a writer); a link out of
the folder is refused, one that stays inside (a hub cache snapshot's
links to its blobs) is followed."""
import contextlib
import ctypes
import hashlib
import json
import os
import pathlib
import select
import shutil
import subprocess
import tempfile
import threading

import numpy as np
import pytest

import gguf_writer as gw
import safetensors_writer as st
import conftest
from conftest import index_paths, is_mounted, one_line, unmount

libc = ctypes.CDLL(None, use_errno=True)
IN_OPEN = 0x20
IN_CLOEXEC = 0o2000000
IN_NONBLOCK = 0o4000
AT_FDCWD = -100
RENAME_EXCHANGE = 2

# Runs of modelfs per swap test: each is a fresh chance for the swap to
# land between a check by name and an open by name.
LIST_RUNS = 12
MOUNT_RUNS = 4
RACE_RUNS = 150


def run_modelfs(*args):
    return conftest.run_modelfs(*args, timeout=60, errors="replace")


def listed_shapes(result):
    return {t["name"]: t["shape"] for t in json.loads(result.stdout)["tensors"]}


def assert_refused(result, name, why):
    assert result.returncode == 2, (result.returncode, result.stderr)
    line = one_line(result.stderr)
    assert name in line and why in line, line
    assert len(line) < 4096


@contextlib.contextmanager
def on_open(path, action):
    """Calls `action` from a thread of its own as soon as `path` is next
    opened (inotify IN_OPEN); yields a list that holds True once it has."""
    fd = libc.inotify_init1(IN_CLOEXEC | IN_NONBLOCK)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    assert libc.inotify_add_watch(fd, os.fsencode(path), IN_OPEN) >= 0, os.strerror(ctypes.get_errno())
    stop_read, stop_write = os.pipe()
    fired = []

    def watch():
        ready, _, _ = select.select([fd, stop_read], [], [], 60)
        if fd in ready:
            action()
            fired.append(True)

    thread = threading.Thread(target=watch)
    thread.start()
    try:
        yield fired
    finally:
        os.write(stop_write, b"x")
        thread.join()
        for f in (fd, stop_read, stop_write):
            os.close(f)


def exchange(a, b):
    if libc.renameat2(AT_FDCWD, os.fsencode(str(a)), AT_FDCWD, os.fsencode(str(b)), RENAME_EXCHANGE) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error), str(a))


@contextlib.contextmanager
def flipping(a, b):
    """Exchanges the entries `a` and `b` over and over until the block ends."""
    stop = threading.Event()
    failed = []

    def flip():
        try:
            while not stop.is_set():
                exchange(a, b)
        except OSError as e:
            failed.append(e)

    thread = threading.Thread(target=flip)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    assert not failed, failed


@contextlib.contextmanager
def mount_attempt(model):
    """Mounts `model`; yields (the result, the mountpoint if anything is
    mounted there, even after a refusal). Always unmounts and removes the
    mountpoint."""
    mnt = pathlib.Path(tempfile.mkdtemp(prefix="modelfs-mnt-"))
    try:
        result = run_modelfs(model, mnt)
        yield result, (mnt if is_mounted(mnt) else None)
    finally:
        unmount(mnt)
        os.rmdir(mnt)


# --- shards of a weight_map -------------------------------------------------

# Enough tensors in the first shard that reading its header takes a while:
# the swap, made when that shard is opened, lands before the next shard
# would be opened by name.
FIRST_SHARD_TENSORS = 30_000
SHARD_1 = "model-00001-of-00002.safetensors"
SHARD_2 = "model-00002-of-00002.safetensors"
GOOD = np.arange(4, dtype=np.float32)
SECRET = np.arange(100, 108, dtype=np.float32)  # another shape, other bytes


def sharded_model(tmp):
    """An index, a first shard of many tensors, a second holding "b"; a
    file outside the folder holding another "b"; a link to it, ready."""
    outside = tmp / "outside"
    outside.mkdir()
    st.write(outside / "secret.safetensors", {"b": SECRET})
    folder = tmp / "model"
    folder.mkdir()
    first = {f"a.{i}": np.full(1, i, np.float32) for i in range(FIRST_SHARD_TENSORS)}
    st.write(folder / SHARD_1, first)
    st.write(folder / "good.safetensors", {"b": GOOD})
    shutil.copy(folder / "good.safetensors", folder / SHARD_2)
    weight_map = {name: SHARD_1 for name in first}
    weight_map["b"] = SHARD_2
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    return folder, index


def arm(folder):
    """The link out, prepared beside the shard it will replace; the shard restored."""
    shutil.copy(folder / "good.safetensors", folder / "restore.tmp")
    os.rename(folder / "restore.tmp", folder / SHARD_2)
    with contextlib.suppress(FileNotFoundError):
        os.remove(folder / "swap.tmp")
    os.symlink("../outside/secret.safetensors", folder / "swap.tmp")


def swap_shard(folder):
    os.rename(folder / "swap.tmp", folder / SHARD_2)


def assert_good_or_refused(result, name):
    if result.returncode == 0:
        return True
    assert_refused(result, name, "outside the model's folder")
    return False


def test_a_shard_swapped_for_a_link_out_after_the_check_is_never_served(tmp):
    folder, index = sharded_model(tmp)
    fired_runs = 0
    for _ in range(LIST_RUNS):
        arm(folder)
        with on_open(folder / SHARD_1, lambda: swap_shard(folder)) as fired:
            result = run_modelfs("--list", "--json", index)
        fired_runs += bool(fired)
        if assert_good_or_refused(result, SHARD_2):
            assert listed_shapes(result)["b"] == [4], "the shard outside the folder was read"
    for _ in range(MOUNT_RUNS):
        arm(folder)
        with on_open(folder / SHARD_1, lambda: swap_shard(folder)) as fired:
            with mount_attempt(index) as (result, mnt):
                if assert_good_or_refused(result, SHARD_2):
                    assert mnt is not None
                    paths, _ = index_paths(mnt)
                    assert subprocess.run(["cat", paths["b"]], check=True,
                                          capture_output=True).stdout == GOOD.tobytes()
        fired_runs += bool(fired)
    # Every run had its swap: the test tested something.
    assert fired_runs == LIST_RUNS + MOUNT_RUNS


def test_a_shard_flipping_with_a_link_out_is_never_served(tmp):
    outside = tmp / "outside"
    outside.mkdir()
    st.write(outside / "secret.safetensors", {"b": SECRET})
    folder = tmp / "model"
    folder.mkdir()
    st.write(folder / SHARD_1, {"a": np.ones(1, np.float32)})
    st.write(folder / SHARD_2, {"b": GOOD})
    os.symlink("../outside/secret.safetensors", folder / "flip.tmp")
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": SHARD_1, "b": SHARD_2}}))
    served = []
    with flipping(folder / SHARD_2, folder / "flip.tmp"):
        for _ in range(RACE_RUNS):
            result = run_modelfs("--list", "--json", index)
            if assert_good_or_refused(result, SHARD_2):
                served.append(listed_shapes(result)["b"])
    assert all(shape == [4] for shape in served), "the shard outside the folder was read"


# --- members of a GGUF split set ----------------------------------------------

def split_tensors(length):
    return [gw.random_tensor(f"t{i}", 0, [length], seed=length + i) for i in range(3)]


def test_a_split_member_that_does_not_resolve_is_refused(tmp):
    folder = tmp / "split"
    folder.mkdir()
    paths = gw.write_split(folder, "m", [], split_tensors(4), 3)
    missing = gw.split_name("m", 2, 3)
    os.remove(paths[1])
    for model in (paths[0], folder):
        assert_refused(run_modelfs("--list", model), missing, "is missing")
    # A link to nothing, and a loop of links: refused by name too.
    os.symlink("nowhere.gguf", paths[1])
    for model in (paths[0], paths[2], folder):
        assert_refused(run_modelfs("--list", model), missing, "is missing")
    os.remove(paths[1])
    os.symlink(paths[1].name, paths[1])
    for model in (paths[0], folder):
        assert_refused(run_modelfs("--list", model), missing, "cannot be opened")
    mnt = tmp / "mnt"
    mnt.mkdir()
    try:
        assert_refused(run_modelfs(paths[0], mnt), missing, "cannot be opened")
        assert not is_mounted(mnt)
    finally:
        unmount(mnt)


def outside_split(tmp):
    """A split set in the folder, and another one outside it whose
    tensors are longer (other shapes, other bytes)."""
    outside = tmp / "outside"
    outside.mkdir()
    gw.write_split(outside, "m", [], split_tensors(8), 2)
    folder = tmp / "split"
    folder.mkdir()
    paths = gw.write_split(folder, "m", [], split_tensors(4), 2)
    return outside / gw.split_name("m", 2, 2), paths


def test_a_split_member_that_links_out_is_refused(tmp):
    secret, paths = outside_split(tmp)
    os.remove(paths[1])
    os.symlink(secret, paths[1])
    for model in (paths[0], paths[1].parent):
        assert_refused(run_modelfs("--list", model), paths[1].name, "outside the model's folder")


def test_a_split_member_flipping_with_a_link_out_is_never_served(tmp):
    secret, paths = outside_split(tmp)
    flip = paths[1].parent / "flip.tmp"
    os.symlink(secret, flip)
    served = []
    with flipping(paths[1], flip):
        for _ in range(RACE_RUNS):
            result = run_modelfs("--list", "--json", paths[0])
            if result.returncode == 0:
                served.append(listed_shapes(result))
            else:
                assert_refused(result, paths[1].name, "outside the model's folder")
    assert all(shape == [4] for shapes in served for shape in shapes.values()), \
        "a member outside the folder was read"


# --- the Hugging Face hub cache -------------------------------------------------

def test_hub_cache_snapshot_mounts_its_blobs(tmp):
    """models--o--n/snapshots/abc/: the index a file of the snapshot (then a
    link to blobs/), the shards links to ../../blobs/HASH (one an absolute
    link); a link out of the repository is refused."""
    repo = tmp / "hub" / "models--o--n"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    written = {}
    weight_map = {}
    for i in range(3):
        name = f"model-0000{i + 1}-of-00003.safetensors"
        values = np.random.default_rng(i).standard_normal(5 + i).astype(np.float32)
        blob = repo / "blobs" / f"{i:02d}cafe{i}"
        st.write(blob, {f"w{i}": values})
        (snapshot / name).symlink_to(blob if i == 2 else f"../../blobs/{blob.name}")
        written[f"w{i}"] = values.tobytes()
        weight_map[f"w{i}"] = name
    (snapshot / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    for model in (snapshot, snapshot / "model.safetensors.index.json"):
        with mount_attempt(model) as (result, mnt):
            assert result.returncode == 0 and mnt is not None, result.stderr
            paths, _ = index_paths(mnt)
            for name, data in written.items():
                assert subprocess.run(["cat", paths[name]], check=True, capture_output=True).stdout == data
    # The index itself a link into blobs/, as the hub makes it: followed too.
    (repo / "blobs" / "index").write_text(json.dumps({"weight_map": weight_map}))
    (snapshot / "model.safetensors.index.json").unlink()
    (snapshot / "model.safetensors.index.json").symlink_to("../../blobs/index")
    result = run_modelfs("--list", "--json", snapshot)
    assert result.returncode == 0 and set(listed_shapes(result)) == set(written), result.stderr
    # A shard linked out of the repository's blobs/: refused as anywhere else.
    outside = outside_secret(tmp)
    (snapshot / "model-00002-of-00003.safetensors").unlink()
    (snapshot / "model-00002-of-00003.safetensors").symlink_to(outside / "secret.safetensors")
    assert_refused_as_outside(run_modelfs("--list", snapshot), "model-00002-of-00003.safetensors")


# --- ONNX external data -----------------------------------------------------------

def onnx_model(path, locations, checksum=None):
    """An .onnx whose initializers w0, w1, ... (4 float32 each) lie in
    external data at `locations`, each at offset 0 (with a SHA-1 checksum
    of its bytes, when given: --check compares it)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    tensors = []
    for i, location in enumerate(locations):
        t = numpy_helper.from_array(np.zeros(4, np.float32), f"w{i}")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        entries = {"location": location, "offset": "0", "length": "16"}
        if checksum:
            entries["checksum"] = checksum
        for key, value in entries.items():
            t.external_data.add(key=key, value=value)
        tensors.append(t)
    outputs = [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, [4]) for t in tensors]
    graph = helper.make_graph([], "g", [], outputs, initializer=tensors)
    path.write_bytes(helper.make_model(graph).SerializeToString())
    return path


ONNX_GOOD = np.arange(4, dtype=np.float32)
ONNX_SECRET = np.full(4, 7, np.float32)


def onnx_folder(tmp):
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(ONNX_SECRET.tobytes())
    (outside / "w.bin").write_bytes(ONNX_SECRET.tobytes())
    folder = tmp / "onnx"
    (folder / "sub").mkdir(parents=True)
    (folder / "w.bin").write_bytes(ONNX_GOOD.tobytes())
    (folder / "sub" / "w.bin").write_bytes(ONNX_GOOD.tobytes())
    return outside, folder


def test_onnx_external_data_that_links_out_is_refused(tmp):
    outside, folder = onnx_folder(tmp)
    (folder / "link.bin").symlink_to("../outside/secret.bin")
    (folder / "absolute.bin").symlink_to(outside / "secret.bin")
    for location in ("link.bin", "absolute.bin"):
        model = onnx_model(folder / "m.onnx", ["w.bin", location])
        assert_refused(run_modelfs("--list", model), location, "outside the model's folder")


def test_onnx_external_data_flipping_with_a_link_out_is_never_served(tmp):
    """The folder holding the data exchanged with a link to one outside:
    --check compares the bytes read with the model's SHA-1 of the good ones,
    a mount reads them back."""
    _, folder = onnx_folder(tmp)
    os.symlink("../outside", folder / "flip.tmp")
    model = onnx_model(folder / "m.onnx", ["sub/w.bin"], hashlib.sha1(ONNX_GOOD.tobytes()).hexdigest())
    with flipping(folder / "sub", folder / "flip.tmp"):
        for _ in range(RACE_RUNS):
            result = run_modelfs("--check", model)
            if result.returncode != 0:
                assert_refused(result, "sub/w.bin", "outside the model's folder")
        for _ in range(MOUNT_RUNS):
            with mount_attempt(model) as (result, mnt):
                if result.returncode != 0:
                    assert_refused(result, "sub/w.bin", "outside the model's folder")
                    continue
                paths, _ = index_paths(mnt)
                assert subprocess.run(["cat", paths["w0"]], check=True,
                                      capture_output=True).stdout == ONNX_GOOD.tobytes()


# ---- FIFOs are refused, never opened for reading; links out of the folder ----

def onnx_with_external_weight(path, location):
    """An .onnx whose one initializer "w" (4 float32) lies in external data at `location`."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    t = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in {"location": location, "offset": "0", "length": "16"}.items():
        t.external_data.add(key=key, value=value)
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])],
                              initializer=[t])
    path.write_bytes(helper.make_model(graph).SerializeToString())
    return path


def assert_refused_as_fifo(result, name):
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert name in line and "FIFO" in line and "not a regular file" in line, line


def test_fifo_as_the_model_is_refused(tmp):
    fifo = tmp / "model.safetensors"
    os.mkfifo(fifo)
    for command in ("--list", "--info", "--check"):
        assert_refused_as_fifo(run_modelfs(command, fifo), "model.safetensors")
    with mount_attempt(fifo) as (result, mnt):
        assert_refused_as_fifo(result, "model.safetensors")
        assert mnt is None


def test_fifo_named_by_a_sharded_index_is_refused(tmp):
    folder = tmp / "sharded"
    folder.mkdir()
    st.write(folder / "a.safetensors", {"x": np.zeros(4, np.float32)})
    os.mkfifo(folder / "b.safetensors")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}))
    # The index named, and its folder (the folder's only index names the FIFO).
    assert_refused_as_fifo(run_modelfs("--list", folder / "model.safetensors.index.json"), "b.safetensors")
    assert_refused_as_fifo(run_modelfs("--list", folder), "b.safetensors")
    torch_folder = tmp / "torch"
    torch_folder.mkdir()
    os.mkfifo(torch_folder / "pytorch_model-00001-of-00001.bin")
    (torch_folder / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {"w": "pytorch_model-00001-of-00001.bin"}}))
    assert_refused_as_fifo(run_modelfs("--list", torch_folder), "pytorch_model-00001-of-00001.bin")


def test_fifo_as_onnx_external_data_or_gguf_split_member_is_refused(tmp):
    onnx_with_external_weight(tmp / "m.onnx", "w.bin")
    os.mkfifo(tmp / "w.bin")
    result = run_modelfs("--list", tmp / "m.onnx")
    assert result.returncode == 2 and "w.bin" in result.stderr and "not a regular file" in result.stderr

    folder = tmp / "split"
    folder.mkdir()
    tensors = [gw.random_tensor(f"t{i}", 0, [4], i) for i in range(2)]
    paths = gw.write_split(folder, "m", [], tensors, 2)
    os.remove(paths[1])
    os.mkfifo(paths[1])
    for model in (paths[0], folder):
        assert_refused_as_fifo(run_modelfs("--list", model), "m-00002-of-00002.gguf")


def outside_secret(tmp):
    outside = tmp / "outside"
    outside.mkdir()
    st.write(outside / "secret.safetensors", {"x": np.arange(4, dtype=np.float32)})
    return outside


def assert_refused_as_outside(result, name):
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert name in line and "outside the model's folder" in line, line


def test_shard_symlink_out_of_the_folder_is_refused(tmp):
    outside = outside_secret(tmp)
    folder = tmp / "model"
    folder.mkdir()
    (folder / "link.safetensors").symlink_to("../outside/secret.safetensors")
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"x": "link.safetensors"}}))
    assert_refused_as_outside(run_modelfs("--list", index), "link.safetensors")
    with mount_attempt(folder) as (result, mnt):
        assert_refused_as_outside(result, "link.safetensors")
        assert mnt is None
    # A link through a folder that leaves, too.
    (folder / "linkdir").symlink_to(outside)
    index.write_text(json.dumps({"weight_map": {"x": "linkdir/secret.safetensors"}}))
    assert_refused_as_outside(run_modelfs("--list", index), "linkdir/secret.safetensors")
    # A link that stays inside is followed.
    (folder / "real").mkdir()
    shutil.copy(outside / "secret.safetensors", folder / "real" / "a.safetensors")
    (folder / "inside.safetensors").symlink_to("real/a.safetensors")
    index.write_text(json.dumps({"weight_map": {"x": "inside.safetensors"}}))
    result = run_modelfs("--list", "--json", index)
    assert result.returncode == 0, result.stderr
    assert [t["name"] for t in json.loads(result.stdout)["tensors"]] == ["x"]


def test_torch_shard_and_gguf_member_symlinks_out_of_the_folder_are_refused(tmp):
    torch = pytest.importorskip("torch")
    outside = tmp / "outside"
    outside.mkdir()
    torch.save({"w": torch.zeros(2)}, outside / "secret.bin")
    folder = tmp / "torch"
    folder.mkdir()
    (folder / "pytorch_model-00001-of-00001.bin").symlink_to(outside / "secret.bin")
    (folder / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {"w": "pytorch_model-00001-of-00001.bin"}}))
    assert_refused_as_outside(run_modelfs("--list", folder), "pytorch_model-00001-of-00001.bin")

    split = tmp / "split"
    split.mkdir()
    tensors = [gw.random_tensor(f"t{i}", 0, [4], i) for i in range(2)]
    paths = gw.write_split(split, "m", [], tensors, 2)
    os.rename(paths[1], outside / "elsewhere.gguf")
    os.symlink(outside / "elsewhere.gguf", paths[1])
    for model in (paths[0], split):
        assert_refused_as_outside(run_modelfs("--list", model), "m-00002-of-00002.gguf")
    # The member the user names is theirs to place anywhere.
    os.remove(paths[1])
    os.rename(outside / "elsewhere.gguf", paths[1])
    os.rename(paths[0], outside / "first.gguf")
    os.symlink(outside / "first.gguf", paths[0])
    result = run_modelfs("--list", paths[0])
    assert result.returncode == 0, result.stderr
