# SPDX-License-Identifier: Apache-2.0
"""modelfs-csi, the Kubernetes CSI node plugin, driven through its unix
socket by a gRPC client playing kubelet (Debian's python3-grpcio, its stubs
generated here from the project's src/csi/csi.proto by protoc). Volumes are
published into kubelet-like target paths and read with numpy and cat (also
as `nobody`), against the values the test's writer put in the model.
Every plugin, mount and server a test starts is stopped in its teardown."""
import concurrent.futures
import ctypes
import importlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import safetensors_writer as st
from conftest import MODELFS, REPO, daemon_pids, is_mounted, one_line, run_modelfs
from test_remote import moto  # noqa: F401 (the fixture)

BUILD = pathlib.Path(os.environ.get("MODELFS_BUILD_DIR", REPO / "build"))
CSI = pathlib.Path(os.environ.get("MODELFS_CSI_BIN", BUILD / "modelfs-csi"))
PROTO = REPO / "src" / "csi" / "csi.proto"
VALUES = {
    "weight": np.arange(24, dtype=np.float32).reshape(4, 6) / 7,
    "bias": np.array([3, -1, 4, -1, 5], dtype=np.int64),
}
SECRET = "hf_s3cr3t-value-0123456789"


@pytest.fixture(scope="module")
def pb():
    """The generated modules (csi_pb2, csi_pb2_grpc) and grpc."""
    if not CSI.exists():
        pytest.skip(f"modelfs-csi not built at {CSI} (cmake -DMODELFS_BUILD_CSI=ON)")
    grpc = pytest.importorskip("grpc")
    plugin = shutil.which("grpc_python_plugin")
    if shutil.which("protoc") is None or plugin is None:
        pytest.skip("needs protoc and grpc_python_plugin (protobuf-compiler, protobuf-compiler-grpc)")
    out = tempfile.mkdtemp(prefix="modelfs-csi-stubs-")
    subprocess.run(["protoc", f"-I{PROTO.parent}", f"--python_out={out}", f"--grpc_out={out}",
                    f"--plugin=protoc-gen-grpc={plugin}", str(PROTO)], check=True)
    sys.path.insert(0, out)
    try:
        yield importlib.import_module("csi_pb2"), importlib.import_module("csi_pb2_grpc"), grpc
    finally:
        sys.path.remove(out)
        shutil.rmtree(out)


def mounts_below(root):
    """Mount points at or below `root`, topmost (last mounted) first."""
    root = os.path.realpath(root)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == root or point.startswith(root + "/"):
                found.append(point)
    return found[::-1]


@pytest.fixture
def node():
    """A node's folders, open to every user (pods run as anyone): kubelet's
    pods folder, a root of models the operator allows, the cache and the
    plugin's socket folder. Whatever is still mounted below is unmounted in
    teardown, and the daemons' exit awaited."""
    top = pathlib.Path(tempfile.mkdtemp(prefix="modelfs-csi-node-"))
    os.chmod(top, 0o755)
    for name in ("kubelet", "models", "cache", "plugin"):
        (top / name).mkdir(mode=0o755)
    try:
        yield top
    finally:
        for point in mounts_below(top):
            subprocess.run(["umount", "-l", point], capture_output=True)
        wait_for(lambda: not daemon_pids_below(top), what="daemons to exit")
        shutil.rmtree(top, ignore_errors=True)


def daemon_pids_below(top):
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError):
            continue
        if argv and argv[0] == os.fsencode(str(MODELFS)) and any(a.startswith(os.fsencode(str(top))) for a in argv):
            pids.append(int(entry))
    return pids


def wait_for(condition, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Plugin:
    """modelfs-csi on NODE/plugin/csi.sock, and the stubs kubelet would use."""

    def __init__(self, pb, node, *args, local_root=True, env=None):
        self.pb, self.rpc, self.grpc = pb
        self.node = node
        self.env = env
        self.socket = node / "plugin" / "csi.sock"
        self.args = ["--endpoint", f"unix://{self.socket}", "--node-id", "node-a", "--cache-dir",
                     str(node / "cache"), "--modelfs", str(MODELFS), *args]
        if local_root:
            self.args += ["--local-root", str(node / "models")]
        self.log = node / "plugin.log"
        self.process = None
        self.start()

    def start(self):
        with open(self.log, "a") as log:
            self.process = subprocess.Popen([str(CSI), *self.args], stdout=log, stderr=log, env=self.env)
        self.channel = self.grpc.insecure_channel(f"unix://{self.socket}")
        self.identity = self.rpc.IdentityStub(self.channel)
        self.nodes = self.rpc.NodeStub(self.channel)
        self.grpc.channel_ready_future(self.channel).result(timeout=20)

    def stop(self, sig=signal.SIGTERM):
        self.channel.close()
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def capability(self, mode=1, block=False, flags=()):
        v = self.pb.VolumeCapability
        kind = {"block": v.BlockVolume()} if block else {"mount": v.MountVolume(mount_flags=list(flags))}
        return v(access_mode=v.AccessMode(mode=mode), **kind)

    def publish(self, volume_id, target, source=None, options=None, secrets=None, capability=None,
                context=None):
        attributes = dict(context or {})
        if source is not None:
            attributes["source"] = str(source)
        if options is not None:
            attributes["options"] = options
        request = self.pb.NodePublishVolumeRequest(
            volume_id=volume_id, target_path=str(target), volume_context=attributes,
            volume_capability=capability if capability is not None else self.capability(),
            secrets=secrets or {})
        return self.nodes.NodePublishVolume(request, timeout=120)

    def unpublish(self, volume_id, target):
        request = self.pb.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=str(target))
        return self.nodes.NodeUnpublishVolume(request, timeout=120)

    def refused(self, code, call, *args, **kwargs):
        """`call` fails with status `code`; returns its message."""
        with pytest.raises(self.grpc.RpcError) as raised:
            call(*args, **kwargs)
        assert raised.value.code() == getattr(self.grpc.StatusCode, code), raised.value.details()
        return raised.value.details()


@pytest.fixture
def plugin(pb, node):
    p = Plugin(pb, node)
    try:
        yield p
    finally:
        p.stop()


def pod_target(node, pod, volume="model"):
    """Where kubelet publishes a pod's volume; it makes the parent (0750)."""
    parent = node / "kubelet" / "pods" / pod / "volumes" / "kubernetes.io~csi" / volume
    parent.mkdir(parents=True, exist_ok=True)
    # Open to all here (kubelet's are not), as the pods' own bind mounts are.
    for folder in [parent, *parent.parents]:
        if folder == node:
            break
        os.chmod(folder, 0o755)
    return parent / "mount"


def inline_context(pod):
    """What kubelet adds for an inline volume when the CSIDriver asks for pod info."""
    return {"csi.storage.k8s.io/ephemeral": "true", "csi.storage.k8s.io/pod.name": pod,
            "csi.storage.k8s.io/pod.namespace": "default", "csi.storage.k8s.io/pod.uid": pod,
            "csi.storage.k8s.io/serviceAccount.name": "default"}


def write_model(folder, name="model.safetensors"):
    path = pathlib.Path(folder) / name
    st.write(path, VALUES)
    os.chmod(path, 0o644)
    return path


def check_values(target):
    """The mount holds the writer's tensors, read with numpy and with cat."""
    for name, values in VALUES.items():
        got = np.load(target / f"{name}.npy")
        assert got.dtype == values.dtype and got.shape == values.shape
        np.testing.assert_array_equal(got, values)
        assert subprocess.run(["cat", str(target / name)], capture_output=True, check=True).stdout == values.tobytes()


def mount_lines(target):
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if line.split()[4] == str(target)]


def unpublished(plugin, volume_id, target):
    plugin.unpublish(volume_id, target)
    assert not is_mounted(target) and not target.exists()
    wait_for(lambda: not daemon_pids(target), what=f"the daemon of {target} to exit")


def test_identity_and_node_answers(plugin):
    pb, grpc = plugin.pb, plugin.grpc
    info = plugin.identity.GetPluginInfo(pb.GetPluginInfoRequest())
    version = subprocess.run([str(MODELFS), "--version"], capture_output=True, text=True).stdout.split()[1]
    assert info.name == "csi.modelfs" and info.vendor_version == version
    capabilities = plugin.identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest()).capabilities
    assert pb.PluginCapability.Service.CONTROLLER_SERVICE not in [c.service.type for c in capabilities]
    probe = plugin.identity.Probe(pb.ProbeRequest())
    assert probe.HasField("ready") and probe.ready.value
    assert plugin.nodes.NodeGetInfo(pb.NodeGetInfoRequest()).node_id == "node-a"
    node_caps = plugin.nodes.NodeGetCapabilities(pb.NodeGetCapabilitiesRequest()).capabilities
    assert pb.NodeServiceCapability.RPC.STAGE_UNSTAGE_VOLUME not in [c.rpc.type for c in node_caps]
    # No Controller service: every method of it is UNIMPLEMENTED.
    create = plugin.channel.unary_unary("/csi.v1.Controller/CreateVolume", request_serializer=lambda m: m,
                                        response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as raised:
        create(b"", timeout=10)
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_driver_name_flag_and_a_stale_socket(pb, node):
    # A socket file left by a plugin killed outright is replaced.
    import socket
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(node / "plugin" / "csi.sock"))
    stale.close()
    p = Plugin(pb, node, "--driver-name", "models.example.com")
    try:
        assert p.identity.GetPluginInfo(p.pb.GetPluginInfoRequest()).name == "models.example.com"
    finally:
        assert p.stop() == 0
    assert not (node / "plugin" / "csi.sock").exists()


def test_publish_local_inline_volume_read_by_any_user(plugin, node):
    model = write_model(node / "models")
    target = pod_target(node, "pod-1")
    plugin.publish("csi-0123abcd", target, model, context=inline_context("pod-1"))
    check_values(target)
    [line] = mount_lines(target)
    assert " fuse.modelfs " in line and line.split()[5].startswith("ro") and "allow_other" in line
    # The daemon logs beside the plugin's record of the target.
    [log] = (node / "plugin" / "state").glob("*.log")
    wait_for(lambda: f"serving {model} " in log.read_text(), what="the daemon's log line")
    # A pod runs as any user: nobody reads the same bytes.
    if shutil.which("setpriv"):
        as_nobody = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "cat",
                                    str(target / "weight")], capture_output=True, timeout=30)
        assert as_nobody.returncode == 0, as_nobody.stderr
        assert as_nobody.stdout == VALUES["weight"].tobytes()
    # Read-only, whatever access mode kubelet sent (SINGLE_NODE_WRITER).
    for attempt in (lambda: open(target / "weight", "r+b"), lambda: open(target / "new", "wb")):
        with pytest.raises(OSError) as raised:
            attempt()
        assert raised.value.errno == 30  # EROFS
    unpublished(plugin, "csi-0123abcd", target)
    assert target.parent.is_dir()  # kubelet's folder (and its vol_data.json) left alone


def test_publish_http_persistent_volume_with_options(plugin, node, nginx, www):
    write_model(www)
    target = pod_target(node, "pod-2", "pv-model")
    capability = plugin.capability(mode=3, flags=["ro", "remote_window=128M"])  # ReadOnlyMany, mountOptions
    plugin.publish("pv-model", target, f"{nginx.url}/model.safetensors", options="flat, remote_parallel=4",
                   capability=capability, context={"csi.storage.k8s.io/ephemeral": "false"})
    check_values(target)  # flat: the names are whole, as files at the root
    assert any(uri == "/model.safetensors" for uri, *_ in nginx.requests())
    # The remote blocks went to the node's shared cache.
    assert any((node / "cache").rglob("*"))
    unpublished(plugin, "pv-model", target)


def test_idempotent_publish_and_its_errors(plugin, node):
    model = write_model(node / "models")
    other = write_model(node / "models", "other.safetensors")
    target = pod_target(node, "pod-3")
    plugin.publish("vol-a", target, model)
    plugin.publish("vol-a", target, model)  # again: OK, nothing stacked
    assert len(mount_lines(target)) == 1
    assert "vol-a" in plugin.refused("ALREADY_EXISTS", plugin.publish, "vol-b", target, other)
    plugin.refused("ALREADY_EXISTS", plugin.publish, "vol-a", target, model, options="flat")
    # The same volume in a second pod.
    second = pod_target(node, "pod-4")
    plugin.publish("vol-a", second, model)
    check_values(second)
    unpublished(plugin, "vol-a", second)
    check_values(target)  # the first pod's mount is untouched
    unpublished(plugin, "vol-a", target)
    plugin.unpublish("vol-a", target)  # unpublishing what is not mounted: OK

    fresh = pod_target(node, "pod-5")
    for kwargs in ({"volume_id": "", "target": fresh, "source": model},
                   {"volume_id": "v", "target": "", "source": model},
                   {"volume_id": "v", "target": "relative/mount", "source": model},
                   {"volume_id": "v", "target": fresh, "source": None},
                   {"volume_id": "v", "target": fresh, "source": "ftp://host/model.safetensors"}):
        plugin.refused("INVALID_ARGUMENT", plugin.publish, **kwargs)
    missing = plugin.pb.NodePublishVolumeRequest(volume_id="v", target_path=str(fresh),
                                                  volume_context={"source": str(model)})
    plugin.refused("INVALID_ARGUMENT", plugin.nodes.NodePublishVolume, missing)
    plugin.refused("INVALID_ARGUMENT", plugin.unpublish, "", fresh)
    plugin.refused("FAILED_PRECONDITION", plugin.publish, "v", fresh, model,
                   capability=plugin.capability(block=True))
    assert "No such file" in plugin.refused("NOT_FOUND", plugin.publish, "v", fresh,
                                            node / "models" / "absent.safetensors")
    # Not a model: modelfs's own line, and nothing left behind.
    junk = node / "models" / "notes.safetensors"
    junk.write_bytes(b"\xff" * 64)
    message = plugin.refused("FAILED_PRECONDITION", plugin.publish, "v", fresh, junk)
    assert message == one_line(run_modelfs("--list", junk).stderr)
    assert not fresh.exists() and not mounts_below(node)
    assert not list((node / "plugin" / "state").iterdir())


def test_options_and_paths_a_pod_may_not_choose(plugin, node, pb, tmp):
    model = write_model(node / "models")
    target = pod_target(node, "pod-6")
    message = plugin.refused("INVALID_ARGUMENT", plugin.publish, "v", target, model,
                             options="flat,log_file=/etc/cron.d/x,cache_dir=/tmp/c,allow_other,remote_window=1G;rm")
    assert "log_file" in message and "cache_dir" in message and "allow_other" in message
    assert "remote_window" in message and "/etc/cron.d" not in message
    # A PV's mountOptions go through the same list.
    plugin.refused("INVALID_ARGUMENT", plugin.publish, "v", target, model,
                   capability=plugin.capability(flags=["nonempty"]))
    outside = tmp / "outside.safetensors"
    st.write(outside, VALUES)
    plugin.refused("PERMISSION_DENIED", plugin.publish, "v", target, outside)
    plugin.refused("PERMISSION_DENIED", plugin.publish, "v", target, f"{node}/models/../../{outside.name}")
    (node / "models" / "link.safetensors").symlink_to(outside)
    plugin.refused("PERMISSION_DENIED", plugin.publish, "v", target, node / "models" / "link.safetensors")
    assert not target.exists() and not mounts_below(node)


def test_local_paths_refused_without_local_root(pb, node):
    model = write_model(node / "models")
    p = Plugin(pb, node, local_root=False)
    try:
        message = p.refused("PERMISSION_DENIED", p.publish, "v", pod_target(node, "pod-7"), model)
        assert "--local-root" in message
    finally:
        p.stop()


def test_secrets_reach_only_the_daemon_environment(plugin, node, nginx, www):
    write_model(www)
    target = pod_target(node, "pod-8")
    secrets = {"HF_TOKEN": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET + "-aws", "LD_PRELOAD": "/tmp/evil.so"}
    # A presigned URL's signature is a credential too: logged without its query.
    source = f"{nginx.url}/model.safetensors?X-Amz-Signature=presigned-0123"
    plugin.publish("v-secret", target, source, secrets=secrets)
    check_values(target)
    [pid] = daemon_pids(target)
    environ = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert f"HF_TOKEN={SECRET}".encode() in environ
    assert f"AWS_SECRET_ACCESS_KEY={SECRET}-aws".encode() in environ
    assert not any(e.startswith(b"LD_PRELOAD=") for e in environ)  # only the keys modelfs reads
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = pathlib.Path(f"/proc/{entry}/cmdline").read_bytes()
            except (FileNotFoundError, ProcessLookupError):
                continue
            assert SECRET.encode() not in cmdline
    assert SECRET not in pathlib.Path("/proc/self/mountinfo").read_text()
    unpublished(plugin, "v-secret", target)
    log = plugin.log.read_text()
    assert SECRET not in log and "presigned-0123" not in log and f"{nginx.url}/model.safetensors" in log
    assert not any(SECRET in f.read_text(errors="replace") for f in (node / "plugin" / "state").rglob("*"))


def plugin_environment(node, **variables):
    """The plugin's environment: no credentials of this machine's, a home
    with none in it, and `variables` (endpoints) for its daemons."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HF_"))}
    return dict(env, HOME=str(node / "plugin"), **variables)


def test_hf_source_served_only_with_the_secret_token(pb, node, nginx, www):
    store = www / "hubstore" / "tiny"
    store.mkdir(parents=True)
    write_model(store)
    # This Hub answers a resolve only with the token.
    conf = nginx.conf.read_text()
    resolve = "location ~ ^/hub-owner/([^/]+)/resolve/([^/]+)/(.*)$ {"
    assert resolve in conf
    nginx.stop()
    nginx.conf.write_text(conf.replace(
        resolve, resolve + f'\n      if ($http_authorization != "Bearer {SECRET}") {{ return 401; }}'))
    nginx.start()
    p = Plugin(pb, node, env=plugin_environment(node, HF_ENDPOINT=nginx.url))
    try:
        target = pod_target(node, "pod-hf")
        message = p.refused("FAILED_PRECONDITION", p.publish, "v-hf", target, "hf://hub-owner/tiny/model.safetensors")
        assert "401" in message and SECRET not in message
        assert not target.exists() and not mounts_below(node)
        p.publish("v-hf", target, "hf://hub-owner/tiny/model.safetensors", secrets={"HF_TOKEN": SECRET},
                  context=inline_context("pod-hf"))
        check_values(target)
        unpublished(p, "v-hf", target)
    finally:
        p.stop()
    assert SECRET not in p.log.read_text()


def test_s3_source_served_only_with_the_secret_keys(pb, node, moto):
    from test_remote import s3_upload

    key_id, secret = s3_upload(moto, "weights", {"models/model.safetensors": write_model(node / "models")})
    p = Plugin(pb, node, env=plugin_environment(node, AWS_ENDPOINT_URL=moto.url, AWS_REGION="us-east-1"))
    try:
        target = pod_target(node, "pod-s3")
        source = "s3://weights/models/model.safetensors"
        p.refused("FAILED_PRECONDITION", p.publish, "v-s3", target, source)
        p.refused("FAILED_PRECONDITION", p.publish, "v-s3", target, source,
                  secrets={"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": "not-the-secret"})
        assert not target.exists() and not mounts_below(node)
        p.publish("v-s3", target, source, secrets={"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret})
        check_values(target)
        [pid] = daemon_pids(target)
        assert secret.encode() not in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        unpublished(p, "v-s3", target)
    finally:
        p.stop()
    assert secret not in p.log.read_text()


def test_mounts_outlive_the_plugin_and_a_new_one_unpublishes_them(pb, node):
    model = write_model(node / "models")
    targets = [pod_target(node, f"pod-r{i}") for i in range(2)]
    p = Plugin(pb, node)
    try:
        for i, target in enumerate(targets):
            p.publish(f"vol-r{i}", target, model)
        assert p.stop(signal.SIGTERM) == 0
        for target in targets:
            check_values(target)  # still served, no plugin running
        # Killed outright this time: its socket file stays behind.
        p.start()
        p.publish("vol-r0", targets[0], model)  # known from the state folder: OK
        p.refused("ALREADY_EXISTS", p.publish, "vol-x", targets[0], model)
        p.stop(signal.SIGKILL)
        assert (node / "plugin" / "csi.sock").exists()
        p.start()
        for i, target in enumerate(targets):
            unpublished(p, f"vol-r{i}", target)
        assert not mounts_below(node)
    finally:
        p.stop()


def test_a_plugin_killed_mid_publish_knows_the_mount_once_restarted(pb, node, nginx, www, tmp):
    from remote_servers import LatencyProxy

    write_model(www)
    # Each request held 1.5 s: modelfs mounts seconds after the call begins.
    proxy = LatencyProxy(tmp / "proxy", nginx.port, 1500)
    p = Plugin(pb, node)
    try:
        target = pod_target(node, "pod-k")
        source = f"{proxy.url}/model.safetensors"
        call = p.nodes.NodePublishVolume.future(p.pb.NodePublishVolumeRequest(
            volume_id="vol-k", target_path=str(target), volume_capability=p.capability(),
            volume_context={"source": source}), timeout=120)
        time.sleep(1)
        p.stop(signal.SIGKILL)  # kubelet saw no answer and will ask again
        with pytest.raises(p.grpc.RpcError):
            call.result()
        wait_for(lambda: is_mounted(target), what="the daemon to mount", timeout=60)
        p.start()
        p.publish("vol-k", target, source)  # the record it wrote first: OK
        assert len(mount_lines(target)) == 1
        check_values(target)
        unpublished(p, "vol-k", target)
    finally:
        p.stop()
        proxy.stop()


def published_and_read(plugin, node, volume_id):
    """(model, target, daemon pid) of a volume published and read once."""
    model = write_model(node / "models")
    target = pod_target(node, f"pod-{volume_id}")
    plugin.publish(volume_id, target, model)
    # Read first: a daemon killed while its own threads (readahead, prefetch)
    # wait on its mount cannot finish exiting, and the mount hangs instead.
    check_values(target)
    [pid] = daemon_pids(target)
    return model, target, pid


def test_a_dead_daemon_is_mounted_again(plugin, node):
    model, target, pid = published_and_read(plugin, node, "vol-d")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not daemon_pids(target), what="the daemon to die")
    plugin.publish("vol-d", target, model)  # the record matches, the mount is dead: mounted afresh
    check_values(target)
    assert len(mount_lines(target)) == 1
    unpublished(plugin, "vol-d", target)


def test_a_daemon_that_does_not_answer_holds_no_call(plugin, node):
    model, target, pid = published_and_read(plugin, node, "vol-h")
    os.kill(pid, signal.SIGSTOP)
    try:
        # Every thread stopped (a thread woken late may still take a request).
        wait_for(lambda: all(pathlib.Path(t, "stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
                             for t in pathlib.Path(f"/proc/{pid}/task").iterdir()), what="the daemon to stop")
        started = time.monotonic()
        message = plugin.refused("UNAVAILABLE", plugin.publish, "vol-h", target, model)
        assert "does not answer" in message and time.monotonic() - started < 30
        # Other targets are served meanwhile, and unpublishing asks the daemon nothing.
        other = pod_target(node, "pod-h2")
        plugin.publish("vol-h2", other, model)
        check_values(other)
        unpublished(plugin, "vol-h2", other)
        plugin.unpublish("vol-h", target)
        assert not is_mounted(target) and not target.exists()
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: not daemon_pids(target), what="the stopped daemon to exit once unmounted")


def test_twenty_volumes_published_and_unpublished_at_once(plugin, node):
    models = [write_model(node / "models", f"m{i}.safetensors") for i in range(20)]
    targets = [pod_target(node, f"pod-c{i}") for i in range(20)]
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        list(pool.map(lambda i: plugin.publish(f"vol-c{i}", targets[i], models[i]), range(20)))
        for target in targets:
            check_values(target)
        assert len(mounts_below(node / "kubelet")) == 20
        list(pool.map(lambda i: plugin.unpublish(f"vol-c{i}", targets[i]), range(20)))
    assert not mounts_below(node)
    assert not any(target.exists() for target in targets)
    wait_for(lambda: not daemon_pids_below(node), what="the daemons to exit")
    assert not list((node / "plugin" / "state").iterdir())


# `modelfs MODEL /dev/fd/N`: the mount made by another process (as a CSI
# plugin does), served by a daemon that did not make it.
MS_RDONLY, MS_NOSUID, MS_NODEV = 1, 2, 4


def mount_fuse_fd(mountpoint):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/dev/fuse", os.O_RDWR)
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions".encode()
    if libc.mount(b"handed-over", os.fsencode(str(mountpoint)), b"fuse.modelfs",
                  ctypes.c_ulong(MS_RDONLY | MS_NOSUID | MS_NODEV), options) != 0:
        os.close(fd)
        pytest.skip(f"cannot mount FUSE here: {os.strerror(ctypes.get_errno())}")
    return fd


def test_dev_fd_mount_served_by_another_process(tmp):
    if os.geteuid() != 0:
        pytest.skip("mounting with fd= needs root")
    model = write_model(tmp)
    mnt = tmp / "mnt"
    mnt.mkdir()
    fd = mount_fuse_fd(mnt)
    try:
        result = run_modelfs(model, f"/dev/fd/{fd}", pass_fds=(fd,))
        assert result.returncode == 0, result.stderr
        os.close(fd)
        fd = -1
        check_values(mnt)
        assert daemon_pids(model), "no daemon serves the mount"
        with pytest.raises(OSError) as raised:
            open(mnt / "weight", "r+b")
        assert raised.value.errno == 30
    finally:
        if fd >= 0:
            os.close(fd)
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        wait_for(lambda: not daemon_pids(model), what="the daemon to exit")
    assert not is_mounted(mnt)


def test_dev_fd_that_is_not_fuse_is_refused(tmp):
    model = write_model(tmp)
    with open(model, "rb") as f:
        result = run_modelfs(model, f"/dev/fd/{f.fileno()}", pass_fds=(f.fileno(),))
    assert result.returncode == 1
    assert "is not /dev/fuse" in one_line(result.stderr)
    result = run_modelfs(model, "/dev/fd/987")
    assert result.returncode == 1 and "not open" in one_line(result.stderr)


# ----- deploy/kubernetes: parsed (no cluster here to --dry-run them against) -----

DEPLOY = REPO / "deploy" / "kubernetes"


def manifests(name):
    yaml = pytest.importorskip("yaml")
    return {doc["kind"]: doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc}


def test_csidriver_manifest():
    driver = manifests("csidriver.yaml")["CSIDriver"]
    assert driver["apiVersion"] == "storage.k8s.io/v1" and driver["metadata"]["name"] == "csi.modelfs"
    spec = driver["spec"]
    assert spec["attachRequired"] is False and spec["podInfoOnMount"] is True
    assert sorted(spec["volumeLifecycleModes"]) == ["Ephemeral", "Persistent"]
    assert spec["fsGroupPolicy"] == "None"


def test_daemonset_manifest():
    daemonset = manifests("node.yaml")["DaemonSet"]
    assert daemonset["apiVersion"] == "apps/v1"
    pod = daemonset["spec"]["template"]["spec"]
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    volumes = {v["name"]: v for v in pod["volumes"]}
    containers = {c["name"]: c for c in pod["containers"]}
    plugin, registrar = containers["modelfs-csi"], containers["node-driver-registrar"]
    assert plugin["securityContext"]["privileged"] is True
    mounts = {m["mountPath"]: m for m in plugin["volumeMounts"]}
    kubelet = mounts["/var/lib/kubelet"]
    assert kubelet["mountPropagation"] == "Bidirectional"
    assert volumes[kubelet["name"]]["hostPath"]["path"] == "/var/lib/kubelet"
    assert volumes[mounts["/dev/fuse"]["name"]]["hostPath"] == {"path": "/dev/fuse", "type": "CharDevice"}
    cache = [a.split("=", 1)[1] for a in plugin["args"] if a.startswith("--cache-dir=")]
    assert cache and volumes[mounts[cache[0]]["name"]]["hostPath"]["path"] == "/var/cache/modelfs"
    endpoint = [a.split("=", 1)[1] for a in plugin["args"] if a.startswith("--endpoint=")][0]
    assert endpoint == "unix:///csi/csi.sock" and "--node-id=$(KUBE_NODE_NAME)" in plugin["args"]
    assert plugin["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # The registrar finds the plugin's socket in the shared folder, and tells
    # kubelet where that folder is on the host.
    socket_dir = volumes[mounts["/csi"]["name"]]["hostPath"]["path"]
    assert socket_dir == "/var/lib/kubelet/plugins/csi.modelfs"
    assert "--csi-address=/csi/csi.sock" in registrar["args"]
    assert f"--kubelet-registration-path={socket_dir}/csi.sock" in registrar["args"]
    registrar_mounts = {m["mountPath"]: m["name"] for m in registrar["volumeMounts"]}
    assert registrar_mounts["/csi"] == mounts["/csi"]["name"]
    assert volumes[registrar_mounts["/registration"]]["hostPath"]["path"] == "/var/lib/kubelet/plugins_registry"


def test_example_pod_and_static_pv_manifests():
    docs = manifests("example-pod.yaml")
    [volume] = docs["Pod"]["spec"]["volumes"]
    csi = volume["csi"]
    assert csi["driver"] == "csi.modelfs" and csi["volumeAttributes"]["source"].startswith("hf://")
    assert csi["nodePublishSecretRef"]["name"] == docs["Secret"]["metadata"]["name"]
    assert "HF_TOKEN" in docs["Secret"]["stringData"]
    [mount] = docs["Pod"]["spec"]["containers"][0]["volumeMounts"]
    assert mount["name"] == volume["name"] and mount["readOnly"] is True

    docs = manifests("static-pv.yaml")
    pv, claim, pod = docs["PersistentVolume"], docs["PersistentVolumeClaim"], docs["Pod"]
    assert pv["spec"]["csi"]["driver"] == "csi.modelfs" and pv["spec"]["csi"]["volumeHandle"]
    assert pv["spec"]["csi"]["volumeAttributes"]["source"]
    assert claim["spec"]["volumeName"] == pv["metadata"]["name"] and claim["spec"]["storageClassName"] == ""
    assert claim["spec"]["accessModes"] == pv["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]


def test_man_page_is_clean_and_names_every_option():
    if shutil.which("man") is None:
        pytest.skip("needs man (man-db)")
    page = subprocess.run(["man", "--warnings", "-l", str(REPO / "man" / "modelfs-csi.1")], capture_output=True,
                          text=True, env=dict(os.environ, MANWIDTH="80"))
    assert page.returncode == 0 and page.stderr == "", page.stderr
    if not CSI.exists():
        pytest.skip(f"modelfs-csi not built at {CSI}")
    usage = subprocess.run([str(CSI), "--help"], capture_output=True, text=True, check=True).stdout
    flags = {word.strip("(),") for word in usage.split() if word.startswith("--")}
    assert flags >= {"--endpoint", "--node-id", "--driver-name", "--cache-dir", "--local-root", "--state-dir"}
    for flag in flags:
        assert flag in page.stdout.replace("\u2010", "-"), flag


def test_image_recipe_installs_the_packages_under_an_init():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "dpkg-buildpackage -b -us -uc" in dockerfile and "modelfs-csi_*.deb" in dockerfile
    # The daemons outlive the plugin's process: PID 1 must reap them.
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/usr/bin/modelfs-csi"]' in dockerfile
