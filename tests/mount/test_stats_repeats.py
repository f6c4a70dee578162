# SPDX-License-Identifier: Apache-2.0
"""`--stats` in proportion to what a model stores (issue 42, "Work out of
proportion to what is stored"): a .pt of 64 expand()s of 1 GiB each (a
few KB on disk) and an HDF5 file of 24 datasets of 1 GiB never written
(their chunks read as the fill value, 0). Their statistics are those of
the few stored values, counts scaled: the expected ones are computed by
numpy on the small storage the test wrote (torch's own expand, h5py's
fill value), never by modelfs. Each run is bounded (a 30 s timeout): the
old code read every repeated value, 40-80 s."""
import json
import subprocess

import numpy as np
import pytest

from conftest import MODELFS

torch = pytest.importorskip("torch")
h5py = pytest.importorskip("h5py")

TIMEOUT = 30
GIB_FLOATS = 1 << 28  # float32 elements in 1 GiB: the most a view may have from a few bytes


def stats_of(model):
    result = subprocess.run([str(MODELFS), "--stats", "--json", str(model)], capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    return {row["name"]: row for row in doc["tensors"]}, doc["total"]


def expected(distinct, count):
    """The --stats fields of `count` values that are `distinct` (a numpy
    array) each repeated equally often."""
    values = np.asarray(distinct, dtype=np.float64).reshape(-1)
    repeats = count // values.size
    finite = values[np.isfinite(values)]
    return {"count": count, "min": finite.min(), "max": finite.max(), "mean": finite.mean(),
            "std": finite.std(), "nan": int(np.isnan(values).sum()) * repeats,
            "inf": int(np.isinf(values).sum()) * repeats, "zeros": int((values == 0).sum()) * repeats}


def assert_row(row, want, name):
    for key in ("count", "nan", "inf", "zeros"):
        assert row[key] == want[key], (name, key, row[key], want[key])
    for key in ("min", "max", "mean", "std"):
        assert row[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), (name, key, row[key], want[key])


def test_stats_of_expanded_views_are_their_storages(tmp_path):
    a = torch.tensor([-1.5, float("nan"), 0.0, 2.5])
    b = torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2
    views, distinct = {}, {}
    for i in range(64):
        # Each 1 GiB: repeated along the outer, the inner or a middle dimension.
        if i % 3 == 0:
            views[f"v{i}"], distinct[f"v{i}"] = a.expand(GIB_FLOATS // 4, 4), a
        elif i % 3 == 1:
            views[f"v{i}"], distinct[f"v{i}"] = a.unsqueeze(1).expand(4, GIB_FLOATS // 4), a
        else:
            views[f"v{i}"], distinct[f"v{i}"] = b.unsqueeze(1).expand(2, GIB_FLOATS // 8, 3), b
    views["plain"] = torch.arange(10, dtype=torch.float32)
    distinct["plain"] = views["plain"]
    path = tmp_path / "expanded.pt"
    torch.save(views, path)
    assert path.stat().st_size < 64 << 10

    rows, total = stats_of(path)
    assert sorted(rows) == sorted(views)
    for name, view in views.items():
        assert rows[name]["shape"] == list(view.shape)
        assert_row(rows[name], expected(distinct[name].numpy(), view.numel()), name)
    assert total["count"] == sum(v.numel() for v in views.values())
    assert total["nan"] == sum(rows[n]["nan"] for n in rows)


def test_stats_of_datasets_never_written_are_their_fill_values(tmp_path):
    path = tmp_path / "unwritten.h5"
    written = np.linspace(-3, 3, 1 << 12, dtype=np.float32)
    with h5py.File(path, "w") as f:
        for i in range(24):
            dtype = (np.float32, np.float64, np.int32)[i % 3]
            count = (1 << 30) // np.dtype(dtype).itemsize
            f.create_dataset(f"d{i}", shape=(count // 1024, 1024), dtype=dtype, chunks=(1024, 1024),
                             fillvalue=0)
        f.create_dataset("written", data=written, chunks=(1024,))
    assert path.stat().st_size < 64 << 10
    with h5py.File(path, "r") as f:  # the oracle: what h5py reads of them
        fills = {name: f[name].fillvalue for name in f if name != "written"}
        shapes = {name: f[name].shape for name in f}
        assert not f["d0"][:2, :8].any() and not f["d23"][-1, -8:].any()

    rows, total = stats_of(path)
    assert sorted(rows) == sorted(shapes)
    for name, fill in fills.items():
        assert rows[name]["shape"] == list(shapes[name])
        assert_row(rows[name], expected(np.array([fill]), int(np.prod(shapes[name]))), name)
    assert_row(rows["written"], expected(written, written.size), "written")
    assert total["zeros"] == sum(rows[n]["zeros"] for n in rows)


def test_diff_of_expanded_views_compares_their_storages(tmp_path):
    """--diff of two such .pt files whose storages differ: every pair of
    the 1 GiB views compared, its numbers those of the storages' values
    (numpy), counts scaled by the repeats; run in the same bound."""
    a = torch.tensor([-1.5, float("nan"), 0.0, 2.5, 4.0, -8.0])
    b = a.clone()
    b[0], b[3], b[5] = -1.5 + 1e-7, 2.5 + 0.25, float("nan")
    models = {}
    for side, base in (("a", a), ("b", b)):
        views = {f"v{i}": (base.expand(GIB_FLOATS // 6, 6) if i % 2 == 0
                           else base.unsqueeze(1).expand(6, GIB_FLOATS // 6)) for i in range(16)}
        models[side] = tmp_path / f"{side}.pt"
        torch.save(views, models[side])
    atol = 1e-6
    result = subprocess.run([str(MODELFS), "--diff", "--json", "--atol", str(atol), models["a"], models["b"]],
                            capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 1, result.stderr  # the models differ
    doc = json.loads(result.stdout)
    x, y = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    repeats = (GIB_FLOATS // 6 * 6) // x.size
    finite = np.isfinite(x) & np.isfinite(y)
    d = np.abs(x[finite] - y[finite])
    want_not_close = int((~(d <= atol)).sum() + (np.isnan(x) != np.isnan(y)).sum()) * repeats
    assert len(doc["tensors"]) == 16
    for row in doc["tensors"]:
        assert row["status"] == "different", row
        assert row["max_abs_diff"] == pytest.approx(d.max(), rel=1e-12)
        assert row["rmse"] == pytest.approx(np.sqrt((d ** 2).mean()), rel=1e-9)
        assert row["nmse"] == pytest.approx((d ** 2).sum() / (y[finite] ** 2).sum(), rel=1e-9)
        cosine = (x[finite] * y[finite]).sum() / np.sqrt((x[finite] ** 2).sum() * (y[finite] ** 2).sum())
        assert row["cosine"] == pytest.approx(cosine, rel=1e-9)
        assert row["nan_mismatch"] == 1 * repeats
        assert row["not_close"] == want_not_close


def test_stats_of_views_that_do_not_repeat_keep_the_export_bound(tmp_path):
    """Views of overlapping strides (not repeats of a few values) are read
    whole, within the export's bound on the whole model (1 GiB for a model
    storing a few KB): 32 views of 64 MiB, the first 16 read (their
    statistics numpy's on the same strides over the storage), the rest
    left out, saying why."""
    # 32 KB of storage a view: the 32 store 1 MiB, and 1024 times that is 1 GiB.
    storage = torch.arange(1 << 13, dtype=torch.float32) - 3000
    views = {f"v{i}": storage.as_strided((1 << 12, 1 << 12), (1, 1)) for i in range(32)}
    path = tmp_path / "overlapping.pt"
    torch.save(views, path)
    rows, _ = stats_of(path)
    s = storage.numpy().astype(np.float64)
    window = np.lib.stride_tricks.as_strided(s, shape=(1 << 12, 1 << 12), strides=(8, 8))
    want = {"count": 1 << 24, "min": window.min(), "max": window.max(), "mean": window.mean(),
            "std": window.std(), "nan": 0, "inf": 0, "zeros": int((window == 0).sum())}
    for i in range(16):
        assert_row(rows[f"v{i}"], want, f"v{i}")
    for i in range(16, 32):
        row = rows[f"v{i}"]
        assert row["min"] is None and row["count"] == 1 << 24
        assert "bound" in row["left_out"], row
