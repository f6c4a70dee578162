# SPDX-License-Identifier: Apache-2.0
"""`modelfs --stats` and `modelfs --diff`: every field against numpy, which
computes it here from the arrays the tests wrote (safetensors_writer,
gguf_writer, torch.save) and, for types numpy lacks and quantized GGUF,
from numeric_oracle's decoders; every status and exit status; --rename;
the JSON shapes; the tables' width."""
import json
import math
import unicodedata

import numpy as np
import pytest
import torch

import gguf_writer as gw
import numeric_oracle as oracle
import safetensors_writer as st
from conftest import run_modelfs

STAT_KEYS = ["name", "dtype", "shape", "count", "min", "max", "mean", "std", "nan", "inf", "zeros"]
DIFF_KEYS = {"name", "status", "max_abs_diff", "rmse", "nmse", "cosine", "not_close", "nan_mismatch",
             "inf_mismatch"}
STATUSES = ["identical", "equal", "close", "different", "mismatch", "only_a", "only_b"]


def bf16_bytes(values):
    """bfloat16 codes of float32 values that bfloat16 holds exactly."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    codes = (bits >> 16).astype(np.uint16)
    assert np.array_equal(codes.astype(np.uint32) << 16, bits)
    return codes.tobytes()


def numpy_stats(values):
    """The --stats fields of an array, as numpy computes them."""
    v = np.asarray(values)
    if v.dtype.kind == "c":
        v = v.view(v.real.dtype)
    v = v.astype(np.float64).reshape(-1)
    finite = v[np.isfinite(v)]
    out = {"nan": int(np.isnan(v).sum()), "inf": int(np.isinf(v).sum()), "zeros": int((v == 0).sum())}
    if finite.size:
        out.update(min=float(finite.min()), max=float(finite.max()), mean=float(finite.mean()),
                   std=float(finite.std()))
    else:
        out.update(min=None, max=None, mean=None, std=None)
    return out


def assert_near(got, want, what):
    if want is None:
        assert got is None, what
    else:
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), what


def stats_json(model):
    result = run_modelfs("--stats", "--json", model)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def check_stats(doc, expected):
    """`expected`: {name: (dtype name, array of the .npy's values)}, in file order."""
    assert list(doc) == ["tensors", "total"]
    rows = doc["tensors"]
    assert [r["name"] for r in rows] == list(expected)
    every = []
    for row in rows:
        assert list(row) == STAT_KEYS
        dtype, values = expected[row["name"]]
        values = np.asarray(values)
        assert row["dtype"] == dtype
        assert row["shape"] == list(values.shape)
        assert row["count"] == values.size
        want = numpy_stats(values)
        for key in ("nan", "inf", "zeros"):
            assert row[key] == want[key], (row["name"], key)
        for key in ("min", "max", "mean", "std"):
            assert_near(row[key], want[key], (row["name"], key))
        every.append(values.astype(np.complex128 if values.dtype.kind == "c" else np.float64).reshape(-1))
    total = doc["total"]
    assert total["tensors"] == len(expected)
    assert total["count"] == sum(v.size for v in every)
    want = numpy_stats(np.concatenate([v.view(np.float64) if v.dtype.kind == "c" else v for v in every]))
    for key in ("nan", "inf", "zeros"):
        assert total[key] == want[key], key
    for key in ("min", "max", "mean", "std"):
        assert_near(total[key], want[key], ("total", key))


def mixed_tensors():
    """{name: (array or Raw to write, dtype name, the .npy's values)} over every element kind."""
    rng = np.random.default_rng(37)
    specials = rng.standard_normal(1000).astype(np.float32)
    specials[[3, 50, 999]] = np.nan
    specials[[7, 8]] = [np.inf, -np.inf]
    specials[100:140] = 0
    specials[141] = -0.0
    bf = (rng.standard_normal((16, 33)).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    bf[0, 0] = np.nan
    f8_codes = rng.integers(0, 256, 300, dtype=np.uint8)
    f8_values = oracle.expected("float8_e4m3fn", f8_codes.tobytes(), [300])
    half = rng.standard_normal((7, 5)).astype(np.float16)
    half[1, 1] = np.float16(np.inf)
    out = {
        "f32.specials": (specials.reshape(10, 100), "float32", specials.reshape(10, 100)),
        "f16": (half, "float16", half),
        "bf16": (st.Raw("BF16", bf.shape, bf16_bytes(bf.astype(np.float32))), "bfloat16", bf),
        "f8": (st.Raw("F8_E4M3", [300], f8_codes.tobytes()), "float8_e4m3fn", f8_values),
        "f64": (rng.standard_normal(257) * 1e6, "float64", None),
        "i32": (rng.integers(-2**31, 2**31 - 1, 500, dtype=np.int32), "int32", None),
        "u8": (rng.integers(0, 256, (4, 4), dtype=np.uint8), "uint8", None),
        "i64": (rng.integers(-2**40, 2**40, 64, dtype=np.int64), "int64", None),
        "flags": (rng.integers(0, 2, 77).astype(bool), "bool", None),
        "zeros": (np.zeros(10, np.float32), "float32", None),
        "allnan": (np.full(3, np.nan, np.float32), "float32", None),
        "empty": (np.zeros((0, 4), np.float32), "float32", None),
        "scalar": (np.array(2.5, np.float32), "float32", None),
        "c64": (np.array([1 + 2j, -3.5 + 0j], np.complex64), "complex64", None),
    }
    return {k: (w, d, w if v is None else v) for k, (w, d, v) in out.items()}


def test_stats_every_element_kind(tmp):
    tensors = mixed_tensors()
    model = st.write(tmp / "mixed.safetensors", {k: w for k, (w, _, _) in tensors.items()})
    check_stats(stats_json(model), {k: (d, v) for k, (_, d, v) in tensors.items()})


def q8_0_tensor(name, rows, seed):
    """A q8_0 tensor of random quants and float16 scales (no NaN or infinity)."""
    rng = np.random.default_rng(seed)
    blocks = rows * 2
    scales = (rng.standard_normal(blocks) * 0.01).astype(np.float16)
    quants = rng.integers(-128, 128, (blocks, 32), dtype=np.int8)
    data = b"".join(scales[i].tobytes() + quants[i].tobytes() for i in range(blocks))
    return gw.Tensor(name, 8, [64, rows], data)


def test_stats_quantized_gguf(tmp):
    q = q8_0_tensor("blk.0.attn_q.weight", 48, 1)
    f = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    ft = gw.Tensor("output_norm.weight", 0, [64, 3], f.tobytes())
    model = tmp / "q.gguf"
    gw.write(model, [], [q, ft])
    want = oracle.expected("q8_0", q.data, q.shape)
    check_stats(stats_json(model), {q.name: ("q8_0", want), ft.name: ("float32", f)})


def test_stats_torch_and_quantized_torch(tmp):
    torch.manual_seed(0)
    w = torch.randn(12, 9)
    q = torch.quantize_per_tensor(torch.randn(40), 0.05, 3, torch.qint8)
    h = torch.randn(5, 6).to(torch.bfloat16)
    model = tmp / "m.pt"
    torch.save({"w": w, "wt": w.t(), "q": q, "h": h}, model)
    check_stats(stats_json(model), {"w": ("float32", w.numpy()), "wt": ("float32", w.t().numpy()),
                                    "q": ("int8", q.dequantize().numpy()),
                                    "h": ("bfloat16", h.float().numpy())})


def columns(line):
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def test_stats_table_fits_80_columns(tmp):
    long = "model.layers.0." + "very_long_component." * 12 + "weight"
    model = st.write(tmp / "long.safetensors", {
        long: np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": np.array([np.nan, -1e300, 1e-300, 0], np.float64),
        "名前": np.ones((2, 2, 2, 2, 2, 2, 2, 2, 2, 2), np.float16),
    })
    result = run_modelfs("--stats", model)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(columns(line) <= 80 for line in lines), [line for line in lines if columns(line) > 80]
    assert lines[0].split()[:4] == ["NAME", "DTYPE", "SHAPE", "COUNT"]
    assert lines[1].split() == ["MIN", "MAX", "MEAN", "STD", "NAN", "INF", "ZEROS"]
    assert lines[2].startswith("model.layers.0.very_long") and "…" in lines[2]
    assert lines[3].split() == ["0", "11", "5.5", "3.452", "0", "0", "1"]
    assert lines[5].split()[4:] == ["1", "0", "1"]
    assert "total: 3 tensors, 1040 values" in result.stdout


def diff_json(a, b, *options, code=None):
    result = run_modelfs("--diff", "--json", *options, a, b)
    doc = json.loads(result.stdout)
    if code is not None:
        assert result.returncode == code, result.stderr
    return doc, result.returncode


def numpy_diff(a, b):
    a = np.asarray(a, np.float64).reshape(-1)
    b = np.asarray(b, np.float64).reshape(-1)
    both = np.isfinite(a) & np.isfinite(b)
    x, y = a[both], b[both]
    d = np.abs(x - y)
    sq = float((d * d).sum())
    cos = None
    if (x * x).sum() and (y * y).sum():
        cos = float((x * y).sum() / (np.sqrt((x * x).sum()) * np.sqrt((y * y).sum())))
    nmse = 0.0 if sq == 0 else (sq / float((y * y).sum()) if (y * y).sum() else None)
    nan_mismatch = int((np.isnan(a) != np.isnan(b)).sum())
    inf_mismatch = int((~np.isnan(a) & ~np.isnan(b) & ~both & (a != b)).sum())
    return {"max_abs_diff": float(d.max()) if d.size else 0.0, "rmse": math.sqrt(sq / d.size) if d.size else 0.0,
            "nmse": nmse, "cosine": cos, "nan_mismatch": nan_mismatch, "inf_mismatch": inf_mismatch}


def check_numbers(row, a, b):
    want = numpy_diff(a, b)
    for key in ("max_abs_diff", "rmse", "nmse", "cosine"):
        assert_near(row[key], want[key], (row["name"], key))
    assert row["nan_mismatch"] == want["nan_mismatch"]
    assert row["inf_mismatch"] == want["inf_mismatch"]


def status_models(tmp):
    rng = np.random.default_rng(5)
    base = (rng.standard_normal((8, 16)).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    noisy = base + rng.standard_normal(base.shape).astype(np.float32) * 1e-4
    far = base.copy()
    far[3, 3] += 1.0
    with_nan = base.copy()
    with_nan[0, :3] = np.nan
    with_nan[1, 0] = np.inf
    nan_b = base.copy()
    nan_b[0, :2] = np.nan
    nan_b[1, 0] = -np.inf
    a = {"same": base, "as_bf16": base, "near": base, "far": base, "shape": base, "nans": with_nan,
         "gone": base}
    b = {"same": base, "as_bf16": st.Raw("BF16", base.shape, bf16_bytes(base)), "near": noisy, "far": far,
         "shape": base.reshape(16, 8), "nans": nan_b, "new": base}
    values_b = {"same": base, "as_bf16": base, "near": noisy, "far": far, "nans": nan_b}
    return st.write(tmp / "a.safetensors", a), st.write(tmp / "b.safetensors", b), a, values_b


def test_diff_every_status_and_field(tmp):
    path_a, path_b, a, b = status_models(tmp)
    doc, _ = diff_json(path_a, path_b, code=1)
    assert list(doc) == ["tensors", "summary"]
    rows = {r["name"]: r for r in doc["tensors"]}
    assert [r["name"] for r in doc["tensors"]] == ["same", "as_bf16", "near", "far", "shape", "nans", "gone",
                                                   "new"]
    want = {"same": "identical", "as_bf16": "equal", "near": "different", "far": "different",
            "shape": "mismatch", "nans": "different", "gone": "only_a", "new": "only_b"}
    assert {k: r["status"] for k, r in rows.items()} == want
    for row in doc["tensors"]:
        assert DIFF_KEYS <= set(row)
    for name in ("as_bf16", "near", "far", "nans"):
        check_numbers(rows[name], a[name], b[name])
    assert rows["same"]["max_abs_diff"] == 0 and rows["same"]["cosine"] == 1
    assert rows["nans"]["nan_mismatch"] == 1 and rows["nans"]["inf_mismatch"] == 1
    for name in ("shape", "gone", "new"):
        assert rows[name]["max_abs_diff"] is None and rows[name]["rmse"] is None
    assert rows["shape"]["shape_a"] == [8, 16] and rows["shape"]["shape_b"] == [16, 8]
    assert rows["as_bf16"]["dtype_a"] == "float32" and rows["as_bf16"]["dtype_b"] == "bfloat16"
    far = np.abs(a["far"].astype(np.float64) - b["far"]) > 0
    assert rows["far"]["not_close"] == int(far.sum())
    summary = doc["summary"]
    assert summary["tensors"] == 8 and summary["same"] is False
    assert [summary[s] for s in STATUSES] == [1, 1, 0, 3, 1, 1, 1]


def test_diff_tolerance_makes_close(tmp):
    path_a, path_b, a, b = status_models(tmp)
    doc, _ = diff_json(path_a, path_b, "--atol", "1e-3", code=1)
    rows = {r["name"]: r for r in doc["tensors"]}
    assert rows["near"]["status"] == "close" and rows["far"]["status"] == "different"
    # numpy's allclose rule, |a-b| <= atol + rtol*|b|, element by element.
    near = np.abs(a["near"].astype(np.float64) - b["near"]) <= 1e-3
    assert near.all()
    doc, _ = diff_json(path_a, path_b, "--atol=0", "--rtol=0.6", code=1)
    rows = {r["name"]: r for r in doc["tensors"]}
    x, y = a["far"].astype(np.float64), b["far"].astype(np.float64)
    want = int((~(np.abs(x - y) <= 0.6 * np.abs(y))).sum())
    assert rows["far"]["not_close"] == want
    assert rows["far"]["status"] == ("close" if want == 0 else "different")


def test_diff_exit_status(tmp):
    rng = np.random.default_rng(9)
    x = rng.standard_normal(100).astype(np.float32)
    a = st.write(tmp / "a.safetensors", {"x": x, "y": x[:10]})
    same = st.write(tmp / "same.safetensors", {"x": x, "y": x[:10]})
    near = st.write(tmp / "near.safetensors", {"x": x + np.float32(1e-6), "y": x[:10]})
    assert run_modelfs("--diff", a, same).returncode == 0
    assert run_modelfs("--diff", a, near).returncode == 1
    assert run_modelfs("--diff", "--atol", "1e-5", a, near).returncode == 0
    missing = run_modelfs("--diff", a, tmp / "missing.safetensors")
    assert missing.returncode == 2 and "missing.safetensors" in missing.stderr
    (tmp / "bad.safetensors").write_bytes(b"\xff" * 64)
    assert run_modelfs("--diff", a, tmp / "bad.safetensors").returncode == 2
    assert run_modelfs("--diff", a).returncode == 1  # usage: one model
    assert run_modelfs("--diff", "--atol", "-1", a, same).returncode == 1
    assert run_modelfs("--diff", "--rename", "x/y/", a, same).returncode == 1
    assert run_modelfs("--stats", "--atol", "1", a).returncode == 1
    assert run_modelfs("--stats", tmp / "bad.safetensors").returncode == 2


def test_diff_rename(tmp):
    x = np.arange(6, dtype=np.float32)
    a = st.write(tmp / "a.safetensors", {"model.layers.0.w": x, "model.layers.1.w": x * 2, "head": x})
    b = st.write(tmp / "b.safetensors", {"blk.0.w": x, "blk.1.w": x * 2, "output": x})
    doc, _ = diff_json(a, b, "--rename", "s/^model\\.layers\\.([0-9]+)/blk.\\1/", "--rename=s|head|output|",
                       code=0)
    assert [(r["name"], r.get("name_a"), r["status"]) for r in doc["tensors"]] == [
        ("blk.0.w", "model.layers.0.w", "identical"), ("blk.1.w", "model.layers.1.w", "identical"),
        ("output", "head", "identical")]
    doc, _ = diff_json(a, b, code=1)
    assert doc["summary"]["only_a"] == 3 and doc["summary"]["only_b"] == 3


def test_diff_torch_against_safetensors(tmp):
    torch.manual_seed(1)
    w = torch.randn(10, 7)
    h = torch.randn(4, 4).to(torch.bfloat16)
    i = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    pt = tmp / "m.pt"
    torch.save({"w": w, "wt": w.t(), "h": h, "i": i}, pt)
    sf = st.write(tmp / "m.safetensors", {
        "w": w.numpy(), "wt": np.ascontiguousarray(w.t().numpy()),
        "h": st.Raw("BF16", [4, 4], h.view(torch.int16).numpy().tobytes()), "i": i.numpy()})
    doc, _ = diff_json(pt, sf, code=0)
    rows = {r["name"]: r["status"] for r in doc["tensors"]}
    # The transposed view is stored in Fortran order: its values are the same.
    assert rows == {"w": "identical", "wt": "equal", "h": "identical", "i": "identical"}
    wt = tmp / "wt.safetensors"
    st.write(wt, {"w": w.numpy(), "wt": w.numpy().T.copy() + np.float32(1), "h": st.Raw(
        "BF16", [4, 4], h.view(torch.int16).numpy().tobytes()), "i": i.numpy()})
    doc, _ = diff_json(pt, wt, code=1)
    row = {r["name"]: r for r in doc["tensors"]}["wt"]
    check_numbers(row, w.t().numpy(), w.numpy().T + np.float32(1))


def test_diff_quantized_gguf_against_float(tmp):
    q = q8_0_tensor("w", 32, 3)
    model = tmp / "q.gguf"
    gw.write(model, [], [q])
    deq = oracle.expected("q8_0", q.data, q.shape)
    exact = st.write(tmp / "deq.safetensors", {"w": deq})
    doc, _ = diff_json(model, exact, code=0)
    assert doc["tensors"][0]["status"] == "equal"
    source = deq.astype(np.float64) + np.random.default_rng(4).uniform(-1e-3, 1e-3, deq.shape)
    src = st.write(tmp / "src.safetensors", {"w": source.astype(np.float32)})
    doc, _ = diff_json(model, src, code=1)
    check_numbers(doc["tensors"][0], deq, source.astype(np.float32))
    doc, _ = diff_json(model, src, "--atol", "2e-3", code=0)
    assert doc["tensors"][0]["status"] == "close"


def test_diff_large_tensors_in_pieces(tmp):
    # Larger than one piece (4 Mi elements): split among the threads and merged.
    n = 5 * (1 << 20) + 3
    rng = np.random.default_rng(8)
    x = rng.standard_normal(n).astype(np.float32)
    y = x.copy()
    y[::1000] += 0.5
    a = st.write(tmp / "a.safetensors", {"x": x})
    b = st.write(tmp / "b.safetensors", {"x": y})
    doc, _ = diff_json(a, b, code=1)
    check_numbers(doc["tensors"][0], x, y)
    check_stats(stats_json(a), {"x": ("float32", x)})


def test_diff_table_fits_80_columns(tmp):
    path_a, path_b, _, _ = status_models(tmp)
    long = "x" * 200
    a = st.write(tmp / "la.safetensors", {long: np.ones(3, np.float32)})
    b = st.write(tmp / "lb.safetensors", {long: np.full(3, 2, np.float32)})
    for pa, pb in ((path_a, path_b), (a, b)):
        result = run_modelfs("--diff", pa, pb)
        assert result.returncode == 1, result.stderr
        lines = result.stdout.splitlines()
        assert all(columns(line) <= 80 for line in lines), lines
        assert lines[0].split() == ["STATUS", "NAME", "MAX_ABS", "RMSE", "NMSE", "COSINE"]
    assert lines[1].split()[0] == "different" and lines[1].split()[2:] == ["1", "1", "0.25", "1.000000"]
    result = run_modelfs("--diff", path_a, path_b)
    lines = result.stdout.splitlines()
    assert all(columns(line) <= 80 for line in lines), lines
    counts = " ".join(line.strip() for line in lines[lines.index("") + 1:])
    assert counts == "8 tensors: 1 identical, 1 equal, 0 close, 3 different, 1 mismatch, 1 only in A, 1 only in B"


def test_bash_completion_offers_both_commands(tmp):
    """What completion offers, modelfs accepts."""
    from test_packaging import complete
    model = st.write(tmp / "m.safetensors", {"x": np.ones(2, np.float32)})
    assert run_modelfs("--stats", model).returncode == 0
    assert run_modelfs("--diff", "--atol", "1e-3", "--rtol", "0", "--rename", "s/a/b/", model, model).returncode == 0
    (tmp / "a.safetensors").write_bytes(b"")
    (tmp / "mnt").mkdir()
    assert complete("modelfs --st", tmp) == ["--stats"]
    assert complete("modelfs --di", tmp) == ["--diff"]
    assert complete("modelfs --stats a.safetensors ", tmp) == []
    assert complete("modelfs --diff a.safetensors ", tmp) == ["a.safetensors", "m.safetensors", "mnt"]
    assert complete("modelfs --diff --atol 1e-3 ", tmp) == ["a.safetensors", "m.safetensors", "mnt"]
    assert complete("modelfs --diff a.safetensors a.safetensors ", tmp) == []


def test_stats_and_diff_of_a_url(tmp):
    """A remote model (nginx of the tests' own) is read through its block
    cache like a local one."""
    from remote_servers import Nginx
    www = tmp / "www"
    www.mkdir()
    x = np.random.default_rng(11).standard_normal((64, 64)).astype(np.float32)
    st.write(www / "a.safetensors", {"x": x, "y": x[:2] * 2})
    cut = ((x[:2] * 2).view(np.uint32) & 0xFFFF0000).view(np.float32)
    local = st.write(tmp / "b.safetensors", {"x": x, "y": st.Raw("BF16", [2, 64], bf16_bytes(cut))})
    server = Nginx(tmp / "nginx", www)
    try:
        url = f"{server.url}/a.safetensors"
        cache = f"cache_dir={tmp / 'cache'}"
        result = run_modelfs("--stats", "--json", "-o", cache, url)
        assert result.returncode == 0, result.stderr
        check_stats(json.loads(result.stdout), {"x": ("float32", x), "y": ("float32", x[:2] * 2)})
        result = run_modelfs("--diff", "--json", "-o", cache, url, local)
        rows = {r["name"]: r for r in json.loads(result.stdout)["tensors"]}
        assert rows["x"]["status"] == "identical"
        check_numbers(rows["y"], x[:2] * 2, cut)
    finally:
        server.stop()


def test_diff_and_stats_of_onnx_and_numpy_against_safetensors(tmp):
    """Formats the other tests do not write: an ONNX model's initializers and
    NumPy's .npz (deflated, so values come through the inflating view) and
    .npy (Fortran order), each against safetensors of the same arrays."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.integers(-50, 50, 7).astype(np.int64)
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 5])],
                              initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx_path = tmp / "m.onnx"
    onnx.save(helper.make_model(graph), str(onnx_path))
    sf = st.write(tmp / "m.safetensors", {"w": w, "b": b})
    doc, _ = diff_json(onnx_path, sf, code=0)
    assert {r["name"]: r["status"] for r in doc["tensors"]} == {"w": "identical", "b": "identical"}
    check_stats(stats_json(onnx_path), {"w": ("float32", w), "b": ("int64", b)})

    npz = tmp / "m.npz"
    np.savez_compressed(npz, w=w, b=b)
    doc, _ = diff_json(npz, sf, code=0)
    assert {r["name"]: r["status"] for r in doc["tensors"]} == {"w": "identical", "b": "identical"}
    changed = w.copy()
    changed[2, 3] += np.float32(0.5)
    np.savez_compressed(npz, w=changed, b=b)
    doc, _ = diff_json(npz, sf, code=1)
    row = {r["name"]: r for r in doc["tensors"]}["w"]
    assert row["status"] == "different"
    check_numbers(row, changed, w)

    npy = tmp / "w.npy"
    np.save(npy, np.asfortranarray(w))
    doc, _ = diff_json(npy, st.write(tmp / "w.safetensors", {"w": w}), code=0)
    assert [(r["name"], r["status"]) for r in doc["tensors"]] == [("w", "equal")]
    check_stats(stats_json(npy), {"w": ("float32", w)})
