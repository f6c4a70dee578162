# SPDX-License-Identifier: Apache-2.0
"""A safetensors writer for the tests, written from the format's spec
(docs/formats.md, "safetensors"), independent of modelfs. Tensors are given as numpy arrays,
or as (dtype code, shape, raw bytes) for types numpy lacks."""
import json
import struct

import numpy as np

NUMPY_CODES = {
    np.dtype("bool"): "BOOL", np.dtype("uint8"): "U8", np.dtype("int8"): "I8",
    np.dtype("int16"): "I16", np.dtype("uint16"): "U16", np.dtype("float16"): "F16",
    np.dtype("int32"): "I32", np.dtype("uint32"): "U32", np.dtype("float32"): "F32",
    np.dtype("complex64"): "C64", np.dtype("float64"): "F64", np.dtype("int64"): "I64",
    np.dtype("uint64"): "U64",
}

# dtype code -> (canonical modelfs name, bits per element)
CODES = {
    "BOOL": ("bool", 8), "F4": ("float4_e2m1", 4), "F6_E2M3": ("float6_e2m3fn", 6),
    "F6_E3M2": ("float6_e3m2fn", 6), "U8": ("uint8", 8), "I8": ("int8", 8),
    "F8_E5M2": ("float8_e5m2", 8), "F8_E4M3": ("float8_e4m3fn", 8),
    "F8_E8M0": ("float8_e8m0fnu", 8), "F8_E4M3FNUZ": ("float8_e4m3fnuz", 8),
    "F8_E5M2FNUZ": ("float8_e5m2fnuz", 8), "I16": ("int16", 16), "U16": ("uint16", 16),
    "F16": ("float16", 16), "BF16": ("bfloat16", 16), "I32": ("int32", 32),
    "U32": ("uint32", 32), "F32": ("float32", 32), "C64": ("complex64", 64),
    "F64": ("float64", 64), "I64": ("int64", 64), "U64": ("uint64", 64),
}


# metadata=NULL writes `"__metadata__": null`, as MLX does when there is none
# (None leaves the key out).
NULL = object()


class Raw:
    """A tensor of a dtype numpy lacks: its code, shape and packed bytes."""

    def __init__(self, code, shape, data):
        self.code, self.shape, self.data = code, list(shape), bytes(data)


def entry(value):
    if isinstance(value, Raw):
        return value.code, value.shape, value.data
    array = np.asarray(value)  # not ascontiguousarray: it turns 0-d into 1-d
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return NUMPY_CODES[array.dtype], list(array.shape), little.tobytes(order="C")


def to_bytes(tensors, metadata=None, align=8, order=None):
    """Serialises {name: array or Raw}. `order` lists names in data order
    (default: as given); the header is padded with spaces to `align`."""
    header, chunks, offset = {}, [], 0
    if metadata is NULL:
        header["__metadata__"] = None
    elif metadata is not None:
        header["__metadata__"] = metadata
    for name in order or list(tensors):
        code, shape, data = entry(tensors[name])
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, ensure_ascii=False).encode()
    text += b" " * ((-len(text)) % align)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def write(path, tensors, metadata=None, **kwargs):
    data = to_bytes(tensors, metadata, **kwargs)
    with open(path, "wb") as f:
        f.write(data)
    return path


def read_reference(path):
    """An independent reader for real files: {name: (code, shape, bytes)}, and metadata."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    metadata = header.pop("__metadata__", None)
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[begin:end])
    return out, metadata
