# SPDX-License-Identifier: Apache-2.0
"""What a tensor's .npy must hold where numpy lacks the stored type: the
tests' own decoders, written from the formats' definitions (docs/formats.md:
"safetensors dtypes", "ggml dequantization", "ONNX data types") and
independent of modelfs's code.

- float8_*, float6_*, float4_e2m1, float8_e8m0fnu, bfloat16 -> float32
  (exact); int4/int2 -> int8, uint4/uint2 -> uint8; sub-byte elements
  packed from the lowest bits of each byte up.
- ggml block types -> float32, following ggml's dequantize_row_* loops:
  the same float32 operations in the same order, so the values compare bit
  for bit (numpy float32 arithmetic rounds each operation as C does).

`expected(dtype_name, data, shape)` returns the array or None where the
.npy must not exist."""
import math

import numpy as np

F32 = np.float32

# ---- element types ------------------------------------------------------------

# name -> (exponent bits, mantissa bits, bias, specials)
SMALL_FLOATS = {
    "float8_e4m3fn": (4, 3, 7, "fn"),
    "float8_e4m3fnuz": (4, 3, 8, "fnuz"),
    "float8_e5m2": (5, 2, 15, "ieee"),
    "float8_e5m2fnuz": (5, 2, 16, "fnuz"),
    "float4_e2m1": (2, 1, 1, "finite"),
    "float6_e2m3fn": (2, 3, 1, "finite"),
    "float6_e3m2fn": (3, 2, 3, "finite"),
}
INTEGERS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}
BITS = {"float8_e4m3fn": 8, "float8_e4m3fnuz": 8, "float8_e5m2": 8, "float8_e5m2fnuz": 8,
        "float8_e8m0fnu": 8, "float4_e2m1": 4, "float6_e2m3fn": 6, "float6_e3m2fn": 6,
        "int4": 4, "uint4": 4, "int2": 2, "uint2": 2}


def small_float(code, e, m, bias, specials):
    """The value of one code, straight from the definition."""
    sign = -1.0 if (code >> (e + m)) & 1 else 1.0
    exponent = (code >> m) & ((1 << e) - 1)
    mantissa = code & ((1 << m) - 1)
    top = (1 << e) - 1
    if specials == "fnuz" and code == 1 << (e + m):
        return math.nan
    if specials == "ieee" and exponent == top:
        return sign * math.inf if mantissa == 0 else math.nan
    if specials == "fn" and exponent == top and mantissa == (1 << m) - 1:
        return math.nan
    if exponent == 0:
        return sign * mantissa / (1 << m) * 2.0 ** (1 - bias)
    return sign * (1 + mantissa / (1 << m)) * 2.0 ** (exponent - bias)


def codes(data, bits, count):
    """`count` codes of `bits` each, element 0 in the lowest bits of byte 0."""
    if bits == 8:
        return np.frombuffer(data, dtype=np.uint8)[:count].astype(np.int64)
    as_int = int.from_bytes(bytes(data), "little")
    mask = (1 << bits) - 1
    return np.array([(as_int >> (bits * i)) & mask for i in range(count)], dtype=np.int64)


def element_values(name, data, count):
    if name == "bfloat16":
        return (np.frombuffer(data, dtype="<u2")[:count].astype(np.uint32) << 16).view(np.float32)
    if name == "float8_e8m0fnu":
        table = np.array([math.nan if c == 255 else 2.0 ** (c - 127) for c in range(256)], dtype=F32)
        return table[codes(data, 8, count)]
    if name in SMALL_FLOATS:
        e, m, bias, specials = SMALL_FLOATS[name]
        table = np.array([small_float(c, e, m, bias, specials) for c in range(1 << (1 + e + m))], dtype=F32)
        return table[codes(data, 1 + e + m, count)]
    if name in INTEGERS:
        bits, signed = INTEGERS[name]
        c = codes(data, bits, count)
        if signed:
            c = np.where(c >= 1 << (bits - 1), c - (1 << bits), c)
        return c.astype(np.int8 if signed else np.uint8)
    return None


# ---- ggml block types ---------------------------------------------------------

def f16(b, at):
    return np.ascontiguousarray(b[:, at:at + 2]).view("<f2").astype(F32)  # shape (n, 1)


def u32(b, at):
    return np.ascontiguousarray(b[:, at:at + 4]).view("<u4").astype(np.uint32)  # (n, 1)


def i8(b, at, n):
    return np.ascontiguousarray(b[:, at:at + n]).view(np.int8)


def f(x):
    return np.asarray(x).astype(F32)


def q4_0(b):
    d, qs = f16(b, 0), b[:, 2:18].astype(np.int32)
    return np.concatenate([f((qs & 15) - 8) * d, f((qs >> 4) - 8) * d], axis=1)


def q4_1(b):
    d, m, qs = f16(b, 0), f16(b, 2), b[:, 4:20].astype(np.int32)
    return np.concatenate([f(qs & 15) * d + m, f(qs >> 4) * d + m], axis=1)


def five_bits(qh, qs):
    j = np.arange(16, dtype=np.uint32)
    xh0 = (((qh >> j) << 4) & 0x10).astype(np.int32)
    xh1 = ((qh >> (j + 12)) & 0x10).astype(np.int32)
    return (qs & 15) | xh0, (qs >> 4) | xh1


def q5_0(b):
    d = f16(b, 0)
    x0, x1 = five_bits(u32(b, 2), b[:, 6:22].astype(np.int32))
    return np.concatenate([f(x0 - 16) * d, f(x1 - 16) * d], axis=1)


def q5_1(b):
    d, m = f16(b, 0), f16(b, 2)
    x0, x1 = five_bits(u32(b, 4), b[:, 8:24].astype(np.int32))
    return np.concatenate([f(x0) * d + m, f(x1) * d + m], axis=1)


def q8_0(b):
    return f(i8(b, 2, 32)) * f16(b, 0)


def q8_1(b):
    return f(i8(b, 4, 32)) * f16(b, 0)


def q2_k(b):
    scales, q = b[:, 0:16].astype(np.int32), b[:, 16:80].astype(np.int32)
    d, dmin = f16(b, 80), f16(b, 82)
    out, is_ = [], 0
    for n in range(2):
        qn = q[:, 32 * n:32 * n + 32]
        for shift in (0, 2, 4, 6):
            for half in (0, 1):
                sc = scales[:, is_:is_ + 1]
                is_ += 1
                dl, ml = d * f(sc & 15), dmin * f(sc >> 4)
                out.append(dl * f((qn[:, 16 * half:16 * half + 16] >> shift) & 3) - ml)
    return np.concatenate(out, axis=1)


def q3_k(b):
    hm, q = b[:, 0:32].astype(np.int32), b[:, 32:96].astype(np.int32)
    d = f16(b, 108)
    # ggml unpacks the 12 scale bytes as three little-endian words.
    aux = np.ascontiguousarray(b[:, 96:108]).view("<u4").astype(np.uint32)
    kmask1, kmask2 = np.uint32(0x03030303), np.uint32(0x0F0F0F0F)
    a0, a1, tmp = aux[:, 0:1], aux[:, 1:2], aux[:, 2:3]
    words = [(a0 & kmask2) | (((tmp >> 0) & kmask1) << 4), (a1 & kmask2) | (((tmp >> 2) & kmask1) << 4),
             ((a0 >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4), ((a1 >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4)]
    scales = np.ascontiguousarray(np.concatenate(words, axis=1)).view(np.int8).astype(np.int32)
    out, is_, m = [], 0, 1
    for n in range(2):
        qn = q[:, 32 * n:32 * n + 32]
        for shift in (0, 2, 4, 6):
            for half in (0, 1):
                dl = d * f(scales[:, is_:is_ + 1] - 32)
                is_ += 1
                sl = slice(16 * half, 16 * half + 16)
                value = ((qn[:, sl] >> shift) & 3) - np.where(hm[:, sl] & m, 0, 4)
                out.append(dl * f(value))
            m <<= 1
    return np.concatenate(out, axis=1)


def scale_min_k4(j, s):
    if j < 4:
        return s[:, j:j + 1] & 63, s[:, j + 4:j + 5] & 63
    return ((s[:, j + 4:j + 5] & 15) | ((s[:, j - 4:j - 3] >> 6) << 4),
            (s[:, j + 4:j + 5] >> 4) | ((s[:, j:j + 1] >> 6) << 4))


def q4_k(b):
    d, dmin, s, q = f16(b, 0), f16(b, 2), b[:, 4:16].astype(np.int32), b[:, 16:144].astype(np.int32)
    out = []
    for g in range(4):
        qg = q[:, 32 * g:32 * g + 32]
        sc, m = scale_min_k4(2 * g, s)
        out.append((d * f(sc)) * f(qg & 15) - dmin * f(m))
        sc, m = scale_min_k4(2 * g + 1, s)
        out.append((d * f(sc)) * f(qg >> 4) - dmin * f(m))
    return np.concatenate(out, axis=1)


def q5_k(b):
    d, dmin, s = f16(b, 0), f16(b, 2), b[:, 4:16].astype(np.int32)
    qh, q = b[:, 16:48].astype(np.int32), b[:, 48:176].astype(np.int32)
    out, u1, u2 = [], 1, 2
    for g in range(4):
        qg = q[:, 32 * g:32 * g + 32]
        sc, m = scale_min_k4(2 * g, s)
        out.append((d * f(sc)) * f((qg & 15) + np.where(qh & u1, 16, 0)) - dmin * f(m))
        sc, m = scale_min_k4(2 * g + 1, s)
        out.append((d * f(sc)) * f((qg >> 4) + np.where(qh & u2, 16, 0)) - dmin * f(m))
        u1, u2 = u1 << 2, u2 << 2
    return np.concatenate(out, axis=1)


def q6_k(b):
    ql, qh = b[:, 0:128].astype(np.int32), b[:, 128:192].astype(np.int32)
    sc, d = i8(b, 192, 16).astype(np.int32), f16(b, 208)
    y = np.zeros((b.shape[0], 256), dtype=F32)
    for n in range(2):
        L, H, S = ql[:, 64 * n:64 * n + 64], qh[:, 32 * n:32 * n + 32], sc[:, 8 * n:8 * n + 8]
        for l in range(32):
            is_ = l // 16
            q1 = ((L[:, l] & 15) | (((H[:, l] >> 0) & 3) << 4)) - 32
            q2 = ((L[:, l + 32] & 15) | (((H[:, l] >> 2) & 3) << 4)) - 32
            q3 = ((L[:, l] >> 4) | (((H[:, l] >> 4) & 3) << 4)) - 32
            q4 = ((L[:, l + 32] >> 4) | (((H[:, l] >> 6) & 3) << 4)) - 32
            base = 128 * n
            y[:, base + l] = d[:, 0] * f(S[:, is_]) * f(q1)
            y[:, base + l + 32] = d[:, 0] * f(S[:, is_ + 2]) * f(q2)
            y[:, base + l + 64] = d[:, 0] * f(S[:, is_ + 4]) * f(q3)
            y[:, base + l + 96] = d[:, 0] * f(S[:, is_ + 6]) * f(q4)
    return y


def q8_k(b):
    d = np.ascontiguousarray(b[:, 0:4]).view("<f4").astype(F32)
    return d * f(i8(b, 4, 256))


def tq1_0(b):
    qs, qh, d = b[:, 0:48].astype(np.int32), b[:, 48:52].astype(np.int32), f16(b, 52)
    pow3 = [1, 3, 9, 27, 81, 243]

    def digits(byte, n):
        q = (byte * pow3[n]) & 0xFF
        return (q * 3) >> 8

    out = []
    for n in range(5):
        out.append(f(digits(qs[:, 0:32], n) - 1) * d)
    for n in range(5):
        out.append(f(digits(qs[:, 32:48], n) - 1) * d)
    for n in range(4):
        out.append(f(digits(qh, n) - 1) * d)
    return np.concatenate(out, axis=1)


def tq2_0(b):
    qs, d = b[:, 0:64].astype(np.int32), f16(b, 64)
    out = []
    for j in (0, 32):
        for l in range(4):
            out.append(f(((qs[:, j:j + 32] >> (2 * l)) & 3) - 1) * d)
    return np.concatenate(out, axis=1)


IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int32)


def iq4_nl(b):
    d, qs = f16(b, 0), b[:, 2:18].astype(np.int32)
    return np.concatenate([d * f(IQ4NL[qs & 15]), d * f(IQ4NL[qs >> 4])], axis=1)


def iq4_xs(b):
    d = f16(b, 0)
    sh = np.ascontiguousarray(b[:, 2:4]).view("<u2").astype(np.int32)
    sl, qs = b[:, 4:8].astype(np.int32), b[:, 8:136].astype(np.int32)
    out = []
    for ib in range(8):
        ls = ((sl[:, ib // 2:ib // 2 + 1] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4)
        dl = d * f(ls - 32)
        q = qs[:, 16 * ib:16 * ib + 16]
        out += [dl * f(IQ4NL[q & 15]), dl * f(IQ4NL[q >> 4])]
    return np.concatenate(out, axis=1)


# E2M1 values doubled, from the float4_e2m1 definition.
MXFP4 = np.array([int(2 * small_float(c, 2, 1, 1, "finite")) for c in range(16)], dtype=np.int32)


def mxfp4(b):
    e = b[:, 0:1].astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23).astype(np.uint32)
    d = bits.view(np.float32)
    qs = b[:, 1:17].astype(np.int32)
    return np.concatenate([f(MXFP4[qs & 15]) * d, f(MXFP4[qs >> 4]) * d], axis=1)


def ue4m3_half(x):
    """ggml's UE4M3 scale, halved: bit 7 ignored, 0x00 and 0x7F zero."""
    if x in (0, 0x7F):
        return F32(0.0)
    exponent, mantissa = (x >> 3) & 15, x & 7
    raw = mantissa * 2.0 ** -9 if exponent == 0 else (1 + mantissa / 8) * 2.0 ** (exponent - 7)
    return F32(raw * 0.5)


UE4M3_HALF = np.array([ue4m3_half(x) for x in range(256)], dtype=F32)


def nvfp4(b):
    qs = b[:, 4:36].astype(np.int32)
    out = []
    for s in range(4):
        d = UE4M3_HALF[b[:, s:s + 1]]
        q = qs[:, 8 * s:8 * s + 8]
        out += [f(MXFP4[q & 15]) * d, f(MXFP4[q >> 4]) * d]
    return np.concatenate(out, axis=1)


def q1_0(b):
    d = f16(b, 0)
    bits = np.unpackbits(b[:, 2:18], axis=1, bitorder="little")
    return np.where(bits == 1, d, -d).astype(F32)


def q2_0(b):
    d = f16(b, 0)
    q = (b[:, 2:18, None].astype(np.int32) >> (2 * np.arange(4))) & 3  # (n, 16, 4): element 4*byte + pair
    return f(q.reshape(-1, 64) - 1) * d


# ---- lattice (IQ) types ----------------------------------------------------------
# The grids' full code lists are read from modelfs's data file
# (src/tree/ggml_grids.txt), but only after checking them against what ggml
# publishes, kept here: ggml-quants.c lists the same codes (iq2xs_init_impl's
# kgrid_2bit_256 / _512 / _1024 and kgrid_1bit_2048, iq3xs_init_impl's
# kgrid_256 / _512, llama.cpp ggml/src/ggml-quants.c); for each grid its
# length, the SHA-256 of those codes as little-endian uint16, and some codes
# copied at their positions. ggml-common.h's byte grids (iq2xxs_grid...) are
# these codes' digits as levels: its rows are checked in numeric_views_test.
# The levels each code digit stands for, and everything else, are written
# here from ggml's definitions.
import hashlib
import pathlib

GRID_LEVELS = {"iq2xxs": ([8, 25, 43], 2, 8), "iq2xs": ([8, 25, 43], 2, 8),
               "iq2s": ([8, 25, 43], 2, 8), "iq3xxs": ([4, 12, 20, 28, 36, 44, 52, 62], 3, 4),
               "iq3s": ([1, 3, 5, 7, 9, 11, 13, 15], 3, 4), "iq1s": ([-1, 0, 1], 2, 8)}
PUBLISHED_GRID_CODES = {
    "iq2xxs": (256, "915952ebc4af8ddba8113583ca1316fc818843f7b825bbf1a25ae1c39bf0e16d",
               {0: 0, 1: 2, 2: 5, 85: 4442, 128: 10248, 170: 18785, 254: 43088, 255: 43268}),
    "iq2xs": (512, "f66435966ca8d64e9e4a6e3c91e64afcf9015e700ec85962f527283ebae207b9",
              {0: 0, 1: 2, 2: 5, 170: 4624, 256: 16390, 341: 20560, 510: 43665, 511: 43690}),
    "iq2s": (1024, "e6e75e121b65e8afa5c1f92b71463cfbe217b83893f438acde22fd5db06a43f7",
             {0: 0, 1: 2, 2: 5, 341: 6150, 512: 16677, 682: 20805, 1022: 43656, 1023: 43690}),
    "iq3xxs": (256, "c9678803c61b2210fbd8cbbb3f965a835409cd7d88a04d086d236261bd221d11",
               {0: 0, 1: 2, 2: 4, 85: 742, 128: 1272, 170: 1950, 254: 3924, 255: 3992}),
    "iq3s": (512, "353274c58dd7d8dc5ee960dc8fc54ff9164eaf2b49206b841cd49415cf393f81",
             {0: 0, 1: 1, 2: 2, 170: 795, 256: 1299, 341: 1953, 510: 3993, 511: 4032}),
    "iq1s": (2048, "e9ffebfc997ad6023063a667c0bf4eedd8ebf7f56b3da399cbc7d1b1f7ea52c6",
             {0: 0, 1: 2, 2: 5, 682: 16918, 1024: 21833, 1365: 26276, 2046: 43688, 2047: 43690}),
}
_GRIDS = {}


def grid_codes():
    """{grid name: [codes]}: a name on a line of its own, then rows of codes."""
    path = pathlib.Path(__file__).resolve().parents[2] / "src" / "tree" / "ggml_grids.txt"
    grids, name = {}, None
    for line in path.read_text().splitlines():
        words = line.split("#")[0].split()
        if len(words) == 1 and not words[0].isdigit():
            name = words[0]
            grids[name] = []
        elif words:
            grids[name] += [int(w) for w in words]
    return grids


def check_grid_codes(grids):
    """Raises unless `grids` are ggml's published code lists, every one."""
    assert set(grids) == set(PUBLISHED_GRID_CODES), sorted(grids)
    for name, (count, sha256, some) in PUBLISHED_GRID_CODES.items():
        codes = grids[name]
        assert len(codes) == count, (name, len(codes))
        for position, code in some.items():
            assert codes[position] == code, (name, position, codes[position], code)
        digest = hashlib.sha256(np.array(codes, dtype="<u2").tobytes()).hexdigest()
        assert digest == sha256, f"{name}: the codes differ from ggml's published list"


def grid(name):
    if not _GRIDS:
        codes_of = grid_codes()
        check_grid_codes(codes_of)
        for grid_name, codes in codes_of.items():
            levels, bits, width = GRID_LEVELS[grid_name]
            digits = (np.array(codes, dtype=np.int64)[:, None] >> (bits * np.arange(width))) & ((1 << bits) - 1)
            _GRIDS[grid_name] = np.array(levels, dtype=np.int32)[digits]  # (rows, width)
    return _GRIDS[name]


KSIGNS = np.array([i | ((bin(i).count("1") & 1) << 7) for i in range(128)], dtype=np.int32)


def signs_of(pattern, j):
    """-1.0 / +1.0 as float32 for bit j of each sign byte."""
    return np.where((pattern >> j) & 1, F32(-1.0), F32(1.0)).astype(F32)


def iq2_xxs(b):
    d = f16(b, 0)
    g = grid("iq2xxs")
    y = np.zeros((b.shape[0], 256), dtype=F32)
    for ib in range(8):
        aux0 = b[:, 2 + 8 * ib:6 + 8 * ib].astype(np.int64)
        aux1 = u32(b, 6 + 8 * ib)[:, 0].astype(np.int64)
        db = d[:, 0] * (F32(0.5) + f(aux1 >> 28)) * F32(0.25)
        for l in range(4):
            rows = g[aux0[:, l]]
            signs = KSIGNS[(aux1 >> (7 * l)) & 127]
            for j in range(8):
                y[:, 32 * ib + 8 * l + j] = db * f(rows[:, j]) * signs_of(signs, j)
    return y


def iq2_xs(b):
    d = f16(b, 0)
    g = grid("iq2xs")
    qs = np.ascontiguousarray(b[:, 2:66]).view("<u2").astype(np.int64)
    scales = b[:, 66:74].astype(np.int32)
    y = np.zeros((b.shape[0], 256), dtype=F32)
    for ib in range(8):
        db = [d[:, 0] * (F32(0.5) + f(scales[:, ib] & 15)) * F32(0.25),
              d[:, 0] * (F32(0.5) + f(scales[:, ib] >> 4)) * F32(0.25)]
        for l in range(4):
            q = qs[:, 4 * ib + l]
            rows, signs = g[q & 511], KSIGNS[q >> 9]
            for j in range(8):
                y[:, 32 * ib + 8 * l + j] = db[l // 2] * f(rows[:, j]) * signs_of(signs, j)
    return y


def iq2_s(b):
    d = f16(b, 0)
    g = grid("iq2s")
    qs, signs, qh, scales = (b[:, 2:34].astype(np.int64), b[:, 34:66].astype(np.int32),
                             b[:, 66:74].astype(np.int64), b[:, 74:82].astype(np.int32))
    y = np.zeros((b.shape[0], 256), dtype=F32)
    for ib in range(8):
        db = [d[:, 0] * (F32(0.5) + f(scales[:, ib] & 15)) * F32(0.25),
              d[:, 0] * (F32(0.5) + f(scales[:, ib] >> 4)) * F32(0.25)]
        for l in range(4):
            rows = g[qs[:, 4 * ib + l] | ((qh[:, ib] << (8 - 2 * l)) & 0x300)]
            for j in range(8):
                y[:, 32 * ib + 8 * l + j] = db[l // 2] * f(rows[:, j]) * signs_of(signs[:, 4 * ib + l], j)
    return y


def iq3_xxs(b):
    d = f16(b, 0)
    g = grid("iq3xxs")
    qs = b[:, 2:66].astype(np.int64)
    y = np.zeros((b.shape[0], 256), dtype=F32)
    for ib in range(8):
        aux = u32(b, 66 + 4 * ib)[:, 0].astype(np.int64)
        db = d[:, 0] * (F32(0.5) + f(aux >> 28)) * F32(0.5)
        for l in range(4):
            signs = KSIGNS[(aux >> (7 * l)) & 127]
            r1, r2 = g[qs[:, 8 * ib + 2 * l]], g[qs[:, 8 * ib + 2 * l + 1]]
            for j in range(4):
                y[:, 32 * ib + 8 * l + j] = db * f(r1[:, j]) * signs_of(signs, j)
                y[:, 32 * ib + 8 * l + j + 4] = db * f(r2[:, j]) * signs_of(signs, j + 4)
    return y


def iq3_s(b):
    d = f16(b, 0)
    g = grid("iq3s")
    qs, qh = b[:, 2:66].astype(np.int64), b[:, 66:74].astype(np.int64)
    signs, scales = b[:, 74:106].astype(np.int32), b[:, 106:110].astype(np.int32)
    y = np.zeros((b.shape[0], 256), dtype=F32)
    for pair in range(4):
        for half in range(2):
            ib = 2 * pair + half
            s = (scales[:, pair] & 15) if half == 0 else (scales[:, pair] >> 4)
            db = d[:, 0] * f(1 + 2 * s)
            for l in range(4):
                r1 = g[qs[:, 8 * ib + 2 * l] | ((qh[:, ib] << (8 - 2 * l)) & 256)]
                r2 = g[qs[:, 8 * ib + 2 * l + 1] | ((qh[:, ib] << (7 - 2 * l)) & 256)]
                sg = signs[:, 4 * ib + l]
                for j in range(4):
                    y[:, 32 * ib + 8 * l + j] = db * f(r1[:, j]) * signs_of(sg, j)
                    y[:, 32 * ib + 8 * l + j + 4] = db * f(r2[:, j]) * signs_of(sg, j + 4)
    return y


DELTA = F32(0.125)


def iq1_s(b):
    d = f16(b, 0)
    g = grid("iq1s")
    qs = b[:, 2:34].astype(np.int64)
    qh = np.ascontiguousarray(b[:, 34:50]).view("<u2").astype(np.int64)
    y = np.zeros((b.shape[0], 256), dtype=F32)
    for ib in range(8):
        dl = d[:, 0] * f(2 * ((qh[:, ib] >> 12) & 7) + 1)
        delta = np.where(qh[:, ib] & 0x8000, -DELTA, DELTA).astype(F32)
        for l in range(4):
            rows = g[qs[:, 4 * ib + l] | (((qh[:, ib] >> (3 * l)) & 7) << 8)]
            for j in range(8):
                y[:, 32 * ib + 8 * l + j] = dl * (f(rows[:, j]) + delta)
    return y


def iq1_m(b):
    g = grid("iq1s")
    qs, qh = b[:, 0:32].astype(np.int64), b[:, 32:48].astype(np.int64)
    sc = np.ascontiguousarray(b[:, 48:56]).view("<u2").astype(np.int64)
    bits = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0x00F0) | ((sc[:, 2] >> 4) & 0x0F00) | (sc[:, 3] & 0xF000)
    d = bits.astype(np.uint16).view(np.float16).astype(F32)
    y = np.zeros((b.shape[0], 256), dtype=F32)
    for ib in range(8):
        s = sc[:, ib // 2]
        dl1 = d * f(2 * ((s >> (6 * (ib % 2))) & 7) + 1)
        dl2 = d * f(2 * ((s >> (6 * (ib % 2) + 3)) & 7) + 1)
        h0, h1 = qh[:, 2 * ib], qh[:, 2 * ib + 1]
        idx = [qs[:, 4 * ib] | ((h0 << 8) & 0x700), qs[:, 4 * ib + 1] | ((h0 << 4) & 0x700),
               qs[:, 4 * ib + 2] | ((h1 << 8) & 0x700), qs[:, 4 * ib + 3] | ((h1 << 4) & 0x700)]
        delta = [np.where(h0 & 0x08, -DELTA, DELTA), np.where(h0 & 0x80, -DELTA, DELTA),
                 np.where(h1 & 0x08, -DELTA, DELTA), np.where(h1 & 0x80, -DELTA, DELTA)]
        for l in range(4):
            rows = g[idx[l]]
            dl = dl1 if l < 2 else dl2
            for j in range(8):
                y[:, 32 * ib + 8 * l + j] = dl * (f(rows[:, j]) + delta[l].astype(F32))
    return y


# name -> (elements per block, bytes per block, dequantizer)
BLOCK_TYPES = {
    "q4_0": (32, 18, q4_0), "q4_1": (32, 20, q4_1), "q5_0": (32, 22, q5_0), "q5_1": (32, 24, q5_1),
    "q8_0": (32, 34, q8_0), "q8_1": (32, 36, q8_1), "q2_k": (256, 84, q2_k), "q3_k": (256, 110, q3_k),
    "q4_k": (256, 144, q4_k), "q5_k": (256, 176, q5_k), "q6_k": (256, 210, q6_k), "q8_k": (256, 292, q8_k),
    "tq1_0": (256, 54, tq1_0), "tq2_0": (256, 66, tq2_0), "iq4_nl": (32, 18, iq4_nl),
    "iq4_xs": (256, 136, iq4_xs), "mxfp4": (32, 17, mxfp4), "iq2_xxs": (256, 66, iq2_xxs),
    "iq2_xs": (256, 74, iq2_xs), "iq2_s": (256, 82, iq2_s), "iq3_xxs": (256, 98, iq3_xxs),
    "iq3_s": (256, 110, iq3_s), "iq1_s": (256, 50, iq1_s), "iq1_m": (256, 56, iq1_m),
    "nvfp4": (64, 36, nvfp4), "q1_0": (128, 18, q1_0), "q2_0": (64, 18, q2_0),
}


def dequantize(name, data):
    block, size, fn = BLOCK_TYPES[name]
    b = np.frombuffer(data, dtype=np.uint8).reshape(-1, size)
    with np.errstate(all="ignore"):
        return fn(b).astype(F32).reshape(-1)


# ---- the contract ---------------------------------------------------------------

def npy_dtype(name):
    """numpy's dtype of the .npy of a tensor stored as `name`, or None."""
    if name in BLOCK_TYPES or name == "bfloat16" or name in SMALL_FLOATS or name == "float8_e8m0fnu":
        return np.dtype(np.float32)
    if name in INTEGERS:
        return np.dtype(np.int8 if INTEGERS[name][1] else np.uint8)
    return None


def expected(name, data, shape):
    """The values a .npy of a tensor stored as `name` (C order) must hold,
    or None where modelfs has no conversion."""
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    with np.errstate(all="ignore"):
        if name in BLOCK_TYPES:
            values = dequantize(name, data)
        else:
            values = element_values(name, data, count)
    if values is None:
        return None
    return values.reshape(shape)


def assert_same(loaded, want, what=""):
    """Equal bit for bit, except that any NaN equals any NaN."""
    assert loaded.dtype == want.dtype and loaded.shape == want.shape, (what, loaded.dtype, loaded.shape, want.shape)
    a, b = np.asarray(loaded), np.asarray(want)
    if a.dtype.kind == "f":
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        assert np.array_equal(nan_a, nan_b), f"{what}: NaN positions differ"
        a, b = np.where(nan_a, 0, a), np.where(nan_b, 0, b)
        bad = np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))
    else:
        bad = np.flatnonzero(a != b)
    assert bad.size == 0, f"{what}: {bad.size} values differ, first at {bad[0]}: {a.flat[bad[0]]!r} != {b.flat[bad[0]]!r}"


def check_npy(npy, name, data, shape, meta=None):
    """The .npy at `npy` of a tensor stored as `name` holds what expected()
    says (read through np.load with mmap_mode='r'), and the sidecar `meta`,
    if given, says so; no .npy where modelfs has no conversion."""
    import os
    want = expected(name, data, list(shape))
    if want is None:
        assert not os.path.exists(npy), f"{npy}: no conversion for {name}, yet a .npy exists"
        if meta is not None:
            assert "npy" not in meta
        return
    loaded = np.load(npy, mmap_mode="r")
    if want.ndim == 0:  # numpy memory-maps a 0-d array as shape (1,)
        loaded = np.load(npy)
    assert_same(loaded, want, npy)
    if meta is not None:
        assert meta["npy"] == {"dtype": str(want.dtype), "from": name, "exact": name not in BLOCK_TYPES}
