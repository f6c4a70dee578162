# SPDX-License-Identifier: Apache-2.0
"""libmodelfs.so in a host program: a small C++ program
(library_host/host.cpp) with its own global operator new and delete and no
SIGBUS handler, compiled against the installed library (cmake --install,
pkg-config), opens and reads a model through the public API. The library
must leave the program as it found it: the host's operator new is the one
called, SIGBUS keeps its default action, fork() returns at once and the child
exits normally; and the bytes it reads are the test's writer's."""
import io
import os
import pathlib
import subprocess

import numpy as np
import pytest

import safetensors_writer as st
from conftest import MODELFS
from remote_servers import LatencyProxy

# Built against the installed library, as a host program would be; the
# sanitizer pass's library would need the host built with its runtime.
pytestmark = pytest.mark.skipif(os.environ.get("MODELFS_SANITIZED") == "1",
                                reason="links a host program against the plain library")

BUILD = pathlib.Path(os.environ.get("MODELFS_BUILD_DIR", MODELFS.parent))
HOST_SOURCE = pathlib.Path(__file__).parent / "library_host" / "host.cpp"


def run(*args, **kwargs):
    kwargs.setdefault("check", True)
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The host program, built against `cmake --install` of the build, and
    the environment that finds the installed library."""
    prefix = tmp_path_factory.mktemp("prefix")
    run("cmake", "--install", BUILD, "--prefix", prefix)
    pkgconfig = next(prefix.rglob("modelfs.pc")).parent
    flags = run("pkg-config", "--cflags", "--libs", "modelfs",
                env=dict(os.environ, PKG_CONFIG_PATH=str(pkgconfig))).stdout.split()
    program = prefix / "host"
    run("g++", "-std=c++20", "-O1", HOST_SOURCE, "-o", program, *flags, "-pthread")
    cache = tmp_path_factory.mktemp("cache")
    env = dict(os.environ, LD_LIBRARY_PATH=str(next(prefix.rglob("libmodelfs.so")).parent),
               XDG_CACHE_HOME=str(cache))
    return program, env


def sample_model(path):
    rng = np.random.default_rng(47)
    tensors = {"w": np.arange(12, dtype=np.float32).reshape(3, 4),
               "b": np.array([7, 8, 9], dtype=np.int16),
               "big": rng.standard_normal(256 * 1024).astype(np.float32)}
    st.write(path, tensors)
    return tensors


def summary(out):
    """The host's lines but the bytes it read: what a failure shows."""
    return [line for line in out.splitlines() if not line.startswith(("tensor ", "npy "))]


def lines_of(out, kind):
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith(kind + " ")]


def test_host_program_is_left_as_it_was_and_reads_the_writers_values(host, tmp):
    program, env = host
    model = tmp / "m.safetensors"
    tensors = sample_model(model)
    result = run(program, model, env=env, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout

    # The catalog's bytes and each .npy the tree serves, against the writer.
    read = dict(line.split(" ") for line in lines_of(out, "tensor"))
    assert sorted(read) == sorted(tensors)
    for name, value in tensors.items():
        assert bytes.fromhex(read[name]) == st.entry(value)[2], name
    npys = dict(line.split(" ") for line in lines_of(out, "npy"))
    assert sorted(pathlib.PurePath(p).stem for p in npys) == sorted(tensors)
    for path, text in npys.items():
        expected = tensors[pathlib.PurePath(path).stem]
        got = np.load(io.BytesIO(bytes.fromhex(text)))
        assert got.dtype == expected.dtype and np.array_equal(got, expected), path

    # The library called the host's operator new: it has none of its own.
    (calls,) = lines_of(out, "host operator new calls")
    assert int(calls.split()[-1]) > 0

    # No guard in a host program: a model cut under the library is refused
    # by the read's size check, not a crash.
    assert any(line.startswith("truncated read refused: ") for line in out.splitlines()), summary(out)

    # fork() at once, the child exits through exit() with status 0.
    (fork,) = lines_of(out, "fork")
    _, seconds, _, how, status = fork.split()
    assert (how, status) == ("exited", "0") and float(seconds) < 1.0, fork

    # SIGBUS keeps the default action the host started with.
    assert "SIGBUS SIG_DFL" in out.splitlines(), summary(out)


@pytest.fixture
def slow_server(tmp, nginx):
    """nginx behind a proxy that holds each request 2 s (stopped in
    teardown): a fetch is in flight for long enough to fork during it."""
    proxy = LatencyProxy(tmp / "proxy", nginx.port, 2000)
    try:
        yield proxy
    finally:
        proxy.stop()


def test_fork_of_the_host_does_not_wait_for_the_librarys_fetches(host, tmp, www, slow_server):
    """The library registers no fork handler: a host forking while one of
    its threads reads a remote model (the library's fetch threads at work)
    forks at once, and its child exits normally through exit()."""
    program, env = host
    rng = np.random.default_rng(4747)
    remote = {"big": rng.standard_normal(1 << 20).astype(np.float32)}  # 4 MiB: fetches on the pool
    st.write(www / "r.safetensors", remote)
    local = tmp / "m.safetensors"
    sample_model(local)
    result = run(program, local, f"{slow_server.url}/r.safetensors", env=env, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    (fork,) = lines_of(out, "fork")
    _, seconds, _, how, status = fork.split()
    assert (how, status) == ("exited", "0") and float(seconds) < 0.5, fork
    (total,) = lines_of(out, "remote bytes sum")
    assert int(total.split()[-1]) == sum(remote["big"].tobytes())
    assert "SIGBUS SIG_DFL" in out.splitlines(), summary(out)
