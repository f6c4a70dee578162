# SPDX-License-Identifier: Apache-2.0
"""Remote models: mounted by URL from a real nginx (and moto's S3) on
127.0.0.1, started by these tests.

Oracles: each format's own oracle from its local test (the reference
readers and the onnx/torch libraries), and the local mount of the same file
byte for byte, every file of the tree; laziness from nginx's access log
($bytes_sent), never from modelfs's own account."""
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest

import safetensors_writer as st
from conftest import MODELFS, cat, index_paths, is_mounted, mounted, run_modelfs, sidecar, unmount
from remote_servers import HUB_COMMIT, MOTO_PYTHON, Moto

MIB = 1 << 20


@pytest.fixture
def www(tmp, shared):
    """The folder nginx serves: the shared fixtures, and what a test adds."""
    root = tmp / "www"
    root.mkdir()
    (root / "fixtures").symlink_to(shared / "fixtures")
    return root


@pytest.fixture
def cache(tmp):
    return tmp / "cache"


def remote_mount(url, cache, *options):
    return mounted(url, "-o", f"cache_dir={cache}", *options)


def tree_files(mnt):
    out = {}
    for dirpath, _, files in os.walk(mnt):
        for f in files:
            p = pathlib.Path(dirpath) / f
            out[str(p.relative_to(mnt))] = p.read_bytes()
    return out


def same_tree_as_local(url, local, cache):
    """Every file of the remote mount is byte-identical to the local mount's."""
    with mounted(local) as mnt:
        want = tree_files(mnt)
    with remote_mount(url, cache) as mnt:
        got = tree_files(mnt)
    assert sorted(got) == sorted(want), url
    for name in want:
        assert got[name] == want[name], (url, name)
    return got


# -- every format, against its oracle -----------------------------------------

SAFETENSORS = ["safetensors_samples_overall.safetensors", "candle_jfk-codes.safetensors",
               "pytorch-ao_fp8_weights.safetensors", "burn_multi_layer.safetensors"]
GGUF = ["stories260K_v3_f32.gguf", "ggml_superpoint.gguf", "crabml_tinyllamas-stories-260k-f32_GGUFv1.gguf"]
ONNX_REAL = ["external_data.onnx", "multi_external_files.onnx", "simple_cnn.onnx", "tract_qtdnn_int8.onnx",
             "onnx_light_squeezenet.onnx"]
PT_REAL = ["torchtune_tiny_llama2_checkpoint.pt", "coremltools_demo_net_weights_legacy.pth",
           "serve_dummy_torchscript.pt", "burn_bfloat16.pt", "candle_fortran_tensor_3d.pth"]
PT2_REAL = ["executorch_linear_newlayout.pt2", "tensorrt_trt_ep_oldlayout_add.pt2"]


@pytest.mark.parametrize("name", SAFETENSORS)
def test_safetensors_by_url_matches_reference(nginx, cache, shared, name):
    model = shared / "fixtures" / "real" / "safetensors" / name
    url = f"{nginx.url}/fixtures/real/safetensors/{name}"
    same_tree_as_local(url, model, cache)
    expected, _ = st.read_reference(model)
    with remote_mount(url, cache) as mnt:
        paths, _ = index_paths(mnt)
        assert set(paths) == set(expected)
        for tensor, (code, shape, data) in expected.items():
            assert cat(paths[tensor]) == data, tensor
            assert sidecar(paths[tensor])["shape"] == shape


@pytest.mark.parametrize("name", GGUF)
def test_gguf_by_url_matches_independent_reader(nginx, cache, shared, name):
    from test_gguf_mount import check_against_independent_reader
    model = shared / "fixtures" / "real" / "gguf" / name
    url = f"{nginx.url}/fixtures/real/gguf/{name}"
    same_tree_as_local(url, model, cache)
    with remote_mount(url, cache) as mnt:
        check_against_independent_reader(mnt, model)


@pytest.mark.parametrize("name", ONNX_REAL)
def test_onnx_by_url_matches_the_onnx_library(nginx, cache, shared, name):
    from test_onnx_mount import check_model
    model = shared / "fixtures" / "real" / "onnx" / name
    url = f"{nginx.url}/fixtures/real/onnx/{name}"
    same_tree_as_local(url, model, cache)
    with remote_mount(url, cache) as mnt:
        check_model(mnt, model)


def test_onnx_generated_external_data_by_url(nginx, cache, shared):
    from test_onnx_mount import check_model
    for name in ("convnet_external.onnx", "mlp.onnx", "typed_fields.onnx"):
        model = shared / "fixtures" / "generated" / "onnx" / name
        url = f"{nginx.url}/fixtures/generated/onnx/{name}"
        with remote_mount(url, cache) as mnt:
            check_model(mnt, model)


@pytest.mark.parametrize("name", PT_REAL)
def test_torch_by_url_matches_torch(nginx, cache, shared, name):
    from test_torch_mount import check_tensor, oracle_for
    model = shared / "fixtures" / "real" / "pt" / name
    url = f"{nginx.url}/fixtures/real/pt/{name}"
    same_tree_as_local(url, model, cache)
    oracle = oracle_for(model)
    if oracle is None:
        return
    with remote_mount(url, cache) as mnt:
        paths, _ = index_paths(mnt)
        for tensor, t in oracle.items():
            if tensor in paths:
                check_tensor(paths[tensor], tensor, t)


def test_torch_generated_fixtures_by_url_match_expected(nginx, cache, shared):
    from test_torch_mount import walk_strided
    expected = json.loads((shared / "fixtures" / "generated" / "expected.json").read_text())
    models = {k: v for k, v in expected.items() if k.startswith("pt/")}
    assert models
    for relative, want in models.items():
        with remote_mount(f"{nginx.url}/fixtures/generated/{relative}", cache) as mnt:
            paths, _ = index_paths(mnt)
            if not want.get("subset"):
                assert set(paths) == set(want["tensors"]), relative
            for tensor, info in want["tensors"].items():
                meta = sidecar(paths[tensor])
                assert meta["dtype"] == info["dtype"] and meta["shape"] == info["shape"], (relative, tensor)
                c_order = walk_strided(paths[tensor].read_bytes(), meta).tobytes()
                assert hashlib.sha256(c_order).hexdigest() == info["sha256"], (relative, tensor)


@pytest.mark.parametrize("name", PT2_REAL)
def test_pt2_by_url_matches_the_archive_members(nginx, cache, shared, name):
    from test_pt2_mount import REAL_CHECKS
    model = shared / "fixtures" / "real" / "pt2" / name
    url = f"{nginx.url}/fixtures/real/pt2/{name}"
    same_tree_as_local(url, model, cache)
    with remote_mount(url, cache) as mnt:
        REAL_CHECKS[name](mnt, model)


def write_sharded(folder):
    rng = np.random.default_rng(7)
    shards = {
        "model-00001-of-00002.safetensors": {"embed.weight": rng.standard_normal((64, 32)).astype(np.float32)},
        "model-00002-of-00002.safetensors": {"head.weight": rng.standard_normal((32, 16)).astype(np.float16),
                                             "head.bias": rng.standard_normal(16).astype(np.float16)},
    }
    folder.mkdir(parents=True)
    weight_map = {}
    for shard, tensors in shards.items():
        st.write(folder / shard, tensors)
        weight_map.update({name: shard for name in tensors})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return {name: value for tensors in shards.values() for name, value in tensors.items()}, weight_map


def check_sharded(mnt, tensors, weight_map):
    paths, _ = index_paths(mnt)
    assert set(paths) == set(tensors)
    for name, value in tensors.items():
        assert cat(paths[name]) == value.tobytes(), name
        assert sidecar(paths[name])["source"]["file"] == weight_map[name]
        np.testing.assert_array_equal(np.load(str(paths[name]) + ".npy"), value)


def test_sharded_index_and_folder_by_url(nginx, www, cache):
    tensors, weight_map = write_sharded(www / "ckpt")
    for url in (f"{nginx.url}/ckpt/model.safetensors.index.json", f"{nginx.url}/ckpt/", f"{nginx.url}/ckpt"):
        with remote_mount(url, cache) as mnt:
            check_sharded(mnt, tensors, weight_map)


def test_shard_outside_the_folder_is_refused(nginx, www, cache):
    (www / "evil").mkdir()
    (www / "evil" / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "../fixtures/real/safetensors/burn_multi_layer.safetensors"}}))
    result = run_modelfs("--list", f"{nginx.url}/evil/model.safetensors.index.json")
    assert result.returncode == 2
    assert ".." in result.stderr


# -- the server's ways ---------------------------------------------------------

def test_redirect_is_followed(nginx, cache, shared):
    name = "burn_multi_layer.safetensors"
    same_tree_as_local(f"{nginx.url}/redirect/fixtures/real/safetensors/{name}",
                       shared / "fixtures" / "real" / "safetensors" / name, cache)
    # The redirect was resolved once, at mount: ranges went to its target.
    assert sum(1 for uri, *_ in nginx.requests() if uri.startswith("/redirect/")) == 1


def test_server_ignoring_range_is_refused_not_downloaded(nginx, www, cache):
    big_model(www, tensors=16)
    result = run_modelfs("-o", f"cache_dir={cache}", "--list", f"{nginx.url}/norange/big.safetensors")
    assert result.returncode == 2
    assert "ignores Range" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    # The transfer was cut at its first bytes (what nginx counts as sent
    # includes what the loopback's socket buffers took).
    size = (www / "big.safetensors").stat().st_size
    assert nginx.bytes_sent("/norange/") < size / 2


@pytest.mark.parametrize("path,status", [("/forbidden/x.safetensors", "403"), ("/missing.safetensors", "404")])
def test_403_and_404_at_mount_one_line_exit_2(nginx, tmp, cache, path, status):
    mnt = tmp / "mnt"
    mnt.mkdir()
    result = run_modelfs("-o", f"cache_dir={cache}", f"{nginx.url}{path}?X-Signature=secret123", mnt)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert status in lines[0] and f"{nginx.url}{path}" in lines[0]
    assert "secret123" not in result.stderr
    assert not is_mounted(mnt)


def test_list_info_and_check_take_urls(nginx, cache, shared):
    name = "candle_jfk-codes.safetensors"
    url = f"{nginx.url}/fixtures/real/safetensors/{name}"
    local = shared / "fixtures" / "real" / "safetensors" / name
    for flag in ("--list", "--info"):
        remote = run_modelfs("-o", f"cache_dir={cache}", flag, "--json", url)
        here = run_modelfs(flag, "--json", local)
        assert remote.returncode == 0, remote.stderr
        assert json.loads(remote.stdout) == json.loads(here.stdout)
    check = run_modelfs("-o", f"cache_dir={cache}", "--check", url)
    assert check.returncode == 0, check.stderr
    pt = f"{nginx.url}/fixtures/real/pt/torchtune_tiny_llama2_checkpoint.pt"
    check = run_modelfs("-o", f"cache_dir={cache}", "--check", pt)
    assert check.returncode == 0, check.stderr


# -- laziness, from the server's log -------------------------------------------

def big_model(folder, tensors=8, each=4 * MIB):
    rng = np.random.default_rng(3)
    values = {f"layer{i}.weight": rng.integers(0, 255, size=each, dtype=np.uint8) for i in range(tensors)}
    st.write(folder / "big.safetensors", values)
    return values


def settled_request_count(nginx):
    """The requests nginx has logged, once a second passes with no new one."""
    count = len(nginx.requests())
    for _ in range(30):
        time.sleep(1)
        if len(nginx.requests()) == count:
            return count
        count = len(nginx.requests())
    return count


def test_mount_fetches_metadata_and_a_read_about_its_tensor(nginx, www, cache):
    values = big_model(www)
    size = (www / "big.safetensors").stat().st_size
    nginx.clear_log()
    with remote_mount(f"{nginx.url}/big.safetensors", cache) as mnt:
        paths, _ = index_paths(mnt)
        mounted_bytes = nginx.bytes_sent()
        assert mounted_bytes < 0.3 * MIB, mounted_bytes  # the header's block, not the tensors
        before = nginx.bytes_sent()
        assert cat(paths["layer5.weight"]) == values["layer5.weight"].tobytes()
        read = nginx.bytes_sent() - before
        # The tensor, give or take a block at each end and the read-ahead
        # window, which grows to about twice what a sequential reader has
        # read (docs/remote.md).
        assert 4 * MIB <= read <= 3 * 4 * MIB + 2 * MIB, read
        assert nginx.bytes_sent() < size / 2
        # Read again: from the cache, no request (once the window's
        # requests past the tensor, still in flight, are logged).
        count = settled_request_count(nginx)
        assert cat(paths["layer5.weight"]) == values["layer5.weight"].tobytes()
    assert len(nginx.requests()) == count


# -- faults --------------------------------------------------------------------

def test_server_stopped_mid_session_eio_then_recovers(nginx, www, cache):
    values = big_model(www, tensors=4, each=2 * MIB)
    # No read-ahead: reading layer0 must not have fetched layer2 before the
    # server stops (on an idle machine the window got there first).
    with remote_mount(f"{nginx.url}/big.safetensors", cache, "-o", "remote_window=0") as mnt:
        paths, _ = index_paths(mnt)
        assert cat(paths["layer0.weight"]) == values["layer0.weight"].tobytes()
        nginx.stop()
        with pytest.raises(OSError) as failure:
            paths["layer2.weight"].read_bytes()
        assert failure.value.errno == 5  # EIO
        # The daemon lives: the tree and the cached tensor are served.
        assert is_mounted(mnt)
        assert cat(paths["layer0.weight"]) == values["layer0.weight"].tobytes()
        nginx.start()
        assert paths["layer2.weight"].read_bytes() == values["layer2.weight"].tobytes()


def test_object_replaced_under_the_mount_is_eio_never_mixed(nginx, www, cache):
    values = big_model(www, tensors=4, each=2 * MIB)
    with remote_mount(f"{nginx.url}/big.safetensors", cache) as mnt:
        paths, _ = index_paths(mnt)
        assert cat(paths["layer0.weight"]) == values["layer0.weight"].tobytes()
        # Same size, other bytes, another ETag (nginx's is mtime and size).
        replaced = {k: (v ^ 0xFF).astype(np.uint8) for k, v in values.items()}
        st.write(www / "big.safetensors.new", replaced)
        os.utime(www / "big.safetensors.new", (time.time() + 5, time.time() + 5))
        os.replace(www / "big.safetensors.new", www / "big.safetensors")
        with pytest.raises(OSError) as failure:
            paths["layer3.weight"].read_bytes()
        assert failure.value.errno == 5
        # What was cached stays the mounted object's.
        assert cat(paths["layer0.weight"]) == values["layer0.weight"].tobytes()


def test_two_daemons_share_one_cache(nginx, www, cache):
    values = big_model(www, tensors=4, each=2 * MIB)
    url = f"{nginx.url}/big.safetensors"
    with remote_mount(url, cache) as one, remote_mount(url, cache) as two:
        p1, _ = index_paths(one)
        p2, _ = index_paths(two)
        results = {}

        def read(key, path):
            results[key] = path.read_bytes()

        threads = [threading.Thread(target=read, args=(i, p[f"layer{i % 4}.weight"]))
                   for i, p in enumerate([p1, p2, p1, p2, p1, p2, p1, p2])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(8):
            assert results[i] == values[f"layer{i % 4}.weight"].tobytes()
    # A third mount over the same cache reads every tensor without a request.
    count = len(nginx.requests())
    with remote_mount(url, cache) as mnt:
        paths, _ = index_paths(mnt)
        for name, value in values.items():
            assert cat(paths[name]) == value.tobytes()
    new = nginx.requests()[count:]
    assert all(rng == "bytes=0-0" for _, _, _, rng in new), new
    assert len(list(cache.glob("*.data"))) == 1


def test_secrets_stay_out_of_cmdline_and_metadata(nginx, cache, shared):
    url = f"{nginx.url}/fixtures/real/safetensors/burn_multi_layer.safetensors?token=hunter2"
    with remote_mount(url, cache) as mnt:
        out = subprocess.run(["pgrep", "-a", "-f", "modelfs"], capture_output=True, text=True).stdout
        assert "hunter2" not in out
        assert "hunter2" not in (mnt / ".modelfs" / "metadata.json").read_text()
        assert "hunter2" not in (mnt / ".modelfs" / "index.json").read_text()
        for line in open("/proc/self/mountinfo"):
            assert "hunter2" not in line


# -- the Hub ---------------------------------------------------------------------

def test_hub_single_file_and_sharded_folder(nginx, www, cache, shared, tmp):
    store = www / "hubstore" / "tiny"
    store.mkdir(parents=True)
    name = "burn_multi_layer.safetensors"
    shutil.copy(shared / "fixtures" / "real" / "safetensors" / name, store / name)
    tensors, weight_map = write_sharded(store / "sharded")
    env = dict(os.environ, HF_ENDPOINT=nginx.url, HF_TOKEN="hf_secret_token", HOME=str(tmp))
    with _mounted_env(f"hf://hub-owner/tiny/{name}", cache, env) as mnt:
        expected, _ = st.read_reference(store / name)
        paths, _ = index_paths(mnt)
        for tensor, (_, _, data) in expected.items():
            assert cat(paths[tensor]) == data
    # The revision was pinned to the commit the Hub named.
    assert any(f"/resolve/{HUB_COMMIT}/" in uri for uri, *_ in nginx.requests()) or \
        any("/resolve/main/" in uri for uri, *_ in nginx.requests())
    for url in ("hf://hub-owner/tiny@main/sharded", "hf://hub-owner/tiny/sharded/model.safetensors.index.json"):
        nginx.clear_log()
        with _mounted_env(url, cache, env) as mnt:
            check_sharded(mnt, tensors, weight_map)
        # Shards are read from the pinned commit, not the branch.
        shard_uris = [uri for uri, *_ in nginx.requests() if uri.endswith(".safetensors") and "/resolve/" in uri]
        assert shard_uris and all(f"/resolve/{HUB_COMMIT}/" in uri for uri in shard_uris), shard_uris


def _mounted_env(url, cache, env):
    import contextlib
    import tempfile

    @contextlib.contextmanager
    def run():
        mnt = pathlib.Path(tempfile.mkdtemp(prefix="modelfs-mnt-"))
        try:
            result = subprocess.run([str(MODELFS), "-o", f"cache_dir={cache}", url, str(mnt)],
                                    capture_output=True, text=True, timeout=120, env=env)
            assert result.returncode == 0, result.stderr
            yield mnt
        finally:
            unmount(mnt)
            os.rmdir(mnt)
    return run()


# -- S3 ----------------------------------------------------------------------------

@pytest.fixture
def moto(tmp):
    if not MOTO_PYTHON.exists():
        pytest.skip(f"moto's Python ({MOTO_PYTHON}) is not on this machine")
    server = Moto(tmp)
    try:
        yield server
    finally:
        server.stop()


def s3_upload(moto, bucket, files):
    """Makes an IAM user with an access key (moto checks signatures with it
    from then on), the bucket, and uploads `files`; returns (key id, secret)."""
    script = f"""
import boto3, sys, json
iam = boto3.client("iam", endpoint_url="{moto.url}", region_name="us-east-1",
                   aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
iam.create_user(UserName="modelfs")
key = iam.create_access_key(UserName="modelfs")["AccessKey"]
iam.put_user_policy(UserName="modelfs", PolicyName="all", PolicyDocument=json.dumps(
    {{"Version": "2012-10-17", "Statement": [{{"Effect": "Allow", "Action": "*", "Resource": "*"}}]}}))
s3 = boto3.client("s3", endpoint_url="{moto.url}", region_name="us-east-1",
                  aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
s3.create_bucket(Bucket="{bucket}")
for name, path in json.loads(sys.argv[1]).items():
    s3.upload_file(path, "{bucket}", name)
print(json.dumps([key["AccessKeyId"], key["SecretAccessKey"]]))
"""
    result = subprocess.run([str(MOTO_PYTHON), "-c", script, json.dumps({k: str(v) for k, v in files.items()})],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def s3_env(moto, tmp, key_id, secret):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return dict(env, AWS_ACCESS_KEY_ID=key_id, AWS_SECRET_ACCESS_KEY=secret, AWS_REGION="us-east-1",
                AWS_ENDPOINT_URL=moto.url, HOME=str(tmp))


def test_s3_single_file_and_sharded_checkpoint(moto, tmp, cache, shared):
    name = "candle_jfk-codes.safetensors"
    local = shared / "fixtures" / "real" / "safetensors" / name
    tensors, weight_map = write_sharded(tmp / "ckpt")
    files = {f"models/{name}": local}
    files.update({f"ckpt/{p.name}": p for p in (tmp / "ckpt").iterdir()})
    key_id, secret = s3_upload(moto, "weights", files)
    env = s3_env(moto, tmp, key_id, secret)
    with _mounted_env(f"s3://weights/models/{name}", cache, env) as mnt:
        expected, _ = st.read_reference(local)
        paths, _ = index_paths(mnt)
        for tensor, (_, _, data) in expected.items():
            assert cat(paths[tensor]) == data
    with _mounted_env("s3://weights/ckpt/model.safetensors.index.json", cache, env) as mnt:
        check_sharded(mnt, tensors, weight_map)
    listing = run_env(["--list", f"s3://weights/models/{name}"], cache, env)
    assert listing.returncode == 0, listing.stderr
    assert secret not in listing.stdout + listing.stderr
    # A wrong secret: moto recomputes the signature and refuses it.
    wrong = run_env(["--list", f"s3://weights/models/{name}"], cache, s3_env(moto, tmp, key_id, "not-the-secret"))
    assert wrong.returncode == 2
    assert "403" in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1
    assert "not-the-secret" not in wrong.stderr
    # The same keys from ~/.aws/credentials, through AWS_PROFILE.
    (tmp / ".aws").mkdir()
    (tmp / ".aws" / "credentials").write_text(
        f"[other]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n")
    env = {k: v for k, v in s3_env(moto, tmp, "", "").items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    profile = run_env(["--list", f"s3://weights/models/{name}"], cache, dict(env, AWS_PROFILE="other"))
    assert profile.returncode == 0, profile.stderr


def run_env(args, cache, env):
    return subprocess.run([str(MODELFS), "-o", f"cache_dir={cache}", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def allocated(cache):
    return sum(p.stat().st_blocks * 512 for p in cache.glob("*.data"))


def test_cache_max_evicts_least_recently_used_blocks(nginx, www, cache):
    values = big_model(www, tensors=8, each=4 * MIB)
    bound = 8 * MIB
    with remote_mount(f"{nginx.url}/big.safetensors", cache, "-o", "cache_max=8M") as mnt:
        paths, _ = index_paths(mnt)
        for name, value in values.items():
            assert cat(paths[name]) == value.tobytes(), name
            # Over the bound by at most what one read pins (its blocks and
            # read-ahead) while it is answered.
            assert allocated(cache) <= bound + 10 * MIB, allocated(cache)
        assert allocated(cache) < 32 * MIB
        # The first tensor was evicted: fetched again, exactly.
        before = nginx.bytes_sent()
        # The kernel's own copy of the file's pages dropped (this file only).
        fd = os.open(paths["layer0.weight"], os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        assert paths["layer0.weight"].read_bytes() == values["layer0.weight"].tobytes()
        assert nginx.bytes_sent() > before


def test_cache_max_removes_objects_no_daemon_has_mounted(nginx, www, cache):
    values = big_model(www, tensors=4, each=2 * MIB)
    shutil.copy(www / "big.safetensors", www / "other.safetensors")
    shutil.copy(www / "big.safetensors", www / "third.safetensors")
    # An earlier run's object, read whole, then unmounted.
    with remote_mount(f"{nginx.url}/other.safetensors", cache) as mnt:
        paths, _ = index_paths(mnt)
        for name, value in values.items():
            assert cat(paths[name]) == value.tobytes(), name
    assert allocated(cache) >= 8 * MIB
    earlier = set(cache.glob("*.blocks"))
    # A mounted object is never removed: a second daemon holds third's.
    with remote_mount(f"{nginx.url}/third.safetensors", cache) as held:
        held_paths, _ = index_paths(held)
        assert cat(held_paths["layer0.weight"]) == values["layer0.weight"].tobytes()
        objects_before = set(cache.glob("*.blocks"))
        # A bound the cache is over: opening big removes the unmounted
        # object of the earlier run, keeps the mounted one.
        with remote_mount(f"{nginx.url}/big.safetensors", cache, "-o", "cache_max=4M") as mnt:
            paths, _ = index_paths(mnt)
            left = set(cache.glob("*.blocks"))
            assert objects_before - left == earlier, (objects_before, left)
            assert cat(paths["layer1.weight"]) == values["layer1.weight"].tobytes()
        # The held mount still reads, from its own cache file.
        assert cat(held_paths["layer2.weight"]) == values["layer2.weight"].tobytes()
    # Without a bound nothing is removed.
    count = len(list(cache.glob("*.blocks")))
    with remote_mount(f"{nginx.url}/other.safetensors", cache) as mnt:
        pass
    assert len(list(cache.glob("*.blocks"))) == count + 1


def test_cache_max_takes_sizes_only(nginx, tmp, cache):
    result = run_modelfs("-o", "cache_max=lots", "--list", f"{nginx.url}/x.safetensors")
    assert result.returncode == 1
    assert "cache_max" in result.stderr


def test_mount_of_many_tensors_fetches_about_the_header(nginx, www, cache):
    values = np.arange(20_000 * 256, dtype=np.float32).reshape(20_000, 256)
    st.write(www / "many.safetensors", {f"layers.{i // 100}.p{i % 100}": values[i] for i in range(20_000)})
    with open(www / "many.safetensors", "rb") as f:
        header = 8 + int.from_bytes(f.read(8), "little")
    size = (www / "many.safetensors").stat().st_size
    nginx.clear_log()
    with remote_mount(f"{nginx.url}/many.safetensors", cache) as mnt:
        sent = nginx.bytes_sent()
        assert header <= sent <= header + 300 * 1024, (sent, header, size)
        assert cat(mnt / "layers" / "123" / "p45") == values[12345].tobytes()


def test_slow_server_times_out_with_exit_2(nginx, www, cache):
    big_model(www, tensors=2, each=1 * MIB)
    start = time.time()
    # 100 bytes a second: the header's block stalls under 1 KiB/s.
    result = run_modelfs("-o", f"cache_dir={cache}", "-o", "remote_timeout=1", "--list",
                         f"{nginx.url}/slow/big.safetensors")
    took = time.time() - start
    assert result.returncode == 2, result.stderr
    assert "timed out" in result.stderr.lower() or "timeout" in result.stderr.lower(), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    # Four tries of about a second each, and the backoff between them.
    assert took < 20, took


def test_a_read_waiting_on_the_server_does_not_hold_up_the_tree(nginx, www, cache, tmp):
    values = big_model(www, tensors=4, each=2 * MIB)
    # One request at a time: the read is as slow as the server makes it.
    with remote_mount(f"{nginx.url}/slowdata/big.safetensors", cache, "-o", "remote_parallel=1") as mnt:
        paths, _ = index_paths(mnt)
        with open(tmp / "out", "wb") as out:
            reader = subprocess.Popen(["cat", str(paths["layer2.weight"])], stdout=out)
        try:
            time.sleep(0.5)  # the read is waiting for its tensor, seconds away
            # Meanwhile the tree answers, and other files read (with -s, they
            # would wait behind the read).
            walk = subprocess.run(["find", str(mnt)], capture_output=True, text=True, check=True)
            assert str(paths["layer3.weight"]) in walk.stdout.splitlines()
            assert sidecar(paths["layer0.weight"])["shape"] == [2 * MIB]
            assert reader.poll() is None, "the read was over before the walk: nothing was shown"
            assert reader.wait(timeout=60) == 0
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
        assert (tmp / "out").read_bytes() == values["layer2.weight"].tobytes()


def test_split_gguf_set_by_url_of_any_member(nginx, www, cache):
    import gguf_writer as gw
    folder = www / "split"
    folder.mkdir()
    tensors = [gw.random_tensor(f"blk.{i}.w", [0, 12, 1, 2][i % 4], [2, 256], seed=10 + i) for i in range(7)]
    kvs = [("general.architecture", gw.Value(gw.STRING, "llama"))]
    paths = gw.write_split(folder, "model", kvs, tensors, 3, alignment=64)
    for member in (paths[0], paths[1]):
        files = same_tree_as_local(f"{nginx.url}/split/{member.name}", member, cache)
        assert any(name.endswith(".json") for name in files)
    with remote_mount(f"{nginx.url}/split/{paths[0].name}", cache) as mnt:
        found, index = index_paths(mnt)
        assert index["files"] == [p.name for p in paths]
        for t in tensors:
            assert cat(found[t.name]) == t.data


def test_a_large_header_shows_a_progress_line_on_a_terminal_only(nginx, www, cache, tmp):
    values = np.zeros((20_000, 4), dtype=np.float32)
    st.write(www / "wide.safetensors", {f"layers.{i // 100}.weight_{i % 100}": values[i] for i in range(20_000)})
    with open(www / "wide.safetensors", "rb") as f:
        assert int.from_bytes(f.read(8), "little") > 1 << 20  # past the line's threshold
    url = f"{nginx.url}/wide.safetensors"
    # A terminal (script(1) gives the command one): the line, ended before the table.
    command = f"{MODELFS} -o cache_dir={tmp / 'tty-cache'} --list {url}"
    shown = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stdout
    assert f"fetching metadata of {url}:" in shown.stdout
    assert "\n20000 tensors" in shown.stdout.replace("\r\n", "\n")
    # Not a terminal: nothing but the table.
    plain = run_modelfs("-o", f"cache_dir={cache}", "--list", url)
    assert plain.returncode == 0 and "fetching" not in plain.stderr, plain.stderr
