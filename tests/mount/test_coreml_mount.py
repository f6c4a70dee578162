# SPDX-License-Identifier: Apache-2.0
"""Core ML through a real mount: .mlmodel neural networks (weights shaped by
their layers, served in place) and ML programs (.mlpackage folders or their
model.mlmodel: immediate consts and weight.bin blobs), the realworld4 files
exactly as their MANIFEST says, the test's own writer for float16, int8 and
raw weights and for blobs, refusals, --export, a URL, and ONNX unaffected.

Oracle: coreml_files.py, a protobuf wire reader written here from the Core
ML specification's field numbers (coremltools is not installed), and
numpy; never modelfs's own output."""
import json
import shutil

import numpy as np
import pytest

import coreml_files as cm
import safetensors_writer
from conftest import cat, index_paths, metadata, mounted, refused, run_modelfs, sidecar

REAL = "fixtures/realworld4/files/coreml"
HOSTILE = "fixtures/realworld4/files/hostile"

# MANIFEST.md: tensor count, dtypes, first names, string consts.
NN_FILES = {
    "coremltools_TinyDrawingEmbedding.mlmodel": (8, {"float32"}, ["conv2d_4.weights", "conv2d_4.bias",
                                                                 "conv2d_5.weights"]),
    "umerzia_MNISTClassifier.mlmodel": (6, {"float32"}, ["convolution2d_1.weights", "convolution2d_1.bias",
                                                         "dense_1.weights"]),
    "qyz777_pb-to-mlmodel.mlmodel": (6, {"float32"}, ["MatMul.weights", "MatMul.bias", "MatMul_1.weights"]),
    "s4tf_keras_model_personalization.mlmodel": (2, {"float32"}, ["dense_1.weights", "dense_1.bias"]),
    "s4tf_model.mlmodel": (2, {"float32"}, ["Identity.weights", "Identity.bias"]),
}
PACKAGES = {
    "autonerf_superpoint.mlpackage": (89, {"bool", "float16", "int32"}, ["var_17", "var_20", "var_22"], 18,
                                      "com.apple.CoreML"),
    "coreml_vs_c_model.mlpackage": (3, {"bool", "int32"}, ["matmul_transpose_x_0", "matmul_transpose_y_0",
                                                           "softmax_axis_0"], 0, "com.ishank.Test"),
    "drawmnist_MNIST.mlpackage": (7, {"float16", "float32", "int32"}, ["Input__biased___y_0", "var_10",
                                                                        "model_Dense1_weight_to_fp16"], 2,
                                  "com.apple.CoreML"),
}
NPY_DTYPES = {"<f4": "float32", "<f2": "float16", "u1": "uint8", "i1": "int8", "|b1": "bool", "<i4": "int32",
              "<f8": "float64", "<i8": "int64"}


def check_tensors(mnt, expected, model_name=None):
    """Every tensor of `expected` ({name: (dtype, shape, bytes[, offset])})
    read through the mount with cat and numpy, and nothing else."""
    paths, index = index_paths(mnt)
    assert set(paths) == set(expected)
    for name, (dtype, shape, data, *at) in expected.items():
        assert cat(paths[name]) == bytes(data), name
        side = sidecar(paths[name])
        assert side["dtype"] == NPY_DTYPES[dtype] and side["shape"] == shape, name
        if at and model_name:
            assert side["source"] == {"file": model_name, "offset": at[0]}, name
        array = np.load(str(paths[name]) + ".npy")
        want = np.frombuffer(bytes(data), dtype=np.dtype(dtype)).reshape(shape)
        assert array.shape == tuple(shape) and np.array_equal(array, want), name
    return paths, index


@pytest.mark.parametrize("file_name", sorted(NN_FILES))
def test_real_neural_networks(shared, file_name):
    model = shared / REAL / file_name
    if not model.exists():
        pytest.skip(f"{model} not found")
    count, dtypes, first = NN_FILES[file_name]
    expected = cm.read_nn(model.read_bytes())
    assert len(expected) == count
    with mounted(model) as mnt:
        _, index = check_tensors(mnt, expected, model.name)
        assert [t["name"] for t in index["tensors"]][:len(first)] == first
        assert {t["dtype"] for t in index["tensors"]} == dtypes
        meta = metadata(mnt)
        assert meta["model_type"] in ("neuralNetwork", "neuralNetworkClassifier")
        assert meta["inputs"] and meta["outputs"]
        # Pooling, activations, flatten, softmax hold no weights: nothing left unread.
        assert "layers_not_read" not in meta


def test_batched_matmul_is_column_major(shared):
    """s4tf_model's batchedMatmul [X1, X2] matrix stored column-major: C order [X2, X1]."""
    model = shared / REAL / "s4tf_model.mlmodel"
    if not model.exists():
        pytest.skip(f"{model} not found")
    layer = cm.Msg(model.read_bytes()).msg(500).msgs(1)[0].msg(1045)
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        assert sidecar(paths["Identity.weights"])["shape"] == [layer.int(6), layer.int(5)]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_real_packages(shared, package):
    root = shared / REAL / package
    if not root.exists():
        pytest.skip(f"{root} not found")
    count, dtypes, first, strings, author = PACKAGES[package]
    model_dir = root / "Data" / author
    weights = {}
    if (model_dir / "weights" / "weight.bin").exists():
        weights["weights/weight.bin"] = (model_dir / "weights" / "weight.bin").read_bytes()
    expected, string_consts = cm.read_program((model_dir / "model.mlmodel").read_bytes(), weights)
    assert len(expected) == count and len(string_consts) == strings
    with mounted(root) as mnt:
        _, index = check_tensors(mnt, expected)
        assert [t["name"] for t in index["tensors"]][:3] == first
        assert {t["dtype"] for t in index["tensors"]} == dtypes
        meta = metadata(mnt)
        assert meta["model_type"] == "mlProgram"
        assert sorted(n["name"] for n in meta.get("not_tensors", [])) == sorted(string_consts)


def test_blob_consts_served_in_place(shared):
    """DrawMNIST's weight.bin blobs: each tensor's source is the data after its record."""
    root = shared / REAL / "drawmnist_MNIST.mlpackage"
    if not root.exists():
        pytest.skip(f"{root} not found")
    blob = (root / "Data/com.apple.CoreML/weights/weight.bin").read_bytes()
    with mounted(root) as mnt:
        paths, _ = index_paths(mnt)
        side = sidecar(paths["model_Dense1_weight_to_fp16"])
        at = side["source"]["offset"]
        assert side["source"]["file"] == "weights/weight.bin" and at % 64 == 0
        assert blob[at - 64:at - 60] == (cm.SENTINEL).to_bytes(4, "little")


def test_nn_v2_prerelease_refused(shared, tmp):
    model = shared / HOSTILE / "coremltools_NN_v2_simple_layer.mlmodel"
    if not model.exists():
        pytest.skip(f"{model} not found")
    for command in ("--list", "--check"):
        refused(model, "Core ML", "specificationVersion", command=command)
    mnt = tmp / "mnt"
    mnt.mkdir()
    result = run_modelfs(model, mnt)
    assert result.returncode == 2, result.stderr


def written_nn():
    """An .mlmodel with float16 innerProduct weights, an int8 convolution
    with a float32 bias, and a quantized rawValue, and the expected tensors."""
    f16 = (np.arange(12, dtype="<f2") / 8).reshape(3, 4)
    i8 = (np.arange(2 * 3 * 2 * 2, dtype=np.int8) - 10).reshape(2, 3, 2, 2)
    bias = np.array([0.5, -1.5], dtype="<f4")
    raw = bytes(range(5))  # 4-bit packed values: served as bytes
    quantized = cm.lfield(30, raw) + cm.lfield(40, cm.vfield(1, 4))
    model = cm.nn_model([
        cm.inner_product("fc", 3, 4, cm.weight_params(f16.tobytes(), 2)),
        cm.convolution("conv", 2, 3, 2, 2, cm.weight_params(i8.tobytes(), 31), cm.weight_params(bias.tobytes(), 1)),
        cm.inner_product("q", 2, 5, quantized),
    ])
    expected = {"fc.weights": ("<f2", [3, 4], f16.tobytes()), "conv.weights": ("i1", [2, 3, 2, 2], i8.tobytes()),
                "conv.bias": ("<f4", [2], bias.tobytes()), "q.weights": ("u1", [5], raw)}
    return model, expected


def test_written_float16_int8_and_raw_weights(tmp):
    model_bytes, expected = written_nn()
    model = tmp / "written.mlmodel"
    model.write_bytes(model_bytes)
    oracle = cm.read_nn(model_bytes)
    for name in ("fc.weights", "conv.weights", "conv.bias"):
        assert oracle[name][2] == expected[name][2]
    with mounted(model) as mnt:
        paths, _ = check_tensors(mnt, expected)
        assert sidecar(paths["q.weights"])["layer_shape"] == [2, 5]
        assert sidecar(paths["fc.weights"])["source"]["offset"] == oracle["fc.weights"][3]


def test_unpacked_float_values_gathered(tmp):
    """floatValue written unpacked (a fixed32 field per value, which
    protobuf parsers accept): gathered into the tensor, no source offset."""
    values = np.array([0.25, -1.0, 3.5, 8.0, -0.5, 2.0], dtype="<f4")
    unpacked = b"".join(cm.key(1, 5) + v.tobytes() for v in values)
    model = tmp / "unpacked.mlmodel"
    model.write_bytes(cm.nn_model([cm.inner_product("fc", 2, 3, unpacked)]))
    with mounted(model) as mnt:
        paths, _ = check_tensors(mnt, {"fc.weights": ("<f4", [2, 3], values.tobytes())})
        assert "offset" not in sidecar(paths["fc.weights"])["source"]
    short = tmp / "unpacked_short.mlmodel"
    short.write_bytes(cm.nn_model([cm.inner_product("fc", 2, 3, unpacked[:-5])]))
    refused(short, "fc.weights", "5 floats")


def test_written_layers_shaped_by_count(tmp):
    """batchnorm, scale, bias, loadConstant, PReLU and embedding weights:
    [n] (batchnorm's checked against its channels), embedding [out, in]."""
    v = lambda k, n: np.arange(n, dtype="<f4") + k
    wp = lambda a: cm.lfield(1, a.tobytes())
    bn = cm.vfield(1, 3) + b"".join(cm.lfield(f, wp(v(f, 3))) for f in (15, 16, 17, 18))
    emb = np.arange(10, dtype="<f4").reshape(5, 2)
    model = tmp / "layers.mlmodel"
    model.write_bytes(cm.nn_model([
        cm.layer("bn", 160, bn),
        cm.layer("sc", 245, cm.lfield(2, wp(v(1, 4))) + cm.vfield(3, 1) + cm.lfield(5, wp(v(2, 4)))),
        cm.layer("b", 250, cm.lfield(2, wp(v(3, 2)))),
        cm.layer("k", 290, cm.lfield(2, wp(v(4, 6)))),
        cm.layer("p", 130, cm.lfield(25, cm.lfield(1, wp(v(5, 3))))),
        cm.layer("e", 150, cm.vfield(1, 2) + cm.vfield(2, 5) + cm.lfield(20, wp(emb))),
        cm.layer("relu", 130, cm.lfield(10, b"")),
        cm.layer("lstm", 420, cm.vfield(1, 4)),
    ]))
    oracle = cm.read_nn(model.read_bytes())
    assert sorted(oracle) == sorted(["bn.gamma", "bn.beta", "bn.mean", "bn.variance", "sc.scale", "sc.bias",
                                     "b.bias", "k.data", "p.alpha", "e.weights"])
    assert oracle["e.weights"][1] == [5, 2] and oracle["k.data"][1] == [6]
    with mounted(model) as mnt:
        check_tensors(mnt, oracle, model.name)
        # A weightless ReLU is not listed; an LSTM, whose weights are not read, is.
        assert metadata(mnt)["layers_not_read"] == [{"name": "lstm", "layer_field": 420}]
    short = tmp / "short_bn.mlmodel"
    short.write_bytes(cm.nn_model([cm.layer("bn", 160, cm.vfield(1, 4) + cm.lfield(15, wp(v(0, 3))))]))
    refused(short, "bn.gamma", "4 elements")


def written_program(tmp, records_edit=None):
    """A package with a float32 blob const, a float16 bytes immediate, an
    int32 immediate with a negative value, and a string const."""
    w = np.arange(6, dtype="<f4").reshape(2, 3)
    h = np.array([1.5, -2.0], dtype="<f2")
    weights, records = cm.weight_file([w.tobytes()], [2])
    if records_edit:
        weights = records_edit(bytearray(weights), records[0])
    ops = [cm.const_op("w", 11, [2, 3], cm.blob_value(records[0])),
           cm.const_op("h", 10, [2], cm.immediate_bytes(h.tobytes())),
           cm.const_op("ints", 23, [3], cm.immediate_ints([1, -7, 300])),
           cm.const_op("mode", 2, [], cm.lfield(3, cm.lfield(1, cm.lfield(4, cm.lfield(1, "same")))))]
    root = cm.package(tmp / "written.mlpackage", cm.program_model(ops), bytes(weights))
    expected = {"w": ("<f4", [2, 3], w.tobytes()), "h": ("<f2", [2], h.tobytes()),
                "ints": ("<i4", [3], np.array([1, -7, 300], "<i4").tobytes())}
    return root, expected


def test_written_program_package(tmp):
    root, expected = written_program(tmp)
    model_dir = root / "Data/com.apple.CoreML"
    oracle, strings = cm.read_program((model_dir / "model.mlmodel").read_bytes(),
                                      {"weights/weight.bin": (model_dir / "weights/weight.bin").read_bytes()})
    assert {n: v[2] for n, v in oracle.items()} == {n: v[2] for n, v in expected.items()} and strings == ["mode"]
    with mounted(root) as mnt:
        check_tensors(mnt, expected)
        assert metadata(mnt)["not_tensors"] == [{"name": "mode", "reason": "string const"}]
    # The model file alone finds its weights beside it (@model_path).
    with mounted(model_dir / "model.mlmodel") as mnt:
        check_tensors(mnt, expected)


def test_several_functions_name_their_consts(tmp):
    """A program of two functions: each const under FUNCTION/."""
    a, b = np.array([1, 2], "<i4"), np.array([0.5], "<f4")
    model = tmp / "two.mlmodel"
    model.write_bytes(cm.program_model(None, functions={
        "main": [cm.const_op("c", 23, [2], cm.immediate_ints([1, 2]))],
        "train": [cm.const_op("c", 11, [1], cm.lfield(3, cm.lfield(1, cm.lfield(1, cm.lfield(1, b.tobytes())))))],
    }))
    expected, _ = cm.read_program(model.read_bytes(), {})
    assert sorted(expected) == ["main/c", "train/c"]
    with mounted(model) as mnt:
        check_tensors(mnt, {"main/c": ("<i4", [2], a.tobytes()), "train/c": ("<f4", [1], b.tobytes())})
        assert metadata(mnt)["functions"] == ["main", "train"]


def test_consts_in_nested_blocks(tmp):
    """A const inside a cond's block (Operation.blocks) is read too."""
    inner = cm.const_op("inner", 23, [], cm.immediate_ints([-3]))
    cond = cm.lfield(1, "cond") + cm.lfield(4, cm.lfield(3, inner))
    model = tmp / "nested.mlmodel"
    model.write_bytes(cm.program_model([cond, cm.const_op("outer", 23, [], cm.immediate_ints([4]))]))
    expected, _ = cm.read_program(model.read_bytes(), {})
    assert sorted(expected) == ["inner", "outer"]
    with mounted(model) as mnt:
        check_tensors(mnt, expected)


def test_real_package_export_round_trip(shared, tmp):
    root = shared / REAL / "drawmnist_MNIST.mlpackage"
    if not root.exists():
        pytest.skip(f"{root} not found")
    model_dir = root / "Data/com.apple.CoreML"
    expected, _ = cm.read_program((model_dir / "model.mlmodel").read_bytes(),
                                  {"weights/weight.bin": (model_dir / "weights/weight.bin").read_bytes()})
    out = tmp / "mnist.safetensors"
    result = run_modelfs("--export", out, root)
    assert result.returncode == 0, result.stderr
    exported, _ = safetensors_writer.read_reference(out)
    assert set(exported) == set(expected)
    for name, (dtype, shape, data) in expected.items():
        assert exported[name][1] == shape and exported[name][2] == bytes(data), name


@pytest.mark.parametrize("edit, words", [
    (lambda b, r: b[:r], ["record runs past the end"]),
    (lambda b, r: b[:r + 64 + 8], ["data", "runs past the end"]),
    (lambda b, r: b[:r] + b"\0\0\0\0" + b[r + 4:], ["sentinel"]),
    (lambda b, r: b[:r + 8] + (1 << 20).to_bytes(8, "little") + b[r + 16:], ["bytes", "shape"]),
    (lambda b, r: b[:r + 4] + (1).to_bytes(4, "little") + b[r + 8:], ["data type"]),
])
def test_lying_blobs_refused(tmp, edit, words):
    root, _ = written_program(tmp, edit)
    for command in ("--list", "--check"):
        refused(root, "Core ML", *words, command=command)


def test_count_not_matching_shape_and_truncation_refused(tmp):
    f32 = np.arange(5, dtype="<f4")
    model = tmp / "short.mlmodel"
    model.write_bytes(cm.nn_model([cm.inner_product("fc", 2, 3, cm.weight_params(f32.tobytes(), 1))]))
    refused(model, "Core ML", "fc.weights", "shape")
    whole, _ = written_nn()
    cut = tmp / "cut.mlmodel"
    cut.write_bytes(whole[:len(whole) - 7])
    refused(cut, "Core ML")


def test_long_description_still_core_ml_and_onnx_unaffected(tmp):
    """A description past the 4 KiB head is still told from ONNX; an ONNX model still opens as ONNX."""
    f32 = np.arange(6, dtype="<f4")
    long = cm.description(inputs=[f"input_{i:04d}_" + "x" * 40 for i in range(100)])
    net = cm.lfield(1, cm.inner_product("fc", 2, 3, cm.weight_params(f32.tobytes(), 1)))
    model = tmp / "long.mlmodel"
    model.write_bytes(cm.vfield(1, 4) + cm.lfield(2, long) + cm.lfield(500, net))
    assert len(long) > 4096
    info = json.loads(run_modelfs("--info", "--json", model).stdout)
    assert info["format"] == "coreml"
    onnx = pytest.importorskip("onnx")
    from onnx import helper
    graph = helper.make_graph([], "g", [], [], [helper.make_tensor("t", onnx.TensorProto.FLOAT, [2], [1.0, 2.0])])
    onnx_model = tmp / "m.onnx"
    onnx.save(helper.make_model(graph, producer_name="\ntricky"), str(onnx_model))
    plain = tmp / "p.onnx"
    onnx.save(helper.make_model(graph), str(plain))
    for m in (onnx_model, plain):
        assert json.loads(run_modelfs("--info", "--json", m).stdout)["format"] == "onnx", m


def test_export_round_trip(tmp):
    model_bytes, expected = written_nn()
    model = tmp / "written.mlmodel"
    model.write_bytes(model_bytes)
    out = tmp / "out.safetensors"
    result = run_modelfs("--export", out, model)
    assert result.returncode == 0, result.stderr
    exported, _ = safetensors_writer.read_reference(out)
    for name, (dtype, shape, data) in expected.items():
        assert exported[name][1] == shape and exported[name][2] == data, name


def test_real_program_model_by_url(shared, tmp, nginx):
    """DrawMNIST's model.mlmodel by URL: its weight.bin fetched beside it."""
    model_dir = shared / REAL / "drawmnist_MNIST.mlpackage/Data/com.apple.CoreML"
    if not model_dir.exists():
        pytest.skip(f"{model_dir} not found")
    shutil.copytree(model_dir, nginx.root / "pkg")
    expected, _ = cm.read_program((model_dir / "model.mlmodel").read_bytes(),
                                  {"weights/weight.bin": (model_dir / "weights/weight.bin").read_bytes()})
    with mounted(f"{nginx.url}/pkg/model.mlmodel", "-o", f"cache_dir={tmp / 'cache'}") as mnt:
        check_tensors(mnt, expected)


def test_real_package_by_url_and_by_manifest(shared, tmp, nginx):
    """DrawMNIST's package by its folder's URL (its Manifest.json fetched,
    then the model and weight.bin it names), and by its local Manifest.json."""
    root = shared / REAL / "drawmnist_MNIST.mlpackage"
    if not root.exists():
        pytest.skip(f"{root} not found")
    shutil.copytree(root, nginx.root / "MNIST.mlpackage")
    model_dir = root / "Data/com.apple.CoreML"
    expected, _ = cm.read_program((model_dir / "model.mlmodel").read_bytes(),
                                  {"weights/weight.bin": (model_dir / "weights/weight.bin").read_bytes()})
    with mounted(f"{nginx.url}/MNIST.mlpackage/", "-o", f"cache_dir={tmp / 'cache'}") as mnt:
        check_tensors(mnt, expected)
        assert metadata(mnt)["package_root_model"] == "Data/com.apple.CoreML/model.mlmodel"
    with mounted(root / "Manifest.json") as mnt:
        check_tensors(mnt, expected)
