#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes examples/sample-model.safetensors, the small model the quick start
mounts: a two-layer Llama-shaped network with float32, float16 and bfloat16
weights, a scalar, and __metadata__. Deterministic (fixed seed), numpy only,
so the committed file can be checked against this script.

    python3 examples/make_sample_model.py [OUTPUT]
"""
import json
import pathlib
import struct
import sys

import numpy as np

HIDDEN, VOCAB, FFN, LAYERS = 16, 64, 32, 2


def bfloat16_bytes(values):
    """bfloat16 keeps the top 16 bits of a float32 (rounded to nearest even)."""
    bits = np.asarray(values, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def tensors():
    rng = np.random.default_rng(2026)
    out = [("model.embed_tokens.weight", "F32", [VOCAB, HIDDEN],
            rng.standard_normal((VOCAB, HIDDEN)).astype("<f4").tobytes())]
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            weight = (rng.standard_normal((HIDDEN, HIDDEN)) / 4).astype("<f2")
            out.append((f"{prefix}.self_attn.{proj}.weight", "F16", [HIDDEN, HIDDEN], weight.tobytes()))
        for proj, shape in (("gate_proj", [FFN, HIDDEN]), ("up_proj", [FFN, HIDDEN]),
                            ("down_proj", [HIDDEN, FFN])):
            out.append((f"{prefix}.mlp.{proj}.weight", "BF16", shape,
                        bfloat16_bytes(rng.standard_normal(shape) / 4)))
        for norm in ("input_layernorm", "post_attention_layernorm"):
            out.append((f"{prefix}.{norm}.weight", "F32", [HIDDEN], np.ones(HIDDEN, "<f4").tobytes()))
    out.append(("model.norm.weight", "F32", [HIDDEN], np.linspace(0.5, 1.5, HIDDEN, dtype="<f4").tobytes()))
    out.append(("lm_head.weight", "F32", [VOCAB, HIDDEN],
                rng.standard_normal((VOCAB, HIDDEN)).astype("<f4").tobytes()))
    out.append(("training_step", "I64", [], np.array(1000, "<i8").tobytes()))
    return out


def sample_model_bytes():
    header = {"__metadata__": {"format": "pt", "description": "modelfs sample model (random weights)"}}
    chunks, offset = [], 0
    for name, dtype, shape, data in tensors():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


if __name__ == "__main__":
    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                          pathlib.Path(__file__).with_name("sample-model.safetensors"))
    target.write_bytes(sample_model_bytes())
    print(f"wrote {target}")
