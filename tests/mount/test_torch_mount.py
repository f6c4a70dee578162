# SPDX-License-Identifier: Apache-2.0
"""PyTorch files through a real mount: torch.save (ZIP and legacy) and
TorchScript, written by torch at test time.

Oracle: torch itself (torch.load, module.state_dict()); every tensor is read
back through the mount twice: the raw file walked by its sidecar's strides
(numpy as_strided), and its .npy view. Shared fixtures are checked against
expected.json. No pickle is ever unpickled by the test except through torch
on files the test wrote itself."""
import collections
import contextlib
import hashlib
import io
import json
import os
import pathlib
import pickle
import pickletools
import struct
import subprocess
import sys
import unittest.mock
import zipfile

import numpy as np
import pytest
import torch

import numeric_oracle
from conftest import index_paths, metadata, mounted, run_modelfs, sidecar

NUMPY_OF = {
    torch.bool: np.bool_, torch.uint8: np.uint8, torch.int8: np.int8, torch.int16: np.int16,
    torch.int32: np.int32, torch.int64: np.int64, torch.float16: np.float16,
    torch.float32: np.float32, torch.float64: np.float64, torch.complex64: np.complex64,
    torch.complex128: np.complex128,
}
DTYPE_NAME = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16",
    torch.int32: "int32", torch.int64: "int64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
    torch.complex64: "complex64", torch.complex128: "complex128",
    torch.qint8: "int8", torch.quint8: "uint8", torch.qint32: "int32",
}


def raw_values(t):
    """A tensor's elements as numpy, bit for bit (bfloat16 as its int16 bits,
    quantized tensors as their integer representation)."""
    t = t.detach()
    if t.is_quantized:
        t = t.int_repr()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy()
    return t.contiguous().numpy()


def walk_strided(raw, meta):
    """The tensor as the sidecar says to read its raw bytes: shape and strides
    in elements, starting at the first byte."""
    shape = meta["shape"]
    numel = int(np.prod(shape)) if shape else 1
    size = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
            "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "complex64": 8,
            "complex128": 16}[meta["dtype"]]
    flat = np.frombuffer(raw, dtype=np.dtype(f"V{size}"))
    if numel == 0:
        return np.empty(shape, dtype=np.dtype(f"V{size}"))
    walked = np.lib.stride_tricks.as_strided(
        flat, shape=shape, strides=[s * size for s in meta["strides"]], writeable=False)
    return np.ascontiguousarray(walked)


def check_tensor(path, name, t, kind=None):
    """Raw file (walked by strides), sidecar and .npy of one tensor against torch."""
    meta = sidecar(path)
    expected = raw_values(t)
    assert meta["name"] == name
    assert meta["dtype"] == DTYPE_NAME[t.dtype], name
    assert meta["shape"] == list(t.shape), name
    assert meta["strides"] == list(t.stride()), name
    raw = path.read_bytes()
    assert meta["nbytes"] == len(raw)
    walked = walk_strided(raw, meta)
    assert walked.tobytes() == expected.tobytes(), f"{name}: bytes walked by strides differ"
    npy = pathlib.Path(str(path) + ".npy")
    if t.is_quantized or t.dtype == torch.bfloat16:
        # The values, as torch converts them: dequantize() and .float().
        want = t.detach().dequantize() if t.is_quantized else t.detach().float()
        numeric_oracle.assert_same(np.load(npy, mmap_mode="r"), want.contiguous().numpy(), name)
        assert meta["npy"]["dtype"] == "float32", name
    elif t.dtype in NUMPY_OF:
        assert npy.exists(), f"{name}: no .npy"
        loaded = np.load(npy)
        assert loaded.flags.c_contiguous or loaded.ndim <= 1 or loaded.flags.f_contiguous
        assert loaded.shape == tuple(t.shape)
        assert np.ascontiguousarray(loaded).tobytes() == expected.tobytes(), f"{name}: .npy differs"
    else:
        assert not npy.exists()
    if kind is not None:
        assert meta.get("kind") == kind, name
    if not t.is_quantized and t.requires_grad:
        assert meta.get("requires_grad") is True, name
    return meta


def flatten(obj, prefix=None):
    """name -> tensor, named as the design says (keys, attributes, indices joined with '.').
    The top of the object has no name (None): a lone tensor there is `tensor`,
    while a tensor under an empty key is named ""."""
    out = {}
    join = (lambda k: str(k) if prefix is None else f"{prefix}.{k}")
    if isinstance(obj, WriterSubclass):
        out.update(flatten(vars(obj), prefix))
    elif isinstance(obj, torch.Tensor):
        out["tensor" if prefix is None else prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, join(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(flatten(v, join(i)))
    return out


def check_all(mnt, tensors, kinds=None):
    paths, _ = index_paths(mnt)
    assert set(paths) == set(tensors), (sorted(paths), sorted(tensors))
    for name, t in tensors.items():
        check_tensor(paths[name], name, t, (kinds or {}).get(name))
    return paths


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.bn = torch.nn.BatchNorm1d(32)
        self.fc2 = torch.nn.Linear(32, 8)
        self.register_buffer("steps", torch.tensor(7))

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def test_state_dict(tmp):
    torch.manual_seed(0)
    sd = MLP().state_dict()
    torch.save(sd, tmp / "model.pt")
    with mounted(tmp / "model.pt") as mnt:
        check_all(mnt, flatten(sd))
        assert (mnt / "fc1" / "weight").is_file()
        assert metadata(mnt)["format"] == "pytorch"
        assert sidecar(mnt / "fc1" / "weight")["source"]["file"] == "model.pt"


def test_nested_checkpoint_with_optimizer_and_plain_values(tmp):
    torch.manual_seed(1)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 5,
            "step": 1234, "config": {"lr": 0.001, "layers": [16, 32, 8], "name": "mlp"},
            "history": [torch.randn(2), torch.randn(3)], "best": None}
    torch.save(ckpt, tmp / "ckpt.pth")
    loaded = torch.load(tmp / "ckpt.pth")
    with mounted(tmp / "ckpt.pth") as mnt:
        check_all(mnt, flatten(loaded))
        values = metadata(mnt)["values"]
        assert values["epoch"] == 5 and values["step"] == 1234
        assert values["config"] == {"lr": 0.001, "layers": [16, 32, 8], "name": "mlp"}
        assert values["optimizer.param_groups"][0]["lr"] == 0.001
        assert (mnt / "optimizer" / "state" / "0" / "exp_avg").is_file()


def test_lone_tensor_and_parameters(tmp):
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    torch.save(t, tmp / "lone.pt")
    with mounted(tmp / "lone.pt") as mnt:
        check_all(mnt, {"tensor": t})
    p = torch.nn.Parameter(torch.randn(3, 2))
    torch.save({"p": p, "frozen": torch.nn.Parameter(torch.ones(2), requires_grad=False)},
               tmp / "params.pt")
    with mounted(tmp / "params.pt") as mnt:
        meta = check_tensor(mnt / "p", "p", p, kind="parameter")
        assert meta["requires_grad"] is True
        assert sidecar(mnt / "frozen")["requires_grad"] is False
        assert sidecar(mnt / "frozen")["kind"] == "parameter"


@pytest.mark.parametrize("zipfile_format", [True, False], ids=["zip", "legacy"])
def test_empty_keys_are_named_empty_not_tensor(tmp, zipfile_format):
    """An empty key is the name "" (path %), at the top as below it; only a
    lone tensor is `tensor`."""
    torch.manual_seed(3)
    obj = {"": torch.randn(2, 3), "tensor": torch.randn(4), "a": {"": torch.arange(5)},
           "b": {"": {"": torch.ones(2, dtype=torch.float64)}}}
    path = tmp / "empty_keys.pt"
    torch.save(obj, path, _use_new_zipfile_serialization=zipfile_format)
    loaded = torch.load(path)
    expected = flatten(loaded)
    assert set(expected) == {"", "tensor", "a.", "b.."}
    with mounted(path) as mnt:
        paths = check_all(mnt, expected)
        assert paths[""] == mnt / "%"
        assert paths["tensor"] == mnt / "tensor"
        assert paths["a."] == mnt / "a" / "%"
        assert paths["b.."] == mnt / "b" / "%" / "%"


@pytest.mark.parametrize("zipfile_format", [True, False], ids=["zip", "legacy"])
def test_whole_module_pickled_by_class(tmp, zipfile_format):
    torch.manual_seed(5)
    model = MLP()
    torch.save(model, tmp / "whole.pt", _use_new_zipfile_serialization=zipfile_format)
    sd = model.state_dict()
    kinds = {n: "parameter" for n, _ in model.named_parameters()}
    kinds.update({n: "buffer" for n, _ in model.named_buffers()})
    listing = run_modelfs("--list", tmp / "whole.pt")
    assert listing.returncode == 0 and "test_torch_mount.MLP" in listing.stderr
    with mounted(tmp / "whole.pt") as mnt:
        check_all(mnt, dict(sd), kinds)
        assert metadata(mnt)["skipped_objects"]


def every_dtype():
    g = torch.Generator().manual_seed(3)
    base = torch.randn(3, 5, generator=g) * 50
    out = {DTYPE_NAME[d]: base.to(d) for d in
           [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
            torch.float16, torch.bfloat16, torch.float32, torch.float64]}
    out["complex64"] = torch.complex(base, -base).to(torch.complex64)
    out["complex128"] = torch.complex(base.double(), base.double() * 2)
    out["empty"] = torch.zeros(0, 4)
    out["scalar"] = torch.tensor(2.5, dtype=torch.float64)
    return out


@pytest.mark.parametrize("zipfile_format", [True, False], ids=["zip", "legacy"])
def test_every_dtype(tmp, zipfile_format):
    tensors = every_dtype()
    torch.save(tensors, tmp / "dtypes.pt", _use_new_zipfile_serialization=zipfile_format)
    with mounted(tmp / "dtypes.pt") as mnt:
        check_all(mnt, tensors)
        assert np.array_equal(np.load(mnt / "bfloat16.npy"), tensors["bfloat16"].float().numpy())


def views():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    row = torch.arange(6, dtype=torch.int64).reshape(1, 6)
    cube = torch.arange(60, dtype=torch.float64).reshape(3, 4, 5)
    return {
        "base": base,
        "transposed": base.t(),
        "rows": base[1:3],
        "col": base[:, 2],
        "stepped": base[::2, 1::2],
        "expanded": row.expand(4, 6),
        "permuted": cube.permute(2, 0, 1),
        "narrow": cube[1:, 2:, 1:4],
        "fortran": cube.permute(2, 1, 0).contiguous().permute(2, 1, 0),
    }


@pytest.mark.parametrize("zipfile_format", [True, False], ids=["zip", "legacy"])
def test_views_offsets_strides_and_expanded(tmp, zipfile_format):
    tensors = views()
    torch.save(tensors, tmp / "views.pt", _use_new_zipfile_serialization=zipfile_format)
    loaded = torch.load(tmp / "views.pt")
    with mounted(tmp / "views.pt") as mnt:
        paths = check_all(mnt, loaded)
        # A view's raw file starts at its first element: same bytes as base from there.
        base = (mnt / "base").read_bytes()
        rows = sidecar(paths["rows"])
        assert rows["storage"]["offset"] == 6
        assert (mnt / "rows").read_bytes() == base[6 * 4: 18 * 4]
        assert sidecar(paths["transposed"])["source"]["offset"] == sidecar(paths["base"])["source"]["offset"]
        # The expanded view covers one row of its storage only.
        assert sidecar(paths["expanded"])["strides"] == [0, 1]
        assert len((mnt / "expanded").read_bytes()) == 6 * 8
        # F-ordered .npy is served as is; the others are gathered copies in C order.
        assert np.load(mnt / "fortran.npy").flags.f_contiguous


def test_tied_weights_share_bytes(tmp):
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight

    sd = Tied().state_dict()
    torch.save(sd, tmp / "tied.pt")
    with mounted(tmp / "tied.pt") as mnt:
        check_all(mnt, flatten(sd))
        a, b = sidecar(mnt / "embed" / "weight"), sidecar(mnt / "head" / "weight")
        assert a["source"] == b["source"]
        assert a["storage"] == b["storage"]


def test_deflated_archive_many_members(tmp):
    """A torch.save whose members another tool compressed (Python's zipfile,
    deflate): every member is inflated once, in linear time, and the bytes
    match what torch itself loads from the same file."""
    torch.manual_seed(0)
    sd = {f"layers.{i}.weight": torch.randn(17, 3) * i for i in range(400)}
    torch.save(sd, tmp / "stored.pt")
    with zipfile.ZipFile(tmp / "stored.pt") as zin, \
            zipfile.ZipFile(tmp / "deflated.pt", "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    with zipfile.ZipFile(tmp / "deflated.pt") as z:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
    loaded = torch.load(tmp / "deflated.pt")
    with mounted(tmp / "deflated.pt") as mnt:
        check_all(mnt, flatten(loaded))


def test_quantized_tensors(tmp):
    x = torch.randn(4, 6)
    per_tensor = torch.quantize_per_tensor(x, 0.05, 3, torch.qint8)
    per_channel = torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64),
                                             torch.tensor([0, 1, 2, 3]), 0, torch.quint8)
    torch.save({"pt": per_tensor, "pc": per_channel, "plain": x}, tmp / "q.pt")
    with mounted(tmp / "q.pt") as mnt:
        paths, _ = index_paths(mnt)
        meta = check_tensor(paths["pt"], "pt", per_tensor)
        assert meta["quantization"] == {"qscheme": "per_tensor_affine", "scale": 0.05, "zero_point": 3}
        assert meta["torch_dtype"] == "qint8"
        meta = check_tensor(paths["pc"], "pc", per_channel)
        assert meta["quantization"]["axis"] == 0
        scales = paths[meta["quantization"]["scales"]]
        assert np.load(str(scales) + ".npy").tolist() == [0.1, 0.2, 0.3, 0.4]
        check_tensor(paths["plain"], "plain", x)


class Scripted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])
        self.register_buffer("scale", torch.full((4,), 2.0))

    def forward(self, x):
        y = self.norm(self.fc(x)) * self.scale
        for block in self.blocks:
            y = block(y)
        return y + torch.tensor([1.0, 2.0, 3.0, 4.0])


@pytest.mark.parametrize("how", ["script", "trace"])
def test_torchscript_modules(tmp, how):
    torch.manual_seed(4)
    module = Scripted().eval()
    compiled = torch.jit.script(module) if how == "script" else torch.jit.trace(module, torch.randn(2, 8))
    compiled.save(str(tmp / "m.pt"))
    reference = torch.jit.load(str(tmp / "m.pt"))
    sd = reference.state_dict()
    kinds = {n: "parameter" for n, _ in reference.named_parameters()}
    kinds.update({n: "buffer" for n, _ in reference.named_buffers()})
    with mounted(tmp / "m.pt") as mnt:
        paths, _ = index_paths(mnt)
        assert metadata(mnt)["format"] == "torchscript"
        for name, t in sd.items():
            check_tensor(paths[name], name, t, kind=kinds[name])
        constants = [n for n in paths if n.startswith("constants.")]
        for name in constants:
            assert sidecar(paths[name])["kind"] == "constant"
        assert set(paths) - set(sd) == set(constants)


def test_shared_generated_fixtures_match_expected(shared):
    expected = json.loads((shared / "fixtures" / "generated" / "expected.json").read_text())
    for rel, entry in expected.items():
        if not rel.startswith("pt/"):
            continue
        with mounted(shared / "fixtures" / "generated" / rel) as mnt:
            paths, _ = index_paths(mnt)
            assert metadata(mnt)["format"] == entry["format"], rel
            if not entry.get("subset"):
                assert set(paths) == set(entry["tensors"]), rel
            for name, want in entry["tensors"].items():
                meta = sidecar(paths[name])
                assert meta["dtype"] == want["dtype"] and meta["shape"] == want["shape"], (rel, name)
                c_order = walk_strided(paths[name].read_bytes(), meta).tobytes()
                assert hashlib.sha256(c_order).hexdigest() == want["sha256"], (rel, name)


class WriterSubclass(torch.Tensor):
    """Stands in for a tensor subclass the writer defined in its own
    __main__ (torchao's quantized weights): torch rebuilds it as a wrapper
    without storage and sets the saved state, whose tensors are the data."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"{func} on a stand-in for a writer's class")


def writer_classes(path):
    """The names a zip torch.save's pickle imports from its writer's
    __main__, found by pickletools without unpickling."""
    try:
        z = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        return []
    names = []
    for member in (m for m in z.namelist() if m.endswith("/data.pkl")):
        for op, arg, _ in pickletools.genops(z.read(member)):
            if op.name == "GLOBAL" and arg.startswith("__main__ "):
                names.append(arg.split(" ", 1)[1])
    return names


def load_with_stand_ins(path):
    """torch.load with each writer class a WriterSubclass, set on __main__
    for the load only (Debian's torch.load ignores pickle_module)."""
    with contextlib.ExitStack() as stack:
        for name in writer_classes(path):
            stack.enter_context(unittest.mock.patch.object(sys.modules["__main__"], name, WriterSubclass,
                                                           create=True))
        return torch.load(str(path), map_location="cpu")


def oracle_for(path):
    """What torch 1.13 loads from a real file (a writer's own tensor
    subclasses by a stand-in, their tensors named by attribute), or None
    when it cannot."""
    try:
        return torch.jit.load(str(path)).state_dict()
    except Exception:
        pass
    try:
        return flatten(load_with_stand_ins(path))
    except Exception:
        return None


def test_real_pytorch_files(shared):
    folder = shared / "fixtures" / "real" / "pt"
    files = sorted(folder.iterdir())
    assert files
    for path in files:
        with mounted(path) as mnt:
            paths, _ = index_paths(mnt)
            assert paths, path.name
            for name, p in paths.items():
                meta = sidecar(p)
                walk_strided(p.read_bytes(), meta)  # every view lies inside its bytes
            oracle = oracle_for(path)
            if oracle is None:
                continue  # e.g. a tensor subclass defined in the writer's __main__
            for name, t in oracle.items():
                if name in paths:
                    check_tensor(paths[name], name, t)
            assert set(oracle) <= set(paths), (path.name, sorted(set(oracle) - set(paths)))


def hand_built_pickle(marker):
    """data.pkl by opcode: {'w': <tensor of storage 0>, 'evil': os.system(...),
    'eval': builtins.eval(...), 'popen': subprocess.Popen([...])}."""
    def u(s):
        b = s.encode()
        return b"X" + struct.pack("<I", len(b)) + b
    tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n((" + u("storage") + b"ctorch\nFloatStorage\n"
              + u("0") + u("cpu") + b"K\x04tQK\x00K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR")
    return (b"\x80\x02}(" + u("w") + tensor
            + u("evil") + b"cos\nsystem\n" + u(f"touch {marker}") + b"\x85R"
            + u("eval") + b"cbuiltins\neval\n" + u(f"open({str(marker)!r}, 'w')") + b"\x85R"
            + u("popen") + b"csubprocess\nPopen\n](" + u("touch") + u(str(marker)) + b"e\x85R"
            + u("build") + b"cos\nsystem\n)\x81}" + u("x") + u(f"touch {marker}") + b"sb"
            + b"u.")


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickles_run_nothing(tmp):
    marker = tmp / "pwned"
    w = torch.arange(4, dtype=torch.float32)
    torch.save({"w": w}, tmp / "good.pt")
    # The same archive with data.pkl replaced by a hand-built hostile pickle.
    with zipfile.ZipFile(tmp / "good.pt") as good, zipfile.ZipFile(tmp / "evil.pt", "w") as evil:
        for info in good.infolist():
            data = good.read(info)
            if info.filename.endswith("/data.pkl"):
                data = hand_built_pickle(marker)
            evil.writestr(info.filename, data)
    # And one torch.save wrote itself around objects whose __reduce__ names os.system.
    torch.save({"w": w, "evil": Evil(marker), "more": [Evil(marker)]}, tmp / "evil2.pt")
    for name in ["evil.pt", "evil2.pt"]:
        listing = run_modelfs("--list", tmp / name)
        assert listing.returncode == 0, listing.stderr
        assert "system" in listing.stderr and "never called" in listing.stderr
        with mounted(tmp / name) as mnt:
            check_tensor(mnt / "w", "w", w)
            assert "posix.system" in json.dumps(metadata(mnt)) or "os.system" in json.dumps(metadata(mnt))
        assert not marker.exists(), f"{name}: a pickle ran code"


def test_big_endian_archive_is_byte_swapped(tmp):
    tensors = {"f": torch.randn(3, 4), "i": torch.arange(6, dtype=torch.int64),
               "c": torch.complex(torch.randn(3), torch.randn(3)), "b": torch.tensor([True, False])}
    torch.save(tensors, tmp / "le.pt")
    loaded = torch.load(tmp / "le.pt")
    storages = {}
    with zipfile.ZipFile(tmp / "le.pt") as z:
        names = z.namelist()
        prefix = names[0].split("/")[0]
        data_pkl = z.read(f"{prefix}/data.pkl")
        # Which storage holds which tensor, from the keys torch wrote in order.
        for key, t in zip(["0", "1", "2", "3"], tensors.values()):
            item = t.element_size() if not t.is_complex() else t.element_size() // 2
            raw = np.frombuffer(z.read(f"{prefix}/data/{key}"), dtype=np.uint8)
            storages[key] = raw.reshape(-1, item)[:, ::-1].tobytes()
        with zipfile.ZipFile(tmp / "be.pt", "w") as out:
            for name in names:
                key = name.rsplit("/", 1)[-1]
                out.writestr(name, storages[key] if "/data/" in name else z.read(name))
            out.writestr(f"{prefix}/byteorder", "big")
    assert data_pkl
    with mounted(tmp / "be.pt") as mnt:
        check_all(mnt, loaded)
        assert sidecar(mnt / "f")["byte_order_in_file"] == "big"


def write_pre_14_torchscript(path):
    """A TorchScript archive as torch 1.0-1.3 laid it out: the module
    described in model.json, its tensors' bytes in tensors/, no data.pkl."""
    weight = np.arange(6, dtype="<f4")
    model_json = {
        "protoVersion": "6", "producerName": "pytorch", "producerVersion": "1.1",
        "mainModule": {"torchscriptArena": {"key": "code/archive.py"}, "name": "archive",
                       "optimize": True,
                       "parameters": [{"isBuffer": False, "tensorId": "0", "name": "weight"}]},
        "tensors": [{"dims": ["2", "3"], "offset": "0", "strides": ["3", "1"],
                     "requiresGrad": True, "dataType": "FLOAT",
                     "data": {"key": "tensors/0"}, "device": "cpu"}]}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/version", "1\n")
        z.writestr("archive/model.json", json.dumps(model_json))
        z.writestr("archive/tensors/0", weight.tobytes())
        z.writestr("archive/code/archive.py", "op_version_set = 0\ndef forward(self, x):\n  return x\n")


def test_torchscript_before_14_refused_as_such(tmp):
    path = tmp / "old_script.pt"
    write_pre_14_torchscript(path)
    # The oracle: torch itself (1.13) does not load that layout either.
    with pytest.raises(RuntimeError, match="Legacy model format"):
        torch.jit.load(str(path))
    mnt = tmp / "mnt"
    mnt.mkdir()
    for args in (["--list", path], [path, mnt]):
        result = run_modelfs(*args)
        assert result.returncode == 2, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert f"{path}: torchscript:" in lines[0]
        assert "a TorchScript archive from before torch 1.4" in lines[0]
        assert "archive/model.json and tensors/" in lines[0]
    assert not os.listdir(mnt)


BAD = {
    "truncated_zip": lambda good, legacy: good[: len(good) // 2],
    "truncated_legacy": lambda good, legacy: legacy[:-10],
    "legacy_bad_protocol": lambda good, legacy: legacy.replace(b"M\xe9\x03", b"M\xea\x03", 1),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_broken_files_exit_2(tmp, name):
    w = {"w": torch.arange(10, dtype=torch.float32)}
    torch.save(w, tmp / "good.pt")
    torch.save(w, tmp / "legacy.pt", _use_new_zipfile_serialization=False)
    model = tmp / name
    model.write_bytes(BAD[name]((tmp / "good.pt").read_bytes(), (tmp / "legacy.pt").read_bytes()))
    result = run_modelfs("--list", model)
    assert result.returncode == 2, result
    assert str(model) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_sharded_bin_checkpoint_folder_and_index(tmp):
    torch.manual_seed(6)
    sd = MLP().state_dict()
    names = list(sd)
    first, second = names[: len(names) // 2], names[len(names) // 2:]
    folder = tmp / "sharded"
    folder.mkdir()
    torch.save({n: sd[n] for n in first}, folder / "pytorch_model-00001-of-00002.bin")
    torch.save({n: sd[n] for n in second}, folder / "pytorch_model-00002-of-00002.bin",
               _use_new_zipfile_serialization=False)
    weight_map = {n: "pytorch_model-00001-of-00002.bin" for n in first}
    weight_map.update({n: "pytorch_model-00002-of-00002.bin" for n in second})
    (folder / "pytorch_model.bin.index.json").write_text(
        json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    for model in [folder, folder / "pytorch_model.bin.index.json"]:
        with mounted(model) as mnt:
            check_all(mnt, dict(sd))
            meta = metadata(mnt)
            assert meta["index"] == {"total_size": 1}
            assert sidecar(index_paths(mnt)[0][second[0]])["source"]["file"] == "pytorch_model-00002-of-00002.bin"
    del weight_map[first[0]]
    weight_map["missing.weight"] = "pytorch_model-00001-of-00002.bin"
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    result = run_modelfs("--list", folder)
    assert result.returncode == 2 and "missing.weight" in result.stderr


def test_quantized_tensor_of_an_unknown_scheme_is_its_stored_integers(tmp):
    x = torch.randn(4, 6)
    q = torch.quantize_per_tensor(x, 0.05, 3, torch.qint8)
    torch.save({"q": q, "plain": x}, tmp / "q.pt")
    # The same archive with the qscheme global renamed to one torch lacks
    # (same length: the pickle stays well formed).
    with zipfile.ZipFile(tmp / "q.pt") as good, zipfile.ZipFile(tmp / "odd.pt", "w") as odd:
        for info in good.infolist():
            data = good.read(info)
            if info.filename.endswith("/data.pkl"):
                assert data.count(b"\nper_tensor_affine\n") == 1
                data = data.replace(b"\nper_tensor_affine\n", b"\nper_tensor_affinX\n")
            odd.writestr(info, data)
    with mounted(tmp / "odd.pt") as mnt:
        paths, _ = index_paths(mnt)
        assert (paths["q"]).read_bytes() == q.int_repr().numpy().tobytes()
        meta = sidecar(paths["q"])
        assert meta["dtype"] == "int8" and meta["torch_dtype"] == "qint8"
        assert "quantization" not in meta
        npy = np.load(str(paths["q"]) + ".npy")
        assert npy.dtype == np.int8 and npy.tolist() == q.int_repr().tolist()
        check_tensor(paths["plain"], "plain", x)
