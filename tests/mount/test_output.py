# SPDX-License-Identifier: Apache-2.0
"""What modelfs prints of a model's text: --info and --list escape what a
terminal would act on (bidirectional marks, C1 controls, DEL), the JSON
outputs give every value back whole, error lines cut long names to stay
under 4 KiB, and big metadata keeps its keys' order and values."""
import json
import random
import struct

import numpy as np

import gguf_writer as gg
import hostile_corpus as hc
import safetensors_writer as st
from conftest import metadata, mounted, run_modelfs

# Each code point a terminal acts on that JSON leaves raw, with the escape
# --info shows for it.
CONTROLS = {"\u202e": "\\u{202e}", "\u2066": "\\u{2066}", "\u200f": "\\u{200f}", "\u061c": "\\u{061c}",
            "\u0085": "\\u{0085}", "\u009b": "\\u{009b}", "\x7f": "\\x7f"}
TEXT = "a" + "".join(f"{c}{i}" for i, c in enumerate(CONTROLS)) + " 权重"


def controlled_model(tmp):
    return st.write(tmp / "m.safetensors", {"w\u202e": np.ones(2, np.float32)},
                    metadata={"note": TEXT, "k\u2066ey": "v\u200f"})


def test_info_shows_each_control_escaped(tmp):
    result = run_modelfs("--info", controlled_model(tmp))
    assert result.returncode == 0, result.stderr
    for raw, escape in CONTROLS.items():
        assert raw not in result.stdout, f"raw U+{ord(raw):04X} in --info"
        assert escape in result.stdout, f"{escape} missing from --info: {result.stdout!r}"
    assert "k\\u{2066}ey" in result.stdout
    assert "权重" in result.stdout  # printable text of any script stays as it is


def test_json_outputs_keep_model_text_whole_and_escaped(tmp):
    model = controlled_model(tmp)
    info = run_modelfs("--info", "--json", model)
    listing = run_modelfs("--list", "--json", model)
    for result in (info, listing):
        assert result.returncode == 0, result.stderr
        for raw in CONTROLS:
            assert raw not in result.stdout, f"raw U+{ord(raw):04X} in JSON output"
    assert json.loads(info.stdout)["metadata"]["__metadata__"] == {"note": TEXT, "k\u2066ey": "v\u200f"}
    assert [t["name"] for t in json.loads(listing.stdout)["tensors"]] == ["w\u202e"]
    with mounted(model) as mnt:
        assert metadata(mnt)["__metadata__"] == {"note": TEXT, "k\u2066ey": "v\u200f"}


def test_table_and_errors_escape_controls(tmp):
    listing = run_modelfs("--list", controlled_model(tmp))
    assert listing.returncode == 0, listing.stderr
    assert "w\\u{202e}" in listing.stdout and "\u202e" not in listing.stdout
    header = {"bad\u202e\u0085": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    text = json.dumps(header).encode()
    bad = tmp / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", len(text)) + text + bytes(4))
    result = run_modelfs("--list", bad)
    assert result.returncode == 2
    assert "bad\\u{202e}\\u{0085}" in result.stderr and "\u202e" not in result.stderr


def one_short_line(result, head):
    assert result.returncode == 2, result.stderr[:300]
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"{len(lines)} lines"
    assert len(lines[0].encode()) < 4096, f"a line of {len(lines[0].encode())} bytes"
    assert head * 50 in lines[0] and " bytes cut]" in lines[0], lines[0]
    return lines[0]


def test_error_on_a_20_mb_name_is_one_short_line(tmp):
    model = hc.long_name_bad_offsets(tmp)
    line = one_short_line(run_modelfs("--list", model), "n")
    cut = int(line.split("\u2026[", 1)[1].split(" bytes cut]", 1)[0])
    assert hc.ERROR_NAME_BYTES - 300 < cut < hc.ERROR_NAME_BYTES
    mnt = tmp / "mnt"
    mnt.mkdir()
    one_short_line(run_modelfs(model, mnt), "n")
    # --check --json keeps the fault whole.
    check = run_modelfs("--check", "--json", model)
    assert check.returncode == 2
    fault = json.loads(check.stdout)["fault"]
    assert "\"" + "n" * hc.ERROR_NAME_BYTES + "\"" in fault["reason"]
    assert "n" * hc.ERROR_NAME_BYTES in fault["message"]


def test_gguf_and_onnx_long_names_make_short_error_lines(tmp):
    one_short_line(run_modelfs("--list", hc.gguf_long_name_past_end(tmp)), "g")
    one_short_line(run_modelfs("--list", hc.onnx_long_name_bad_tensor(tmp)), "o")


def test_big_metadata_is_given_back_whole(tmp):
    """Tens of thousands of keys in --info --json and metadata.json equal the
    writer's, in each format."""
    rng = random.Random(7)
    keys = [hc._key(i) for i in range(30_000)]
    rng.shuffle(keys)
    st_meta = {k: f"v{i}" for i, k in enumerate(keys)}
    st_model = st.write(tmp / "meta.safetensors", {"w": np.ones(1, np.float32)}, metadata=st_meta)
    kvs = [(f"k.{k}", gg.Value(gg.UINT32, i)) for i, k in enumerate(keys)]
    gguf_model = gg.write(tmp / "meta.gguf", kvs, [gg.Tensor("w", 0, [1], np.ones(1, np.float32).tobytes())])
    info = run_modelfs("--info", "--json", st_model)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["metadata"]["__metadata__"] == st_meta
    info = run_modelfs("--info", "--json", gguf_model)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["metadata"]["kv"] == {k: v.value for k, v in kvs}
    with mounted(st_model) as mnt:
        assert metadata(mnt)["__metadata__"] == st_meta
    human = run_modelfs("--info", st_model)
    assert human.returncode == 0 and all(f'"{k}":"v{i}"' in human.stdout for i, k in enumerate(keys[:50]))


def test_onnx_props_and_attributes_keep_order_and_the_last_value(tmp):
    """ONNX maps, written by the test: metadata_props keeps the last value of
    a repeated key; a node's attributes keep their file order in graph.json,
    a repeated name its first place and last value."""
    rng = random.Random(11)
    keys = [hc._key(i) for i in range(20_000)]
    rng.shuffle(keys)
    props = b"".join(hc._pb(14, hc._pb(1, k) + hc._pb(2, f"p{i}")) for i, k in enumerate(keys))
    props += hc._pb(14, hc._pb(1, keys[0]) + hc._pb(2, "last"))
    attributes = b"".join(hc._pb(5, hc._pb(1, k) + hc._pb(3, i) + hc._pb(20, 2)) for i, k in enumerate(keys))
    attributes += hc._pb(5, hc._pb(1, keys[1]) + hc._pb(3, 999_999) + hc._pb(20, 2))
    node = hc._pb(1, "w") + hc._pb(2, "y") + hc._pb(4, "Identity") + attributes
    model = tmp / "maps.onnx"
    model.write_bytes(hc._onnx_model(graph_fields=hc._pb(1, node), model_fields=props))

    want_props = {k: f"p{i}" for i, k in enumerate(keys)}
    want_props[keys[0]] = "last"
    info = run_modelfs("--info", "--json", model)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["metadata"]["metadata_props"] == want_props
    with mounted(model) as mnt:
        graph = json.loads((mnt / ".modelfs" / "graph.json").read_text(), object_pairs_hook=list)
    node_doc = dict(dict(graph)["graph"])["nodes"][0]
    got = dict(node_doc)["attributes"]
    assert [k for k, _ in got] == keys
    assert dict(got) == {k: 999_999 if k == keys[1] else i for i, k in enumerate(keys)}
