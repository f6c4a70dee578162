# SPDX-License-Identifier: Apache-2.0
"""OpenVINO IR v10/v11 models (an .xml and the .bin of its stem) through a
real mount: Consts of many element types, a scalar, two Consts sharing one
range, u4 packed low nibble first, a string Const, u1 (bits most
significant first) and nf4 (indices into its 16-value table) unpacked in
their .npy, u2/u3/u6 left out (their packing changed between OpenVINO
releases); --list/--info/--check; --export; a URL; refusals; and the real files of
realworld2 (openvino/, hostile/openvino_underallocated, per its MANIFEST.md).

Oracle: the test's own writer (numpy arrays' bytes placed in a .bin at
offsets the test chooses), and for the real files Python's xml.etree
reading each Const's offset and size and slicing the .bin itself; never
modelfs's own output."""
import hashlib
import json
import struct
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict

import numpy as np
import pytest

import conftest
from conftest import cat, index_paths, metadata, mounted, one_line, run_modelfs, sidecar
from test_export import parse_export

REAL = "fixtures/realworld2/files/openvino"
HOSTILE = "fixtures/realworld2/files/hostile/openvino_underallocated"
# Tensor counts per realworld2's MANIFEST.md ("mount exact, N tensors").
REAL_COUNTS = {"datumaro_face_detection_0200": 705, "datumaro_rise": 2, "ovms_dummy": 1,
               "ovms_dummy_fp64": 1, "ovms_scalar": 1}
# IR element_type -> the sidecar's dtype (docs/formats.md, "OpenVINO IR").
DTYPES = {"f32": "float32", "f16": "float16", "f64": "float64", "bf16": "bfloat16", "i8": "int8",
          "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32",
          "u64": "uint64", "boolean": "bool", "u4": "uint4", "i4": "int4", "string": "string",
          "u1": "uint1", "nf4": "nf4"}
# NF4's 16 values, as OpenVINO's ConvertNF4::dequantize lists them.
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], "<f4")


def pack_msb_bits(values):
    """u1: element i in bit 7 - i % 8 of byte i // 8 (docs/formats.md, "OpenVINO IR")."""
    out = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        out[i // 8] |= int(v) << (7 - i % 8)
    return bytes(out)


def pack_low_nibbles(values):
    """u4/i4/nf4: element 2i in the low nibble of byte i, 2i + 1 in the high one."""
    out = bytearray((len(values) + 1) // 2)
    for i, v in enumerate(values):
        out[i // 2] |= int(v) << (4 * (i % 2))
    return bytes(out)


# -- the writer ------------------------------------------------------------------

class Const:
    """One Const layer: its element_type, shape, the bytes it stores, and
    (offset) where the writer put them; `share` names a Const whose range it reuses."""

    def __init__(self, name, element_type, shape, data, share=None):
        self.name, self.element_type, self.shape, self.data, self.share = name, element_type, shape, data, share
        self.offset = None


def write_ir(folder, consts, version="11", stem="model", port_dims=True):
    folder.mkdir(parents=True, exist_ok=True)
    blob = bytearray()
    by_name = {}
    for c in consts:
        if c.share is not None:
            c.offset = by_name[c.share].offset
        else:
            blob += b"\x5a" * 3  # no alignment: odd gaps between Consts
            c.offset = len(blob)
            blob += c.data
        by_name[c.name] = c
    layers = []
    for i, c in enumerate(consts):
        dims = "".join(f"<dim>{d}</dim>" for d in c.shape) if port_dims else ""
        layers.append(
            f'<layer id="{i}" name="{c.name}" type="Const" version="opset1">'
            f'<data element_type="{c.element_type}" shape="{", ".join(map(str, c.shape))}" '
            f'offset="{c.offset}" size="{len(c.data)}"/>'
            f'<output><port id="0" precision="FP32">{dims}</port></output></layer>')
    layers.append(f'<layer id="{len(consts)}" name="out" type="Result" version="opset1"/>')
    xml = (f'<?xml version="1.0"?>\n<net name="written" version="{version}">\n<layers>\n' + "\n".join(layers) +
           '\n</layers>\n<edges/>\n<rt_info><MO_version value="test"/>'
           '<conversion_parameters><framework value="numpy"/></conversion_parameters></rt_info>\n</net>\n')
    (folder / f"{stem}.bin").write_bytes(bytes(blob))
    path = folder / f"{stem}.xml"
    path.write_text(xml)
    return path


def string_region(elements):
    ends, at = [0], 0
    for e in elements:
        at += len(e)
        ends.append(at)
    return struct.pack(f"<{len(ends) + 1}i", len(elements), *ends) + b"".join(elements)


def sample():
    rng = np.random.default_rng(7)
    arrays = {
        "f32": rng.standard_normal((3, 4)).astype("<f4"),
        "f16": rng.standard_normal(5).astype("<f2"),
        "f64": rng.standard_normal((2, 2)).astype("<f8"),
        "i8": np.array([-128, -1, 0, 127], "<i1"),
        "i16": np.array([-32768, 7, 32767], "<i2"),
        "i32": rng.integers(-2**31, 2**31, (2, 3), dtype="<i4"),
        "i64": np.array([-2**63, 0, 2**63 - 1], "<i8"),
        "u8": np.arange(256, dtype="u1").reshape(16, 16),
        "u64": np.array([0, 2**64 - 1], "<u8"),
        "boolean": np.array([True, False, True], "?"),
    }
    consts = [Const(f"w.{k}", k, list(v.shape), v.tobytes()) for k, v in arrays.items()]
    consts.append(Const("scalar", "f32", [], np.float32(2.5).tobytes()))
    arrays["scalar"] = np.array(2.5, "<f4")
    # bf16 as raw uint16 bits: 1.0, -2.0, 0.5, 3.140625, inf, 0.
    bits = np.array([0x3F80, 0xC000, 0x3F00, 0x4049, 0x7F80, 0x0000], "<u2").reshape(2, 3)
    consts.append(Const("bf16", "bf16", [2, 3], bits.tobytes()))
    consts.append(Const("tied.a", "f32", [3, 4], arrays["f32"].tobytes()))
    consts.append(Const("tied.b", "f32", [3, 4], arrays["f32"].tobytes(), share="tied.a"))
    # u4, low nibble first: 5 values in 3 bytes.
    nibbles = [1, 2, 15, 0, 9]
    packed = bytes([1 | 2 << 4, 15 | 0 << 4, 9])
    consts.append(Const("nib", "u4", [5], packed))
    consts.append(Const("words", "string", [3], string_region([b"ab", b"", b"xyz"])))
    consts.append(Const("bits", "u1", [16], b"\x80\x01"))  # most significant bit first
    consts.append(Const("pairs", "u2", [4], b"\x1b"))  # left out: its packing changed between releases
    consts.append(Const("empty", "f32", [0, 3], b""))
    return consts, arrays, bits, nibbles


def bf16_values(bits):
    return (bits.astype("<u4") << 16).view("<f4")


def check_written(mnt, consts, arrays, bits, nibbles):
    paths, index = index_paths(mnt)
    names = sorted(c.name for c in consts if c.element_type != "u2")
    assert sorted(paths) == names
    for key, values in arrays.items():
        name = "scalar" if key == "scalar" else f"w.{key}"
        path = paths[name]
        assert cat(path) == values.tobytes(), name
        np.testing.assert_array_equal(np.load(str(path) + ".npy"), values)
        car = sidecar(path)
        assert car["dtype"] == DTYPES["f32" if key == "scalar" else key], name
        assert car["shape"] == list(values.shape), name
        assert car["format"] == "openvino"
    assert cat(paths["bf16"]) == bits.tobytes()
    np.testing.assert_array_equal(np.load(str(paths["bf16"]) + ".npy"), bf16_values(bits))
    assert sidecar(paths["bf16"])["dtype"] == "bfloat16"
    for name in ("tied.a", "tied.b"):
        assert cat(paths[name]) == arrays["f32"].tobytes()
        assert sidecar(paths[name])["source"]["offset"] == next(c for c in consts if c.name == "tied.a").offset
    assert cat(paths["nib"]) == bytes([0x21, 0x0F, 0x09])
    np.testing.assert_array_equal(np.load(str(paths["nib"]) + ".npy"), np.array(nibbles, "u1"))
    assert cat(paths["words"]) == b'"ab"\n""\n"xyz"\n'
    assert cat(paths["bits"]) == b"\x80\x01"
    np.testing.assert_array_equal(np.load(str(paths["bits"]) + ".npy"), np.array([1] + [0] * 14 + [1], "u1"))
    assert cat(paths["empty"]) == b""
    meta = metadata(mnt)
    assert meta["ir_version"] == 11 and meta["net_name"] == "written"
    assert meta["layer_types"] == {"Const": len(consts), "Result": 1}
    assert meta["left_out"][0]["name"] == "pairs" and meta["left_out"][0]["element_type"] == "u2"
    assert meta["rt_info"]["conversion_parameters"]["framework"] == "numpy"


def test_written_ir_every_dtype(tmp):
    consts, arrays, bits, nibbles = sample()
    model = write_ir(tmp / "m", consts)
    with mounted(model) as mnt:
        check_written(mnt, consts, arrays, bits, nibbles)
        assert (mnt / ".modelfs" / "model.xml").read_bytes() == model.read_bytes()
    for step in ("--list", "--info", "--check"):
        result = run_modelfs(step, model)
        assert result.returncode == 0, (step, result.stderr)


def sub_byte_sample():
    """u1 and nf4 Consts of values chosen here, odd counts and 2-D shapes
    among them, packed by this test's own writer; u2, u3 and u6 beside them."""
    rng = np.random.default_rng(45)
    values = {
        "mask": rng.integers(0, 2, (3, 5)).astype("u1"),        # 15 bits: 2 bytes, the last bit padding
        "flags": np.array([1, 0, 1, 1, 0, 0, 1, 0, 1], "u1"),  # the legacy spelling BIN
        "q": np.arange(16, dtype="u1")[::-1].reshape(2, 8),     # every index of the table
        "q.odd": np.array([15, 0, 7, 8, 3], "u1"),              # 5 nibbles: 3 bytes
    }
    consts = [
        Const("mask", "u1", [3, 5], pack_msb_bits(values["mask"].ravel())),
        Const("flags", "BIN", [9], pack_msb_bits(values["flags"])),
        Const("q", "nf4", [2, 8], pack_low_nibbles(values["q"].ravel())),
        Const("q.odd", "NF4", [5], pack_low_nibbles(values["q.odd"])),
        Const("u2", "u2", [4], b"\x1b"),
        Const("u3", "u3", [5], bytes(3)),  # 15 bits in a whole 3-byte group, as OpenVINO sized u3 before 2026
        Const("u6", "u6", [4], bytes(3)),
    ]
    return consts, values


def check_sub_byte(mnt, consts, values):
    paths, _ = index_paths(mnt)
    assert sorted(paths) == sorted(values)
    for c in consts[:4]:
        path, chosen = paths[c.name], values[c.name]
        assert cat(path) == c.data, c.name  # the packed bytes, in place
        npy = np.load(str(path) + ".npy")
        car = sidecar(path)
        if c.element_type.lower() in ("u1", "bin"):
            assert npy.dtype == np.uint8, c.name
            np.testing.assert_array_equal(npy, chosen)
            assert car["dtype"] == "uint1" and car["openvino_element_type"] == "u1", c.name
            assert car["openvino_bit_order"] == "element 0 in the most significant bit"
            assert car["npy"] == {"dtype": "uint8", "from": "uint1", "exact": True}
        else:
            assert npy.dtype == np.float32, c.name
            np.testing.assert_array_equal(npy, NF4[chosen])
            assert car["dtype"] == "nf4" and car["openvino_element_type"] == "nf4", c.name
            assert car["openvino_bit_order"] == "element 0 in the lowest bits"
            assert car["npy"] == {"dtype": "float32", "from": "nf4", "exact": True}
        assert car["shape"] == list(chosen.shape) and car["nbytes"] == len(c.data), c.name
        assert car["source"] == {"file": "model.bin", "offset": c.offset}, c.name
    left = {e["name"]: e for e in metadata(mnt)["left_out"]}
    assert set(left) == {"u2", "u3", "u6"}
    for name, entry in left.items():
        assert entry["element_type"] == name and "OpenVINO releases" in entry["reason"], entry


def test_u1_and_nf4_unpacked_u2_u3_u6_left_out(tmp):
    consts, values = sub_byte_sample()
    model = write_ir(tmp / "m", consts)
    with mounted(model) as mnt:
        check_sub_byte(mnt, consts, values)
    result = run_modelfs("--check", model)
    assert result.returncode == 0 and "4 tensors" in result.stdout, result.stderr


def exported(path):
    """{name: (dtype, shape, bytes)} of a safetensors file, by the reference reader's rules (test_export)."""
    return parse_export(path.read_bytes())[0]


def test_sub_byte_export(tmp):
    """As for int4: left out of a plain export (safetensors has no such
    types), written as their .npy's values with -o export=float32."""
    consts, values = sub_byte_sample()
    consts.append(Const("plain", "f32", [2], np.array([1.5, -2], "<f4").tobytes()))
    model = write_ir(tmp / "m", consts)
    out = tmp / "plain.safetensors"
    result = run_modelfs("--export", out, model)
    assert result.returncode == 0, result.stderr
    tensors = exported(out)
    assert set(tensors) == {"plain"}
    assert tensors["plain"] == ("F32", [2], np.array([1.5, -2], "<f4").tobytes())
    out = tmp / "float32.safetensors"
    result = run_modelfs("--export", out, "-o", "export=float32", model)
    assert result.returncode == 0, result.stderr
    tensors = exported(out)
    assert set(tensors) == set(values) | {"plain"}
    for name, chosen in values.items():
        dtype, shape, raw = tensors[name]
        assert shape == list(chosen.shape), name
        if name in ("mask", "flags"):
            assert dtype == "U8" and raw == chosen.tobytes(), name
        else:
            assert dtype == "F32" and raw == NF4[chosen].tobytes(), name


def test_ir_v10_and_bom(tmp):
    values = np.arange(6, dtype="<i4").reshape(2, 3)
    model = write_ir(tmp / "m", [Const("a", "i32", [2, 3], values.tobytes())], version="10", stem="net")
    model.write_bytes(b"\xef\xbb\xbf<!-- a comment -->\n" + model.read_bytes())
    with mounted(model) as mnt:
        paths, _ = index_paths(mnt)
        np.testing.assert_array_equal(np.load(str(paths["a"]) + ".npy"), values)
        assert metadata(mnt)["ir_version"] == 10


# -- the real files --------------------------------------------------------------

def oracle(folder):
    """{name: [sha256 of its bytes, ...]} and {name: [element_type, ...]} of
    every Const, from the .xml by ElementTree and the .bin sliced here."""
    xml = next(folder.glob("*.xml"))
    blob = xml.with_suffix(".bin").read_bytes()
    digests, types = defaultdict(list), defaultdict(list)
    for layer in ET.parse(xml).getroot().find("layers").findall("layer"):
        if layer.get("type") != "Const":
            continue
        data = layer.find("data")
        offset, size = int(data.get("offset")), int(data.get("size"))
        assert offset + size <= len(blob)
        digests[layer.get("name")].append(hashlib.sha256(blob[offset:offset + size]).hexdigest())
        types[layer.get("name")].append(data.get("element_type"))
    return xml, digests, types


def test_real_openvino_models(shared):
    folder = shared / REAL
    if not folder.is_dir():
        pytest.skip(f"realworld2 fixtures not found at {folder}")
    for name, count in REAL_COUNTS.items():
        xml, digests, types = oracle(folder / name)
        assert sum(map(len, digests.values())) == count, name
        with mounted(xml) as mnt:
            _, index = index_paths(mnt)
            assert len(index["tensors"]) == count, name
            got, got_types = defaultdict(list), defaultdict(list)
            for t in index["tensors"]:
                got[t["name"]].append(hashlib.sha256(cat(mnt / t["path"])).hexdigest())
                got_types[t["name"]].append(sidecar(mnt / t["path"])["dtype"])
            assert set(got) == set(digests), name
            for tensor in digests:
                assert Counter(got[tensor]) == Counter(digests[tensor]), (name, tensor)
                assert Counter(got_types[tensor]) == Counter(DTYPES[e] for e in types[tensor]), (name, tensor)
            assert metadata(mnt)["ir_version"] in (10, 11)


def test_real_model_list_info_check(shared):
    folder = shared / REAL / "datumaro_face_detection_0200"
    if not folder.is_dir():
        pytest.skip(f"realworld2 fixtures not found at {folder}")
    xml = folder / "face-detection-0200.xml"
    for step in ("--list", "--info", "--check"):
        result = run_modelfs(step, xml)
        assert result.returncode == 0, (step, result.stderr)
    assert "705 tensors" in run_modelfs("--check", xml).stdout


def test_underallocated_fixture_refused(shared, tmp):
    folder = shared / HOSTILE
    if not folder.is_dir():
        pytest.skip(f"realworld2 fixtures not found at {folder}")
    xml = folder / "test_model_with_underallocated_weights.xml"
    for step in ("--list", "--check"):
        result = run_modelfs(step, xml)
        assert result.returncode == 2, (step, result.stderr)
        assert "OpenVINO" in one_line(result.stderr)
    mnt = tmp / "mnt"
    mnt.mkdir()
    result = run_modelfs(xml, mnt)
    assert result.returncode == 2 and "OpenVINO" in one_line(result.stderr)


# -- refusals --------------------------------------------------------------------

def refused(model, *words):
    conftest.refused(model, "OpenVINO IR", *words)


def test_refusals(tmp):
    values = np.arange(4, dtype="<f4")

    def model(old=None, new=None):
        path = write_ir(tmp / "r", [Const("a", "f32", [4], values.tobytes())])
        if old is not None:
            text = path.read_text()
            assert old in text
            path.write_text(text.replace(old, new))
        return path

    refused(model('size="16"', 'size="12"'), "size 12 is not the 16 bytes")
    # Packed types: a byte per value (as if unpacked) is not their size.
    refused(model('element_type="f32"', 'element_type="u1"'), "size 16 is not the 1 bytes")
    refused(model('element_type="f32" shape="4"', 'element_type="nf4" shape="30"'), "size 16 is not the 15 bytes")
    # u3 of 40 values: 15 bytes, in whole 3-byte groups too; 16 is neither.
    refused(model('element_type="f32" shape="4"', 'element_type="u3" shape="40"'), "size 16 is not the 15 bytes")
    refused(model('element_type="f32"', 'element_type="f33"'), "unknown element_type")
    refused(model('shape="4"', 'shape="4,x"'), "shape")
    refused(model('offset="3"', 'offset="3000"'), "run past the end")
    refused(model('version="11"', 'version="9"'), "IR version")
    refused(model("<dim>4</dim>", "<dim>5</dim>"), "dims are not its shape")
    path = model()
    path.with_suffix(".bin").unlink()
    refused(path, "model.bin")
    path = model()
    path.write_text(path.read_text()[:-20])
    refused(path, "XML")


# -- remote ----------------------------------------------------------------------

def test_remote_ir(tmp, nginx):
    consts, arrays, bits, nibbles = sample()
    write_ir(nginx.root / "m", consts)
    with mounted(f"{nginx.url}/m/model.xml", "-o", f"cache_dir={tmp / 'cache'}") as mnt:
        check_written(mnt, consts, arrays, bits, nibbles)
