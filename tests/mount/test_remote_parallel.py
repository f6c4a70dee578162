# SPDX-License-Identifier: Apache-2.0
"""The parallel fetching of remote models: the read-ahead window of a
sequential reader, the side-by-side fetch of a sharded checkpoint's headers,
and the fault rules under both.

Oracles: the bytes the test's own writer put on the server; what was
requested and when from the server's side (nginx's access log with its
timing and connection numbers, the latency proxy's log of each request it
held), never modelfs's own account, never wall time."""
import json
import os
import random
import subprocess
import time

import numpy as np
import pytest

import safetensors_writer as st
from conftest import MODELFS, cat, index_paths, is_mounted, run_modelfs, unmount
from remote_servers import LatencyProxy, most_at_once
# nginx, moto and cache are fixtures: nginx serves this file's own www.
from test_remote import cache, moto, remote_mount  # noqa: F401

MIB = 1 << 20
BLOCK = 256 << 10


@pytest.fixture
def www(tmp):
    """What nginx serves here: only what a test writes (no shared fixtures)."""
    root = tmp / "www"
    root.mkdir()
    return root


def one_tensor_model(folder, size, name="big.safetensors", seed=5):
    value = np.random.default_rng(seed).integers(0, 255, size=size, dtype=np.uint8)
    st.write(folder / name, {"w": value})
    return value


def ranges(requests, uri):
    """The byte ranges asked of `uri` (the probe's bytes=0-0 left out)."""
    out = []
    for got, status, _, rng, *_ in requests:
        if got == uri and rng.startswith("bytes=") and rng != "bytes=0-0":
            first, last = rng[len("bytes="):].split("-")
            out.append((int(first), int(last), status))
    return out


def test_sequential_cat_fetches_the_object_once_over_several_connections(nginx, www, cache):
    value = one_tensor_model(www, 48 * MIB)
    size = (www / "big.safetensors").stat().st_size
    with remote_mount(f"{nginx.url}/rated/big.safetensors", cache) as mnt:
        paths, _ = index_paths(mnt)
        nginx.clear_log()
        assert cat(paths["w"]) == value.tobytes()
    timed = [r for r in nginx.timed_requests() if r[0] == "/rated/big.safetensors" and r[3] != "bytes=0-0"]
    asked = sorted(ranges(timed, "/rated/big.safetensors"))
    assert all(status == 206 for _, _, status in asked), asked
    # Each byte at most once: no two ranges overlap, and they add up to
    # about the tensor (the header's block was fetched at mount).
    for (_, last, _), (first, _, _) in zip(asked, asked[1:]):
        assert first > last, asked
    fetched = sum(last - first + 1 for first, last, _ in asked)
    assert 48 * MIB - BLOCK <= fetched <= size, fetched
    # Several requests in flight at once, on connections of their own
    # (nginx caps each at 4 MiB/s: one at a time would never overlap).
    assert most_at_once([(start, end) for *_, start, end, _ in timed]) >= 4
    assert len({connection for *_, connection in timed}) >= 4


def test_random_reader_fetches_about_what_it_reads(nginx, www, cache):
    value = one_tensor_model(www, 64 * MIB)
    with remote_mount(f"{nginx.url}/big.safetensors", cache) as mnt:
        paths, _ = index_paths(mnt)
        nginx.clear_log()
        rng = random.Random(11)
        reads = 60
        with open(paths["w"], "rb", buffering=0) as f:
            for _ in range(reads):
                at = rng.randrange(0, 64 * MIB - 4096) & ~4095
                # O_DIRECT is not at hand; posix_fadvise(RANDOM) turns the
                # kernel's own readahead off, as a random reader's would be.
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
                assert os.pread(f.fileno(), 4096, at) == value[at:at + 4096].tobytes()
    fetched = sum(last - first + 1 for first, last, _ in ranges(nginx.requests(), "/big.safetensors"))
    # A block or two a read, never a window.
    assert fetched <= reads * 2 * BLOCK, fetched


def test_random_reads_of_a_converted_npy_fetch_about_their_values(nginx, www, cache):
    """A bfloat16 tensor's .npy is converted in the daemon: a read of a few
    of its values fetches their stored bytes (a block or two), not the
    tensor's 32 MiB."""
    values = np.random.default_rng(12).standard_normal(16 * MIB).astype(np.float32)
    bf16 = (values.view(np.uint32) >> 16).astype("<u2")
    st.write(www / "bf.safetensors", {"w": st.Raw("BF16", [16 * MIB], bf16.tobytes())})
    widened = (bf16.astype(np.uint32) << 16).view(np.float32)
    with remote_mount(f"{nginx.url}/bf.safetensors", cache) as mnt:
        paths, _ = index_paths(mnt)
        npy = str(paths["w"]) + ".npy"
        with open(npy, "rb") as f:
            header = len(f.read(128).split(b"\n")[0]) + 1  # numpy pads its header to a newline
        nginx.clear_log()
        rng = random.Random(13)
        reads = 20
        with open(npy, "rb", buffering=0) as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
            for _ in range(reads):
                at = rng.randrange(0, 16 * MIB - 1024) & ~1023
                got = os.pread(f.fileno(), 4096, header + 4 * at)
                assert got == widened[at:at + 1024].tobytes()
    fetched = sum(last - first + 1 for first, last, _ in ranges(nginx.requests(), "/bf.safetensors"))
    assert fetched <= reads * 2 * BLOCK, fetched


def test_object_changed_mid_window_is_eio_and_never_mixed(nginx, www, cache):
    value = one_tensor_model(www, 48 * MIB)
    # Same size, other bytes, another ETag (nginx's is mtime and size).
    st.write(www / "big.new", {"w": (value ^ 0xFF).astype(np.uint8)})
    os.utime(www / "big.new", (time.time() + 5, time.time() + 5))
    # Two connections at 4 MiB/s: the window cannot have fetched the object
    # by the time it is replaced.
    with remote_mount(f"{nginx.url}/rated/big.safetensors", cache, "-o", "remote_timeout=5",
                      "-o", "remote_parallel=2") as mnt:
        paths, _ = index_paths(mnt)
        got = bytearray()
        failure = None
        with open(paths["w"], "rb") as f:
            got += f.read(2 * MIB)  # the window is open, its requests in flight
            os.replace(www / "big.new", www / "big.safetensors")
            try:
                while chunk := f.read(MIB):
                    got += chunk
            except OSError as e:
                failure = e
        assert failure is not None and failure.errno == 5, "the changed object must fail the read"
        # Every byte served is the mounted version's.
        assert bytes(got) == value[:len(got)].tobytes()
        assert len(got) < len(value)
    # And the 412s (If-Match) are what nginx answered, not other bytes.
    statuses = {status for _, _, status in ranges(nginx.requests(), "/rated/big.safetensors")}
    assert 412 in statuses, statuses


def test_server_dying_mid_window_recovers_when_it_returns(nginx, www, cache):
    value = one_tensor_model(www, 48 * MIB)
    with remote_mount(f"{nginx.url}/rated/big.safetensors", cache, "-o", "remote_timeout=2",
                      "-o", "remote_parallel=2") as mnt:
        paths, _ = index_paths(mnt)
        got = bytearray()
        failure = None
        with open(paths["w"], "rb") as f:
            got += f.read(2 * MIB)
            nginx.stop()
            try:
                while chunk := f.read(MIB):
                    got += chunk
            except OSError as e:
                failure = e
        assert failure is not None and failure.errno == 5
        assert bytes(got) == value[:len(got)].tobytes()
        assert is_mounted(mnt)
        nginx.start()
        time.sleep(1.1)  # past the second a failed fetch fails its blocks' next read at once
        assert cat(paths["w"]) == value.tobytes()


def write_shards(folder, shards, each=64 << 10):
    folder.mkdir(parents=True)
    rng = np.random.default_rng(9)
    weight_map, values = {}, {}
    for i in range(shards):
        shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        value = rng.integers(0, 255, size=each, dtype=np.uint8)
        st.write(folder / shard, {f"layer{i}.weight": value})
        weight_map[f"layer{i}.weight"] = shard
        values[f"layer{i}.weight"] = value
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return values


@pytest.fixture
def slow_proxy(tmp, nginx):
    proxy = LatencyProxy(tmp / "proxy", nginx.port, 200)
    try:
        yield proxy
    finally:
        proxy.stop()


def assert_held_side_by_side(proxy, prefix, files):
    """`files` files under `prefix` each asked for, many requests held at
    once: one after another, no two would ever be."""
    held = proxy.held(prefix)
    assert len({line.split()[1] for *_, line in held}) == files
    assert most_at_once([(start, end) for start, end, _ in held]) >= 8


def test_shard_headers_are_fetched_side_by_side(www, cache, slow_proxy):
    values = write_shards(www / "ckpt", 16)
    with remote_mount(f"{slow_proxy.url}/ckpt/model.safetensors.index.json", cache) as mnt:
        paths, _ = index_paths(mnt)
        # Every shard's probe and header.
        assert_held_side_by_side(slow_proxy, "/ckpt/model-", 16)
        for name, value in values.items():
            assert cat(paths[name]) == value.tobytes()


def test_list_of_a_sharded_url_fetches_side_by_side_too(www, cache, slow_proxy):
    write_shards(www / "ckpt", 16)
    result = run_modelfs("--list", "-o", f"cache_dir={cache}", f"{slow_proxy.url}/ckpt/")
    assert result.returncode == 0, result.stderr
    assert all(f"layer{i}.weight" in result.stdout for i in range(16))
    assert_held_side_by_side(slow_proxy, "/ckpt/model-", 16)


def test_onnx_external_data_files_are_opened_side_by_side(tmp, www, cache, slow_proxy):
    """A model saved a file per tensor (onnx's own writer): every file's
    first request held at once with others, every tensor exact."""
    rng = np.random.default_rng(3)
    expected = {f"w{i}": rng.standard_normal(1024).astype(np.float32) for i in range(16)}
    np.savez(tmp / "inputs.npz", **expected)
    script = r"""
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
arrays = np.load(sys.argv[1])
inits = [numpy_helper.from_array(arrays[name], name) for name in arrays.files]
graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("w0", TensorProto.FLOAT, [1024])], inits)
onnx.save_model(helper.make_model(graph), f"{sys.argv[2]}/model.onnx", save_as_external_data=True,
                all_tensors_to_one_file=False, size_threshold=0)
"""
    folder = www / "onnx"
    folder.mkdir()
    subprocess.run(["/usr/bin/python3", "-c", script, str(tmp / "inputs.npz"), str(folder)], check=True)
    external = [p.name for p in folder.iterdir() if p.name.startswith("w")]
    assert len(external) == 16, external
    with remote_mount(f"{slow_proxy.url}/onnx/model.onnx", cache) as mnt:
        paths, _ = index_paths(mnt)
        assert_held_side_by_side(slow_proxy, "/onnx/w", 16)
        for name, value in expected.items():
            assert cat(paths[name]) == value.tobytes()


def test_tensorflow_data_shards_are_opened_side_by_side(www, cache, slow_proxy):
    import tfckpt_bundle as tb
    folder = www / "tf"
    folder.mkdir()
    bundle = tb.Bundle(num_shards=16)
    rng = np.random.default_rng(4)
    expected = {}
    for i in range(16):
        expected[f"v{i}"] = rng.standard_normal(512).astype(np.float32)
        bundle.add(f"v{i}", expected[f"v{i}"], shard=i)
    bundle.write(folder)
    with remote_mount(f"{slow_proxy.url}/tf/model.index", cache) as mnt:
        paths, _ = index_paths(mnt)
        assert_held_side_by_side(slow_proxy, "/tf/model.data-", 16)
        for name, value in expected.items():
            assert cat(paths[name]) == value.tobytes()


def test_check_of_a_url_fetches_in_parallel(nginx, www, cache):
    one_tensor_model(www, 24 * MIB)
    nginx.clear_log()
    result = run_modelfs("--check", "-o", f"cache_dir={cache}", f"{nginx.url}/rated/big.safetensors")
    assert result.returncode == 0, result.stderr
    timed = [r for r in nginx.timed_requests() if r[3] != "bytes=0-0"]
    assert most_at_once([(start, end) for *_, start, end, _ in timed]) >= 4
    asked = sorted(ranges(timed, "/rated/big.safetensors"))
    for (_, last, _), (first, _, _) in zip(asked, asked[1:]):
        assert first > last, asked


def test_export_of_a_url_fetches_in_parallel_and_shows_its_rate(nginx, www, cache, tmp):
    value = one_tensor_model(www, 72 * MIB)  # past the progress line's 64 MiB
    url = f"{nginx.url}/rated/big.safetensors"
    out = tmp / "export.safetensors"
    nginx.clear_log()
    # A terminal (script(1) gives the command one): the line says what came and how fast.
    command = f"{MODELFS} -o cache_dir={cache} --export {out} {url}"
    shown = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, text=True,
                           timeout=300)
    assert shown.returncode == 0, shown.stdout
    assert "exporting [" in shown.stdout and "fetched" in shown.stdout and "MiB/s" in shown.stdout
    timed = [r for r in nginx.timed_requests() if r[3] != "bytes=0-0"]
    assert most_at_once([(start, end) for *_, start, end, _ in timed]) >= 4
    asked = sorted(ranges(timed, "/rated/big.safetensors"))
    for (_, last, _), (first, _, _) in zip(asked, asked[1:]):
        assert first > last, asked  # each byte asked for once
    tensors, _ = st.read_reference(out)
    assert tensors["w"][2] == value.tobytes()


def test_two_daemons_on_one_cache_fetch_each_block_once(nginx, www, cache):
    value = one_tensor_model(www, 32 * MIB)
    url = f"{nginx.url}/rated/big.safetensors"
    with remote_mount(url, cache) as one, remote_mount(url, cache) as two:
        p1, _ = index_paths(one)
        p2, _ = index_paths(two)
        nginx.clear_log()
        assert cat(p1["w"]) == value.tobytes()
        after_first = ranges(nginx.requests(), "/rated/big.safetensors")
        # The second daemon finds every block in the shared cache.
        assert cat(p2["w"]) == value.tobytes()
        assert ranges(nginx.requests(), "/rated/big.safetensors") == after_first


# -- S3 (moto) ---------------------------------------------------------------

def test_s3_object_read_through_the_window_is_exact(moto, tmp, cache):
    """The window's parallel range requests against S3: each signed on its
    own (SigV4 per request), each pinned; a sequential reader and a random
    one get exactly the uploaded bytes."""
    from test_remote import s3_env, s3_upload

    folder = tmp / "up"
    folder.mkdir()
    value = one_tensor_model(folder, 24 * MIB, seed=9)
    key_id, secret = s3_upload(moto, "weights", {"big.safetensors": folder / "big.safetensors"})
    env = s3_env(moto, tmp, key_id, secret)
    mnt = tmp / "mnt-s3"
    mnt.mkdir()
    result = subprocess.run([str(MODELFS), "-o", f"cache_dir={cache}", "-o", "remote_parallel=8",
                             "s3://weights/big.safetensors", str(mnt)],
                            capture_output=True, text=True, timeout=120, env=env)
    try:
        assert result.returncode == 0, result.stderr
        paths, _ = index_paths(mnt)
        assert cat(paths["w"]) == value.tobytes()
        rng = random.Random(3)
        with open(paths["w"], "rb") as f:
            for _ in range(32):
                offset = rng.randrange(0, value.size - 4096)
                f.seek(offset)
                assert f.read(4096) == value[offset:offset + 4096].tobytes()
    finally:
        unmount(mnt)
        os.rmdir(mnt)
