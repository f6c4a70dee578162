# SPDX-License-Identifier: Apache-2.0
"""A corpus of hostile model files ("Hostile input, round two"), each made
small on disk by a function of its own, for tests/mount/test_hostile_corpus.py
and fuzz/make_seeds.py.

Every case is a function `make(folder) -> path of the model to give
modelfs` (a file or a folder). Files are written with the tests' own
writers (safetensors_writer, gguf_writer), torch.save, struct, or the small
ZIP writer below; none of them holds a big tensor in memory: the big ones
are views (expand) or deflated zeros, made from a repeated chunk.

    python3 tests/mount/hostile_corpus.py OUT_FOLDER [CASE...]

writes the named cases (default: all) into OUT_FOLDER/<case>/.
"""
import collections
import io
import json
import os
import pathlib
import pickle
import struct
import sys
import zlib

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import coreml_files as cm  # noqa: E402
import ggml_legacy_files as gl  # noqa: E402
import gguf_writer as gg  # noqa: E402
import safetensors_writer as st  # noqa: E402

try:
    import torch
except ImportError:  # the torch cases are skipped by the test
    torch = None

MiB = 1 << 20
F32 = np.float32


# --------------------------------------------------------------------------
# A minimal ZIP writer: torch.save's layout (archive/...), stored or deflated
# members, ZIP64 records. It takes a member's deflate stream as a list of
# chunks, so a 256 MiB member of zeros is its ~260 KB compressed form and
# never 256 MiB in memory. Python's zipfile cannot write precompressed data,
# and deflating 6 x 256 MiB through it would compress every byte; this
# deflates one MiB of zeros once and repeats that block.

class Member:
    def __init__(self, name, data=b"", *, deflate_chunks=None, size=None, crc=None):
        self.name = name.encode()
        if deflate_chunks is None:
            self.method, self.payload = 0, [bytes(data)]
            self.size, self.crc = len(data), zlib.crc32(data)
        else:
            self.method, self.payload, self.size, self.crc = 8, deflate_chunks, size, crc
        self.csize = sum(len(c) for c in self.payload)


def write_zip(path, members):
    """Writes `members` with ZIP64 extra fields and end records (as torch does)."""
    with open(path, "wb") as f:
        central = []
        for m in members:
            offset = f.tell()
            # ZIP64 extra: uncompressed size, compressed size (local header)
            extra = struct.pack("<HHQQ", 1, 16, m.size, m.csize)
            f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, m.method, 0, 0x21,
                                m.crc, 0xFFFFFFFF, 0xFFFFFFFF, len(m.name), len(extra)))
            f.write(m.name + extra)
            for chunk in m.payload:
                f.write(chunk)
            cextra = struct.pack("<HHQQQ", 1, 24, m.size, m.csize, offset)
            central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, m.method, 0,
                                       0x21, m.crc, 0xFFFFFFFF, 0xFFFFFFFF, len(m.name),
                                       len(cextra), 0, 0, 0, 0, 0xFFFFFFFF) + m.name + cextra)
        cd_offset = f.tell()
        cd = b"".join(central)
        f.write(cd)
        eocd64 = f.tell()
        f.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(members),
                            len(members), len(cd), cd_offset))
        f.write(struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1))
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                            0xFFFFFFFF, 0))
    return path


def deflated_zeros(size, chunk=MiB):
    """(chunks, crc) of a raw deflate stream of `size` zero bytes: one
    full-flushed block of `chunk` zeros repeated (a full flush resets the
    window, so each copy decodes alone), then the final block."""
    assert size % chunk == 0
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(chunk)) + c.flush(zlib.Z_FULL_FLUSH)
    tail = zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)  # empty final block
    crc, zeros = 0, bytes(chunk)
    for _ in range(size // chunk):
        crc = zlib.crc32(zeros, crc)
    return [block] * (size // chunk) + [tail], crc


class _StorageRef:
    def __init__(self, key, numel):
        self.key, self.numel = key, numel


class _TensorRef:
    """Pickles as torch.save pickles a contiguous float tensor of `numel`."""

    def __init__(self, key, numel):
        self.storage = _StorageRef(key, numel)

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2,
                (self.storage, 0, (self.storage.numel,), (1,), False, collections.OrderedDict()))


class _TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _StorageRef):
            return ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel)
        return None


def torch_pickle(obj):
    out = io.BytesIO()
    _TorchPickler(out, protocol=2).dump(obj)
    return out.getvalue()


def torch_zip_members(pickle_bytes, storages=()):
    return ([Member("archive/data.pkl", pickle_bytes)] + list(storages)
            + [Member("archive/version", b"3\n")])


# --------------------------------------------------------------------------
# The cases. Sizes are module constants so the seeds script can shrink them.

LONG_NAME = 70000


def long_name(folder, name_bytes=LONG_NAME):
    """1. A 70 000-byte name among short ones (heap corruption)."""
    return st.write(folder / "long_name.safetensors",
                    {"a" * name_bytes: np.ones(1, F32), "b": np.ones(1, F32),
                     "c" * 100: np.ones(1, F32), "d": np.ones(1, F32)})


def shared_pickle_dict(folder, levels=60):
    """2. A dict whose two values are one memoized dict, 60 levels: 2^60
    paths through 60 objects."""
    d = {}
    for _ in range(levels):
        d = {"l": d, "r": d}
    path = folder / "shared_dict.pt"
    torch.save({"w": torch.zeros(2), "x": d}, path)
    return path


def shared_pickle_list(folder, levels=60):
    """2. The same with lists: a = [a, a]."""
    a = []
    for _ in range(levels):
        a = [a, a]
    path = folder / "shared_list.pt"
    torch.save({"w": torch.zeros(2), "x": a}, path)
    return path


EXPANDED_VIEWS = 12
EXPANDED_NUMEL = 64 * MiB


def expanded_views(folder, views=EXPANDED_VIEWS, numel=EXPANDED_NUMEL):
    """3. Twelve views of one 4-byte storage, each 64 Mi elements (stride 0)."""
    s = torch.zeros(1)
    path = folder / "expanded_views.pt"
    torch.save({f"v{i}": s.expand(numel) for i in range(views)}, path)
    return path


ZIP_BOMB_MEMBERS = 6
ZIP_BOMB_BYTES = 256 * MiB


def zip_bomb(folder, members=ZIP_BOMB_MEMBERS, size=ZIP_BOMB_BYTES):
    """4. A torch.save-shaped ZIP whose six float storages of 64 Mi elements
    are deflated members of 256 MiB of zeros each (1.5 MB on disk)."""
    chunks, crc = deflated_zeros(size, chunk=min(size, MiB))
    numel = size // 4
    pkl = torch_pickle({f"w{i}": _TensorRef(str(i), numel) for i in range(members)})
    storages = [Member(f"archive/data/{i}", deflate_chunks=chunks, size=size, crc=crc)
                for i in range(members)]
    return write_zip(folder / "zip_bomb.pt", torch_zip_members(pkl, storages))


HUGE_SIDECAR_DIMS = 3_000_000


def huge_sidecar(folder, dims=HUGE_SIDECAR_DIMS):
    """5. One F32 element of shape [1] * 3 000 000: a 6 MB header and sidecar."""
    header = {"w": {"dtype": "F32", "shape": [1] * dims, "data_offsets": [0, 4]}}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)
    path = folder / "huge_sidecar.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(4))
    return path


LONG_LISTED_NAME = 100_000
LISTED_BESIDE = 1000


def long_listed_name(folder, name_bytes=LONG_LISTED_NAME, others=LISTED_BESIDE):
    """6. One 100 000-byte name beside 1 000 normal tensors (--list pads every row to it)."""
    tensors = {"n" * name_bytes: np.ones(1, F32)}
    tensors.update({f"layer{i}.weight": np.full(1, i, F32) for i in range(others)})
    return st.write(folder / "long_listed_name.safetensors", tensors)


NUL_NAME = "a\u0000b\u001b[31m"


def nul_name_bad_offsets(folder):
    """7. A name holding NUL and an escape sequence, whose offsets run past the data."""
    header = {NUL_NAME: {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}
    text = json.dumps(header).encode()  # ensure_ascii: the NUL is written \\u0000
    path = folder / "nul_name.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(8))
    return path


def fifo_model(folder):
    """8. A FIFO given as the model (opening it for reading blocks until a writer comes)."""
    path = folder / "fifo.safetensors"
    os.mkfifo(path)
    return path


def _index(folder, weight_map):
    path = folder / "model.safetensors.index.json"
    path.write_text(json.dumps({"metadata": {"total_size": 8}, "weight_map": weight_map}))
    return path


def fifo_shard(folder):
    """8. A sharded index whose weight_map names a FIFO beside a good shard."""
    st.write(folder / "model-00001-of-00002.safetensors", {"a": np.ones(1, F32)})
    os.mkfifo(folder / "model-00002-of-00002.safetensors")
    return _index(folder, {"a": "model-00001-of-00002.safetensors",
                           "b": "model-00002-of-00002.safetensors"})


def _escaping_link(folder):
    outside = folder / "outside"
    outside.mkdir()
    st.write(outside / "secret.safetensors", {"secret": np.arange(2, dtype=F32)})
    model = folder / "model"
    model.mkdir()
    st.write(model / "model-00001-of-00002.safetensors", {"a": np.ones(1, F32)})
    os.symlink("../outside/secret.safetensors", model / "link.safetensors")
    return _index(model, {"a": "model-00001-of-00002.safetensors", "secret": "link.safetensors"})


def symlink_escape_index(folder):
    """9. A shard that is a symlink out of the index's folder, the index given."""
    return _escaping_link(folder)


def symlink_escape_folder(folder):
    """9. The same, the folder given."""
    return _escaping_link(folder).parent


# Old hostile shapes worth keeping.

DEEP_JSON = 100_000


def deep_json_header(folder, depth=DEEP_JSON):
    """A safetensors header nesting arrays 100 000 deep."""
    text = b'{"w":' + b"[" * depth + b"]" * depth + b"}"
    path = folder / "deep_json.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text)
    return path


DEEP_PICKLE = 100_000


def deep_pickle(folder, depth=DEEP_PICKLE):
    """A torch.save ZIP whose pickle is {'x': [[[...]]]} 100 000 lists deep
    (EMPTY_LIST x depth, then APPEND x depth - 1)."""
    pkl = (b"\x80\x02}X\x01\x00\x00\x00x" + b"]" * depth + b"a" * (depth - 1) + b"s.")
    return write_zip(folder / "deep_pickle.pt", torch_zip_members(pkl))


def _gguf_head(kv_count=1):
    return b"GGUF" + struct.pack("<IQQ", 3, 0, kv_count)


def gguf_huge_array_count(folder):
    """A GGUF key-value array of uint32 claiming 2^62 items, none present."""
    body = struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", gg.ARRAY, gg.UINT32, 1 << 62)
    path = folder / "huge_array.gguf"
    path.write_bytes(_gguf_head() + body + bytes(64))
    return path


def gguf_huge_string_length(folder):
    """A GGUF string value claiming 2^63 bytes."""
    body = struct.pack("<Q", 1) + b"s" + struct.pack("<IQ", gg.STRING, 1 << 63) + b"abc"
    path = folder / "huge_string.gguf"
    path.write_bytes(_gguf_head() + body + bytes(64))
    return path


def safetensors_header_2_63(folder):
    """A safetensors header length of 2^63."""
    path = folder / "header_2_63.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 63) + b'{"w":{"dtype":"F32","shape":[1],'
                     b'"data_offsets":[0,4]}}' + bytes(4))
    return path


def truncated_central_directory(folder):
    """A torch.save file whose central directory is cut in half; the end
    records are kept (and now overlap where the directory claims to be)."""
    buf = io.BytesIO()
    torch.save({"w": torch.arange(4.0), "b": torch.ones(2)}, buf)
    data = buf.getvalue()
    eocd = data.rfind(b"PK\x05\x06")
    locator = data.rfind(b"PK\x06\x07", 0, eocd)
    zip64 = data.rfind(b"PK\x06\x06", 0, eocd)
    (cd_size, cd_offset) = struct.unpack_from("<QQ", data, zip64 + 40)
    end = min(p for p in (zip64, locator, eocd) if p >= 0)
    path = folder / "truncated_cd.pt"
    path.write_bytes(data[:cd_offset + cd_size // 2] + data[end:])
    return path



MEMO_REPEATS = 2_000_000


def _bin_unicode(text):
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _memo_repeats(folder, name, value, repeats):
    """A torch.save ZIP whose pickle is one list holding `value` (memoized
    once) and then `repeats` memo references to it, two bytes each."""
    pkl = b"\x80\x02](" + value + b"q\x00" + b"h\x00" * repeats + b"e."
    return write_zip(folder / name, torch_zip_members(pkl, [Member("archive/data/0", bytes(16))]))


_STORAGE_ID = (b"(" + _bin_unicode("storage") + b"ctorch\nFloatStorage\n" + _bin_unicode("0")
               + _bin_unicode("cpu") + b"K\x04tQ")


def memo_repeated_tensor(folder, repeats=MEMO_REPEATS):
    """A rebuilt tensor repeated two million times through the memo (4 MB):
    each repeat a tensor of its own name (400 MB peak while a repeat was
    charged as a fraction of what it costs)."""
    rebuild = (b"ctorch._utils\n_rebuild_tensor_v2\n(" + _STORAGE_ID
               + b"K\x00K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR")
    return _memo_repeats(folder, "memo_tensor.pt", rebuild, repeats)


def memo_repeated_storage(folder, repeats=MEMO_REPEATS):
    """The same with a storage saved on its own (a bare persistent id):
    2 GB peak while such tensors were not charged at all."""
    return _memo_repeats(folder, "memo_storage.pt", _STORAGE_ID, repeats)

EXPORT_WRAP_VIEWS = 17
EXPORT_WRAP_NUMEL = 1 << 58  # float32: 2^60 bytes each in C order
EXPORT_PLAIN = [0.5, 1.5, -2.0, 3.25, 4.0, -5.5]


def _views_of_one_storage(path, views, numel, value):
    """`views` stride-0 views v0, v1, ... of `numel` elements of one 4-byte
    storage holding `value`, beside a plain tensor w."""
    s = torch.full((1,), value)
    tensors = {"w": torch.tensor(EXPORT_PLAIN)}
    tensors.update({f"v{i}": s.expand(numel) for i in range(views)})
    torch.save(tensors, path)
    return path


def export_size_wraps(folder, views=EXPORT_WRAP_VIEWS, numel=EXPORT_WRAP_NUMEL):
    """Seventeen stride-0 views of one 4-byte storage, 2^60 bytes each in C
    order (1.9 KB on disk): their parts of the export sum past 2^64, which
    wrapped its header's offsets and its size. Beside them, a plain tensor."""
    return _views_of_one_storage(folder / "export_wraps.pt", views, numel, 0.0)


TIB_VIEW_NUMEL = 1 << 40  # float32: 4 TiB in C order
MANY_VIEWS = 2000
MANY_VIEWS_NUMEL = 1 << 26  # float32: 256 MiB each in C order, under the bound on one view


def many_expanded_views(folder, views=MANY_VIEWS, numel=MANY_VIEWS_NUMEL):
    """2000 views of one 4-byte storage, each 256 MiB in C order and so
    within the bound on one view (160 KB on disk): together a 500 GiB
    export, unless the export as a whole is bounded."""
    return _views_of_one_storage(folder / "many_views.pt", views, numel, 1.0)


def tib_expanded_view(folder, numel=TIB_VIEW_NUMEL):
    """One float32 element expanded to 2^40 (stride 0): a 4 TiB export and
    .npy from a 4-byte storage (1.3 KB on disk), beside two plain
    tensors the export keeps."""
    tensors = {"a": torch.tensor(EXPORT_PLAIN), "big": torch.ones(1).expand(numel),
               "b": torch.arange(12, dtype=torch.int16).reshape(3, 4)}
    path = folder / "tib_view.pt"
    torch.save(tensors, path)
    return path


STRIDE_OVERFLOW_SHAPE = [0, 1 << 40, 1 << 40, 1 << 40]


def stride_overflow(folder):
    """An empty safetensors tensor of shape [2^40, 2^40, 2^40, 0]: its
    C-order strides (2^80 for the first) pass int64, as numpy and torch
    say in refusing the shape; beside it a plain tensor."""
    header = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "e": {"dtype": "F32", "shape": STRIDE_OVERFLOW_SHAPE, "data_offsets": [8, 8]}}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)
    path = folder / "stride_overflow.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + np.ones(2, F32).tobytes())
    return path

# --------------------------------------------------------------------------
# Counts that made modelfs quadratic (an insert that scans what is there,
# a suffix search from ~1 for every clash), and names long enough to make
# an error line of megabytes.

def _key(i):
    """A short distinct key for each i (letters and digits, base 62)."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = ""
    while True:
        out += digits[i % 62]
        i //= 62
        if not i:
            return out


# A million keys (10 MB) parse in over 10 s on a loaded 2-CPU machine and
# take some 240 MiB as a map; 300 000 keep the case within the bounds and
# still take hours where each insert scans the keys before it.
METADATA_KEYS = 300_000


def safetensors_metadata_keys(folder, keys=METADATA_KEYS, name="metadata_keys.safetensors"):
    """A __metadata__ of 300 000 short keys (3 MB): --info built its object
    one key at a time, each insert a scan of those before."""
    return st.write(folder / name, {"w": np.ones(1, F32)},
                    metadata={_key(i): "" for i in range(keys)})


GGUF_KEYS = 120_000


def gguf_keys(folder, keys=GGUF_KEYS, name="keys.gguf"):
    """120 000 GGUF key-values (uint8 each): --info took minutes while each
    key was inserted into an ordered object by a scan of the others."""
    kvs = [("k." + _key(i), gg.Value(gg.UINT8, i & 0xFF)) for i in range(keys)]
    return gg.write(folder / name, kvs, [gg.Tensor("w", 0, [1], np.ones(1, F32).tobytes())])


def _varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _pb(number, value):
    """One protobuf field: an int as a varint, bytes or str length-delimited."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _onnx_model(graph_fields=b"", model_fields=b"", initializer_name="w", raw=None, dims=(1,)):
    """An ONNX ModelProto written field by field (onnx.proto3's numbers):
    ir_version 8, opset 17, one float initializer, and what is given."""
    tensor = (b"".join(_pb(1, d) for d in dims) + _pb(2, 1) + _pb(8, initializer_name)
              + _pb(9, raw if raw is not None else np.ones(int(np.prod(dims)), F32).tobytes()))
    graph = _pb(2, "g") + _pb(5, tensor) + graph_fields
    return _pb(1, 8) + _pb(8, _pb(1, "") + _pb(2, 17)) + model_fields + _pb(7, graph)


ONNX_ENTRIES = 150_000


def onnx_props(folder, entries=ONNX_ENTRIES, name="props.onnx"):
    """150 000 metadata_props (StringStringEntryProto, field 14)."""
    props = b"".join(_pb(14, _pb(1, _key(i)) + _pb(2, "v")) for i in range(entries))
    path = folder / name
    path.write_bytes(_onnx_model(model_fields=props))
    return path


def onnx_attributes(folder, entries=ONNX_ENTRIES, name="attributes.onnx"):
    """One node with 150 000 INT attributes (AttributeProto name 1, i 3, type 20)."""
    attributes = b"".join(_pb(5, _pb(1, _key(i)) + _pb(3, i) + _pb(20, 2)) for i in range(entries))
    node = _pb(1, "w") + _pb(2, "y") + _pb(4, "Identity") + attributes
    path = folder / name
    path.write_bytes(_onnx_model(graph_fields=_pb(1, node)))
    return path


# 2^16 such names mount in under a second of CPU; the corpus's walk of the
# mount (find over every file) would then list 196 608 files, past its cap
# on its own. 2^14 still took 2^27 lookups.
COLLIDING_SEPARATORS = 14


def colliding_names(folder, separators=COLLIDING_SEPARATORS):
    """2^14 names on one path: "c" 15 times, each of the 14 separators "."
    or "/" (both split a name into folders). The n-th takes "~n"; each was
    found by trying ~1, ~2, ... (n^2 / 2 lookups)."""
    tensors = {}
    for bits in range(1 << separators):
        name = "c" + "".join(("/" if bits >> i & 1 else ".") + "c" for i in range(separators))
        tensors[name] = np.full(1, bits & 0xFF, np.uint8)
    return st.write(folder / "colliding_names.safetensors", tensors)


ERROR_NAME_BYTES = 20 * MiB


def long_name_bad_offsets(folder, name_bytes=ERROR_NAME_BYTES):
    """A 20 MB tensor name whose offsets run past the data: the refusal
    quoted it whole (a 20 MB line on stderr)."""
    header = {"n" * name_bytes: {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    text = json.dumps(header).encode()
    path = folder / "long_name_bad_offsets.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(4))
    return path


def gguf_long_name_past_end(folder, name_bytes=65535):
    """A tensor named with GGUF's longest name (65 535 bytes) claiming 4 GiB."""
    tensor = gg.Tensor("g" * name_bytes, 0, [1 << 30], bytes(4))
    return gg.write(folder / "long_name_past_end.gguf", [], [tensor])


def onnx_long_name_bad_tensor(folder, name_bytes=ERROR_NAME_BYTES):
    """An initializer with a 20 MB name whose raw data is short of its dims."""
    path = folder / "long_name_bad_tensor.onnx"
    path.write_bytes(_onnx_model(initializer_name="o" * name_bytes, raw=bytes(4), dims=(1000,)))
    return path


MEMO_STRING_BYTES = 64 << 10
MEMO_STRING_REFS = 30_000


def _pickle_dict(entries):
    """A protocol-2 pickle of one dict: `entries` are (key, value) pickle
    opcodes, set in one SETITEMS."""
    return b"\x80\x02}(" + b"".join(k + v for k, v in entries) + b"u."


def memo_repeated_string(folder, size=MEMO_STRING_BYTES, refs=MEMO_STRING_REFS):
    """A torch.save whose pickle is a dict of 30 000 plain values, each the
    same 64 KiB string through the memo (2 GB when each reference is a copy
    of its own, outside the budget)."""
    first = (_bin_unicode("k0"), _bin_unicode("x" * size) + b"q\x00")
    rest = [(_bin_unicode(f"k{i}"), b"h\x00") for i in range(1, refs)]
    pkl = _pickle_dict([first] + rest)
    return write_zip(folder / "memo_string.pt", torch_zip_members(pkl, [Member("archive/data/0", bytes(16))]))


def memo_repeated_tuple_key(folder, items=1000, item_bytes=1000, refs=MEMO_STRING_REFS):
    """A dict whose 30 000 keys are one memoized tuple of 1 000 strings of
    1 000 bytes: each key's text made anew is 1 MB, 30 GB in all."""
    big = b"(" + b"".join(_bin_unicode(f"{i:04d}" + "y" * (item_bytes - 4)) for i in range(items)) + b"tq\x00"
    entries = [(big, b"K\x00")] + [(b"h\x00", struct.pack("<BH", ord("M"), i)) for i in range(1, refs)]
    pkl = _pickle_dict(entries)
    return write_zip(folder / "memo_tuple_key.pt", torch_zip_members(pkl, [Member("archive/data/0", bytes(16))]))


GGUF_EXPORT_TENSORS = 100_000


def gguf_many_tensors(folder, count=GGUF_EXPORT_TENSORS):
    """A GGUF of 100 000 one-element float32 tensors (4 MB): the tree, the
    export file's header and index.json of each, within the budget."""
    tensors = [gg.Tensor(f"t{i}", 0, [1], struct.pack("<f", i)) for i in range(count)]
    path = folder / "many.gguf"
    gg.write(path, [], tensors)
    return path


# The three cases below close the list of "memory the budget never saw":
# the PT2 model JSON and its text copy, a safetensors header of many empty
# tensors (their entries and the tree of each), and ONNX int64 lists.
PT2_JSON_BYTES = 24 * MiB


def pt2_big_json(folder, size=PT2_JSON_BYTES):
    """A PT2 archive whose model JSON is 24 MB of small objects, deflated
    to some 50 KB: the document and its text were held twice outside the
    budget."""
    item = b'{"a":[1,2,3],"b":"x"},'
    text = b'{"schema_version":{"major":8,"minor":0},"graph_module":{"x":[' + item * (size // len(item)) + b"0]}}"
    return _pt2_of_json(folder / "big_json.pt2", text)


def _pt2_of_json(path, text):
    """A PT2 archive whose model JSON is `text`, deflated."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = compressor.compress(text) + compressor.flush()
    members = [Member("m/archive_format", b"pt2"),
               Member("m/models/model.json", deflate_chunks=[stream], size=len(text), crc=zlib.crc32(text))]
    return write_zip(path, members)


EMPTY_TENSORS = 120_000


def zero_size_tensors(folder, count=EMPTY_TENSORS):
    """A safetensors header of 120 000 zero-size tensors (6.5 MB): refused or
    mounted within the budget, never after peaking past it."""
    entries = ",".join(f'"{_key(i)}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}' for i in range(count))
    header = ("{" + entries + "}").encode()
    header += b" " * (-len(header) % 8)
    path = folder / "empty_tensors.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def onnx_million_dims(folder, dims=1_000_000):
    """An initializer whose dims list is a million packed int64s (2 MB), and
    a node attribute of a million ints: int64 lists copied outside the
    budget."""
    packed = b"".join(_varint(1) for _ in range(dims))
    tensor = _varint(1 << 3 | 2) + _varint(len(packed)) + packed + _pb(2, 1) + _pb(8, "w") + _pb(9, bytes(4))
    ints = _varint(8 << 3 | 2) + _varint(len(packed)) + packed
    node = _pb(1, "w") + _pb(2, "y") + _pb(4, "Identity") + _pb(5, _pb(1, "k") + ints + _pb(20, 7))
    graph = _pb(2, "g") + _pb(5, tensor) + _pb(1, node)
    path = folder / "million_dims.onnx"
    path.write_bytes(_pb(1, 8) + _pb(8, _pb(1, "") + _pb(2, 17)) + _pb(7, graph))
    return path

# name -> (make, needs torch)
def split_member_missing(folder):
    """A GGUF split set of three whose second member is not there: a name
    the set gives that resolves to nothing."""
    tensors = [gg.random_tensor(f"t{i}", 0, [4], i) for i in range(3)]
    paths = gg.write_split(folder, "m", [], tensors, 3)
    os.remove(paths[1])
    return paths[0]


def split_member_links_out(folder):
    """A GGUF split set whose second member is a link out of its folder."""
    outside = folder / "outside"
    outside.mkdir()
    gg.write_split(outside, "m", [], [gg.random_tensor(f"t{i}", 0, [8], i) for i in range(2)], 2)
    model = folder / "model"
    model.mkdir()
    paths = gg.write_split(model, "m", [], [gg.random_tensor(f"t{i}", 0, [4], i) for i in range(2)], 2)
    os.remove(paths[1])
    os.symlink("../outside/" + paths[1].name, paths[1])
    return paths[0]


def _npy(header_text, data=b"", version=1):
    """An .npy of `header_text` padded to 64 with a final newline, then `data`."""
    text = header_text.encode("latin-1")
    fixed = 10 if version == 1 else 12
    text += b" " * (-(fixed + len(text) + 1) % 64) + b"\n"
    length = struct.pack("<H" if version == 1 else "<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + length + text + data


def npy_header_lies(folder):
    """An .npy whose 2.0 header length (1 MiB) runs far past its 200 bytes."""
    blob = bytearray(_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", bytes(12), 2))
    blob[8:12] = struct.pack("<I", 1 << 20)
    path = folder / "header_lies.npy"
    path.write_bytes(bytes(blob))
    return path


def npy_shape_overflow(folder):
    """An .npy whose shape's element count passes 2^64 (and each dimension 2^62)."""
    path = folder / "shape_overflow.npy"
    path.write_bytes(_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d, 16), }"
                          % (1 << 62, 1 << 62), bytes(64)))
    return path


NPZ_MEMBERS = 100_000


def npz_many_members(folder, count=NPZ_MEMBERS):
    """An .npz of 100 000 one-byte uint8 arrays (stored, ~15 MB): the
    directory, the catalog and the tree of each, within the budget."""
    body = _npy("{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }", b"\x07")
    return write_zip(folder / "many.npz", [Member(f"m{i}.npy", body) for i in range(count)])


NPZ_BOMB_BYTES = 256 << 20


def npz_deflate_bomb(folder, size=NPZ_BOMB_BYTES):
    """An .npz whose one deflated member is a float32 array of 256 MiB of
    zeros (260 KB on disk): mounted without inflating it, read in parts."""
    header = _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % (size // 4))
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(header) + c.flush(zlib.Z_FULL_FLUSH)
    chunks, _ = deflated_zeros(size, chunk=min(size, MiB))
    member = Member("w.npy", deflate_chunks=[head] + chunks, size=len(header) + size,
                    crc=_crc_after(header, size))
    return write_zip(folder / "bomb.npz", [member])


def _crc_after(header, zeros):
    """CRC-32 of `header` and then `zeros` zero bytes (a multiple of 1 MiB or less)."""
    crc, block = zlib.crc32(header), bytes(min(zeros, MiB))
    for _ in range(zeros // len(block)):
        crc = zlib.crc32(block, crc)
    return crc


def npz_member_short_stream(folder):
    """An .npz whose deflated member's header and directory say 4 MB of
    float32 but whose stream ends after 1 KiB: reads past it fail (EIO)."""
    numel = 1 << 20
    header = _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % numel)
    short = header + bytes(1024)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = c.compress(short) + c.flush(zlib.Z_FINISH)
    member = Member("w.npy", deflate_chunks=[stream], size=len(header) + 4 * numel,
                    crc=zlib.crc32(short))
    return write_zip(folder / "short_stream.npz", [member])


def npy_deep_header(folder, depth=100_000):
    """An .npy whose descr is 100 000 nested lists (a 2.0 header)."""
    path = folder / "deep.npy"
    path.write_bytes(_npy("{'descr': " + "[" * depth + "]" * depth + ", 'fortran_order': False, "
                          "'shape': (1,), }", bytes(4), 2))
    return path


def npy_odd_header(folder):
    """An .npy whose header is 60 000 bytes of every byte value, braces and
    quotes among them, in a 1.0 header."""
    odd = bytes(range(256)) * 234
    text = b"{'descr': '" + odd + b"', }"
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    path = folder / "odd.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text)
    return path


# --- hdf5 cases ---
# Written by h5py (Debian's python3-h5py, over libhdf5), then changed by
# hand where a case is a lie h5py would not write.


def _h5py():
    import h5py
    return h5py


def hdf5_deep_groups(folder, depth=10_000):
    """An HDF5 file of 10 000 nested groups: the child's walk stops at its
    depth limit and the file is refused."""
    h5py = _h5py()
    path = folder / "deep.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_group("/".join(["g"] * depth))
    return path


HDF5_UNWRITTEN = 1000


def hdf5_many_chunks(folder, count=40_000):
    """A dataset of 40 000 one-element chunks, all written, beside a small
    one: libhdf5 1.10 walks the chunk index from its start for each chunk
    looked up (1.6 billion steps, minutes), so the big one is left out by
    the cap on lookup steps, and the small one served."""
    h5py = _h5py()
    path = folder / "many_chunks.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("many", data=np.arange(count, dtype="<f4"), chunks=(1,))
        f["small"] = np.arange(4, dtype="<f4")
    return path



def hdf5_unwritten_datasets(folder, count=HDF5_UNWRITTEN):
    """1000 gzip-chunked float32 datasets of 2^28 elements never written
    (their chunks read as zeros): 1 TiB of tensors and export from a file
    of a few hundred KB."""
    h5py = _h5py()
    path = folder / "unwritten.h5"
    with h5py.File(path, "w") as f:
        for i in range(count):
            f.create_dataset(f"d{i}", shape=(1 << 28,), dtype="<f4", chunks=(1 << 22,), compression="gzip")
    return path


def hdf5_100k_links(folder, count=100_000):
    """100 000 names in one group, every one a hard link to one dataset: the
    walk visits each name, lists the dataset once and the aliases as left
    out, within the object count and the budget."""
    h5py = _h5py()
    path = folder / "links.h5"
    with h5py.File(path, "w", libver="latest") as f:
        d = f.create_dataset("d", data=np.arange(4, dtype="<f4"))
        g = f.create_group("l")
        for i in range(count):
            g[str(i)] = d
    return path


def hdf5_chunk_past_file(folder):
    """A chunked dataset whose chunk index points past the end of the file:
    libhdf5 reports the address, the parent refuses it."""
    h5py = _h5py()
    path = folder / "chunk_past.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("c", data=np.arange(64, dtype="<f4"), chunks=(64,))
        address = f["c"].id.get_chunk_info(0).byte_offset
    blob = bytearray(path.read_bytes())
    at = blob.find(struct.pack("<Q", address))
    assert at > 0, "chunk address not found in the B-tree"
    blob[at:at + 8] = struct.pack("<Q", len(blob) + (1 << 20))
    path.write_bytes(bytes(blob))
    return path


def hdf5_truncated(folder):
    """An HDF5 file cut in the middle of its metadata."""
    h5py = _h5py()
    path = folder / "truncated.h5"
    with h5py.File(path, "w") as f:
        for i in range(20):
            f[f"g{i}/w"] = np.arange(100, dtype="<f4")
    blob = path.read_bytes()
    path.write_bytes(blob[:len(blob) // 3])
    return path


def hdf5_huge_dataspace(folder):
    """Datasets whose dataspaces claim 2^62 elements (contiguous, never
    written; chunked, one chunk written) and 2^40 float32 in 2^19 chunks
    of which one is stored: left out, nothing allocated for them."""
    h5py = _h5py()
    path = folder / "huge.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("contiguous", shape=(1 << 62,), dtype="u1")
        d = f.create_dataset("chunked", shape=(1 << 62,), dtype="u1", chunks=(1 << 16,), compression="gzip")
        d[0:10] = 1
        d = f.create_dataset("sparse", shape=(1 << 40,), dtype="<f4", chunks=(1 << 21,), compression="gzip")
        d[0:10] = 1
        f["ok"] = np.arange(3, dtype="<f4")
    return path
# --- tfckpt cases ---
import tfckpt_bundle as tfb  # noqa: E402


def _tfckpt_index(folder, contents, kind=0, data=b""):
    """A bundle whose one data block is `contents` as given (trailer of
    type `kind` with a correct CRC, so the block's own checks are reached)."""
    meta = tfb.block([])
    out = contents + tfb.trailer(contents, kind)
    meta_at = len(out)
    out += meta + tfb.trailer(meta, 0)
    index = tfb.block([(b"\xff", tfb.varint(0) + tfb.varint(len(contents)))], 1)
    index_at = len(out)
    out += index + tfb.trailer(index, 0)
    handles = tfb.varint(meta_at) + tfb.varint(len(meta)) + tfb.varint(index_at) + tfb.varint(len(index))
    out += handles.ljust(40, b"\0") + struct.pack("<Q", tfb.MAGIC)
    (folder / "model.index").write_bytes(out)
    (folder / "model.data-00000-of-00001").write_bytes(data)
    return folder / "model.index"


def tfckpt_restarts_lie(folder):
    """A data block whose restart count says 2^30 and whose restart offsets
    point past its entries: refused, nothing sized by the count."""
    good = tfb.block([(b"", tfb.header_proto()), (b"w", tfb.entry_proto(1, [1], size=4))])
    lying = good[:-8] + struct.pack("<I", 0xFFFFFF00) + struct.pack("<I", 1 << 30)
    return _tfckpt_index(folder, lying, data=b"\0" * 4)


def tfckpt_prefix_lies(folder):
    """Entries whose shared-prefix lengths pass the previous key (4 GiB,
    then one byte more than it has): refused."""
    entry = tfb.varint(0) + tfb.varint(0) + tfb.varint(len(tfb.header_proto())) + tfb.header_proto()
    entry += tfb.varint(0xFFFFFFFF) + tfb.varint(1) + tfb.varint(0) + b"x"
    return _tfckpt_index(folder, entry + struct.pack("<I", 0) + struct.pack("<I", 1))


def tfckpt_snappy_4gib(folder):
    """A snappy block whose preamble claims 4 GiB - 1 (a few bytes on
    disk; its first literal the header entry, as a real one's): refused
    before anything is allocated."""
    entry = tfb.varint(0) + tfb.varint(0) + tfb.varint(len(tfb.header_proto())) + tfb.header_proto()
    contents = tfb.varint((4 << 30) - 1) + bytes([(len(entry) - 1) << 2]) + entry
    return _tfckpt_index(folder, contents, kind=1)


TFCKPT_ENTRIES = 200_000


def tfckpt_many_entries(folder, count=TFCKPT_ENTRIES):
    """An index of 200 000 float32 scalars (6 MB): parsed, catalogued and
    served, or refused by the budget, within the bounds."""
    bundle = tfb.Bundle()
    raw = np.float32(1.5).tobytes()
    crc = tfb.mask(tfb.crc32c(raw))
    bundle.data[0] = bytearray(raw * count)
    for i in range(count):
        bundle.entries[b"v/%06d" % i] = tfb.entry_proto(1, [], 0, 4 * i, 4, crc)
    return bundle.write(folder, block_entries=4096)


TFCKPT_SLICES = 100_000


def tfckpt_many_slices(folder, count=TFCKPT_SLICES):
    """A partitioned variable of 100 000 one-row slices, each its own
    entry: its pieces checked and assembled without quadratic work."""
    bundle = tfb.Bundle()
    raw = np.float32(2.5).tobytes()
    crc = tfb.mask(tfb.crc32c(raw))
    bundle.data[0] = bytearray(raw * count)
    slices = [[(i, 1)] for i in range(count)]
    for i, s in enumerate(slices):
        bundle.entries[tfb.slice_key("p", s)] = tfb.entry_proto(1, [1], 0, 4 * i, 4, crc)
    bundle.entries[b"p"] = tfb.entry_proto(1, [count], slices=slices)
    return bundle.write(folder, block_entries=4096)


# --- tfjs cases ---
def _tfjs_model(folder, groups, topology=None, name="model.json"):
    """A TensorFlow.js model.json of `groups` [(paths, weights)] (shards
    written by the caller)."""
    doc = {"format": "graph-model", "generatedBy": "hostile", "convertedBy": "hostile",
           "modelTopology": topology if topology is not None else {"node": []},
           "weightsManifest": [{"paths": paths, "weights": weights} for paths, weights in groups]}
    path = folder / name
    path.write_text(json.dumps(doc, separators=(",", ":")))
    return path


def tfjs_sizes_disagree(folder):
    """A TensorFlow.js manifest whose weights claim 4 TiB of a 16-byte shard."""
    (folder / "w.bin").write_bytes(bytes(16))
    return _tfjs_model(folder, [(["w.bin"], [{"name": "w", "dtype": "float32", "shape": [1 << 20, 1 << 20]}])])


def tfjs_repeated_shards(folder, repeats=100_000):
    """A TensorFlow.js group naming one shard 100 000 times, its weights
    sized to the repeated stream."""
    (folder / "w.bin").write_bytes(bytes(64))
    return _tfjs_model(folder, [(["w.bin"] * repeats,
                                 [{"name": "w", "dtype": "float32", "shape": [16 * repeats]}])])


def tfjs_many_weights(folder, count=200_000):
    """A TensorFlow.js manifest of 200 000 one-byte weights over one shard."""
    (folder / "w.bin").write_bytes(bytes(count))
    weights = [{"name": "%x" % i, "dtype": "bool", "shape": []} for i in range(count)]
    return _tfjs_model(folder, [(["w.bin"], weights)])


def tfjs_deep_topology(folder, depth=100_000):
    """A TensorFlow.js model.json whose modelTopology nests 100 000 levels."""
    (folder / "w.bin").write_bytes(b"")
    path = folder / "model.json"
    path.write_text('{"format":"layers-model","modelTopology":' + "[" * depth + "]" * depth +
                    ',"weightsManifest":[{"paths":["w.bin"],"weights":[]}]}')
    return path


# --- tflite cases ---
class _Flat:
    """A flatbuffer laid out forwards by hand (each referrer before what it
    points at, as uoffsets need): tables with their vtables just before them."""

    def __init__(self):
        self.buf = bytearray(b"\0\0\0\0TFL3")

    def _align(self, n):
        self.buf += bytes(-len(self.buf) % n)

    def table(self, fields):
        """fields {id: (struct format, value)}, "I" placeholders for offsets;
        returns (table position, {id: field position})."""
        ids = sorted(fields)
        body, where = 4, {}
        for i in ids:
            size = struct.calcsize("<" + fields[i][0])
            body += -body % size
            where[i] = body
            body += size
        slots = max(ids) + 1 if ids else 0
        self._align(2)
        vt = len(self.buf)
        self.buf += struct.pack("<HH", 4 + 2 * slots, body)
        self.buf += b"".join(struct.pack("<H", where.get(i, 0)) for i in range(slots))
        self._align(8)
        at = len(self.buf)
        self.buf += struct.pack("<i", at - vt) + bytes(body - 4)
        for i in ids:
            struct.pack_into("<" + fields[i][0], self.buf, at + where[i], fields[i][1])
        return at, {i: at + where[i] for i in ids}

    def point(self, field, target):
        struct.pack_into("<I", self.buf, field, target - field)

    def vector(self, count, element=4, data=None):
        """A vector's length, then `data` (or count x element zero bytes);
        returns (its position, the first element's)."""
        self._align(16)
        self.buf += bytes(12)  # room so that the data lands 16-aligned
        at = len(self.buf)
        self.buf += struct.pack("<I", count)
        self.buf += data if data is not None else bytes(count * element)
        return at, at + 4

    def root(self, at):
        self.point(0, at)


def _tflite_model(f, tensor_count, buffer_count):
    """Model {version 3, subgraphs [SubGraph {tensors}], buffers}, written
    first (uoffsets point forwards): returns the positions of the tensor
    vector's and the buffer vector's first slots, to point at what follows."""
    model, mf = f.table({0: ("I", 3), 2: ("I", 0), 4: ("I", 0)})
    f.root(model)
    graphs, first = f.vector(1)
    f.point(mf[2], graphs)
    graph, gf = f.table({0: ("I", 0)})
    f.point(first, graph)
    tensors, tfirst = f.vector(tensor_count)
    f.point(gf[0], tensors)
    bufs, bfirst = f.vector(buffer_count)
    f.point(mf[4], bufs)
    return tfirst, bfirst


def _tflite_buffer(f, data=None, offset=0, size=0):
    if data is None:
        return f.table({1: ("Q", offset), 2: ("Q", size)})[0]
    at, fields = f.table({0: ("I", 0)})
    vec, _ = f.vector(len(data), 1, data)
    f.point(fields[0], vec)
    return at


def _tflite_tensor(f, shape, buffer, name=b"t", type_=0):
    at, fields = f.table({0: ("I", 0), 1: ("b", type_), 2: ("I", buffer), 3: ("I", 0)})
    dims, _ = f.vector(len(shape), 4, struct.pack("<%di" % len(shape), *shape))
    f.point(fields[0], dims)
    text, _ = f.vector(len(name), 1, name + b"\0")
    f.point(fields[3], text)
    return at


def tflite_vector_2_31(folder):
    """A TensorFlow Lite model whose buffers vector claims 2^31 entries."""
    f = _Flat()
    model, mf = f.table({0: ("I", 3), 4: ("I", 0)})
    f.root(model)
    bufs, _ = f.vector(0)
    struct.pack_into("<I", f.buf, bufs, 1 << 31)
    f.point(mf[4], bufs)
    path = folder / "vector.tflite"
    path.write_bytes(bytes(f.buf))
    return path


def tflite_cyclic_offsets(folder, count=100_000):
    """A TensorFlow Lite subgraph whose 100 000 tensors are all the Model
    table itself, and whose Model's subgraphs vector points back at its own
    tensors: every table read as another one."""
    f = _Flat()
    model, mf = f.table({0: ("I", 3), 2: ("I", 0), 4: ("I", 0)})
    f.root(model)
    graphs, first = f.vector(1)
    f.point(mf[2], graphs)
    graph, gf = f.table({0: ("I", 0)})
    f.point(first, graph)
    tensors, tfirst = f.vector(count)
    f.point(gf[0], tensors)
    # Backward offsets wrap around 2^32: each entry points at the Model.
    for i in range(count):
        struct.pack_into("<I", f.buf, tfirst + 4 * i, (model - (tfirst + 4 * i)) % (1 << 32))
    f.point(mf[4], graphs)  # the buffers are the subgraphs vector
    path = folder / "cyclic.tflite"
    path.write_bytes(bytes(f.buf))
    return path


def tflite_million_tensors(folder, count=1_000_000):
    """A TensorFlow Lite subgraph of 1 000 000 tensors, one tensor table
    named by every entry (4 MB of offsets), each with a 4-byte buffer."""
    f = _Flat()
    tfirst, bfirst = _tflite_model(f, count, 2)
    f.point(bfirst, _tflite_buffer(f))
    f.point(bfirst + 4, _tflite_buffer(f, b"\1\2\3\4"))
    tensor = _tflite_tensor(f, [1], 1)
    slots = np.arange(count, dtype=np.int64) * 4 + tfirst
    f.buf[tfirst:tfirst + 4 * count] = (tensor - slots).astype("<u4").tobytes()
    path = folder / "million.tflite"
    path.write_bytes(bytes(f.buf))
    return path


def tflite_offset_past_file(folder):
    """A TensorFlow Lite buffer (the > 2 GB layout) whose offset/size lie
    1 TiB past the end of a small file."""
    f = _Flat()
    tfirst, bfirst = _tflite_model(f, 1, 2)
    f.point(bfirst, _tflite_buffer(f))
    f.point(bfirst + 4, _tflite_buffer(f, offset=1 << 40, size=16))
    f.point(tfirst, _tflite_tensor(f, [4], 1))
    path = folder / "offset.tflite"
    path.write_bytes(bytes(f.buf))
    return path
# --- openvino cases ---
def _openvino_ir(folder, layers, bin_bytes=b"", head="", depth_xml=""):
    """An OpenVINO IR v11 model.xml of `layers` (XML text) and its model.bin."""
    (folder / "model.bin").write_bytes(bin_bytes)
    path = folder / "model.xml"
    with open(path, "w") as f:
        f.write('<?xml version="1.0"?>\n<net name="hostile" version="11"%s><layers>' % head)
        for layer in layers:
            f.write(layer)
        f.write("</layers>%s<edges/></net>\n" % depth_xml)
    return path


def _openvino_const(i, element_type, shape, offset, size):
    return ('<layer id="%d" name="c%x" type="Const" version="opset1"><data element_type="%s" '
            'shape="%s" offset="%d" size="%d"/></layer>' % (i, i, element_type, shape, offset, size))


def openvino_const_2_62(folder):
    """An OpenVINO Const claiming 2^62 bytes of a 16-byte .bin."""
    return _openvino_ir(folder, [_openvino_const(0, "u8", str(1 << 62), 0, 1 << 62)], bytes(16))


def openvino_many_consts(folder, count=200_000):
    """200 000 one-byte OpenVINO Consts over one .bin."""
    return _openvino_ir(folder, (_openvino_const(i, "u8", "", i, 1) for i in range(count)), bytes(count))


def openvino_deep_nesting(folder, depth=100_000):
    """An OpenVINO IR whose rt_info nests 100 000 levels of elements."""
    return _openvino_ir(folder, [_openvino_const(0, "f32", "1", 0, 4)], bytes(4),
                        depth_xml="<rt_info>" + "<a>" * depth + "</a>" * depth + "</rt_info>")


def openvino_huge_attribute(folder):
    """An OpenVINO IR whose net name is an attribute of 1 MiB and a byte."""
    return _openvino_ir(folder, [_openvino_const(0, "f32", "1", 0, 4)], bytes(4),
                        head=' label="%s"' % ("x" * (MiB + 1)))


def openvino_u1_size_unpacked(folder):
    """A u1 Const of 4096 bits whose size is a byte per bit (4096), as if unpacked."""
    return _openvino_ir(folder, [_openvino_const(0, "u1", "4096", 0, 4096)], bytes(4096))


def openvino_nf4_past_end(folder):
    """An nf4 Const of 2^62 + 1 elements claiming the 2^61 + 1 bytes they pack into, of a 16-byte .bin."""
    return _openvino_ir(folder, [_openvino_const(0, "nf4", str((1 << 62) + 1), 0, (1 << 61) + 1)], bytes(16))


# --- executorch cases ---
class _EtFlat(_Flat):
    """A hand-laid ExecuTorch program: root offset, "ET12", and (when
    `header`) a 32-byte extended header "eh00" whose fields are patched."""

    def __init__(self, header=False):
        super().__init__()
        self.buf = bytearray(b"\0\0\0\0ET12")
        if header:
            self.buf += b"eh00" + struct.pack("<IQQQ", 32, 0, 0, 0)


def _et_program(f, plan_count):
    """Program {execution_plan: [plan_count slots]}: the slots' position."""
    program, pf = f.table({1: ("I", 0)})
    f.root(program)
    plans, first = f.vector(plan_count)
    f.point(pf[1], plans)
    return program, first


def executorch_vector_2_31(folder):
    """An ExecuTorch program whose execution_plan vector claims 2^31 entries."""
    f = _EtFlat()
    program, pf = f.table({1: ("I", 0)})
    f.root(program)
    plans, _ = f.vector(0)
    struct.pack_into("<I", f.buf, plans, 1 << 31)
    f.point(pf[1], plans)
    path = folder / "vector.pte"
    path.write_bytes(bytes(f.buf))
    return path


def executorch_segment_past_file(folder):
    """An ExecuTorch program (extended header) whose one segment, holding the
    constant segment, lies 1 TiB past the end of a small file."""
    f = _EtFlat(header=True)
    program, pf = f.table({4: ("I", 0), 5: ("I", 0)})
    f.root(program)
    segs, first = f.vector(1)
    f.point(pf[4], segs)
    f.point(first, f.table({0: ("Q", 1 << 40), 1: ("Q", 64)})[0])
    cs, cf = f.table({0: ("I", 0), 1: ("I", 0)})
    f.point(pf[5], cs)
    offs, _ = f.vector(2, 8)
    f.point(cf[1], offs)
    f._align(128)
    base = len(f.buf)
    struct.pack_into("<QQQ", f.buf, 16, base, base, 64)  # program_size, segment base, data size
    f.buf += bytes(64)
    path = folder / "segment.pte"
    path.write_bytes(bytes(f.buf))
    return path


def executorch_million_evalues(folder, count=1_000_000):
    """An ExecuTorch method of 1 000 000 EValues, every entry naming one
    Tensor EValue (4 MB of offsets) whose constant is 4 inline bytes."""
    f = _EtFlat()
    program, pf = f.table({1: ("I", 0), 2: ("I", 0)})
    f.root(program)
    plans, pfirst = f.vector(1)
    f.point(pf[1], plans)
    plan, plf = f.table({2: ("I", 0)})
    f.point(pfirst, plan)
    values, vfirst = f.vector(count)
    f.point(plf[2], values)
    bufs, bfirst = f.vector(2)
    f.point(pf[2], bufs)
    for i, data in enumerate((b"", b"\1\2\3\4")):
        buf, bf = f.table({0: ("I", 0)})
        vec, _ = f.vector(len(data), 1, data)
        f.point(bf[0], vec)
        f.point(bfirst + 4 * i, buf)
    ev, ef = f.table({0: ("B", 5), 1: ("I", 0)})
    tensor, tf = f.table({0: ("b", 6), 2: ("I", 0), 5: ("I", 1)})
    f.point(ef[1], tensor)
    dims, _ = f.vector(1, 4, struct.pack("<i", 1))
    f.point(tf[2], dims)
    slots = np.arange(count, dtype=np.int64) * 4 + vfirst
    f.buf[vfirst:vfirst + 4 * count] = (ev - slots).astype("<u4").tobytes()
    path = folder / "million.pte"
    path.write_bytes(bytes(f.buf))
    return path


def executorch_cyclic_offsets(folder, count=100_000):
    """An ExecuTorch program whose 100 000 execution plans are all the
    Program table itself (backward offsets wrapping around 2^32), and whose
    Program's values are read from its own execution_plan vector."""
    f = _EtFlat()
    program, first = _et_program(f, count)
    for i in range(count):
        struct.pack_into("<I", f.buf, first + 4 * i, (program - (first + 4 * i)) % (1 << 32))
    path = folder / "cyclic.pte"
    path.write_bytes(bytes(f.buf))
    return path
# --------------------------------------------------------------------------
# torch.distributed.checkpoint: a .metadata pickle written by hand
# (protocol 2, as Python pickles the dataclasses: NEWOBJ of the class, BUILD
# of its field dict; TensorProperties as its 5-tuple), beside data files.

_DCP_META = b"torch.distributed.checkpoint.metadata"


def _pk_str(s):
    s = s.encode() if isinstance(s, str) else s
    return b"X" + struct.pack("<I", len(s)) + s


def _pk_int(v):
    if v < (1 << 31):
        return b"J" + struct.pack("<i", v)
    return b"\x8a\x08" + struct.pack("<q", v)


def _pk_global(module, name):
    return b"c" + module + b"\n" + name + b"\n"


def _pk_size(dims):
    return _pk_global(b"torch", b"Size") + b"((" + b"".join(_pk_int(d) for d in dims) + b"ttR"


def _pk_obj(module, cls, fields):
    return _pk_global(module, cls) + b")\x81}(" + fields + b"ub"


def _dcp_chunk(offsets, sizes):
    return _pk_obj(_DCP_META, b"ChunkStorageMetadata",
                   _pk_str("offsets") + _pk_size(offsets) + _pk_str("sizes") + _pk_size(sizes))


def _dcp_tensor(dtype, shape, chunks_list):
    props = _pk_global(_DCP_META, b"TensorProperties") + b")\x81(" + _pk_global(b"torch", dtype) + b"N\x89N\x89tb"
    return _pk_obj(_DCP_META, b"TensorStorageMetadata",
                   _pk_str("properties") + props + _pk_str("size") + _pk_size(shape) + _pk_str("chunks")
                   + chunks_list)


def _dcp_storage(fqn, offsets, path, offset, length):
    key = _pk_obj(_DCP_META, b"MetadataIndex", _pk_str("fqn") + _pk_str(fqn) + _pk_str("offset") + _pk_size(offsets))
    info = _pk_obj(b"torch.distributed.checkpoint.filesystem", b"_StorageInfo",
                   _pk_str("relative_path") + _pk_str(path) + _pk_str("offset") + _pk_int(offset)
                   + _pk_str("length") + _pk_int(length))
    return key + info


def _dcp_write(folder, entries, storage, extra=b"", data=b""):
    pkl = (b"\x80\x02" + _pk_obj(_DCP_META, b"Metadata", _pk_str("state_dict_metadata") + b"}(" + entries + b"u"
                                 + _pk_str("storage_data") + b"}(" + storage + b"u" + extra) + b".")
    folder = folder / "dcp"
    folder.mkdir()
    (folder / ".metadata").write_bytes(pkl)
    (folder / "__0_0.distcp").write_bytes(data)
    return folder


def _dcp_archive(folder, name, rows, cols, first):
    """A torch.save archive of one float32 tensor rows x cols, values first.."""
    n = rows * cols
    pkl = (b"\x80\x02" + _pk_global(b"torch._utils", b"_rebuild_tensor_v2") + b"((" + _pk_str("storage")
           + _pk_global(b"torch", b"FloatStorage") + _pk_str("0") + _pk_str("cpu") + _pk_int(n) + b"tQ"
           + _pk_int(0) + b"(" + _pk_int(rows) + _pk_int(cols) + b"t(" + _pk_int(cols) + _pk_int(1) + b"t\x89"
           + _pk_global(b"collections", b"OrderedDict") + b")RtR.")
    data = struct.pack("<%df" % n, *range(first, first + n))
    return write_zip(folder / name, torch_zip_members(pkl, [Member("archive/data/0", data)])).read_bytes()


def dcp_fuzz_seed(folder):
    """Not a hostile case: fuzz_dcp's seed, one file that is both the
    .metadata and every data file (the pickle ends at its STOP): a 4 x 2
    tensor in two row chunks and a 2 x 4 one in two column chunks, whose
    archives follow the pickle."""
    archives = [_dcp_archive(folder, "a%d" % i, r, c, 10 * i) for i, (r, c) in enumerate([(2, 2), (2, 2), (2, 2), (2, 2)])]
    chunks_w = b"](" + _dcp_chunk((0, 0), (2, 2)) + _dcp_chunk((2, 0), (2, 2)) + b"e"
    chunks_v = b"](" + _dcp_chunk((0, 0), (2, 2)) + _dcp_chunk((0, 2), (2, 2)) + b"e"
    entries = (_pk_str("w") + _dcp_tensor(b"float32", (4, 2), chunks_w)
               + _pk_str("v") + _dcp_tensor(b"float32", (2, 4), chunks_v))

    def pickle_at(base):
        at, storage = base, b""
        for (fqn, offsets), blob in zip([("w", (0, 0)), ("w", (2, 0)), ("v", (0, 0)), ("v", (0, 2))], archives):
            storage += _dcp_storage(fqn, offsets, "__0_0.distcp", at, len(blob))
            at += len(blob)
        return (b"\x80\x02" + _pk_obj(_DCP_META, b"Metadata", _pk_str("state_dict_metadata") + b"}(" + entries
                                       + b"u" + _pk_str("storage_data") + b"}(" + storage + b"u") + b".")
    pkl = pickle_at(0)
    pkl = pickle_at(len(pkl))  # fixed-width integers: the length does not change
    path = folder / "dcp.metadata"
    path.write_bytes(pkl + b"".join(archives))
    return path


DCP_CHUNKS = 1_000_000


def dcp_million_chunks(folder, count=DCP_CHUNKS):
    """A DCP tensor declaring 1 000 000 chunks: one chunk object memoized
    and fetched again 999 999 times (BINGET), a ~2 MB pickle."""
    chunks = b"](" + _dcp_chunk((0, 0), (4, 2)) + b"q\x00" + b"h\x00" * (count - 1) + b"e"
    return _dcp_write(folder, _pk_str("w") + _dcp_tensor(b"float32", (4, 2), chunks),
                      _dcp_storage("w", (0, 0), "__0_0.distcp", 0, 0))


def dcp_chunk_2_62(folder):
    """A DCP uint8 tensor of 2^62 x 1 elements in one chunk of 2^62 rows,
    its storage record a 64-byte slice that holds no such archive."""
    chunks = b"](" + _dcp_chunk((0, 0), (1 << 62, 1)) + b"e"
    return _dcp_write(folder, _pk_str("w") + _dcp_tensor(b"uint8", (1 << 62, 1), chunks),
                      _dcp_storage("w", (0, 0), "__0_0.distcp", 0, 64), data=bytes(64))


def dcp_deep_pickle(folder, depth=DEEP_PICKLE):
    """A DCP .metadata whose planner_data nests 100 000 lists."""
    extra = _pk_str("planner_data") + b"]" * depth + b"a" * (depth - 1)
    return _dcp_write(folder, b"", b"", extra=extra)


def dcp_overlapping_chunks(folder):
    """Two DCP chunks of rows [0, 3) and [2, 4) of a 4 x 2 tensor."""
    chunks = b"](" + _dcp_chunk((0, 0), (3, 2)) + _dcp_chunk((2, 0), (2, 2)) + b"e"
    return _dcp_write(folder, _pk_str("w") + _dcp_tensor(b"float32", (4, 2), chunks),
                      _dcp_storage("w", (0, 0), "__0_0.distcp", 0, 0)
                      + _dcp_storage("w", (2, 0), "__0_0.distcp", 0, 0))


# --- serving memory (issue 42): chunks that decode far past the file ---
def hdf5_big_decoded_chunks(folder, chunks=2, chunk=256 << 20):
    """Gzip chunks of zeros that each inflate to 256 MiB (two: --check
    inflates them all within the corpus's time cap), a file of about
    500 KB: served, checked and read within the serving bound, never a
    whole decoded chunk a thread."""
    h5py = _h5py()
    path = folder / "big_chunks.h5"
    stream = zlib.compress(bytes(chunk), 6)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("big", shape=(chunks * chunk,), dtype="u1", chunks=(chunk,), compression="gzip")
        for k in range(chunks):
            d.id.write_direct_chunk((k * chunk,), stream)
    return path


def hdf5_big_shuffled_chunks(folder, chunks=1, elements=64 << 20):
    """A float32 chunk of 256 MiB with shuffle and deflate: each read
    unshuffles from the stream, four planes 64 MiB apart (one chunk: --diff
    decodes it for both sides within the corpus's time cap)."""
    h5py = _h5py()
    path = folder / "big_shuffled.h5"
    stream = zlib.compress(bytes(4 * elements), 6)  # zeros shuffled are zeros
    with h5py.File(path, "w") as f:
        d = f.create_dataset("big", shape=(chunks * elements,), dtype="<f4", chunks=(elements,), shuffle=True,
                             compression="gzip")
        for k in range(chunks):
            d.id.write_direct_chunk((k * elements,), stream)
    return path


# Every command catches (issue 42).
PACKED_INTS = 4_000_000


def onnx_packed_ints(folder, count=PACKED_INTS):
    """A node attribute of 4 million packed INTS of one byte each (4 MB):
    its JSON array is 64 MB, and destroying it made nlohmann::json ask for
    more than the whole budget in a destructor (an abort, not a refusal)."""
    packed = b"\x01" * count
    ints = _varint(8 << 3 | 2) + _varint(len(packed)) + packed
    node = _pb(1, "w") + _pb(2, "y") + _pb(4, "Identity") + _pb(5, _pb(1, "k") + ints + _pb(20, 7))
    path = folder / "packed_ints.onnx"
    path.write_bytes(_onnx_model(graph_fields=_pb(1, node)))
    return path


# --- issue 42, HDF5: addresses after a user block, inexact types, libhdf5's memory ---

def hdf5_user_block_chunks(folder):
    """A 512-byte user block before chunked datasets, plain and gzip:
    libhdf5 1.10 gives chunk addresses from the base address (after the
    user block), contiguous ones from the file's start; each is served
    from its own bytes."""
    h5py = _h5py()
    path = folder / "user_block.h5"
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset("plain", data=np.arange(600, dtype="<i4").reshape(20, 30), chunks=(8, 8))
        f.create_dataset("gzip", data=np.arange(500, dtype="<f4"), chunks=(64,), compression="gzip")
        f["contiguous"] = np.arange(32, dtype="<f8")
    return path


def _h5_custom(f, name, file_type, data):
    h5py = _h5py()
    ds = h5py.h5d.create(f.id, name.encode(), file_type, h5py.h5s.create_simple(data.shape))
    ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))


def hdf5_odd_types(folder):
    """Datasets whose types are not a dtype's bits: 16-bit integers at bit 8
    of 32-bit words, floats without IEEE's implied mantissa bit, integers
    with padding bits of ones. Each is left out and named; "exact" served."""
    h5py = _h5py()
    path = folder / "odd_types.h5"
    with h5py.File(path, "w") as f:
        t = h5py.h5t.STD_I32LE.copy()
        t.set_precision(16)
        t.set_offset(8)
        _h5_custom(f, "int16_at_bit_8", t, np.arange(-20, 20, dtype="<i4"))
        t = h5py.h5t.IEEE_F32LE.copy()
        t.set_norm(h5py.h5t.NORM_NONE)
        _h5_custom(f, "float_no_implied_bit", t, np.linspace(-3, 3, 16, dtype="<f4"))
        t = h5py.h5t.STD_U32LE.copy()
        t.set_precision(24)
        t.set_pad(h5py.h5t.PAD_ONE, h5py.h5t.PAD_ONE)
        _h5_custom(f, "uint24_padded_with_ones", t, np.arange(10, dtype="<u4"))
        f["exact"] = np.arange(8, dtype="<f4")
    return path


def hdf5_heap_cycle(folder):
    """A 2 KB file whose root group's local heap free list is a cycle (its
    one free block names itself as the next): libhdf5 1.10 allocates a list
    entry per step until memory runs out (593 MB before the child was held
    to the model's budget); refused in one line, within the budget."""
    h5py = _h5py()
    path = folder / "heap_cycle.h5"
    with h5py.File(path, "w") as f:
        f["a"] = np.arange(4, dtype="<f4")
    blob = bytearray(path.read_bytes())
    heap = blob.find(b"HEAP")
    assert heap > 0, "no local heap (an old-style group) in the file"
    _, free, data = struct.unpack_from("<QQQ", blob, heap + 8)
    assert free != 1, "the heap has no free block"  # 1: H5HL_FREE_NULL
    struct.pack_into("<Q", blob, data + free, free)
    path.write_bytes(bytes(blob))
    return path


# --- issue 42: the budget bounds the process (peak RSS within the budget
# and 32 MiB), HDF5 past a 4 KiB user block, work in proportion to what is
# stored, more files than the usual soft limit on open files.

def safetensors_million_metadata_keys(folder, keys=1_100_000):
    """1 100 000 __metadata__ keys of 8 bytes, empty values (a 15 MB
    header): refused at 293 MiB of RSS under a budget of 182 MiB, its keys
    held twice (the object and a set) and copied again to be printed."""
    header = ('{"__metadata__":{' + ",".join(f'"k{i:07d}":""' for i in range(keys)) + "}}").encode()
    path = folder / "million_keys.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def safetensors_short_metadata_keys(folder, keys=1_100_000):
    """1 100 000 __metadata__ keys of 1 to 6 hex digits (a 12 MB header):
    203 MiB of RSS under a bound of 188. The header was parsed from its
    pages of the mapping, which no budget counts, its SAX reader had no
    checkpoint of the budget, and --info printed the value of 1.1M keys to
    a text, then two copies of it."""
    header = ('{"__metadata__":{' + ",".join(f'"{i:x}":""' for i in range(keys)) + "}}").encode()
    path = folder / "short_keys.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def gguf_empty_strings(folder, count=2_000_000):
    """A GGUF key-value array of two million empty strings (16 MB): 320 MiB
    of RSS under a budget of 187, its copy and its destruction uncharged."""
    body = struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", gg.ARRAY, gg.STRING, count) + bytes(8 * count)
    path = folder / "empty_strings.gguf"
    path.write_bytes(_gguf_head() + body + bytes(64))
    return path


def pt2_long_json_string(folder, size=30 << 20):
    """A PT2 archive whose model JSON holds one string of 30 MB, deflated to
    31 KB: 103 MiB of RSS under a budget of 65, lexed before the budget saw it."""
    text = b'{"schema_version":{"major":8,"minor":0},"graph_module":{"x":"' + b"a" * size + b'"}}'
    return _pt2_of_json(folder / "long_string.pt2", text)


HDF5_BIG_USER_BLOCK = 16384


def hdf5_big_user_block(folder):
    """A 16 KiB user block: the signature past the 4 KiB detection probed
    ("not a model file" before), libhdf5's addresses after it."""
    h5py = _h5py()
    path = folder / "big_user_block.h5"
    with h5py.File(path, "w", userblock_size=HDF5_BIG_USER_BLOCK) as f:
        f.create_dataset("plain", data=np.arange(600, dtype="<i4").reshape(20, 30), chunks=(8, 8))
        f["contiguous"] = np.arange(32, dtype="<f8")
    return path


def pt_expanded_gib_views(folder, views=64):
    """64 expand()s of one 4-byte storage to 1 GiB each (5 KB): --stats read
    64 GiB of one repeated value for 40-80 s."""
    return _views_of_one_storage(folder / "expanded_gib.pt", views, 1 << 28, 0.5)


TFJS_SHARDS = 5000


def tfjs_many_shards(folder, count=TFJS_SHARDS):
    """A TensorFlow.js weight of 5 000 float32s, one 4-byte shard each:
    refused at about the 1016th shard under a soft limit of 1024 open files."""
    values = np.arange(count, dtype="<f4") * 0.5 - 7
    paths = []
    for i in range(count):
        paths.append(f"group1-shard{i + 1}of{count}.bin")
        (folder / paths[-1]).write_bytes(values[i:i + 1].tobytes())
    return _tfjs_model(folder, [(paths, [{"name": "w", "dtype": "float32", "shape": [count]}])])


# --- legacy GGML (issue 45): records that lie about what follows them ---
GGML_RECORDS = 50_000


def _ggml_plain(count=3):
    return [(f"w{i}", 0, [4], np.arange(4, dtype="<f4").tobytes()) for i in range(count)]


def ggml_truncated_record(folder):
    """A whisper file whose last record's data is cut short by 3 bytes."""
    path = folder / "ggml-truncated.bin"
    path.write_bytes(gl.whisper(_ggml_plain())[:-3])
    return path


def ggml_data_past_end(folder):
    """A 'ggjt' v3 record of 65536 x 65536 float32 (16 GiB) in a file of a few hundred bytes."""
    path = folder / "ggjt-past-end.bin"
    head = gl.llama([])
    path.write_bytes(head + gl.record("tok_embeddings.weight", 0, [65536, 65536], b"\0" * 64,
                                      at=len(head), aligned=True))
    return path


def ggml_ndims_lies(folder):
    """An rwkv.cpp record saying n_dims = 1 000 000, with four dimensions after it."""
    path = folder / "rwkv-ndims.bin"
    path.write_bytes(gl.rwkv([]) + struct.pack("<iii", 1_000_000, 1, 0) + struct.pack("<4i", 1, 1, 1, 1) + b"w")
    return path


def ggml_name_length_lies(folder):
    """A whisper record whose name is said to be 2^31 - 1 bytes long."""
    path = folder / "ggml-name.bin"
    path.write_bytes(gl.whisper([]) + struct.pack("<iiii", 1, 2**31 - 1, 0, 4) + b"name" + bytes(16))
    return path


def ggml_many_records(folder, count=GGML_RECORDS):
    """50 000 one-element whisper records (1.2 MB): listed and mounted within the budget."""
    path = folder / "ggml-many.bin"
    one = struct.pack("<f", 0.5)
    path.write_bytes(gl.whisper([(f"t{i:05d}", 0, [], one) for i in range(count)]))
    return path


# --- llamafile cases (issue 45) ---
def _llamafile(folder, members, name="model.llamafile", sizes=None, alignment=65536):
    """A llamafile as zipalign lays one out (a shell-script stand-in for the
    executable, each member stored with its data on `alignment`, ZIP64 extras,
    offsets from the file's first byte): members are (name, bytes[,
    method]); `sizes` overrides a member's sizes in its ZIP64 extras."""
    out, central = bytearray(b"#!/bin/sh\nexit 1\n"), bytearray()
    for member in members:
        mname, data = member[0].encode(), member[1]
        method = member[2] if len(member) > 2 else 0
        stored = zlib.compress(data)[2:-4] if method == 8 else data
        size, csize = (sizes or {}).get(member[0], (len(data), len(stored)))
        local_extra = struct.pack("<HHQQ", 1, 16, size, csize)
        at = -(-(len(out) + 30 + len(mname) + 20) // alignment) * alignment - 30 - len(mname) - 20
        out += b"\0" * (at - len(out))
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, method, 0, 0, zlib.crc32(data), 0xFFFFFFFF,
                           0xFFFFFFFF, len(mname), 20) + mname + local_extra + stored
        extra = struct.pack("<HHQQQ", 1, 24, size, csize, at)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, method, 0, 0, zlib.crc32(data),
                               0xFFFFFFFF, 0xFFFFFFFF, len(mname), len(extra), 0, 0, 0, 0, 0xFFFFFFFF)
        central += mname + extra
    directory_at = len(out)
    out += central
    end64_at = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(members), len(members), len(central),
                       directory_at)
    out += struct.pack("<IIQI", 0x07064B50, 0, end64_at, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    path = folder / name
    path.write_bytes(bytes(out))
    return path


def _small_gguf(offset=None):
    """A GGUF of one float32 tensor "w" of 1024 values; with `offset`, its
    tensor info's offset field patched to it."""
    blob, _ = gg.to_bytes([("general.architecture", gg.Value(gg.STRING, "llama"))],
                          [gg.Tensor("w", 0, [1024], np.arange(1024, dtype="<f4").tobytes())])
    if offset is not None:
        # name (u64 length, "w"), n_dims u32, ne[0] u64, type u32, then the offset.
        at = blob.index(struct.pack("<Q", 1) + b"w") + 9 + 4 + 8 + 4
        blob = blob[:at] + struct.pack("<Q", offset) + blob[at + 8:]
    return blob


def llamafile_deflated_gguf(folder, alignment=65536):
    """The GGUF member deflated: it cannot be served in place."""
    return _llamafile(folder, [("model.gguf", _small_gguf(), 8), (".args", b"-m\nmodel.gguf\n")],
                      alignment=alignment)


def llamafile_gguf_cut_short(folder, alignment=65536):
    """The GGUF member's sizes stop 4 KiB into its tensor data: the rest
    lies in the file (the next member's padding) but not in the member."""
    blob = _small_gguf()
    return _llamafile(folder, [("model.gguf", blob), (".args", b"x")],
                      sizes={"model.gguf": (len(blob) - 2048, len(blob) - 2048)}, alignment=alignment)


def llamafile_member_2_62(folder):
    """The GGUF member's ZIP64 sizes say 2^62 bytes."""
    return _llamafile(folder, [("model.gguf", _small_gguf())], sizes={"model.gguf": (1 << 62, 1 << 62)})


def llamafile_tensor_past_end(folder, alignment=65536):
    """A tensor of the GGUF member at 1 TiB from its data section."""
    return _llamafile(folder, [("model.gguf", _small_gguf(offset=1 << 40))], alignment=alignment)


def llamafile_truncated(folder):
    """A llamafile cut in the middle of its GGUF: no end record is left."""
    path = _llamafile(folder, [("model.gguf", _small_gguf()), (".args", b"x")])
    path.write_bytes(path.read_bytes()[:65536 + 1000])
    return path


def llamafile_20k_members(folder):
    """20 000 members of 1 KiB beside the GGUF: each listed, the documents
    bounded in all (16 MiB), the rest only listed."""
    members = [("model.gguf", _small_gguf())]
    members += [(f"licenses/{i:05}.txt", bytes([65 + i % 26]) * 1024) for i in range(20_000)]
    # Plain stored members (Python's zipfile), no 64 KiB padding, to keep the case small.
    import zipfile
    path = folder / "many.llamafile"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members:
            z.writestr(zipfile.ZipInfo(name), data)
    return path


# --- NeMo cases (issue 45) ---
def _nemo_ckpt():
    """torch.save of a small state_dict (a ZIP archive), as model_weights.ckpt holds it."""
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(1024, dtype=torch.float32)}, buffer)
    return buffer.getvalue()


def _tar_header(name, size, type_=b"0", size_field=None):
    """A ustar header as Python's tarfile writes one, its checksum computed."""
    h = bytearray(512)
    h[0:len(name)] = name.encode()
    h[100:108] = b"0000644\0"
    if size_field is None:  # octal, or base-256 past its 11 digits (GNU's)
        size_field = b"%011o\0" % size if size < 8 ** 11 else b"\x80" + size.to_bytes(11, "big")
    h[124:136] = size_field
    h[156:157] = type_
    h[257:265] = b"ustar\x0000"
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def _tar(members, end=True):
    out = bytearray()
    for name, data, *rest in members:
        out += _tar_header(name, len(data), *rest) + data + b"\0" * (-len(data) % 512)
    return bytes(out) + (b"\0" * 1024 if end else b"")


def nemo_member_past_end(folder):
    """The checkpoint's header says 1 TiB: its data would run past the file."""
    path = folder / "past.nemo"
    path.write_bytes(_tar_header("./model_weights.ckpt", 1 << 40) + _nemo_ckpt())
    return path


def nemo_ckpt_cut_by_its_member(folder):
    """The tar member holds the checkpoint's first half; the rest follows in
    the next member: the ZIP must be read inside its member, not the file."""
    ckpt = _nemo_ckpt()
    half = len(ckpt) // 2 // 512 * 512
    path = folder / "cut.nemo"
    path.write_bytes(_tar([("./model_weights.ckpt", ckpt[:half]), ("./rest", ckpt[half:])]))
    return path


def nemo_truncated(folder):
    """A .nemo cut in the middle of its checkpoint."""
    blob = _tar([("./model_config.yaml", b"a: 1\n"), ("./model_weights.ckpt", _nemo_ckpt())])
    path = folder / "truncated.nemo"
    path.write_bytes(blob[:len(blob) // 2])
    return path


def nemo_pax_size_lies(folder):
    """A PAX record gives the checkpoint a size of 2^62."""
    record = b"25 size=4611686018427387904\n"
    record = b"%d size=4611686018427387904\n" % (len(record))
    path = folder / "pax.nemo"
    path.write_bytes(_tar([("./PaxHeaders/x", record, b"x"), ("./model_weights.ckpt", _nemo_ckpt())]))
    return path


def nemo_gzip_empty(folder):
    """As megatron_retro_chunk_tp1.nemo: gzip of an empty tar."""
    import gzip
    path = folder / "empty.nemo"
    path.write_bytes(gzip.compress(b"\0" * 10240))
    return path


def nemo_gzip_truncated(folder):
    """A gzip .nemo (NeMo before 1.7) cut in the middle of its stream."""
    import gzip
    blob = gzip.compress(_tar([("./model_config.yaml", b"a: 1\n"), ("./model_weights.ckpt", _nemo_ckpt())]))
    path = folder / "cut.nemo"
    path.write_bytes(blob[:len(blob) // 2])
    return path


def nemo_gzip_bomb(folder):
    """A gzip .nemo whose tar is followed by 1 GiB of zeros in the stream
    (a 1 MB file): refused once 1 MiB has passed the tar's end."""
    import zlib as z
    compressor = z.compressobj(9, z.DEFLATED, 31)
    parts = [compressor.compress(_tar([("./model_weights.ckpt", _nemo_ckpt())]))]
    zeros = b"\0" * (1 << 20)
    parts += [compressor.compress(zeros) for _ in range(1024)]
    parts.append(compressor.flush())
    path = folder / "bomb.nemo"
    path.write_bytes(b"".join(parts))
    return path


def nemo_20k_members(folder):
    """20 000 small members beside the checkpoint: listed, the documents
    bounded in all, the tensor served."""
    members = [("./model_weights.ckpt", _nemo_ckpt())]
    members += [(f"./tokenizer/{i:05}.txt", bytes([65 + i % 26]) * 1000) for i in range(20_000)]
    path = folder / "many.nemo"
    path.write_bytes(_tar(members))
    return path


# --------------------------------------------------------------------------
# PaddlePaddle (issue 45): programs whose tensor streams lie, are cut or
# missing, and a state dict whose latin-1 text lies (paddle_files.py writes).

import paddle_files as pdf  # noqa: E402

PADDLE_VARS = 100_000


def _paddle_params():
    return {"fc_0.w_0": np.arange(12, dtype=F32).reshape(3, 4), "fc_0.b_0": np.arange(4, dtype=np.int64)}


def _paddle_combined(folder, data, declared=None):
    p = _paddle_params()
    (folder / "model.pdiparams").write_bytes(data)
    path = folder / "model.pdmodel"
    path.write_bytes(pdf.program(p, declared=declared))
    return path


def paddle_truncated_stream(folder):
    """A combined file cut in the middle of its last stream's data."""
    return _paddle_combined(folder, pdf.combined(_paddle_params())[:-7])


def paddle_dims_2_62(folder):
    """A stream whose TensorDesc says 2^31 x 2^31 floats (the program leaves the
    dims unknown) over 48 bytes of data."""
    p = _paddle_params()
    data = pdf.stream(p["fc_0.b_0"]) + pdf.stream(p["fc_0.w_0"], dims=[1 << 31, 1 << 31])
    return _paddle_combined(folder, data, declared={"fc_0.w_0": (5, [-1, -1])})


def paddle_missing_var_file(folder):
    """A fluid __model__ naming two vars, with one var's file missing."""
    p = _paddle_params()
    (folder / "fc_0.w_0").write_bytes(pdf.stream(p["fc_0.w_0"]))
    path = folder / "__model__"
    path.write_bytes(pdf.program(p))
    return path


def paddle_stream_count_mismatch(folder):
    """A combined file holding one stream more than the program's vars."""
    p = _paddle_params()
    return _paddle_combined(folder, pdf.combined(p) + pdf.stream(p["fc_0.b_0"]))


def paddle_100k_vars(folder, count=PADDLE_VARS):
    """A program of 100 000 persistable vars and their 100 000 streams (mounts)."""
    p = {f"v{i:06d}": np.array([i], dtype=F32) for i in range(count)}
    (folder / "model.pdiparams").write_bytes(pdf.combined(p))
    path = folder / "model.pdmodel"
    path.write_bytes(pdf.program(p))
    return path


def paddle_pdparams_text_lies(folder):
    """A protocol-2 state dict whose array's latin-1 text stands for fewer bytes
    than its shape needs (the BINUNICODE length says so too)."""
    a = np.arange(256, dtype=F32) * 1.7
    good = pickle.dumps({"w": a}, protocol=2)
    text = a.tobytes().decode("latin1").encode("utf-8")
    at = good.index(text)
    cut = text[:-8]
    path = folder / "model.pdparams"
    path.write_bytes(good[:at - 4] + struct.pack("<I", len(cut)) + cut + good[at + len(text):])
    return path


# --- Core ML cases (issue 45): blob records and weights that lie, truncation, nesting ---
def _coreml_package(folder, edit_record=None, offset_shift=0):
    """A package with one float32 const of 6 values in weight.bin; `edit_record`
    rewrites the weight file given its first record's offset."""
    data = np.arange(6, dtype="<f4").tobytes()
    weights, records = cm.weight_file([data], [2])
    if edit_record:
        weights = edit_record(bytearray(weights), records[0])
    model = cm.program_model([cm.const_op("w", 11, [2, 3], cm.blob_value(records[0] + offset_shift))])
    return cm.package(folder / "model.mlpackage", model, bytes(weights))


def coreml_blob_offset_past_end(folder):
    """The const's blob offset points 1 TiB into a small weight.bin."""
    return _coreml_package(folder, offset_shift=1 << 40)


def coreml_wrong_sentinel(folder):
    """The blob's metadata record lacks 0xDEADBEEF."""
    return _coreml_package(folder, lambda b, r: b[:r] + b"\xef\xbe\xad\x00" + b[r + 4:])


def coreml_blob_size_lies(folder):
    """The record says 2^62 bytes for a [2, 3] float32 const."""
    return _coreml_package(folder, lambda b, r: b[:r + 8] + struct.pack("<Q", 1 << 62) + b[r + 16:])


def coreml_weight_count_not_shape(folder):
    """An innerProduct [4, 4] holding 5 floats."""
    path = folder / "short.mlmodel"
    weights = cm.weight_params(np.arange(5, dtype="<f4").tobytes(), 1)
    path.write_bytes(cm.nn_model([cm.inner_product("fc", 4, 4, weights)]))
    return path


def coreml_shape_overflows(folder):
    """An innerProduct of 2^40 x 2^40 channels: its element count overflows."""
    path = folder / "huge.mlmodel"
    weights = cm.weight_params(np.arange(4, dtype="<f4").tobytes(), 1)
    path.write_bytes(cm.nn_model([cm.inner_product("fc", 1 << 40, 1 << 40, weights)]))
    return path


def coreml_truncated(folder):
    """A neural network cut in the middle of its weights."""
    weights = cm.weight_params(np.arange(64, dtype="<f4").tobytes(), 1)
    blob = cm.nn_model([cm.inner_product("fc", 8, 8, weights)])
    path = folder / "cut.mlmodel"
    path.write_bytes(blob[:len(blob) - 100])
    return path


def coreml_nested_blocks(folder, depth=200):
    """A const inside 200 nested blocks: past the scanner's nesting bound."""
    op = cm.const_op("w", 23, [], cm.immediate_ints([1]))
    for _ in range(depth):
        op = cm.lfield(1, "cond") + cm.lfield(4, cm.lfield(3, op))
    path = folder / "nested.mlmodel"
    path.write_bytes(cm.program_model([op]))
    return path


CASES = {
    "long_name": (long_name, False),
    "shared_pickle_dict": (shared_pickle_dict, True),
    "shared_pickle_list": (shared_pickle_list, True),
    "expanded_views": (expanded_views, True),
    "zip_bomb": (zip_bomb, True),
    "huge_sidecar": (huge_sidecar, False),
    "long_listed_name": (long_listed_name, False),
    "nul_name_bad_offsets": (nul_name_bad_offsets, False),
    "fifo_model": (fifo_model, False),
    "fifo_shard": (fifo_shard, False),
    "symlink_escape_index": (symlink_escape_index, False),
    "symlink_escape_folder": (symlink_escape_folder, False),
    "deep_json_header": (deep_json_header, False),
    "deep_pickle": (deep_pickle, False),
    "gguf_huge_array_count": (gguf_huge_array_count, False),
    "gguf_huge_string_length": (gguf_huge_string_length, False),
    "safetensors_header_2_63": (safetensors_header_2_63, False),
    "truncated_central_directory": (truncated_central_directory, True),
    "memo_repeated_tensor": (memo_repeated_tensor, False),
    "memo_repeated_storage": (memo_repeated_storage, False),
    "split_member_missing": (split_member_missing, False),
    "split_member_links_out": (split_member_links_out, False),
    "export_size_wraps": (export_size_wraps, True),
    "tib_expanded_view": (tib_expanded_view, True),
    "many_expanded_views": (many_expanded_views, True),
    "stride_overflow": (stride_overflow, False),
    "safetensors_metadata_million_keys": (safetensors_metadata_keys, False),
    "gguf_120k_keys": (gguf_keys, False),
    "onnx_150k_props": (onnx_props, False),
    "onnx_150k_attributes": (onnx_attributes, False),
    "colliding_names_2_16": (colliding_names, False),
    "long_name_bad_offsets": (long_name_bad_offsets, False),
    "gguf_long_name_past_end": (gguf_long_name_past_end, False),
    "onnx_long_name_bad_tensor": (onnx_long_name_bad_tensor, False),
    "memo_repeated_string": (memo_repeated_string, False),
    "memo_repeated_tuple_key": (memo_repeated_tuple_key, False),
    "gguf_many_tensors": (gguf_many_tensors, False),
    "pt2_big_json": (pt2_big_json, False),
    "zero_size_120k": (zero_size_tensors, False),
    "onnx_million_dims": (onnx_million_dims, False),
    "npy_header_lies": (npy_header_lies, False),
    "npy_shape_overflow": (npy_shape_overflow, False),
    "npz_100k_members": (npz_many_members, False),
    "npz_deflate_bomb": (npz_deflate_bomb, False),
    "npz_member_short_stream": (npz_member_short_stream, False),
    "npy_deep_header": (npy_deep_header, False),
    "npy_odd_header": (npy_odd_header, False),
    # --- hdf5 cases ---
    "hdf5_deep_groups": (hdf5_deep_groups, False),
    "hdf5_100k_links": (hdf5_100k_links, False),
    "hdf5_chunk_past_file": (hdf5_chunk_past_file, False),
    "hdf5_truncated": (hdf5_truncated, False),
    "hdf5_huge_dataspace": (hdf5_huge_dataspace, False),
    "hdf5_unwritten_1000": (hdf5_unwritten_datasets, False),
    "hdf5_40k_chunks": (hdf5_many_chunks, False),
    # --- tfckpt cases ---
    "tfckpt_restarts_lie": (tfckpt_restarts_lie, False),
    "tfckpt_prefix_lies": (tfckpt_prefix_lies, False),
    "tfckpt_snappy_4gib": (tfckpt_snappy_4gib, False),
    "tfckpt_200k_entries": (tfckpt_many_entries, False),
    "tfckpt_100k_slices": (tfckpt_many_slices, False),
    # --- tfjs cases ---
    "tfjs_sizes_disagree": (tfjs_sizes_disagree, False),
    "tfjs_repeated_shards": (tfjs_repeated_shards, False),
    "tfjs_200k_weights": (tfjs_many_weights, False),
    "tfjs_deep_topology": (tfjs_deep_topology, False),
    # --- tflite cases ---
    "tflite_vector_2_31": (tflite_vector_2_31, False),
    "tflite_cyclic_offsets": (tflite_cyclic_offsets, False),
    "tflite_million_tensors": (tflite_million_tensors, False),
    "tflite_offset_past_file": (tflite_offset_past_file, False),
    # --- openvino cases ---
    "openvino_const_2_62": (openvino_const_2_62, False),
    "openvino_200k_consts": (openvino_many_consts, False),
    "openvino_deep_nesting": (openvino_deep_nesting, False),
    "openvino_1mib_attribute": (openvino_huge_attribute, False),
    # --- executorch cases ---
    "executorch_vector_2_31": (executorch_vector_2_31, False),
    "executorch_segment_past_file": (executorch_segment_past_file, False),
    "executorch_million_evalues": (executorch_million_evalues, False),
    "executorch_cyclic_offsets": (executorch_cyclic_offsets, False),
    # --- dcp cases ---
    "dcp_million_chunks": (dcp_million_chunks, False),
    "dcp_chunk_2_62": (dcp_chunk_2_62, False),
    "dcp_deep_pickle": (dcp_deep_pickle, False),
    "dcp_overlapping_chunks": (dcp_overlapping_chunks, False),
    # --- serving memory (issue 42): chunks that decode far past the file ---
    "hdf5_big_decoded_chunks": (hdf5_big_decoded_chunks, False),
    "hdf5_big_shuffled_chunks": (hdf5_big_shuffled_chunks, False),
    # --- every command catches (issue 42) ---
    "onnx_4m_packed_ints": (onnx_packed_ints, False),
    # --- issue 42, HDF5: addresses after a user block, inexact types, libhdf5's memory ---
    "hdf5_user_block_chunks": (hdf5_user_block_chunks, False),
    "hdf5_odd_types": (hdf5_odd_types, False),
    "hdf5_heap_cycle": (hdf5_heap_cycle, False),
    # --- issue 42: process memory, a user block past 4 KiB, work in proportion, open files ---
    "safetensors_1m_metadata_keys": (safetensors_million_metadata_keys, False),
    "safetensors_1100k_short_keys": (safetensors_short_metadata_keys, False),
    "gguf_2m_empty_strings": (gguf_empty_strings, False),
    "pt2_30mb_json_string": (pt2_long_json_string, False),
    "hdf5_16k_user_block": (hdf5_big_user_block, False),
    "pt_64_expanded_gib_views": (pt_expanded_gib_views, True),
    "tfjs_5000_shards": (tfjs_many_shards, False),
    # --- legacy GGML (issue 45): records that lie about what follows them ---
    "ggml_truncated_record": (ggml_truncated_record, False),
    "ggml_data_past_end": (ggml_data_past_end, False),
    "ggml_ndims_lies": (ggml_ndims_lies, False),
    "ggml_name_length_lies": (ggml_name_length_lies, False),
    "ggml_50k_records": (ggml_many_records, False),
    # --- llamafile (issue 45): a compressed GGUF, a member cut short or lying, truncation, many members ---
    "llamafile_deflated_gguf": (llamafile_deflated_gguf, False),
    "llamafile_gguf_cut_short": (llamafile_gguf_cut_short, False),
    "llamafile_member_2_62": (llamafile_member_2_62, False),
    "llamafile_tensor_past_end": (llamafile_tensor_past_end, False),
    "llamafile_truncated": (llamafile_truncated, False),
    "llamafile_20k_members": (llamafile_20k_members, False),
    # --- NeMo (issue 45): members past the file, a checkpoint cut by its member, truncation, PAX lies ---
    "nemo_member_past_end": (nemo_member_past_end, True),
    "nemo_ckpt_cut_by_its_member": (nemo_ckpt_cut_by_its_member, True),
    "nemo_truncated": (nemo_truncated, True),
    "nemo_pax_size_lies": (nemo_pax_size_lies, True),
    "nemo_gzip_empty": (nemo_gzip_empty, False),
    "nemo_20k_members": (nemo_20k_members, True),
    "nemo_gzip_truncated": (nemo_gzip_truncated, True),
    "nemo_gzip_bomb": (nemo_gzip_bomb, True),
    # --- issue 45, PaddlePaddle: streams cut, lying, missing, too many; a state dict's text ---
    "paddle_truncated_stream": (paddle_truncated_stream, False),
    "paddle_dims_2_62": (paddle_dims_2_62, False),
    "paddle_missing_var_file": (paddle_missing_var_file, False),
    "paddle_stream_count_mismatch": (paddle_stream_count_mismatch, False),
    "paddle_100k_vars": (paddle_100k_vars, False),
    "paddle_pdparams_text_lies": (paddle_pdparams_text_lies, False),
    # --- Core ML (issue 45): blob records and weights that lie, truncation, nesting ---
    "coreml_blob_offset_past_end": (coreml_blob_offset_past_end, False),
    "coreml_wrong_sentinel": (coreml_wrong_sentinel, False),
    "coreml_blob_size_lies": (coreml_blob_size_lies, False),
    "coreml_weight_count_not_shape": (coreml_weight_count_not_shape, False),
    "coreml_shape_overflows": (coreml_shape_overflows, False),
    "coreml_truncated": (coreml_truncated, False),
    "coreml_nested_blocks": (coreml_nested_blocks, False),
    # --- OpenVINO sub-byte Consts (issue 45): sizes that do not fit the packed type ---
    "openvino_u1_size_unpacked": (openvino_u1_size_unpacked, False),
    "openvino_nf4_past_end": (openvino_nf4_past_end, False),
}


def make(name, folder):
    """Writes case `name` into `folder` (made if missing); returns the model path."""
    function, needs_torch = CASES[name]
    if needs_torch and torch is None:
        raise RuntimeError(f"{name} needs torch")
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return function(folder)


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1])
    for case in sys.argv[2:] or CASES:
        print(case, make(case, out / case))
