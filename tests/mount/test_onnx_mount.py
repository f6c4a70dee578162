# SPDX-License-Identifier: Apache-2.0
"""ONNX through a real mount: every tensor (initializers, sparse
initializers, Constant nodes, attribute tensors, subgraphs, functions) in
every storage form, external data, graph.json and metadata.json.

Oracle: the onnx library (onnx.load + numpy_helper.to_array) and
torch.onnx.export; for the types onnx 1.12 does not know (float8, 4-bit,
2-bit) the bytes the test itself put in the file. Never modelfs's output."""
import collections
import hashlib
import json
import os
import struct

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import numeric_oracle
from conftest import cat, mounted, run_modelfs

OPSET = [helper.make_opsetid("", 13)]

# Canonical dtype names of modelfs by ONNX DataType code (docs/formats.md, "ONNX data types").
DTYPE_NAMES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    8: "string", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64",
    15: "complex128", 16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz",
    19: "float8_e5m2", 20: "float8_e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4_e2m1",
    24: "float8_e8m0fnu", 25: "uint2", 26: "int2",
}
ELEMENT_BITS = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2}
NUMPY_LACKS = {8, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26}


def json_lines(elements):
    """STRING elements (bytes, in C order) as the raw file holds them: one JSON
    string per line, bytes that are not UTF-8 as \\udcXX. Python's own codecs
    make it: surrogateescape turns each such byte into U+DC80-U+DCFF, json
    leaves that lone surrogate as it is, backslashreplace writes it \\udcXX."""
    return b"".join(json.dumps(e.decode("utf-8", "surrogateescape"), ensure_ascii=False)
                    .encode("utf-8", "backslashreplace") + b"\n" for e in elements)


def read_json_lines(data):
    """The elements back from the raw file, as a reader would decode them."""
    return [json.loads(line).encode("utf-8", "surrogateescape") for line in data.split(b"\n")[:-1]]


# ---- the oracle: tensors the onnx library sees, named as docs/design.md, "Tensor names", says --

def expected_bytes(t):
    """C-order little-endian bytes of a TensorProto, as modelfs must serve them."""
    width = {16: 2}.get(t.data_type, 1)
    if t.data_type == TensorProto.STRING:  # to_array of onnx 1.12 decodes them, or fails
        return json_lines(list(t.string_data))
    if t.data_type in NUMPY_LACKS:  # onnx 1.12 does not decode these faithfully
        if t.HasField("raw_data"):
            return t.raw_data
        return b"".join((v & ((1 << (8 * width)) - 1)).to_bytes(width, "little") for v in t.int32_data)
    if t.data_type in (14, 15) and not t.HasField("raw_data") and t.data_location != 1:
        # onnx 1.12's to_array fails on typed complex data: read the pairs.
        if t.data_type == 14:
            return np.array(t.float_data, dtype="<f4").tobytes()
        return np.array(t.double_data, dtype="<f8").tobytes()
    return np.ascontiguousarray(numpy_helper.to_array(t)).tobytes()


# A Constant's value_* forms, and the numpy type onnx's operator gives each.
VALUE_FORMS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
               "value_ints": np.int64, "value_string": object, "value_strings": object}


def node_ident(node, index):
    if node.name:
        return node.name
    if node.output and node.output[0]:
        return node.output[0]
    return f"{node.op_type}_{index}"


def collect(model):
    """name -> [TensorProto...] for every tensor modelfs should serve."""
    found = collections.defaultdict(list)

    def add(name, t):
        found[name].append(t)

    def sparse(name, s):
        add(name + ".values", s.values)
        add(name + ".indices", s.indices)

    def attributes(node_like_attrs, owner, constant_name):
        for a in node_like_attrs:
            base = f"{owner}/{a.name}"
            if constant_name and a.name in VALUE_FORMS and not a.ref_attr_name:
                # The tensor the Constant makes: onnx reads the attribute,
                # numpy_helper writes it as a TensorProto.
                value = np.array(helper.get_attribute_value(a), dtype=VALUE_FORMS[a.name])
                add(constant_name, numpy_helper.from_array(value, constant_name))
            if a.HasField("t"):
                add(constant_name or base, a.t)
            for i, t in enumerate(a.tensors):
                add(f"{base}/{i}", t)
            if a.HasField("sparse_tensor"):
                sparse(constant_name or base, a.sparse_tensor)
            for i, s in enumerate(a.sparse_tensors):
                sparse(f"{base}/{i}", s)
            if a.HasField("g"):
                graph(a.g)
            for g in a.graphs:
                graph(g)

    def nodes(node_list):
        for index, node in enumerate(node_list):
            constant = node.op_type == "Constant" and node.domain in ("", "ai.onnx")
            name = node.output[0] if constant and node.output and node.output[0] else None
            attributes(node.attribute, node_ident(node, index), name)

    def graph(g):
        for i, t in enumerate(g.initializer):
            add(t.name or f"initializer_{i}", t)
        for i, s in enumerate(g.sparse_initializer):
            sparse(s.values.name or f"sparse_initializer_{i}", s)
        nodes(g.node)

    graph(model.graph)
    for f in model.functions:
        attributes(getattr(f, "attribute_proto", []), f.name, None)  # newer than onnx 1.12
        nodes(f.node)
    for info in model.training_info:
        graph(info.initialization)
        graph(info.algorithm)
    return found


def index_of(mnt):
    index = json.loads((mnt / ".modelfs" / "index.json").read_text())
    paths = collections.defaultdict(list)
    for t in index["tensors"]:
        paths[t["name"]].append(mnt / t["path"])
    return paths, index


def check_model(mnt, model_path):
    """Every tensor the onnx library finds is in the mount with its exact bytes,
    sidecar and (where numpy has the type) .npy view; nothing else is."""
    model = onnx.load(str(model_path))
    found = collect(model)
    paths, index = index_of(mnt)
    assert index["format"] == "onnx"
    assert set(paths) == set(found), (set(paths) ^ set(found))
    for name, protos in found.items():
        assert len(paths[name]) == len(protos), name
        served = sorted(cat(p) for p in paths[name])
        assert served == sorted(expected_bytes(t) for t in protos), name
        for path in paths[name]:
            meta = json.loads(cat(str(path) + ".json"))
            proto = next(t for t in protos if expected_bytes(t) == cat(path))
            assert meta["name"] == name
            assert meta["format"] == "onnx"
            assert meta["dtype"] == DTYPE_NAMES[proto.data_type], name
            assert meta["shape"] == list(proto.dims), name
            assert meta["nbytes"] == len(cat(path))
            if proto.data_type in ELEMENT_BITS:
                assert meta["element_bits"] == ELEMENT_BITS[proto.data_type]
            npy = str(path) + ".npy"
            if proto.data_type == TensorProto.STRING:
                assert "numpy" not in meta and not os.path.exists(npy), name
                assert read_json_lines(cat(path)) == list(proto.string_data)
                strides, acc = [], 1
                for dim in reversed(proto.dims):
                    strides.insert(0, acc)
                    acc *= max(dim, 1)
                assert meta["strides"] == strides, name
            elif proto.data_type in NUMPY_LACKS:
                numeric_oracle.check_npy(npy, DTYPE_NAMES[proto.data_type], cat(path), list(proto.dims), meta)
            else:
                want = numpy_helper.to_array(proto) if proto.data_type not in (14, 15) or \
                    proto.HasField("raw_data") else None
                loaded = np.load(npy)
                if want is not None:
                    assert loaded.dtype == want.dtype and loaded.shape == want.shape, name
                    np.testing.assert_array_equal(loaded, want)
                assert loaded.tobytes() == cat(path)
    meta = json.loads((mnt / ".modelfs" / "metadata.json").read_text())
    assert "string_tensors" not in meta  # they are tensors like any other
    return paths, meta


# ---- hand encoding, for the forms the protobuf library never writes -------

def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(number, wire, payload):
    key = varint(number << 3 | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def unpacked_tensor(name, data_type, dims, number, values, wire):
    """A TensorProto whose repeated data field is written one entry per key."""
    out = b"".join(field(1, 0, varint(d)) for d in dims)
    out += field(2, 0, varint(data_type)) + field(8, 2, name.encode())
    for v in values:
        if wire == 0:
            out += field(number, 0, varint(v))
        elif wire == 5:
            out += field(number, 5, struct.pack("<f", v))
        else:
            out += field(number, 1, struct.pack("<d", v))
    return out


def save_with_extra_initializers(model, path, tensor_bytes):
    """Saves `model` and appends a second `graph` field holding more
    initializers: protobuf merges repeated occurrences of a message field, so
    onnx.load (and modelfs) see one graph with all of them."""
    extra_graph = b"".join(field(5, 2, t) for t in tensor_bytes)
    path.write_bytes(model.SerializeToString() + field(7, 2, extra_graph))


def simple_model(initializers, nodes=(), sparse=(), outputs=None, functions=(), **graph_kwargs):
    out = outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]
    graph = helper.make_graph(list(nodes), "g", [], out, initializer=list(initializers),
                              sparse_initializer=list(sparse), **graph_kwargs)
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="modelfs-test",
                              producer_version="1.0", functions=list(functions))
    model.ir_version = 8
    return model


RNG = np.random.default_rng(11)

SUPPORTED = {  # DataType -> array of that type (onnx 1.12's types)
    TensorProto.FLOAT: RNG.standard_normal((3, 4)).astype(np.float32),
    TensorProto.UINT8: RNG.integers(0, 256, (2, 5), dtype=np.uint8),
    TensorProto.INT8: RNG.integers(-128, 128, (7,), dtype=np.int8),
    TensorProto.UINT16: RNG.integers(0, 65536, (3,), dtype=np.uint16),
    TensorProto.INT16: RNG.integers(-32768, 32768, (2, 2), dtype=np.int16),
    TensorProto.INT32: RNG.integers(-2**31, 2**31, (5,), dtype=np.int32),
    TensorProto.INT64: RNG.integers(-2**63, 2**63, (2, 3), dtype=np.int64),
    TensorProto.BOOL: RNG.integers(0, 2, (3, 3)).astype(bool),
    TensorProto.FLOAT16: RNG.standard_normal((4,)).astype(np.float16),
    TensorProto.DOUBLE: RNG.standard_normal((2, 3)),
    TensorProto.UINT32: RNG.integers(0, 2**32, (4,), dtype=np.uint32),
    TensorProto.UINT64: RNG.integers(0, 2**64, (3,), dtype=np.uint64),
    TensorProto.COMPLEX64: (RNG.standard_normal(3) + 1j * RNG.standard_normal(3)).astype(np.complex64),
    TensorProto.COMPLEX128: RNG.standard_normal((2, 2)) + 1j * RNG.standard_normal((2, 2)),
}


def typed_tensor(name, data_type, array):
    """The typed-field (packed) form, as onnx.helper writes it."""
    if data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
        t = TensorProto(name=name, data_type=data_type, dims=array.shape)
        pairs = np.stack([array.real, array.imag], axis=-1).ravel().tolist()
        (t.float_data if data_type == TensorProto.COMPLEX64 else t.double_data).extend(pairs)
        return t
    if data_type == TensorProto.FLOAT16:
        t = TensorProto(name=name, data_type=data_type, dims=array.shape)
        t.int32_data.extend(array.view(np.uint16).ravel().tolist())
        return t
    return helper.make_tensor(name, data_type, array.shape, array.ravel().tolist())


# ---- the tests ---------------------------------------------------------------

def test_every_supported_type_raw_and_typed(tmp):
    inits = []
    for code, array in SUPPORTED.items():
        kind = TensorProto.DataType.Name(code).lower()
        inits.append(numpy_helper.from_array(array, f"raw.{kind}"))
        inits.append(typed_tensor(f"typed.{kind}", code, array))
    bf16 = np.array([0x3F80, 0x4020, 0xC040, 0x7F80], dtype=np.uint16)
    inits.append(TensorProto(name="raw.bfloat16", data_type=16, dims=[4], raw_data=bf16.tobytes()))
    t = TensorProto(name="typed.bfloat16", data_type=16, dims=[2, 2])
    t.int32_data.extend(bf16.tolist())
    inits.append(t)
    inits.append(helper.make_tensor("words", TensorProto.STRING, [2], [b"hello", b"world"]))
    model = simple_model(inits)
    path = tmp / "types.onnx"
    onnx.save(model, str(path))
    with mounted(path) as mnt:
        paths, meta = check_model(mnt, path)
        assert len(paths) == 2 * len(SUPPORTED) + 3
        assert json.loads(cat(str(mnt / "words") + ".json"))["shape"] == [2]
        # In-place storage: raw_data and packed float/double point into the file.
        data = path.read_bytes()
        for name in ["raw.float", "typed.float", "typed.double", "typed.complex64"]:
            side = json.loads(cat(str(paths[name][0]) + ".json"))
            offset = side["source"]["offset"]
            assert data[offset:offset + side["nbytes"]] == cat(paths[name][0]), name
        side = json.loads(cat(str(paths["typed.int8"][0]) + ".json"))
        assert side["storage"] == "int32_data" and "offset" not in side["source"]
        assert side["onnx_data_type"] == "INT8" and side["kind"] == "initializer"


def test_unpacked_repeated_fields_and_merged_graph(tmp):
    f32 = [1.5, -2.25, 3.0, 0.0, 1e-3, 7.0]
    f64 = [2.5, -1e10, 3.25]
    i8 = [-1, 5, -128, 127]
    i64 = [-(2**63), 2**63 - 1, 0, -7]
    u64 = [2**64 - 1, 3]
    u32 = [2**32 - 1, 0, 12]
    bf16 = [0x3F80, 0xFF80]
    extra = [
        unpacked_tensor("unpacked.f32", 1, [2, 3], 4, f32, 5),
        unpacked_tensor("unpacked.f64", 11, [3], 10, f64, 1),
        unpacked_tensor("unpacked.i8", 3, [4], 5, [v & (2**64 - 1) for v in i8], 0),
        unpacked_tensor("unpacked.i64", 7, [2, 2], 7, i64, 0),
        unpacked_tensor("unpacked.u64", 13, [2], 11, u64, 0),
        unpacked_tensor("unpacked.u32", 12, [3], 11, u32, 0),
        unpacked_tensor("unpacked.bf16", 16, [2], 5, bf16, 0),
        unpacked_tensor("unpacked.c64", 14, [1], 4, [1.0, -1.0], 5),
    ]
    model = simple_model([numpy_helper.from_array(np.arange(4, dtype=np.float32), "first")])
    path = tmp / "unpacked.onnx"
    save_with_extra_initializers(model, path, extra)
    loaded = onnx.load(str(path))
    assert len(loaded.graph.initializer) == 1 + len(extra)  # the merge the oracle sees
    with mounted(path) as mnt:
        paths, _ = check_model(mnt, path)
        assert cat(paths["unpacked.i8"][0]) == bytes(v & 0xFF for v in i8)
        assert cat(paths["unpacked.bf16"][0]) == b"\x80\x3f\x80\xff"


def test_types_newer_than_the_onnx_library(tmp):
    """float8, e8m0, 4-bit and 2-bit types, in raw_data and int32_data."""
    inits = []
    expected = {}
    for code, dims in [(17, [5]), (18, [2, 2]), (19, [3]), (20, [4]), (24, [6]),
                       (21, [5]), (22, [2, 3]), (23, [7]), (25, [6]), (26, [9])]:
        bits = ELEMENT_BITS.get(code, 8)
        nbytes = (int(np.prod(dims)) * bits + 7) // 8
        data = RNG.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
        name = DTYPE_NAMES[code]
        inits.append(TensorProto(name=f"raw.{name}", data_type=code, dims=dims, raw_data=data))
        typed = TensorProto(name=f"typed.{name}", data_type=code, dims=dims)
        typed.int32_data.extend(list(data))
        inits.append(typed)
        expected[f"raw.{name}"] = expected[f"typed.{name}"] = (data, code, dims)
    path = tmp / "new_types.onnx"
    onnx.save(simple_model(inits), str(path))
    with mounted(path) as mnt:
        paths, _ = index_of(mnt)
        assert set(paths) == set(expected)
        for name, (data, code, dims) in expected.items():
            (p,) = paths[name]
            assert cat(p) == data, name
            side = json.loads(cat(str(p) + ".json"))
            assert side["dtype"] == DTYPE_NAMES[code] and side["shape"] == dims
            assert "numpy" not in side
            numeric_oracle.check_npy(str(p) + ".npy", DTYPE_NAMES[code], data, dims, side)
            if code in ELEMENT_BITS:
                assert side["element_bits"] == ELEMENT_BITS[code] and "per byte" in side["packing"]


def test_constants_subgraphs_sparse_and_attribute_tensors(tmp):
    def const(out, array, name=""):
        return helper.make_node("Constant", [], [out], name=name,
                                value=numpy_helper.from_array(array, "ignored"))

    then_graph = helper.make_graph(
        [const("branch_out", np.full((2,), 1.0, np.float32))], "then", [],
        [helper.make_tensor_value_info("branch_out", TensorProto.FLOAT, [2])],
        initializer=[numpy_helper.from_array(np.array([1, 2], np.int64), "shared")])
    else_graph = helper.make_graph(
        [const("branch_out", np.full((2,), -1.0, np.float32))], "else", [],
        [helper.make_tensor_value_info("branch_out", TensorProto.FLOAT, [2])],
        initializer=[numpy_helper.from_array(np.array([3, 4], np.int64), "shared")])
    body = helper.make_graph(
        [const("step", np.array(0.5, np.float32)),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "step"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [])])
    values = numpy_helper.from_array(np.array([5.0, 6.0], np.float32), "sparse_w")
    indices = numpy_helper.from_array(np.array([1, 7], np.int64), "sparse_w_idx")
    sparse_init = helper.make_sparse_tensor(values, indices, [3, 3])
    sparse_const = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([9], np.int32), "v"),
        numpy_helper.from_array(np.array([2], np.int64), "i"), [4])
    nodes = [
        const("c.main", np.arange(6, dtype=np.float32).reshape(2, 3), name="/model/Constant"),
        helper.make_node("Constant", [], ["c.sparse"], sparse_value=sparse_const),
        helper.make_node("ConstantOfShape", ["shape"], ["filled"],
                         value=numpy_helper.from_array(np.array([7], np.int32), "v")),
        helper.make_node("ConstantOfShape", ["shape"], ["filled2"], name="fill",
                         value=numpy_helper.from_array(np.array([2.5], np.float64), "v")),
        helper.make_node("If", ["cond"], ["branch_out"], name="choose",
                         then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Loop", ["trip", "cond", "v0"], ["v_final"], body=body),
        helper.make_node("Relu", ["x"], ["y"], name="relu", alpha=0.5, mode="fast",
                         sizes=[1, 2, 3], scales=[0.5, 1.5]),
    ]
    inits = [numpy_helper.from_array(np.array([2, 2], np.int64), "shape"),
             numpy_helper.from_array(np.array(True), "cond")]
    model = simple_model(inits, nodes, sparse=[sparse_init],
                         outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                         value_info=[])
    model.graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]))
    path = tmp / "graph.onnx"
    onnx.save(model, str(path))
    with mounted(path) as mnt:
        paths, meta = check_model(mnt, path)
        # Names: Constant -> first output; other attributes -> <node>/<attr>.
        assert {"c.main", "c.sparse.values", "c.sparse.indices", "filled/value", "fill/value",
                "sparse_w.values", "sparse_w.indices", "step"} <= set(paths)
        assert paths["c.main"] == [mnt / "c" / "main"]
        side = json.loads(cat(str(paths["sparse_w.values"][0]) + ".json"))
        assert side["dense_shape"] == [3, 3] and side["sparse_part"] == "values"
        # One name in two subgraphs: both reachable, the later with ~1.
        assert sorted(p.name for p in paths["shared"]) == ["shared", "shared~1"]
        assert sorted(p.name for p in paths["branch_out"]) == ["branch_out", "branch_out~1"]
        graphs = sorted(json.loads(cat(str(p) + ".json"))["graph"] for p in paths["shared"])
        assert graphs == ["main/choose/else_branch", "main/choose/then_branch"]

        graph = json.loads((mnt / ".modelfs" / "graph.json").read_text())["graph"]
        assert graph["inputs"] == [{"name": "x", "type": {"tensor": {"elem_type": "FLOAT",
                                                                    "shape": ["N", 3]}}}]
        by_name = {n["name"] or n["outputs"][0]: n for n in graph["nodes"]}
        relu = by_name["relu"]
        assert relu["op_type"] == "Relu" and relu["inputs"] == ["x"] and relu["outputs"] == ["y"]
        assert relu["attributes"] == {"alpha": 0.5, "mode": "fast", "sizes": [1, 2, 3],
                                      "scales": [0.5, 1.5]}
        assert by_name["fill"]["attributes"]["value"] == {"tensor": "fill/value"}
        if_node = by_name["choose"]
        then_doc = if_node["attributes"]["then_branch"]["graph"]
        assert then_doc["name"] == "then" and then_doc["initializers"] == ["shared"]
        assert then_doc["nodes"][0]["attributes"]["value"] == {"tensor": "branch_out"}
        loop = by_name["v_final"]["attributes"]["body"]["graph"]
        assert [n["op_type"] for n in loop["nodes"]] == ["Constant", "Identity", "Add"]
        assert graph["sparse_initializers"] == ["sparse_w"]
        assert meta["producer_name"] == "modelfs-test" and meta["ir_version"] == 8
        assert meta["opset_import"] == [{"domain": "", "version": 13}]


STRINGS = np.array([[b"cat", b"", "caf\u00e9 \u6a21\u578b".encode()],
                    [b'quote " backslash \\ newline \n tab \t nul \x00',
                     b"\xff\xfe not utf-8 \xc3", "\U0001f600".encode()]], dtype=object)


def test_string_tensors_are_json_lines(tmp):
    """STRING initializers, Constant values and attribute tensors (a LabelEncoder
    of ai.onnx.ml), as dtype "string": JSON Lines, every byte kept."""
    labels = numpy_helper.from_array(STRINGS, "labels")
    scalar = numpy_helper.from_array(np.array(b"alone", dtype=object), "alone")
    empty = helper.make_tensor("none", TensorProto.STRING, [0, 2], [])
    keys = numpy_helper.from_array(np.array([b"a", b"b\xe9"], dtype=object), "keys")
    values = numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "values")
    nodes = [helper.make_node("Constant", [], ["greeting"],
                              value=numpy_helper.from_array(np.array([b"hi", b"\x80"], dtype=object), "v")),
             helper.make_node("LabelEncoder", ["x"], ["y"], name="encode", domain="ai.onnx.ml",
                              keys_tensor=keys, values_tensor=values, default_int64=-1)]
    model = simple_model([labels, scalar, empty], nodes)
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 4))
    path = tmp / "strings.onnx"
    onnx.save(model, str(path))
    with mounted(path, "-o", "xattr") as mnt:
        paths, meta = check_model(mnt, path)
        assert {"labels", "alone", "none", "greeting", "encode/keys_tensor", "encode/values_tensor"} \
            == set(paths)
        raw = cat(paths["labels"][0])
        assert raw == json_lines(STRINGS.ravel().tolist())
        assert raw.count(b"\n") == 6 and b"\\udcff\\udcfe" in raw and "caf\u00e9".encode() in raw
        assert read_json_lines(raw) == STRINGS.ravel().tolist()
        side = json.loads(cat(str(paths["labels"][0]) + ".json"))
        assert side["dtype"] == "string" and side["shape"] == [2, 3] and side["strides"] == [3, 1]
        assert side["nbytes"] == len(raw) == os.path.getsize(paths["labels"][0])
        assert "numpy" not in side and side["onnx_data_type"] == "STRING"
        assert cat(paths["alone"][0]) == b'"alone"\n'
        assert json.loads(cat(str(paths["alone"][0]) + ".json"))["shape"] == []
        assert cat(paths["none"][0]) == b""
        assert read_json_lines(cat(paths["encode/keys_tensor"][0])) == [b"a", b"b\xe9"]
        assert os.getxattr(paths["labels"][0], "user.modelfs.dtype") == b"string"
        assert os.getxattr(paths["labels"][0], "user.modelfs.shape") == b"[2,3]"
        index = json.loads((mnt / ".modelfs" / "index.json").read_text())
        entry = next(t for t in index["tensors"] if t["name"] == "labels")
        assert entry["dtype"] == "string" and entry["nbytes"] == len(raw)
    listed = run_modelfs("--list", path)
    assert listed.returncode == 0
    assert any(line.split()[:2] == ["labels", "string"] for line in listed.stdout.splitlines())
    assert run_modelfs("--check", path).returncode == 0


def test_constant_value_forms(tmp):
    """Constant's value_float(s), value_int(s), value_string(s): float32, int64
    and string tensors named by the node's output, 0-D or 1-D."""
    floats = [1.5, -0.25, 3.0e38, float("inf")]
    ints = [-(2**63), -1, 0, 2**63 - 1, 7]
    nodes = [helper.make_node("Constant", [], ["c.float"], value_float=-2.5),
             helper.make_node("Constant", [], ["c.floats"], value_floats=floats),
             helper.make_node("Constant", [], ["c.int"], value_int=-7),
             helper.make_node("Constant", [], ["c.ints"], value_ints=ints),
             helper.make_node("Constant", [], ["c.string"], value_string="caf\u00e9"),
             helper.make_node("Constant", [], ["c.strings"], value_strings=[b"a", b"", b"\xfe"]),
             helper.make_node("Constant", [], ["c.no_floats"], value_floats=[]),
             helper.make_node("Constant", [], ["c.named"], name="/k/Constant", value_int=3)]
    loop_body = helper.make_graph(
        [helper.make_node("Constant", [], ["inner"], value_ints=[4, 5])], "body", [],
        [helper.make_tensor_value_info("inner", TensorProto.INT64, [2])])
    nodes.append(helper.make_node("If", ["cond"], ["z"], name="branch", then_branch=loop_body,
                                  else_branch=loop_body))
    model = simple_model([numpy_helper.from_array(np.array(True), "cond")], nodes)
    path = tmp / "values.onnx"
    onnx.save(model, str(path))
    with mounted(path) as mnt:
        paths, _ = check_model(mnt, path)
        assert np.load(str(paths["c.floats"][0]) + ".npy").tolist() == \
            np.array(floats, np.float32).tolist()
        assert np.load(str(paths["c.ints"][0]) + ".npy").tolist() == ints
        assert np.load(str(paths["c.float"][0]) + ".npy").shape == ()
        assert np.load(str(paths["c.int"][0]) + ".npy").reshape(()) == -7
        assert read_json_lines(cat(paths["c.string"][0])) == ["caf\u00e9".encode()]
        assert read_json_lines(cat(paths["c.strings"][0])) == [b"a", b"", b"\xfe"]
        assert np.load(str(paths["c.no_floats"][0]) + ".npy").shape == (0,)
        assert paths["c.ints"] == [mnt / "c" / "ints"] and paths["c.named"] == [mnt / "c" / "named"]
        assert len(paths["inner"]) == 2  # one per branch, the later ~1
        side = json.loads(cat(str(paths["c.strings"][0]) + ".json"))
        assert side["dtype"] == "string" and side["shape"] == [3] and side["kind"] == "constant"
        assert side["storage"] == "value_strings" and side["onnx_data_type"] == "STRING"
        side = json.loads(cat(str(paths["c.float"][0]) + ".json"))
        assert side["dtype"] == "float32" and side["shape"] == [] and side["storage"] == "value_float"
        graph = json.loads((mnt / ".modelfs" / "graph.json").read_text())["graph"]
        by_output = {n["outputs"][0]: n for n in graph["nodes"]}
        assert by_output["c.ints"]["attributes"] == {"value_ints": {"tensor": "c.ints"}}
    assert run_modelfs("--check", path).returncode == 0


def test_functions_and_metadata(tmp):
    fn_const = helper.make_node("Constant", [], ["k"],
                                value=numpy_helper.from_array(np.array([3.0], np.float32), "k"))
    fn = helper.make_function("custom", "Scale", ["a"], ["b"],
                              [fn_const, helper.make_node("Mul", ["a", "k"], ["b"])],
                              [helper.make_opsetid("", 13)])
    model = simple_model([numpy_helper.from_array(np.ones(2, np.float32), "w")],
                         [helper.make_node("Scale", ["w"], ["y"], domain="custom")],
                         functions=[fn])
    model.opset_import.append(helper.make_opsetid("custom", 1))
    model.doc_string = "a test model"
    model.domain = "org.modelfs"
    model.model_version = 7
    helper.set_model_props(model, {"author": "tests", "license": "none"})
    path = tmp / "functions.onnx"
    onnx.save(model, str(path))
    with mounted(path) as mnt:
        paths, meta = check_model(mnt, path)
        assert set(paths) == {"w", "k"}
        assert json.loads(cat(str(paths["k"][0]) + ".json"))["graph"] == "function:custom:Scale"
        assert meta["metadata_props"] == {"author": "tests", "license": "none"}
        assert meta["doc_string"] == "a test model" and meta["domain"] == "org.modelfs"
        assert meta["model_version"] == 7 and meta["producer_version"] == "1.0"
        assert {"domain": "custom", "version": 1} in meta["opset_import"]
        assert meta["functions"] == ["custom:Scale"]
        doc = json.loads((mnt / ".modelfs" / "graph.json").read_text())
        assert doc["functions"][0]["nodes"][1]["op_type"] == "Mul"


@pytest.mark.parametrize("one_file", [True, False])
def test_external_data(tmp, one_file):
    inits = [numpy_helper.from_array(RNG.standard_normal((16, 8)).astype(np.float32), "layer.w"),
             numpy_helper.from_array(RNG.integers(0, 100, (40,)).astype(np.int64), "layer.b"),
             numpy_helper.from_array(np.arange(3, dtype=np.float32), "small")]
    model = simple_model(inits)
    path = tmp / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=one_file,
                    location="weights.bin" if one_file else None, size_threshold=64)
    with mounted(path) as mnt:
        paths, _ = check_model(mnt, path)
        loaded = onnx.load(str(path), load_external_data=False)
        for t in loaded.graph.initializer:
            side = json.loads(cat(str(paths[t.name][0]) + ".json"))
            if t.data_location == TensorProto.EXTERNAL:
                info = {e.key: e.value for e in t.external_data}
                assert side["source"]["file"] == info["location"]
                assert side["source"]["offset"] == int(info.get("offset", 0))
                assert side["storage"] == "external_data"
                data = (tmp / info["location"]).read_bytes()
                start = int(info.get("offset", 0))
                assert cat(paths[t.name][0]) == data[start:start + side["nbytes"]]
            else:
                assert side["source"]["file"] == "ext.onnx"
        index = json.loads((mnt / ".modelfs" / "index.json").read_text())
        assert index["files"][0] == "ext.onnx" and len(index["files"]) == (2 if one_file else 3)


def test_external_data_refused_before_mounting(tmp):
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(b"\0" * 64)
    folder = tmp / "model"
    folder.mkdir()
    (folder / "link.bin").symlink_to(outside / "secret.bin")
    (folder / "short.bin").write_bytes(b"\0" * 10)
    cases = {
        "../outside/secret.bin": "contains \"..\"",
        str(outside / "secret.bin"): "is absolute",
        "link.bin": "outside the model's folder",
        "missing.bin": "cannot be opened",
        "short.bin": "past the end",
    }
    for location, reason in cases.items():
        t = numpy_helper.from_array(np.zeros(16, np.float32), "w")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in {"location": location, "offset": "0", "length": "64"}.items():
            t.external_data.add(key=k, value=v)
        path = folder / "hostile.onnx"
        path.write_bytes(simple_model([t]).SerializeToString())
        mnt = tmp / "mnt"
        mnt.mkdir(exist_ok=True)
        result = run_modelfs(path, mnt)
        assert result.returncode == 2, (location, result.stderr)
        assert ": onnx: " in result.stderr and reason in result.stderr, (location, result.stderr)
        assert not os.path.ismount(mnt)


def test_check_verifies_external_data_checksums(tmp):
    """--check compares external data with its SHA-1 "checksum" entry; a
    flipped byte in the data file is named; no checksum, nothing to verify."""
    import hashlib
    values = np.arange(16, dtype=np.float32)
    folder = tmp / "model"
    folder.mkdir()
    data = folder / "weights.bin"
    data.write_bytes(b"\0" * 32 + values.tobytes())
    t = numpy_helper.from_array(values, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    digest = hashlib.sha1(values.tobytes()).hexdigest()
    for k, v in {"location": "weights.bin", "offset": "32", "length": "64", "checksum": digest}.items():
        t.external_data.add(key=k, value=v)
    path = folder / "m.onnx"
    path.write_bytes(simple_model([t]).SerializeToString())
    ok = run_modelfs("--check", path)
    assert ok.returncode == 0 and "1 integrity checks passed" in ok.stdout, ok.stderr
    blob = bytearray(data.read_bytes())
    blob[40] ^= 0xFF
    data.write_bytes(bytes(blob))
    bad = run_modelfs("--check", path)
    assert bad.returncode == 2 and "SHA-1" in bad.stderr and "weights.bin" in bad.stderr, bad.stderr


def test_truncated_model_refused(tmp):
    model = simple_model([numpy_helper.from_array(np.ones((8, 8), np.float32), "w")])
    data = model.SerializeToString()
    path = tmp / "cut.onnx"
    path.write_bytes(data[: len(data) - 20])
    mnt = tmp / "mnt"
    mnt.mkdir()
    result = run_modelfs(path, mnt)
    assert result.returncode == 2 and ": onnx: " in result.stderr, result.stderr
    assert "past the end" in result.stderr and not os.path.ismount(mnt)


def test_torch_export(tmp):
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.norm = torch.nn.LayerNorm(4)
            self.fc = torch.nn.Linear(4, 5)

        def forward(self, x):
            h = self.conv(x).mean(dim=(2, 3))
            return self.fc(self.norm(h) * 2.0 + 1.0)

    torch.manual_seed(0)
    net = Net().eval()
    path = tmp / "torch.onnx"
    torch.onnx.export(net, torch.randn(1, 3, 8, 8), str(path), opset_version=13,
                      input_names=["x"], output_names=["y"])
    with mounted(path) as mnt:
        paths, _ = check_model(mnt, path)
        state = net.state_dict()
        for name in ["conv.weight", "fc.weight", "fc.bias", "norm.weight", "norm.bias"]:
            assert cat(paths[name][0]) == state[name].numpy().tobytes(), name


def test_generated_fixtures_match_expected(shared):
    expected = json.loads((shared / "fixtures" / "generated" / "expected.json").read_text())
    models = {k: v for k, v in expected.items() if k.startswith("onnx/")}
    assert models
    for relative, want in models.items():
        path = shared / "fixtures" / "generated" / relative
        with mounted(path) as mnt:
            paths, index = index_of(mnt)
            assert index["format"] == want["format"]
            assert set(paths) == set(want["tensors"]), relative
            for name, info in want["tensors"].items():
                data = cat(paths[name][0])
                assert hashlib.sha256(data).hexdigest() == info["sha256"], (relative, name)
                side = json.loads(cat(str(paths[name][0]) + ".json"))
                assert side["dtype"] == info["dtype"] and side["shape"] == info["shape"]
            check_model(mnt, path)


def test_every_real_onnx_file_mounts(shared):
    files = sorted((shared / "fixtures" / "real" / "onnx").glob("*.onnx"))
    assert files
    for path in files:
        with mounted(path) as mnt:
            check_model(mnt, path)
            graph = json.loads((mnt / ".modelfs" / "graph.json").read_text())
            model = onnx.load(str(path), load_external_data=False)
            assert len(graph["graph"]["nodes"]) == len(model.graph.node), path.name
            assert [n["op_type"] for n in graph["graph"]["nodes"]] == \
                [n.op_type for n in model.graph.node]
