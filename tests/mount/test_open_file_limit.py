# SPDX-License-Identifier: Apache-2.0
"""A model of more files than the usual soft limit on open files (issue 42,
"Open-file limit"): a TF.js model of 2 100 shards, written by the tests'
TF.js writer (test_tfjs_mount.py), mounted and listed under a soft
RLIMIT_NOFILE of 1024 (the hard limit left as it is), as a login shell
starts modelfs. Before, the 1016th shard was refused ("Too many open
files"); modelfs now raises its soft limit to the hard one. The weights
are read through the mount with numpy and compared with the writer's."""
import resource
import subprocess

import numpy as np
import pytest

from conftest import MODELFS, index_paths, is_mounted, unmount
from test_tfjs_mount import Weight, write_model

SOFT_LIMIT = 1024
SHARDS = 2100


def _soft_limit():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT_LIMIT, hard))


def run_limited(*args):
    return subprocess.run([str(MODELFS), *map(str, args)], capture_output=True, text=True, timeout=120,
                          preexec_fn=_soft_limit)


@pytest.fixture
def many_shards(tmp_path):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < SHARDS + 64:
        pytest.skip(f"the hard limit on open files ({hard}) is below the model's {SHARDS} files")
    weights = [Weight("big", np.arange(SHARDS, dtype=np.float32) * 0.5 - 7),  # one float a shard
               Weight("counts", np.arange(-5, 7, dtype=np.int32).reshape(3, 4))]
    # 4-byte shards: the 2 100 floats and the 12 ints take 2 112 files.
    model = write_model(tmp_path / "m", [weights], shard_size=4)
    assert len(list((tmp_path / "m").glob("group1-*.bin"))) == SHARDS + 12
    return model, weights


def test_list_of_thousands_of_shards_under_a_soft_limit_of_1024(many_shards):
    model, weights = many_shards
    result = run_limited("--list", model)
    assert result.returncode == 0, result.stderr
    for w in weights:
        assert w.name in result.stdout


def test_mount_of_thousands_of_shards_under_a_soft_limit_of_1024(many_shards, tmp_path):
    model, weights = many_shards
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        result = run_limited(model, mnt)
        assert result.returncode == 0, result.stderr
        assert is_mounted(mnt)
        paths, _ = index_paths(mnt)
        for w in weights:
            loaded = np.load(str(paths[w.name]) + ".npy")
            np.testing.assert_array_equal(loaded, w.values, err_msg=w.name)
            assert paths[w.name].read_bytes() == w.stored, w.name
    finally:
        unmount(mnt)
