# SPDX-License-Identifier: Apache-2.0
"""The legacy GGML family (docs/formats.md, "Legacy GGML"), from its
documentation and independent of modelfs: a parser of the headers and tensor
records (the tests' oracle), a writer of each program's layout (variants the
real files lack, and the hostile corpus's cases), and ggml's dequantization
of q4_0, q4_1, q5_0, q5_1 and q8_0 from ggml's published block layouts
(ggml-common.h's block structs, ggml-quants.c's dequantize_row_*)."""
import struct

import numpy as np

MAGIC = {b"lmgg": "ggml", b"fmgg": "ggmf", b"tjgg": "ggjt"}
# ggml_type id -> (name, block size, bytes per block)
GGML = {0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
        6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34)}
# rwkv.cpp's own codes -> ggml_type ids (rwkv.cpp docs/FILE_FORMAT.md)
RWKV_TO_GGML = {0: 0, 1: 1, 2: 2, 3: 3, 7: 6, 8: 7, 9: 8}
GGML_TO_RWKV = {v: k for k, v in RWKV_TO_GGML.items()}
PLAIN = {0: np.float32, 1: np.float16}


class Bad(Exception):
    pass


class Reader:
    def __init__(self, data, at):
        self.data, self.at = data, at

    def left(self):
        return len(self.data) - self.at

    def take(self, n):
        if n < 0 or n > self.left():
            raise Bad(f"{n} bytes at {self.at} past the end")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def i32(self):
        return struct.unpack("<i", self.take(4))[0]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]


class Record:
    def __init__(self, name, type_id, shape, offset, nbytes, code):
        self.name, self.type_id, self.shape = name, type_id, shape
        self.offset, self.nbytes, self.code = offset, nbytes, code

    @property
    def type_name(self):
        return GGML[self.type_id][0]

    @property
    def dtype(self):
        return {0: "float32", 1: "float16"}.get(self.type_id, self.type_name)


def _whisper(r):
    hp = [r.i32() for _ in range(11)]
    n_mel, n_fft = r.i32(), r.i32()
    r.take(4 * n_mel * n_fft)
    n = r.i32()
    for _ in range(n):
        r.take(r.u32())
    return {"layout": "whisper", "n_vocab": hp[0], "ftype": hp[10], "vocab_size": n, "arrays": True}


def _silero(r):
    kind = r.take(r.i32())
    if not kind or not all(0x20 <= c < 0x7F for c in kind):
        raise Bad("no model type")
    version = [r.i32() for _ in range(3)]
    r.i32(), r.i32()
    layers = r.i32()
    r.take(12 * layers)
    r.take(16)
    return {"layout": "silero_vad", "model_type": kind.decode(), "version": version, "arrays": False}


def _parakeet(r):
    hp = [r.i32() for _ in range(15)]
    n_mel, n_fb = r.i32(), r.i32()
    r.take(4 * n_mel * n_fb)
    r.take(4 * r.i32())
    r.take(4 * hp[13])
    n = r.i32()
    for _ in range(n):
        r.take(r.i32())
    return {"layout": "parakeet", "n_vocab": hp[0], "vocab_size": n, "arrays": True}


def _llama(r, scores):
    hp = [r.u32() for _ in range(7)]
    for _ in range(hp[0]):
        r.take(r.u32())
        if scores:
            r.take(4)
    return {"layout": "llama", "n_vocab": hp[0], "vocab_size": hp[0], "ftype": hp[6], "arrays": False}


def _records(r, *, aligned=False, rwkv=False, dims=(0, 4)):
    out = []
    while r.left():
        n_dims, name_len, code = r.i32(), r.i32(), r.i32()
        if not dims[0] <= n_dims <= dims[1] or name_len <= 0:
            raise Bad(f"record at {r.at - 12}")
        ne = [r.i32() for _ in range(n_dims)]
        name = r.take(name_len).decode("utf-8", "surrogateescape")
        type_id = RWKV_TO_GGML.get(code) if rwkv else code
        if type_id not in GGML:
            raise Bad(f"type {code}")
        _, block, size = GGML[type_id]
        count = int(np.prod(ne, dtype=np.int64)) if ne else 1
        if aligned:
            r.take(-r.at & 31)
        nbytes = count // block * size
        out.append(Record(name, type_id, ne[::-1], r.at, nbytes, code))
        r.take(nbytes)
    return out


def parse(data):
    """{"layout", "magic", "version", "records_at", "records", ...}: the file
    as its documentation says; raises Bad when no layout takes it whole."""
    magic = MAGIC.get(data[:4])
    if magic is None:
        raise Bad("no magic")
    if magic == "ggml":
        found = []
        for read in (_whisper, _silero, _parakeet, lambda r: _llama(r, False)):
            r = Reader(data, 4)
            try:
                info = read(r)
                info["records_at"] = r.at
                dims = (1, 2) if info["layout"] == "llama" else (0, 4)
                info["records"] = _records(r, dims=dims)
                found.append(info)
            except (Bad, struct.error, UnicodeDecodeError):
                pass
        if len(found) != 1:
            raise Bad(f"{len(found)} layouts")
        info = found[0]
        info.update(magic=magic, version=None)
        return info
    r = Reader(data, 8)
    version = struct.unpack_from("<I", data, 4)[0]
    if magic == "ggmf" and version in (100, 101):
        n_vocab, n_embed, n_layer, data_type = (r.u32() for _ in range(4))
        info = {"layout": "rwkv", "vocab_size": n_vocab, "n_embed": n_embed, "n_layer": n_layer,
                "arrays": False, "records_at": r.at}
        info["records"] = _records(r, rwkv=True, dims=(1, 3))
    else:
        info = _llama(r, True)
        info["records_at"] = r.at
        info["records"] = _records(r, aligned=magic == "ggjt", dims=(1, 2))
    info.update(magic=magic, version=version)
    return info


# ---- dequantization, from ggml's block layouts -------------------------------

def _f16(raw, at):
    return np.frombuffer(raw[at:at + 2], "<f2")[0].astype(np.float32)


def _nibbles(qs):
    """The 32 4-bit values of 16 bytes: low nibbles are the block's first half."""
    qs = np.frombuffer(qs, np.uint8)
    return np.concatenate([qs & 15, qs >> 4]).astype(np.int32)


def _high_bits(qh):
    bits = struct.unpack("<I", qh)[0]
    return np.array([(bits >> j) & 1 for j in range(32)], np.int32) << 4


def dequantize(type_id, raw):
    """float32 values of ggml blocks of type `type_id`."""
    name, block, size = GGML[type_id]
    out = []
    for at in range(0, len(raw), size):
        b = raw[at:at + size]
        if name == "q4_0":
            q = _nibbles(b[2:18])
            out.append((q - 8).astype(np.float32) * _f16(b, 0))
        elif name == "q4_1":
            q = _nibbles(b[4:20])
            out.append(q.astype(np.float32) * _f16(b, 0) + _f16(b, 2))
        elif name == "q5_0":
            q = _nibbles(b[6:22]) | _high_bits(b[2:6])
            out.append((q - 16).astype(np.float32) * _f16(b, 0))
        elif name == "q5_1":
            q = _nibbles(b[8:24]) | _high_bits(b[4:8])
            out.append(q.astype(np.float32) * _f16(b, 0) + _f16(b, 2))
        elif name == "q8_0":
            out.append(np.frombuffer(b[2:34], np.int8).astype(np.float32) * _f16(b, 0))
        else:
            raise ValueError(name)
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def values(record, data):
    """The record's values as its .npy must hold them."""
    raw = data[record.offset:record.offset + record.nbytes]
    if record.type_id in PLAIN:
        return np.frombuffer(raw, PLAIN[record.type_id]).reshape(record.shape)
    return dequantize(record.type_id, raw).reshape(record.shape)


# ---- writers -------------------------------------------------------------------

def random_blocks(type_id, count, seed):
    """`count` values of type `type_id` as stored bytes: plain values, or
    blocks with finite f16 scales and random quants."""
    rng = np.random.default_rng(seed)
    name, block, size = GGML[type_id]
    if type_id in PLAIN:
        return rng.standard_normal(count).astype(PLAIN[type_id]).tobytes()
    out = bytearray()
    for _ in range(count // block):
        scales = np.array(rng.uniform(0.01, 0.5, 2), "<f2").tobytes()
        head = {"q4_0": 2, "q4_1": 4, "q5_0": 2, "q5_1": 4, "q8_0": 2}[name]
        out += scales[:head] + rng.integers(0, 256, size - head, dtype=np.uint8).tobytes()
    return bytes(out)


def record(name, code, shape, data, *, at=None, aligned=False):
    """One tensor record; `shape` outermost first (stored reversed); `at`
    (for 'ggjt') the file offset the record starts at."""
    name = name.encode() if isinstance(name, str) else name
    head = struct.pack("<iii", len(shape), len(name), code) + struct.pack(f"<{len(shape)}i", *shape[::-1]) + name
    pad = b""
    if aligned:
        pad = b"\0" * (-(at + len(head)) & 31)
    return head + pad + data


def records(tensors, start, *, aligned=False, rwkv=False):
    """Bytes of (name, ggml type id, shape, data) records from file offset `start`."""
    out = bytearray()
    for name, type_id, shape, data in tensors:
        code = GGML_TO_RWKV[type_id] if rwkv else type_id
        out += record(name, code, shape, data, at=start + len(out), aligned=aligned)
    return bytes(out)


def whisper(tensors, *, ftype=1, tokens=(b"a", b"bc"), n_mel=2, n_fft=3):
    hp = [len(tokens), 1500, 8, 2, 1, 448, 8, 2, 1, n_mel, ftype]
    head = b"lmgg" + struct.pack("<11i", *hp) + struct.pack("<ii", n_mel, n_fft)
    head += np.arange(n_mel * n_fft, dtype="<f4").tobytes() + struct.pack("<i", len(tokens))
    head += b"".join(struct.pack("<I", len(t)) + t for t in tokens)
    return head + records(tensors, len(head))


def llama(tensors, *, magic=b"tjgg", version=3, tokens=(b"<unk>", b"\xe2\x96\x81a"), ftype=2):
    head = magic + (struct.pack("<I", version) if version is not None else b"")
    head += struct.pack("<7I", len(tokens), 64, 256, 2, 1, 32, ftype)
    for i, t in enumerate(tokens):
        head += struct.pack("<I", len(t)) + t + (struct.pack("<f", -i) if magic != b"lmgg" else b"")
    return head + records(tensors, len(head), aligned=magic == b"tjgg")


def rwkv(tensors, *, version=101, data_type=7):
    head = b"fmgg" + struct.pack("<5I", version, 256, 64, 1, data_type)
    return head + records(tensors, len(head), rwkv=True)
