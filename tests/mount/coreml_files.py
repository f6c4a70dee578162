# SPDX-License-Identifier: Apache-2.0
"""Core ML files for the tests, read and written here from the Core ML
specification (coremltools mlmodel/format/Model.proto, NeuralNetwork.proto,
MIL.proto; the blob file from MILBlob/Blob/StorageFormat.hpp), never from
modelfs: a protobuf wire reader that walks a Model by field numbers and
returns each weight's bytes, and writers for the variants the real files
lack (float16 and int8 neural-network weights, blob consts). The hostile
corpus and the fuzz seeds use the writers too."""
import struct

SENTINEL = 0xDEADBEEF


# ---- the wire format ------------------------------------------------------

def _varint(b, p):
    result = shift = 0
    while True:
        c = b[p]
        p += 1
        result |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return result, p


def fields(b, start=0, end=None):
    """(number, wire type, value, payload offset) of each field: the value
    an int for varints, (start, end) of the payload for length-delimited
    fields, the raw bytes for fixed ones."""
    p, end = start, len(b) if end is None else end
    while p < end:
        key, p = _varint(b, p)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, p = _varint(b, p)
            yield number, kind, value, None
        elif kind == 2:
            length, p = _varint(b, p)
            yield number, kind, (p, p + length), p
            p += length
        elif kind in (1, 5):
            size = 8 if kind == 1 else 4
            yield number, kind, b[p:p + size], p
            p += size
        else:
            raise ValueError(f"wire type {kind} at {p}")


class Msg:
    """A message's fields by number (each a list, in order)."""

    def __init__(self, b, span=None):
        self.b = b
        self.by = {}
        start, end = span if span else (0, len(b))
        for number, kind, value, at in fields(b, start, end):
            self.by.setdefault(number, []).append((kind, value, at))

    def msgs(self, n):
        return [Msg(self.b, v) for k, v, _ in self.by.get(n, []) if k == 2]

    def msg(self, n):
        all_ = self.msgs(n)
        return all_[-1] if all_ else None

    def int(self, n, default=0):
        return self.by[n][-1][1] if n in self.by else default

    def ints(self, n):
        out = []
        for kind, value, _ in self.by.get(n, []):
            if kind == 0:
                out.append(value)
            else:
                p, end = value
                while p < end:
                    v, p = _varint(self.b, p)
                    out.append(v)
        return out

    def bytes(self, n):
        kind, (s, e), at = self.by[n][-1]
        return bytes(self.b[s:e]), at

    def text(self, n):
        return self.bytes(n)[0].decode() if n in self.by else ""

    def has(self, n):
        return n in self.by


# ---- reading (the oracle) -------------------------------------------------

NN_FIELDS = {500: "neuralNetwork", 403: "neuralNetworkClassifier", 303: "neuralNetworkRegressor"}
# WeightParams field -> numpy dtype of its values.
WEIGHT_KINDS = {1: "<f4", 2: "<f2", 30: "u1", 31: "i1"}


def _weights(params, number, name, shape, out):
    w = params.msg(number)
    if w is None:
        return
    for field, dtype in WEIGHT_KINDS.items():
        if w.has(field):
            data, at = w.bytes(field)
            out[name] = (dtype, shape, data, at)


# Layers whose WeightParams are 1-D [n]: layer field -> (nested field or None, {WeightParams field: name}).
COUNTED = [(160, None, {15: "gamma", 16: "beta", 17: "mean", 18: "variance"}),
           (245, None, {2: "scale", 5: "bias"}), (250, None, {2: "bias"}), (290, None, {2: "data"}),
           (130, 25, {1: "alpha"}), (130, 71, {1: "alpha", 2: "beta"})]
ELEMENT_BYTES = {"<f4": 4, "<f2": 2, "u1": 1, "i1": 1}


def _counted(layer, name, out):
    for number, nested, weights in COUNTED:
        params = layer.msg(number)
        if params is not None and nested is not None:
            params = params.msg(nested)
        if params is None:
            continue
        for field, field_name in weights.items():
            before = set(out)
            _weights(params, field, f"{name}.{field_name}", None, out)
            for key in set(out) - before:
                dtype, _, data, at = out[key]
                out[key] = (dtype, [len(data) // ELEMENT_BYTES[dtype]], data, at)


def read_nn(b):
    """{name: (numpy dtype, shape, bytes, offset in the file)} of a neural
    network's convolution, innerProduct and batchedMatmul weights."""
    model = Msg(b)
    net = next(model.msg(n) for n in NN_FIELDS if model.has(n))
    out = {}
    for layer in net.msgs(1):
        name = layer.text(1)
        if layer.has(100):
            p = layer.msg(100)
            out_c, kernel, groups = p.int(1), p.int(2), max(1, p.int(10))
            kh, kw = p.ints(20)
            shape = [kernel, out_c // groups, kh, kw] if p.int(60) else [out_c, kernel, kh, kw]
            _weights(p, 90, name + ".weights", shape, out)
            _weights(p, 91, name + ".bias", [out_c], out)
        elif layer.has(140):
            p = layer.msg(140)
            _weights(p, 20, name + ".weights", [p.int(2), p.int(1)], out)
            _weights(p, 21, name + ".bias", [p.int(2)], out)
        elif layer.has(1045):
            p = layer.msg(1045)
            # The [first, second] matrix is stored column-major: C order [second, first].
            _weights(p, 8, name + ".weights", [p.int(6), p.int(5)], out)
            _weights(p, 9, name + ".bias", [p.int(6)], out)
        elif layer.has(150):
            p = layer.msg(150)
            _weights(p, 20, name + ".weights", [p.int(2), p.int(1)], out)
            _weights(p, 21, name + ".bias", [p.int(2)], out)
        else:
            _counted(layer, name, out)
    return out


# MIL DataType -> numpy dtype; STRING (2) is not a tensor.
MIL_DTYPES = {1: "|b1", 10: "<f2", 11: "<f4", 12: "<f8", 21: "i1", 22: "<i2", 23: "<i4", 24: "<i8",
              31: "u1", 32: "<u2", 33: "<u4", 34: "<u8"}


def _const_values(value, dtype, numel, weights):
    """A const Value's bytes: an immediate tensor or a weight.bin blob."""
    if value.has(5):
        blob = value.msg(5)
        name, offset = blob.text(1), blob.int(2)
        w = weights[name.removeprefix("@model_path/")]
        sentinel, _, size, data = struct.unpack_from("<IIQQ", w, offset)
        assert sentinel == SENTINEL
        return w[data:data + size]
    tensor = value.msg(3).msg(1)
    kind = next(k for k in range(1, 8) if tensor.has(k))
    holder = tensor.msg(kind)
    import numpy as np
    if kind in (1, 6, 7):  # floats, doubles, bytes: the packed payload
        return holder.bytes(1)[0] if holder.has(1) else b""
    values = holder.ints(1)
    if kind == 2:  # int32: sign-extended varints
        values = [v - (1 << 64) if v >= 1 << 63 else v for v in values]
    return np.array(values, dtype=dtype).tobytes()


def read_program(b, weights):
    """({name: (numpy dtype, shape, bytes)}, [string const names]) of an
    ML program's const operations; `weights` maps a blob file's name under
    @model_path/ to its bytes."""
    model = Msg(b)
    program = model.msg(502)
    functions = program.msgs(2)
    tensors, strings = {}, []

    def block(blk, prefix):
        for op in blk.msgs(3):
            for nested in op.msgs(4):
                block(nested, prefix)
            if op.text(1) != "const":
                continue
            name = prefix + op.msgs(3)[0].text(1)
            value = next(kv.msg(2) for kv in op.msgs(5) if kv.text(1) == "val")
            tt = value.msg(2).msg(1)
            code = tt.int(1)
            shape = [d.msg(1).int(1) for d in tt.msgs(3)]
            if code == 2:
                strings.append(name)
                continue
            numel = 1
            for d in shape:
                numel *= d
            tensors[name] = (MIL_DTYPES[code], shape, _const_values(value, MIL_DTYPES[code], numel, weights))

    for entry in functions:
        prefix = entry.text(1) + "/" if len(functions) > 1 else ""
        for spec in entry.msg(2).msgs(3):
            block(spec.msg(2), prefix)
    return tensors, strings


# ---- writing --------------------------------------------------------------

def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        c = n & 0x7F
        n >>= 7
        out.append(c | (0x80 if n else 0))
        if not n:
            return bytes(out)


def key(number, kind):
    return varint(number << 3 | kind)


def vfield(number, value):
    return key(number, 0) + varint(value)


def lfield(number, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return key(number, 2) + varint(len(payload)) + payload


def packed(number, values):
    return lfield(number, b"".join(varint(v) for v in values))


def description(inputs=("x",), outputs=("y",)):
    feature = lambda n: lfield(1, n) + lfield(3, lfield(5, packed(1, [4])))  # multiArray of 4
    return b"".join(lfield(1, feature(n)) for n in inputs) + b"".join(lfield(10, feature(n)) for n in outputs)


def weight_params(values, kind):
    """WeightParams holding `values` (bytes) in field `kind` (1 floatValue
    packed, 2 float16Value, 30 rawValue, 31 int8RawValue)."""
    return lfield(kind, values)


def inner_product(name, c_out, c_in, weights, bias=None):
    params = vfield(1, c_in) + vfield(2, c_out) + lfield(20, weights)
    if bias is not None:
        params += vfield(10, 1) + lfield(21, bias)
    return lfield(1, name) + lfield(2, "x") + lfield(3, name + "_out") + lfield(140, params)


def convolution(name, c_out, kernel_channels, kh, kw, weights, bias=None):
    params = vfield(1, c_out) + vfield(2, kernel_channels) + packed(20, [kh, kw]) + lfield(90, weights)
    if bias is not None:
        params += vfield(70, 1) + lfield(91, bias)
    return lfield(1, name) + lfield(2, "x") + lfield(3, name + "_out") + lfield(100, params)


def layer(name, number, params):
    """A layer `name` whose params are field `number`."""
    return lfield(1, name) + lfield(2, "x") + lfield(3, name + "_out") + lfield(number, params)


def nn_model(layers, spec=4, field=500):
    """A .mlmodel: specificationVersion, a description, a neural network of `layers`."""
    net = b"".join(lfield(1, layer) for layer in layers)
    return vfield(1, spec) + lfield(2, description()) + lfield(field, net)


def tensor_type(code, shape):
    dims = b"".join(lfield(3, lfield(1, vfield(1, d))) for d in shape)
    return lfield(1, vfield(1, code) + vfield(2, len(shape)) + dims)


def const_op(name, code, shape, value):
    """A const operation whose val is the Value payload `value` (without its type)."""
    val = lfield(2, tensor_type(code, shape)) + value
    attribute = lfield(1, "val") + lfield(2, val)
    return lfield(1, "const") + lfield(3, lfield(1, name) + lfield(2, tensor_type(code, shape))) + lfield(5, attribute)


def blob_value(offset, file="@model_path/weights/weight.bin"):
    return lfield(5, lfield(1, file) + vfield(2, offset))


def immediate_bytes(data):
    return lfield(3, lfield(1, lfield(7, lfield(1, data))))


def immediate_ints(values):
    return lfield(3, lfield(1, lfield(2, packed(1, values))))


def program_model(ops, functions=None):
    """A .mlmodel holding an ML program: one function "main" (opset
    CoreML5) of `ops`, or `functions` ({name: ops})."""
    entries = b""
    for name, function_ops in (functions or {"main": ops}).items():
        block = lfield(2, "y") + b"".join(lfield(3, op) for op in function_ops)
        function = lfield(2, "CoreML5") + lfield(3, lfield(1, "CoreML5") + lfield(2, block))
        entries += lfield(2, lfield(1, name) + lfield(2, function))
    return vfield(1, 6) + lfield(2, description()) + lfield(502, vfield(1, 1) + entries)


def weight_file(blobs, mil_dtypes):
    """weight.bin holding `blobs` (bytes each) with blob dtype codes
    `mil_dtypes`: the 64-byte header, then per blob its 64-byte record and
    its data on a 64-byte boundary. Returns (bytes, [record offsets])."""
    out = bytearray(struct.pack("<II", len(blobs), 2) + bytes(56))
    records = []
    for data, code in zip(blobs, mil_dtypes):
        records.append(len(out))
        data_at = len(out) + 64
        out += struct.pack("<IIQQQ", SENTINEL, code, len(data), data_at, 0) + bytes(32)
        out += data
        out += bytes(-len(out) % 64)
    return bytes(out), records


def package(root, model, weights=None, author="com.apple.CoreML"):
    """An .mlpackage folder at `root`: Manifest.json naming Data/AUTHOR/model.mlmodel."""
    import json
    data = root / "Data" / author
    (data / "weights").mkdir(parents=True)
    (data / "model.mlmodel").write_bytes(model)
    if weights is not None:
        (data / "weights" / "weight.bin").write_bytes(weights)
    manifest = {"fileFormatVersion": "1.0.0", "rootModelIdentifier": "ROOT",
                "itemInfoEntries": {"ROOT": {"author": author, "description": "CoreML Model Specification",
                                             "name": "model.mlmodel", "path": f"{author}/model.mlmodel"}}}
    (root / "Manifest.json").write_text(json.dumps(manifest))
    return root
