"""torch.save archives whose members another writer compressed: Python's
zipfile re-zips a checkpoint with deflate, bzip2 or LZMA. libzip
decompresses what it can (Debian 12's: deflate and bzip2); LZMA is refused
by name. The tensors are compared with the ones saved."""
import zipfile

import numpy as np
import pytest

from conftest import mounted, run_modelfs

torch = pytest.importorskip("torch")


def rezipped(tmp, method):
    original = tmp / "original.pt"
    state = {"w": torch.arange(6000, dtype=torch.float32).reshape(60, 100), "b": torch.zeros(7, dtype=torch.int16),
             "step": 3}
    torch.save(state, original)
    path = tmp / f"method{method}.pt"
    with zipfile.ZipFile(original) as source, zipfile.ZipFile(path, "w", compression=method) as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info))
    with zipfile.ZipFile(path) as check:
        assert {i.compress_type for i in check.infolist()} == {method}
    return path, state


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2], ids=["deflate", "bzip2"])
def test_compressed_members_are_read_through_libzip(tmp, method):
    path, state = rezipped(tmp, method)
    if method == zipfile.ZIP_DEFLATED:  # torch reads deflate only (miniz)
        assert torch.equal(torch.load(path, weights_only=True)["w"], state["w"])
    check = run_modelfs("--check", path)
    assert check.returncode == 0, check.stderr
    with mounted(path) as mnt:
        assert (mnt / "w").read_bytes() == state["w"].numpy().tobytes()
        assert np.load(mnt / "b.npy").tolist() == [0] * 7


def test_lzma_members_are_refused_by_name(tmp):
    path, _ = rezipped(tmp, zipfile.ZIP_LZMA)
    result = run_modelfs("--list", path)
    assert result.returncode == 2, result
    assert "compression method LZMA is not supported (libzip here reads stored, deflate, bzip2)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
