# SPDX-License-Identifier: Apache-2.0
"""Generates the benchmark models of issue 7 into a work folder, reusing
what is already there when its manifest says it is complete.

  big.safetensors        64 float32 tensors of 16 MiB (1 GiB)
  small.safetensors      100 000 float32 tensors of 16 elements
  model.pt               the same 64 tensors, torch.save's ZIP format (1 GiB)
  model.onnx + .data     64 initializers whose bytes are in an external file (1 GiB)

Run under Debian's /usr/bin/python3 (numpy, torch, onnx)."""
import json
import pathlib
import struct
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "mount"))
import safetensors_writer  # noqa: E402  (the tests' independent writer)

VERSION = 1  # bump when what is generated changes
BIG_TENSORS = 64
BIG_SHAPE = (2048, 2048)  # float32: 16 MiB each, 1 GiB in all
SMALL_TENSORS = 100_000
SMALL_SHAPE = (16,)


def big_arrays():
    """The 64 large tensors, named like a transformer's, made one at a time."""
    rng = np.random.default_rng(7)
    for i in range(BIG_TENSORS):
        # Real float values (no denormals or NaNs from random bits).
        yield f"model.layers.{i // 4}.mlp.w{i % 4}.weight", rng.standard_normal(BIG_SHAPE, dtype=np.float32)


def write_big_safetensors(path):
    # Streamed: the header first, then each tensor, so 1 GiB is never held twice.
    header, offset = {}, 0
    nbytes = int(np.prod(BIG_SHAPE)) * 4
    for i in range(BIG_TENSORS):
        name = f"model.layers.{i // 4}.mlp.w{i % 4}.weight"
        header[name] = {"dtype": "F32", "shape": list(BIG_SHAPE), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, array in big_arrays():
            f.write(array.tobytes())


def write_small_safetensors(path):
    # 1000 layers x 100 leaves: model/layers/L/pK/{weight,weight.json,weight.npy}
    rng = np.random.default_rng(8)
    values = rng.standard_normal((SMALL_TENSORS, *SMALL_SHAPE), dtype=np.float32)
    tensors = {f"model.layers.{i // 100}.p{i % 100}.weight": values[i] for i in range(SMALL_TENSORS)}
    safetensors_writer.write(path, tensors)


def write_torch(path):
    import torch
    state = {name: torch.from_numpy(array) for name, array in big_arrays()}
    torch.save(state, path)  # the default ZIP container


def write_onnx(path):
    import onnx
    from onnx import TensorProto, helper
    data_name = path.name + ".data"
    initializers, nodes, outputs = [], [], []
    offset = 0
    with open(path.parent / data_name, "wb") as data:
        for name, array in big_arrays():
            raw = array.tobytes()
            pad = (-offset) % 4096  # aligned, as onnx's own converter does for large tensors
            data.write(b"\0" * pad)
            offset += pad
            data.write(raw)
            tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(array.shape))
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(len(raw)))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            offset += len(raw)
            initializers.append(tensor)
            out = name + ".out"
            nodes.append(helper.make_node("Identity", [name], [out]))
            outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, list(array.shape)))
    graph = helper.make_graph(nodes, "bench", [], outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    onnx.checker.check_model(str(path))


# name -> (files it makes, writer)
MODELS = {
    "big.safetensors": (["big.safetensors"], write_big_safetensors),
    "small.safetensors": (["small.safetensors"], write_small_safetensors),
    "model.pt": (["model.pt"], write_torch),
    "model.onnx": (["model.onnx", "model.onnx.data"], write_onnx),
}


def main(workdir):
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    manifest_path = workdir / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    if manifest.get("version") != VERSION:
        manifest = {"version": VERSION, "files": {}}
    for model, (files, writer) in MODELS.items():
        known = manifest["files"]
        if all(f in known and (workdir / f).is_file() and (workdir / f).stat().st_size == known[f]
               for f in files):
            continue
        print(f"bench: generating {model}", file=sys.stderr, flush=True)
        for f in files:
            known.pop(f, None)
        writer(workdir / files[0])
        for f in files:
            known[f] = (workdir / f).stat().st_size
        manifest_path.write_text(json.dumps(manifest, indent=1))  # after each: resumable
    manifest_path.write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/var/tmp/modelfs-bench")
