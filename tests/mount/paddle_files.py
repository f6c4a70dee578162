# SPDX-License-Identifier: Apache-2.0
"""PaddlePaddle files written and read in plain Python, from the layouts
docs/formats.md ("PaddlePaddle") gives and Paddle's framework.proto field
numbers, for the mount tests, the hostile corpus and the fuzz seeds
(paddle is not installed, and none of this goes through modelfs).

Writer: a ProgramDesc (one block: feed and fetch vars and ops, the
parameters as persistable LOD_TENSOR vars), tensor streams (version,
LoD levels, TensorDesc, data), the combined file (streams in sorted name
order) and per-var files.
Reader (the oracle for the real files): the program's vars, and each
stream's data type, dims and data range."""
import struct

import numpy as np

from tfckpt_bundle import _fields
from tfckpt_bundle import _read_varint as read_varint
from tfckpt_bundle import f_bytes as field_bytes
from tfckpt_bundle import f_varint as field_varint

# VarType.Type data type codes and var types (framework.proto).
CODES = {np.dtype(np.bool_): 0, np.dtype(np.int16): 1, np.dtype(np.int32): 2, np.dtype(np.int64): 3,
         np.dtype(np.float16): 4, np.dtype(np.float32): 5, np.dtype(np.float64): 6, np.dtype(np.uint8): 20,
         np.dtype(np.int8): 21, np.dtype(np.complex64): 23, np.dtype(np.complex128): 24}
DTYPES = {code: dtype for dtype, code in CODES.items()}
LOD_TENSOR, FEED_MINIBATCH, FETCH_LIST, RAW = 7, 9, 10, 17


# -- protobuf wire format (the writers and varint reader of tfckpt_bundle.py) --

def fields(data):
    """[(number, value)] of a message: ints, or bytes payloads."""
    return list(_fields(data))


def signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def ints(items):
    """A repeated int64 field's values, packed (bytes) or not."""
    out = []
    for value in items:
        if isinstance(value, int):
            out.append(signed(value))
        else:
            at = 0
            while at < len(value):
                v, at = read_varint(value, at)
                out.append(signed(v))
    return out


# -- writer ------------------------------------------------------------------

def tensor_desc(code, dims):
    return field_varint(1, code) + b"".join(field_varint(2, d) for d in dims)


def var_desc(name, var_type, persistable, code=None, dims=None):
    vtype = field_varint(1, var_type)
    if code is not None:
        vtype += field_bytes(3, field_bytes(1, tensor_desc(code, dims)) + field_varint(2, 0))
    return field_bytes(1, name.encode()) + field_bytes(2, vtype) + field_varint(3, int(persistable))


def op_desc(op_type, inputs, outputs):
    def args(number, slots):
        return b"".join(field_bytes(number, field_bytes(1, slot.encode()) +
                                    b"".join(field_bytes(2, a.encode()) for a in names))
                        for slot, names in slots.items())
    return args(1, inputs) + args(2, outputs) + field_bytes(3, op_type.encode())


def program(params, extra_vars=b"", declared=None):
    """A ProgramDesc naming `params` ({name: array}) as persistable vars,
    with an input `x`, an output `y`, and a feed and a fetch op.
    `declared` ({name: (code, dims)}) overrides what a var declares."""
    declared = declared or {}
    block = field_varint(1, 0) + field_varint(2, -1)
    block += field_bytes(3, var_desc("feed", FEED_MINIBATCH, True))
    block += field_bytes(3, var_desc("fetch", FETCH_LIST, True))
    block += field_bytes(3, var_desc("x", LOD_TENSOR, False, 5, [-1, 4]))
    block += field_bytes(3, var_desc("y", LOD_TENSOR, False, 5, [-1, 4]))
    for name, array in params.items():
        code, dims = declared.get(name, (CODES[array.dtype], list(array.shape)))
        block += field_bytes(3, var_desc(name, LOD_TENSOR, True, code, dims))
    block += extra_vars
    block += field_bytes(4, op_desc("feed", {"X": ["feed"]}, {"Out": ["x"]}))
    block += field_bytes(4, op_desc("fetch", {"X": ["y"]}, {"Out": ["fetch"]}))
    return field_bytes(1, block) + field_bytes(4, field_varint(1, 2006000))


def stream(array, lod=(), dims=None, code=None):
    """A LoDTensor stream of `array` (`dims`/`code` to lie about it)."""
    array = np.array(array, order="C")  # (ascontiguousarray makes a 0-d array 1-d)
    desc = tensor_desc(CODES[array.dtype] if code is None else code, list(array.shape) if dims is None else dims)
    out = struct.pack("<IQ", 0, len(lod))
    for level in lod:
        out += struct.pack("<Q", 8 * len(level)) + struct.pack(f"<{len(level)}Q", *level)
    out += struct.pack("<Ii", 0, len(desc)) + desc
    return out + array.astype(array.dtype.newbyteorder("<")).tobytes()


def combined(params):
    """save_combine: the streams in sorted name order."""
    return b"".join(stream(params[name]) for name in sorted(params))


def write_model(folder, params, layout, stem="model"):
    """Writes a model of `params`: `combined` as STEM.pdmodel + STEM.pdiparams,
    `legacy` as __model__ + __params__, `separate` as __model__ and one file
    per var. Returns the program's path."""
    folder.mkdir(parents=True, exist_ok=True)
    if layout == "combined":
        (folder / f"{stem}.pdiparams").write_bytes(combined(params))
        path = folder / f"{stem}.pdmodel"
    else:
        path = folder / "__model__"
        if layout == "legacy":
            (folder / "__params__").write_bytes(combined(params))
        else:
            for name, array in params.items():
                (folder / name).write_bytes(stream(array))
    path.write_bytes(program(params))
    return path


# -- reader (oracle) ---------------------------------------------------------

def program_vars(data):
    """[(name, var type, persistable, (code, dims) or None)] of every block, each name once."""
    out, seen = [], set()
    for number, block in fields(data):
        if number != 1:
            continue
        for n, var in fields(block):
            if n != 3:
                continue
            f = fields(var)
            name = next(v for k, v in f if k == 1).decode()
            vtype = fields(next(v for k, v in f if k == 2))
            var_type = next(v for k, v in vtype if k == 1)
            persistable = any(k == 3 and v for k, v in f)
            desc = None
            for k, lod in vtype:
                if k == 3:
                    t = fields(next(v for kk, v in fields(lod) if kk == 1))
                    desc = (next(v for kk, v in t if kk == 1), ints([v for kk, v in t if kk == 2]))
            if name not in seen:
                seen.add(name)
                out.append((name, var_type, persistable, desc))
    return out


def saved_vars(data):
    """The names of the vars Paddle saves, in program order."""
    return [name for name, var_type, persistable, _ in program_vars(data)
            if persistable and var_type not in (FEED_MINIBATCH, FETCH_LIST, 15, RAW)]


def read_stream(data, at):
    """(numpy dtype, dims, data offset, data size, end) of the stream at `at`."""
    version, lod = struct.unpack_from("<IQ", data, at)
    assert version == 0
    at += 12
    for _ in range(lod):
        (n,) = struct.unpack_from("<Q", data, at)
        at += 8 + n
    version, size = struct.unpack_from("<Ii", data, at)
    assert version == 0
    at += 8
    t = fields(data[at:at + size])
    at += size
    dtype = DTYPES[next(v for k, v in t if k == 1)]
    dims = ints([v for k, v in t if k == 2])
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    return dtype, dims, at, nbytes, at + nbytes


def expected_model(program_path):
    """[(name, numpy dtype, dims, raw bytes)] as a correct reader sees the
    model of `program_path`: combined file when there is one, else per-var files."""
    folder = program_path.parent
    names = saved_vars(program_path.read_bytes())
    params = folder / ("__params__" if program_path.name == "__model__" else program_path.stem + ".pdiparams")
    out = []
    if params.exists():
        data, at = params.read_bytes(), 0
        for name in sorted(names):
            dtype, dims, start, n, at = read_stream(data, at)
            out.append((name, dtype, dims, data[start:start + n]))
        assert at == len(data)
    else:
        for name in names:
            data = (folder / name).read_bytes()
            dtype, dims, start, n, end = read_stream(data, 0)
            assert end == len(data)
            out.append((name, dtype, dims, data[start:start + n]))
    return out
