# SPDX-License-Identifier: Apache-2.0
"""What modelfs prints of a model's text: --info and --list escape what a
terminal would act on (bidirectional marks, C1 controls, DEL), the JSON
outputs give every value back whole, error lines cut long names to stay
under 4 KiB (a NUL in a name does not cut them), the --list name column
is capped while --json keeps names whole, and big metadata keeps its keys'
order and values."""
import json
import random
import re
import struct
import subprocess
import unicodedata

import numpy as np

import gguf_writer as gg
import hostile_corpus as hc
import safetensors_writer as st
from conftest import MODELFS, is_mounted, metadata, mounted, one_line, run_modelfs, unmount
from test_containment import onnx_with_external_weight

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


def test_info_shortens_long_arrays_but_json_keeps_them(tmp):
    vocab = [f"tok{i}" for i in range(32000)]
    model = gg.write(tmp / "vocab.gguf", [("general.architecture", gg.Value(gg.STRING, "llama")),
                                          ("tokenizer.ggml.tokens", gg.Array(gg.STRING, vocab)),
                                          ("small", gg.Array(gg.INT32, [1, 2, 3]))],
                     [gg.Tensor("w", 0, [2], np.ones(2, np.float32).tobytes())])
    result = run_modelfs("--info", model)
    assert result.returncode == 0, result.stderr
    assert max(map(len, result.stdout.splitlines())) < 1000
    assert '"tok0","tok1","tok2","tok3","tok4",… (32000 items)' in result.stdout.replace(", ", ",")
    assert "tok5" not in result.stdout
    assert re.search(r"1,\s*2,\s*3\]", result.stdout), "short arrays stay whole"
    whole = json.loads(run_modelfs("--info", "--json", model).stdout)
    assert len(re.findall(r"\"tok\d", json.dumps(whole))) == 32000
    with mounted(model) as mnt:
        assert len(re.findall(r"\"tok\d", (mnt / ".modelfs" / "metadata.json").read_text())) == 32000


ELLIPSIS = "\u2026"


def safetensors_header(header, data=b""):
    text = json.dumps(header).encode() if not isinstance(header, (bytes, str)) else header
    text = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(text)) + text + data


def test_list_caps_the_name_column_and_json_keeps_names_whole(tmp):
    long_name = "x" * 100_000
    tensors = {f"layer.{i}.w": np.zeros(1, np.float32) for i in range(1000)}
    tensors[long_name] = np.ones(2, np.float32)
    model = st.write(tmp / "long.safetensors", tensors)
    result = run_modelfs("--list", model)
    assert result.returncode == 0, result.stderr
    # About a hundred columns a row, not 100 000 (that was 100 MB).
    assert len(result.stdout) < 300_000, len(result.stdout)
    lines = result.stdout.split("\n")
    cut = [line for line in lines if line.startswith("x" * 79 + ELLIPSIS)]
    assert len(cut) == 1 and "float32" in cut[0] and "[2]" in cut[0], cut
    assert "x" * 80 not in result.stdout
    assert max(len(line) for line in lines) < 140
    # Aligned: every table row has its dtype in the same column.
    rows = [line for line in lines[1:] if line.startswith("layer.")]
    assert len({line.index("float32") for line in rows + cut}) == 1
    listed = json.loads(run_modelfs("--list", "--json", model).stdout)
    assert long_name in {t["name"] for t in listed["tensors"]}


def test_nul_in_a_tensor_name_keeps_the_reason(tmp):
    header = '{"a\\u0000b\\u001b[31m": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}'
    model = tmp / "nul.safetensors"
    model.write_bytes(safetensors_header(header, b"\0" * 4))
    for command in (("--list",), ("--check",), ()):
        mnt = tmp / "mnt"
        mnt.mkdir(exist_ok=True)
        result = run_modelfs(*command, model, *(() if command else (mnt,)))
        assert result.returncode == 2, (command, result.stderr)
        line = one_line(result.stderr)
        assert 'tensor "a\\x00b\\x1b[31m": data_offsets span 4 bytes but shape and dtype need 8' in line, line
        assert "\x1b" not in line and "\0" not in line
        assert not is_mounted(mnt)


def test_nul_in_an_onnx_external_location_keeps_the_reason(tmp):
    model = onnx_with_external_weight(tmp / "nul.onnx", "a\0b\x1b[31m.bin")
    result = run_modelfs("--list", model)
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert 'external data location "a\\x00b\\x1b[31m.bin" contains a NUL byte' in line, line


def columns(text):
    """Terminal columns, as a UTF-8 terminal counts them."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
               for c in text)


def test_names_cannot_drive_the_terminal(tmp):
    """A name that would colour the terminal and start a forged line is
    listed escaped, and names in other scripts keep the table aligned."""
    hostile = "w\x1b[31mred\nmodelfs: forged"
    model = st.write(tmp / "m.safetensors", {hostile: np.zeros(2, np.float32),
                                             "ок.权重": np.zeros(3, np.float32),
                                             "plain": np.zeros(1, np.int8)})
    table = run_modelfs("--list", model)
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout
    lines = table.stdout.splitlines()
    assert not any(line.startswith("modelfs: forged") for line in lines)
    assert any(line.startswith("w\\x1b[31mred\\x0amodelfs: forged ") for line in lines), lines
    # DTYPE starts at the same column on every row of the table.
    rows = lines[:4]
    starts = {columns(row[:row.index(word)]) for row, word in
              zip(rows, ["DTYPE", "float32", "float32", "int8"])}
    assert len(starts) == 1, rows


def test_error_messages_quote_names_escaped(tmp):
    """A refused tensor's name, quoted in the message, cannot reach the
    terminal as control characters or split the message into lines."""
    header = {"w\x1b[2J\x9b1m\nmodelfs: forged": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}}
    text = json.dumps(header).encode()
    model = tmp / "bad.safetensors"
    model.write_bytes(struct.pack("<Q", len(text)) + text + bytes(4))
    for command in ("--list", "--check"):
        result = subprocess.run([str(MODELFS), command, str(model)], capture_output=True, timeout=60)
        assert result.returncode == 2, result
        err = result.stderr.decode("utf-8")  # well-formed: escapes are ASCII
        assert "\x1b" not in err and "\x9b" not in err and "\u009b" not in err
        assert len(err.strip().splitlines()) == 1, err
        assert "w\\x1b[2J\\u{009b}1m\\x0amodelfs: forged" in err, err
    mnt = tmp / "mnt"
    mnt.mkdir()
    try:
        result = subprocess.run([str(MODELFS), str(model), str(mnt)], capture_output=True, timeout=60)
        assert result.returncode == 2 and not is_mounted(mnt)
        assert b"\x1b" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    finally:
        unmount(mnt)
