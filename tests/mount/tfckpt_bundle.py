# SPDX-License-Identifier: Apache-2.0
"""The tests' own TensorFlow checkpoint bundle writer and reader
(docs/formats.md, "TensorFlow checkpoint bundles"), written from the format's
description, independent of modelfs: the writer makes bundles with every
feature the tests need (restarts every 16 keys, prefix-compressed keys,
snappy blocks, several data shards, DT_STRING, partitioned variables), the
reader is the oracle for the real bundles."""
import struct

import numpy as np

try:
    import snappy
except ImportError:  # python3-snappy (scripts/deps.sh TEST)
    snappy = None

MAGIC = 0xdb4775248b80fb57

# DataType codes and their numpy types (as stored, little-endian).
DT = {
    "float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6, "string": 7,
    "complex64": 8, "int64": 9, "bool": 10, "bfloat16": 14, "uint16": 17, "complex128": 18,
    "float16": 19, "uint32": 22, "uint64": 23,
}
NUMPY_OF = {1: "<f4", 2: "<f8", 3: "<i4", 4: "u1", 5: "<i2", 6: "i1", 8: "<c8", 9: "<i8", 10: "?",
            11: "i1", 12: "u1", 13: "<i4", 14: "<u2", 15: "<i2", 16: "<u2", 17: "<u2", 18: "<c16",
            19: "<f2", 22: "<u4", 23: "<u8"}


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = (crc >> 8) ^ _TABLE[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF


def mask(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


# -- protobuf, by hand ---------------------------------------------------------

def f_varint(number, value):
    return varint(number << 3) + varint(value)


def f_bytes(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def f_fixed32(number, value):
    return varint(number << 3 | 5) + struct.pack("<I", value)


def header_proto(num_shards=1, endianness=0, producer=1, min_consumer=0):
    out = f_varint(1, num_shards)
    if endianness:
        out += f_varint(2, endianness)
    version = f_varint(1, producer) + (f_varint(2, min_consumer) if min_consumer else b"")
    return out + f_bytes(3, version)


def shape_proto(shape):
    return b"".join(f_bytes(2, f_varint(1, d)) for d in shape)


def slice_proto(slice_):
    """slice_: [(start, length or None)] per dimension."""
    out = b""
    for start, length in slice_:
        extent = (f_varint(1, start) if start else b"") + (f_varint(2, length) if length is not None else b"")
        out += f_bytes(1, extent)
    return out


def entry_proto(dtype, shape, shard_id=0, offset=0, size=0, crc=0, slices=()):
    out = f_varint(1, dtype) + f_bytes(2, shape_proto(shape))
    if shard_id:
        out += f_varint(3, shard_id)
    if offset:
        out += f_varint(4, offset)
    if size:
        out += f_varint(5, size)
    if not slices:
        out += f_fixed32(6, crc)
    for s in slices:
        out += f_bytes(7, slice_proto(s))
    return out


# -- slice keys (OrderedCode) ----------------------------------------------------

def _num_increasing(n):
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return bytes([len(raw)]) + raw


def _signed_num_increasing(v):
    x = ~v if v < 0 else v
    length = 1
    while length < 10 and x >= 1 << (7 * length - 1):
        length += 1
    raw = (v & ((1 << (8 * length)) - 1)).to_bytes(length, "big")
    header = ((1 << length) - 1) << (8 * length - length)
    return (int.from_bytes(raw, "big") ^ header).to_bytes(length, "big")


def slice_key(name, slice_):
    """EncodeTensorNameSlice: slice_ [(start, length or None)]."""
    escaped = name.encode().replace(b"\xff", b"\xff\x00").replace(b"\x00", b"\x00\xff")
    out = b"\x00" + escaped + b"\x00\x01" + _num_increasing(len(slice_))
    for start, length in slice_:
        out += _signed_num_increasing(start) + _signed_num_increasing(-1 if length is None else length)
    return out


# -- the table -----------------------------------------------------------------

def block(entries, restart_interval=16):
    out, restarts, last = bytearray(), [], b""
    for i, (key, value) in enumerate(entries):
        shared = 0
        if i % restart_interval == 0:
            restarts.append(len(out))
        else:
            while shared < min(len(key), len(last)) and key[shared] == last[shared]:
                shared += 1
        out += varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value
        last = key
    if not restarts:
        restarts = [0]
    for r in restarts:
        out += struct.pack("<I", r)
    return bytes(out + struct.pack("<I", len(restarts)))


def trailer(contents, kind):
    return bytes([kind]) + struct.pack("<I", mask(crc32c(contents + bytes([kind]))))


def table(entries, compress=False, block_entries=1000, restart_interval=16):
    """An SSTable of sorted (key, value) pairs, `block_entries` entries a data block."""
    entries = sorted(entries)
    out, index = bytearray(), []

    def put(contents, snappy_it):
        kind = 0
        if snappy_it:
            contents, kind = snappy.compress(contents), 1
        handle = varint(len(out)) + varint(len(contents))
        out.extend(contents + trailer(contents, kind))
        return handle

    for i in range(0, len(entries), block_entries):
        chunk = entries[i:i + block_entries]
        index.append((chunk[-1][0], put(block(chunk, restart_interval), compress)))
    meta = put(block([]), False)
    idx = put(block(index, 1), False)
    footer = (meta + idx).ljust(40, b"\0") + struct.pack("<II", MAGIC & 0xFFFFFFFF, MAGIC >> 32)
    return bytes(out + footer)


class Bundle:
    """Tensors added in any order; write() lays out data shards and the index."""

    def __init__(self, num_shards=1):
        self.num_shards = num_shards
        self.data = [bytearray() for _ in range(num_shards)]
        self.entries = {}

    def _store(self, shard, payload):
        offset = len(self.data[shard])
        self.data[shard] += payload
        return offset

    def add(self, name, array, shard=0, dtype=None):
        array = np.array(array, order="C")  # ascontiguousarray makes a 0-d array 1-d
        dtype = dtype or DT[str(array.dtype)]
        raw = array.tobytes()
        offset = self._store(shard, raw)
        self.entries[name.encode() if isinstance(name, str) else name] = entry_proto(
            dtype, array.shape, shard, offset, len(raw), mask(crc32c(raw)))

    def add_strings(self, name, strings, shape=None, shard=0):
        shape = [len(strings)] if shape is None else shape
        lengths = b"".join(varint(len(s)) for s in strings)
        lengths_crc = 0
        for s in strings:
            lengths_crc = crc32c(struct.pack("<I", len(s)), lengths_crc)
        checksum = struct.pack("<I", mask(lengths_crc))
        body = b"".join(strings)
        entry_crc = crc32c(body, crc32c(checksum, lengths_crc))
        payload = lengths + checksum + body
        offset = self._store(shard, payload)
        self.entries[name.encode()] = entry_proto(7, shape, shard, offset, len(payload), mask(entry_crc))

    def add_partitioned(self, name, array, slices, shards=None):
        """slices: [[(start, length or None)] per dim]; each slice's data stored
        under its own key, in shard shards[i]."""
        for i, s in enumerate(slices):
            index = tuple(slice(a, None if n is None else a + n) for a, n in s)
            part = np.array(array[index], order="C")
            raw = part.tobytes()
            shard = shards[i] if shards else 0
            offset = self._store(shard, raw)
            self.entries[slice_key(name, s)] = entry_proto(
                DT[str(array.dtype)], part.shape, shard, offset, len(raw), mask(crc32c(raw)))
        self.entries[name.encode()] = entry_proto(DT[str(array.dtype)], array.shape, slices=slices)

    def write(self, folder, prefix="model", compress=False, block_entries=1000, header=None):
        entries = [(b"", header if header is not None else header_proto(self.num_shards))]
        entries += list(self.entries.items())
        index = folder / f"{prefix}.index"
        index.write_bytes(table(entries, compress, block_entries))
        for i, data in enumerate(self.data):
            (folder / f"{prefix}.data-{i:05d}-of-{self.num_shards:05d}").write_bytes(bytes(data))
        return index


# -- the reader (the oracle for real bundles) --------------------------------------

def _read_varint(data, pos):
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def _fields(data):
    pos = 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 2:
            n, pos = _read_varint(data, pos)
            value, pos = data[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = struct.unpack_from("<I", data, pos)[0], pos + 4
        elif wire == 1:
            value, pos = struct.unpack_from("<Q", data, pos)[0], pos + 8
        else:
            raise ValueError("wire type %d" % wire)
        yield number, value


def _read_block(data, offset, size):
    contents, kind = data[offset:offset + size], data[offset + size]
    assert struct.unpack_from("<I", data, offset + size + 1)[0] == mask(crc32c(contents + bytes([kind])))
    if kind == 1:
        contents = snappy.uncompress(contents)
    n = struct.unpack_from("<I", contents, len(contents) - 4)[0]
    end, pos, key = len(contents) - 4 - 4 * n, 0, b""
    while pos < end:
        shared, pos = _read_varint(contents, pos)
        non_shared, pos = _read_varint(contents, pos)
        length, pos = _read_varint(contents, pos)
        key = key[:shared] + contents[pos:pos + non_shared]
        pos += non_shared
        yield key, contents[pos:pos + length]
        pos += length


def read_entries(index_path):
    """[(key, value bytes)] of an .index, in order."""
    data = index_path.read_bytes()
    footer = data[-48:]
    assert struct.unpack_from("<Q", footer, 40)[0] == MAGIC
    pos = 0
    _, pos = _read_varint(footer, pos)
    _, pos = _read_varint(footer, pos)
    index_offset, pos = _read_varint(footer, pos)
    index_size, pos = _read_varint(footer, pos)
    out = []
    for _, handle in _read_block(data, index_offset, index_size):
        offset, p = _read_varint(handle, 0)
        size, _ = _read_varint(handle, p)
        out.extend(_read_block(data, offset, size))
    return out


def parse_entry(value):
    e = {"dtype": 0, "shape": [], "shard_id": 0, "offset": 0, "size": 0, "slices": []}
    for number, v in _fields(value):
        if number == 1:
            e["dtype"] = v
        elif number == 2:
            e["shape"] = [dict(_fields(d)).get(1, 0) for n, d in _fields(v) if n == 2]
        elif number in (3, 4, 5):
            e[{3: "shard_id", 4: "offset", 5: "size"}[number]] = v
        elif number == 7:
            e["slices"].append(v)
    return e


def read_bundle(index_path):
    """{key: numpy array, or list of bytes for DT_STRING} of a bundle without
    partitioned variables, and the header's fields."""
    entries = read_entries(index_path)
    assert entries[0][0] == b""
    header = dict(_fields(entries[0][1]))
    prefix = str(index_path)[:-len(".index")]
    shards = header.get(1, 0)
    out = {}
    for key, value in entries[1:]:
        e = parse_entry(value)
        with open(f"{prefix}.data-{e['shard_id']:05d}-of-{shards:05d}", "rb") as f:
            f.seek(e["offset"])
            raw = f.read(e["size"])
        if e["dtype"] == 7:
            n = int(np.prod(e["shape"])) if e["shape"] else 1
            lengths, pos = [], 0
            for _ in range(n):
                length, pos = _read_varint(raw, pos)
                lengths.append(length)
            pos += 4
            strings = []
            for length in lengths:
                strings.append(raw[pos:pos + length])
                pos += length
            out[key.decode()] = strings
        else:
            out[key.decode()] = np.frombuffer(raw, NUMPY_OF[e["dtype"]]).reshape(e["shape"])
    return out, header
