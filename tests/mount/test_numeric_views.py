# SPDX-License-Identifier: Apache-2.0
"""Numbers for every tensor: the .npy of a tensor whose stored type numpy
lacks holds its values (float32 for bfloat16, the small floats and every
dequantized type; int8/uint8 for 4- and 2-bit integers), converted for each
read. Checked against torch's own conversions (.float(), dequantize()) and
against the tests' decoders (numeric_oracle.py), with np.load(mmap_mode='r')
and with dd at odd offsets and lengths."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import gguf_writer as gw
import numeric_oracle as oracle
import safetensors_writer as st
from conftest import cat, index_paths, mounted, sidecar

IDS = {name: type_id for type_id, (name, _, _) in gw.GGML_TYPES.items()}


def dd(path, skip, count):
    """`count` bytes from byte `skip`, as dd reads them."""
    return subprocess.run(["dd", f"if={path}", "iflag=skip_bytes,count_bytes", f"skip={skip}",
                           f"count={count}", "bs=65536", "status=none"], check=True, capture_output=True).stdout


def npy_bytes(want):
    """The .npy file numpy itself would write for `want`, header included."""
    import io
    out = io.BytesIO()
    np.save(out, np.ascontiguousarray(want))
    return out.getvalue()


def check_odd_reads(npy, want):
    """1 byte, across values, blocks and pages, and the last partial block,
    through dd, against the same slice of numpy's own .npy of the oracle's
    array `want` (where an element is NaN in both, the served NaN's bits:
    IEEE leaves a NaN's sign and payload to the arithmetic, and compilers
    differ)."""
    reference = npy_bytes(want)
    whole = cat(npy)
    size = len(whole)
    assert size == len(reference)
    header = size - want.nbytes
    assert whole[:header] == reference[:header]
    served = np.frombuffer(whole[header:], dtype=want.dtype).reshape(want.shape)
    oracle.assert_same(served, want, npy)
    body = np.array(want, order="C")
    if body.dtype.kind == "f":
        nan, bits = np.isnan(body), f"u{body.itemsize}"
        body.view(bits)[nan] = served.view(bits)[nan]
    expected = reference[:header] + body.tobytes()
    ranges = [(0, 1), (size - 1, 1), (size - 7, 7), (127, 3), (4093, 9), (4095, 4098), (8191, 70001),
              (size // 2 + 1, 1), (size // 3, 4097)]
    for skip, count in ranges:
        if 0 <= skip < size:
            assert dd(npy, skip, count) == expected[skip:skip + count], (npy, skip, count)


def edge_blocks(name, size):
    """Blocks whose scales are the edge values: NaN, infinities, subnormal
    and zero float16 scales; for mxfp4 the E8M0 extremes 0, 1, 254, 255."""
    blocks = []
    rng = np.random.default_rng(len(name))
    if name == "nvfp4":  # UE4M3 scales: zero, the 0x7F zero, the smallest, the largest, bit 7 set
        for scales in ((0, 0x7F, 1, 0x7E), (0x80, 0xFF, 0xFE, 0x38), (8, 0x77, 0x3F, 0x40)):
            b = rng.integers(0, 256, size, dtype=np.uint8)
            b[0:4] = scales
            blocks.append(b)
        return blocks
    if name == "mxfp4":
        for e in (0, 1, 2, 127, 254, 255):
            b = rng.integers(0, 256, size, dtype=np.uint8)
            b[0] = e
            blocks.append(b)
        return blocks
    for half in (0x7E00, 0x7C00, 0xFC00, 0x0001, 0x03FF, 0x0000, 0x8000, 0x7BFF):
        b = rng.integers(0, 256, size, dtype=np.uint8)
        # every float16 in the block set to the edge value: d, dmin, m, s
        for at in {"q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q5_1": (0, 2), "q8_0": (0,), "q8_1": (0, 2),
                   "q2_k": (80, 82), "q3_k": (108,), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,),
                   "tq1_0": (52,), "tq2_0": (64,), "iq4_nl": (0,), "iq4_xs": (0,), "iq2_xxs": (0,),
                   "iq2_xs": (0,), "iq2_s": (0,), "iq3_xxs": (0,), "iq3_s": (0,), "iq1_s": (0,),
                   "q1_0": (0,), "q2_0": (0,)}.get(name, ()):
            b[at:at + 2] = np.frombuffer(np.uint16(half).tobytes(), dtype=np.uint8)
        if name == "q8_k":  # a float32 scale
            b[0:4] = np.frombuffer(np.uint32(0x7F800000 if half == 0x7C00 else half).tobytes(), dtype=np.uint8)
        blocks.append(b)
    return blocks


def block_tensors():
    tensors = []
    for i, (name, (block, size, _)) in enumerate(sorted(oracle.BLOCK_TYPES.items())):
        rng = np.random.default_rng(100 + i)
        rows = 5
        blocks = [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(rows * 3 - len(edge_blocks(name, size)))]
        blocks += edge_blocks(name, size)
        data = np.concatenate(blocks).tobytes()
        assert len(data) == rows * 3 * size
        tensors.append(gw.Tensor(f"blk.{name}.weight", IDS[name], [3 * block, rows], data))
    return tensors


def test_every_ggml_block_type_loads_as_the_oracle_dequantizes(tmp):
    tensors = block_tensors()
    # Types without a dequantization in modelfs yet: no .npy, no "npy" key.
    without = [n for n in IDS if n not in oracle.BLOCK_TYPES and gw.GGML_TYPES[IDS[n]][1] > 1]
    for name in without:
        tensors.append(gw.random_tensor(f"none.{name}", IDS[name], [2, gw.GGML_TYPES[IDS[name]][1]], seed=7))
    model = tmp / "blocks.gguf"
    blob, _ = gw.to_bytes([], tensors)
    model.write_bytes(blob)
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        for t in tensors:
            name = gw.GGML_TYPES[t.type_id][0]
            npy = str(paths[t.name]) + ".npy"
            meta = sidecar(paths[t.name])
            oracle.check_npy(npy, name, t.data, t.shape, meta)
            if name in oracle.BLOCK_TYPES:
                assert meta["npy"] == {"dtype": "float32", "from": name, "exact": False}
                check_odd_reads(npy, oracle.expected(name, t.data, t.shape))


def test_lattice_grids_of_the_oracle_are_ggmls_published_codes():
    """The IQ decoders' grids come from src/tree/ggml_grids.txt only as far
    as they match ggml's published code lists (lengths, SHA-256, codes at
    positions, kept in numeric_oracle); a changed code is caught."""
    grids = oracle.grid_codes()
    oracle.check_grid_codes(grids)
    for name in grids:
        changed = {k: list(v) for k, v in grids.items()}
        changed[name][len(changed[name]) // 2 + 1] ^= 1
        with pytest.raises(AssertionError):
            oracle.check_grid_codes(changed)


def test_bfloat16_llama_shaped_model_loads_tensor_by_tensor(tmp):
    g = torch.Generator().manual_seed(5)
    hidden, inter, vocab = 64, 176, 300
    shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,),
              "lm_head.weight": (vocab, hidden)}
    for layer in range(2):
        p = f"model.layers.{layer}."
        for proj in ("q", "k", "v", "o"):
            shapes[p + f"self_attn.{proj}_proj.weight"] = (hidden, hidden)
        shapes[p + "mlp.gate_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.up_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.down_proj.weight"] = (hidden, inter)
        shapes[p + "input_layernorm.weight"] = (hidden,)
    tensors = {name: (torch.randn(*shape, generator=g) * 3).to(torch.bfloat16) for name, shape in shapes.items()}
    # edge values: NaN, infinities, subnormals, the largest and smallest
    edge = torch.from_numpy(np.array([0x7FC1, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x7F7F, 0x0080, 0x8000],
                                     dtype=np.uint16).view(np.int16))
    tensors["model.norm.weight"].view(torch.int16)[:8] = edge
    raw = {name: st.Raw("BF16", list(t.shape), t.view(torch.int16).numpy().tobytes()) for name, t in tensors.items()}
    model = tmp / "model.safetensors"
    st.write(model, raw)
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        for name, t in tensors.items():
            npy = str(paths[name]) + ".npy"
            loaded = np.load(npy, mmap_mode="r")
            oracle.assert_same(loaded, t.float().numpy(), name)
            assert sidecar(paths[name])["npy"] == {"dtype": "float32", "from": "bfloat16", "exact": True}
        check_odd_reads(str(paths["model.layers.0.mlp.up_proj.weight"]) + ".npy",
                        tensors["model.layers.0.mlp.up_proj.weight"].float().numpy())
    # With -o xattr, the .npy's dtype attribute names what it holds.
    with mounted(model, "-o", "xattr") as mnt:
        raw = mnt / "model" / "norm" / "weight"
        assert os.getxattr(raw, "user.modelfs.dtype") == b"bfloat16"
        assert os.getxattr(str(raw) + ".npy", "user.modelfs.dtype") == b"float32"


def test_small_floats_every_code(tmp):
    codes = np.arange(256, dtype=np.uint8)
    raw = {f"f8.{code}": st.Raw(code, [16, 16], codes.tobytes())
           for code in ("F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ")}
    raw["f4"] = st.Raw("F4", [2, 16], codes[:16].tobytes())  # every pair of codes
    # 64 six-bit codes, packed from the lowest bits up: 48 bytes.
    packed = sum(c << (6 * c) for c in range(64)).to_bytes(48, "little")
    raw["f6.e2m3"] = st.Raw("F6_E2M3", [64], packed)
    raw["f6.e3m2"] = st.Raw("F6_E3M2", [8, 8], packed)
    model = tmp / "small.safetensors"
    st.write(model, raw)
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        for name, r in raw.items():
            dtype_name = st.CODES[r.code][0]
            meta = sidecar(paths[name])
            oracle.check_npy(str(paths[name]) + ".npy", dtype_name, r.data, r.shape, meta)
            assert meta["npy"]["exact"] is True
        e8m0 = np.load(str(paths["f8.F8_E8M0"]) + ".npy").ravel()
        assert e8m0[0] == np.float32(2.0 ** -127) and e8m0[254] == np.float32(2.0 ** 127) and np.isnan(e8m0[255])


QUANTIZED = {
    "per_tensor.qint8": lambda x: torch.quantize_per_tensor(x, 0.0371, -5, torch.qint8),
    "per_tensor.quint8": lambda x: torch.quantize_per_tensor(x, 0.3, 100, torch.quint8),
    "per_tensor.qint32": lambda x: torch.quantize_per_tensor(x, 1e-3, 7, torch.qint32),
    "per_channel.axis0": lambda x: torch.quantize_per_channel(
        x, torch.linspace(0.01, 0.5, x.shape[0], dtype=torch.float64), torch.arange(x.shape[0]) % 7, 0,
        torch.quint8),
    "per_channel.axis1": lambda x: torch.quantize_per_channel(
        x, torch.linspace(0.05, 0.3, x.shape[1], dtype=torch.float64), -(torch.arange(x.shape[1]) % 5), 1,
        torch.qint8),
    "per_channel.float_qparams": lambda x: torch.quantize_per_channel(
        x, torch.linspace(0.05, 0.3, x.shape[0]), torch.linspace(-1, 1, x.shape[0]), 0, torch.quint8),
}


def test_torch_quantized_tensors_dequantize_as_torch_does(tmp):
    x = torch.randn(12, 40, generator=torch.Generator().manual_seed(2)) * 4
    tensors = {name: make(x) for name, make in QUANTIZED.items()}
    # Strided views (torch sets strides only on per-tensor quantized tensors).
    tensors["per_tensor.transposed"] = QUANTIZED["per_tensor.qint8"](x).t()
    tensors["bf16.transposed"] = x.to(torch.bfloat16).t()
    torch.save(tensors, tmp / "q.pt")
    with mounted(tmp / "q.pt") as mnt:
        paths, _ = index_paths(mnt)
        for name, t in tensors.items():
            want = (t.dequantize() if t.is_quantized else t.float()).contiguous().numpy()
            npy = str(paths[name]) + ".npy"
            oracle.assert_same(np.load(npy, mmap_mode="r"), want, name)
            meta = sidecar(paths[name])
            if t.is_quantized:
                torch_name = str(t.dtype).replace("torch.", "")
                assert meta["npy"] == {"dtype": "float32", "from": torch_name, "exact": False}, name
        check_odd_reads(str(paths["per_channel.axis1"]) + ".npy", tensors["per_channel.axis1"].dequantize().numpy())
        check_odd_reads(str(paths["per_tensor.transposed"]) + ".npy",
                        tensors["per_tensor.transposed"].dequantize().contiguous().numpy())
        check_odd_reads(str(paths["bf16.transposed"]) + ".npy", tensors["bf16.transposed"].float().numpy())
