# SPDX-License-Identifier: Apache-2.0
"""A GGUF writer for the tests, written from the format's spec (docs/formats.md, "GGUF"),
independent of modelfs. Key-values are typed explicitly (Value, Array) so
every value type can be written; tensors are raw bytes with a ggml type id
and `ne` (fastest dimension first, as GGUF stores it)."""
import struct

import numpy as np

# Metadata value types (docs/formats.md, "GGUF metadata values").
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
SCALAR_FORMATS = {UINT8: "B", INT8: "b", UINT16: "H", INT16: "h", UINT32: "I", INT32: "i",
                  FLOAT32: "f", BOOL: "?", UINT64: "Q", INT64: "q", FLOAT64: "d"}
TYPE_NAMES = {UINT8: "uint8", INT8: "int8", UINT16: "uint16", INT16: "int16", UINT32: "uint32",
              INT32: "int32", FLOAT32: "float32", BOOL: "bool", STRING: "string", ARRAY: "array",
              UINT64: "uint64", INT64: "int64", FLOAT64: "float64"}

# ggml type id -> (lowercase name, elements per block, bytes per block)
# (docs/formats.md, "ggml types").
GGML_TYPES = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36),
    10: ("q2_k", 256, 84), 11: ("q3_k", 256, 110), 12: ("q4_k", 256, 144),
    13: ("q5_k", 256, 176), 14: ("q6_k", 256, 210), 15: ("q8_k", 256, 292),
    16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74), 18: ("iq3_xxs", 256, 98),
    19: ("iq1_s", 256, 50), 20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110),
    22: ("iq2_s", 256, 82), 23: ("iq4_xs", 256, 136), 24: ("i8", 1, 1), 25: ("i16", 1, 2),
    26: ("i32", 1, 4), 27: ("i64", 1, 8), 28: ("f64", 1, 8), 29: ("iq1_m", 256, 56),
    30: ("bf16", 1, 2), 34: ("tq1_0", 256, 54), 35: ("tq2_0", 256, 66), 39: ("mxfp4", 32, 17),
    40: ("nvfp4", 64, 36), 41: ("q1_0", 128, 18), 42: ("q2_0", 64, 18),
}
# Unblocked ggml types: id -> (canonical modelfs dtype, numpy dtype or None).
PLAIN = {0: ("float32", "<f4"), 1: ("float16", "<f2"), 24: ("int8", "|i1"),
         25: ("int16", "<i2"), 26: ("int32", "<i4"), 27: ("int64", "<i8"),
         28: ("float64", "<f8"), 30: ("bfloat16", None)}


class Value:
    """A scalar or string key-value of an explicit GGUF type."""

    def __init__(self, type_id, value):
        self.type_id, self.value = type_id, value


class Array:
    """An array of `element_type`; items are plain values, or Arrays when
    element_type is ARRAY."""

    def __init__(self, element_type, items):
        self.element_type, self.items = element_type, list(items)


class Tensor:
    def __init__(self, name, type_id, ne, data, offset=None):
        self.name, self.type_id, self.ne, self.data = name, type_id, list(ne), bytes(data)
        self.offset = offset  # relative to the data section; None: placed by the writer

    @property
    def shape(self):
        return list(reversed(self.ne))


def nbytes(type_id, ne):
    _, block, size = GGML_TYPES[type_id]
    ne0 = ne[0] if ne else 1
    assert ne0 % block == 0
    n = ne0 // block * size
    for dim in ne[1:]:
        n *= dim
    return n


def random_tensor(name, type_id, shape, seed):
    """A tensor of `shape` (outermost first) holding random bytes (random
    blocks for block types)."""
    ne = list(reversed(shape))
    data = np.random.default_rng(seed).integers(0, 256, nbytes(type_id, ne), dtype=np.uint8)
    return Tensor(name, type_id, ne, data.tobytes())


class _Out:
    def __init__(self, version):
        self.parts, self.width = [], "I" if version == 1 else "Q"

    def pack(self, fmt, *values):
        self.parts.append(struct.pack("<" + fmt, *values))

    def length(self, n):
        self.pack(self.width, n)

    def string(self, s):
        raw = s if isinstance(s, bytes) else s.encode("utf-8")
        self.length(len(raw))
        self.parts.append(raw)

    def value(self, type_id, value):
        if type_id == STRING:
            self.string(value)
        elif type_id == ARRAY:
            self.pack("I", value.element_type)
            self.length(len(value.items))
            for item in value.items:
                self.value(value.element_type, item)
        elif type_id == BOOL and not isinstance(value, bool):
            self.pack("B", value)  # lets a test write an invalid bool byte
        else:
            self.pack(SCALAR_FORMATS[type_id], value)

    def size(self):
        return sum(len(p) for p in self.parts)


def to_bytes(kvs, tensors, version=3, alignment=None):
    """kvs: a list of (key, Value | Array). With `alignment`, a UINT32
    general.alignment key is written first. Returns (file bytes, {name:
    absolute offset of its data})."""
    align = alignment or 32
    kvs = list(kvs)
    if alignment is not None:
        kvs.insert(0, ("general.alignment", Value(UINT32, alignment)))
    out = _Out(version)
    out.parts.append(b"GGUF")
    out.pack("I", version)
    out.length(len(tensors))
    out.length(len(kvs))
    for key, value in kvs:
        out.string(key)
        type_id = ARRAY if isinstance(value, Array) else value.type_id
        out.pack("I", type_id)
        out.value(type_id, value if isinstance(value, Array) else value.value)

    placed, cursor = [], 0
    for t in tensors:
        offset = t.offset if t.offset is not None else cursor
        placed.append(offset)
        cursor = max(cursor, -(-(offset + len(t.data)) // align) * align)
    for t, offset in zip(tensors, placed):
        out.string(t.name)
        out.pack("I", len(t.ne))
        for dim in t.ne:
            out.length(dim)
        out.pack("I", t.type_id)
        out.pack("Q", offset)
    head = b"".join(out.parts)
    if not tensors:
        return head, {}
    data_start = -(-len(head) // align) * align
    data = bytearray(cursor)
    for t, offset in zip(tensors, placed):
        data[offset:offset + len(t.data)] = t.data
    blob = head + b"\0" * (data_start - len(head)) + bytes(data)
    return blob, {t.name: data_start + offset for t, offset in zip(tensors, placed)}


def write(path, kvs, tensors, **kwargs):
    blob, offsets = to_bytes(kvs, tensors, **kwargs)
    with open(path, "wb") as f:
        f.write(blob)
    return path


def split_name(prefix, number, count):
    return f"{prefix}-{number:05d}-of-{count:05d}.gguf"


def write_split(folder, prefix, kvs, tensors, count, **kwargs):
    """Writes `tensors` over `count` files as llama.cpp's gguf-split does:
    every file gets split.no (u16), split.count (u16) and
    split.tensors.count (i32); the first also gets `kvs`. Returns the paths."""
    paths = []
    for i in range(count):
        share = tensors[i::count]
        split_kvs = [("split.no", Value(UINT16, i)), ("split.count", Value(UINT16, count)),
                     ("split.tensors.count", Value(INT32, len(tensors)))]
        path = folder / split_name(prefix, i + 1, count)
        write(path, (list(kvs) if i == 0 else []) + split_kvs, share, **kwargs)
        paths.append(path)
    return paths
