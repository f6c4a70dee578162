# SPDX-License-Identifier: Apache-2.0
"""The tests' own writer of torch.distributed.checkpoint folders, laid out
as FileSystemWriter writes them (docs/formats.md, "torch.distributed.checkpoint"):
`.metadata`, a pickle of Metadata, and `__{rank}_0.distcp` per rank, each
the concatenation of its bytes items and of one complete torch.save archive
per tensor chunk.

Debian's torch (1.13) has no torch.distributed.checkpoint, so the classes are
stand-ins defined here under the real module and class names (registered in
sys.modules so that pickle records those names), with the real fields: the
dataclasses pickle as NEWOBJ + BUILD of their __dict__, TensorProperties as
its __getstate__ 5-tuple, _StorageInfo as a dict without its None fields."""
import dataclasses
import enum
import io
import os
import pathlib
import pickle
import sys
import types
from typing import Any, Optional

import torch

META = "torch.distributed.checkpoint.metadata"
FILESYSTEM = "torch.distributed.checkpoint.filesystem"


def _module(name):
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name)
        sys.modules[name] = module
    return module


_module("torch.distributed.checkpoint")
_meta = _module(META)
_fs = _module(FILESYSTEM)


def _register(module, cls):
    cls.__module__ = module.__name__
    setattr(module, cls.__name__, cls)
    return cls


_MEM_FORMAT_ENCODING = enum.Enum(
    "_MEM_FORMAT_ENCODING",
    [("TORCH_CONTIGUOUS_FORMAT", 0), ("TORCH_CHANNELS_LAST", 1), ("TORCH_PRESERVE_FORMAT", 2)],
    module=META)
_meta._MEM_FORMAT_ENCODING = _MEM_FORMAT_ENCODING


@dataclasses.dataclass
class ChunkStorageMetadata:
    offsets: torch.Size
    sizes: torch.Size


@dataclasses.dataclass
class TensorProperties:
    dtype: torch.dtype = dataclasses.field(default_factory=torch.get_default_dtype)
    layout: torch.layout = torch.strided
    requires_grad: bool = False
    memory_format: torch.memory_format = torch.contiguous_format
    pin_memory: bool = False

    def __getstate__(self):
        return (self.dtype, self.layout, self.requires_grad,
                _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, self.pin_memory)

    def __setstate__(self, state):
        self.dtype, self.layout, self.requires_grad, _, self.pin_memory = state
        self.memory_format = torch.contiguous_format


@dataclasses.dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: torch.Size
    chunks: list


@dataclasses.dataclass
class BytesStorageMetadata:
    pass


@dataclasses.dataclass
class StorageMeta:
    checkpoint_id: Any = None
    save_id: Optional[str] = None
    load_id: Optional[str] = None
    modules: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: Any = None
    storage_data: Any = None
    storage_meta: Optional[StorageMeta] = None
    version: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: Optional[torch.Size] = None
    index: Optional[int] = dataclasses.field(hash=False, compare=False, default=None)


@dataclasses.dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int
    transform_descriptors: Any = None

    def __getstate__(self):
        return {k: v for k, v in vars(self).items() if v is not None}


for _cls in (ChunkStorageMetadata, TensorProperties, TensorStorageMetadata, BytesStorageMetadata,
             StorageMeta, Metadata, MetadataIndex):
    _register(_meta, _cls)
_register(_fs, _StorageInfo)


# -- chunking plans: [(offsets, sizes, rank), ...] ------------------------------

def _cuts(n, parts):
    base, extra = divmod(n, parts)
    out, at = [], 0
    for p in range(parts):
        size = base + (1 if p < extra else 0)
        out.append((at, size))
        at += size
    return out


def by_rows(shape, ranks):
    return [((at,) + (0,) * (len(shape) - 1), (size,) + tuple(shape[1:]), r)
            for r, (at, size) in enumerate(_cuts(shape[0], ranks))]


def by_cols(shape, ranks):
    return [((0, at) + (0,) * (len(shape) - 2), (shape[0], size) + tuple(shape[2:]), r)
            for r, (at, size) in enumerate(_cuts(shape[1], ranks))]


def by_grid(shape, rows, cols):
    out = []
    for i, (r0, rn) in enumerate(_cuts(shape[0], rows)):
        for j, (c0, cn) in enumerate(_cuts(shape[1], cols)):
            out.append(((r0, c0), (rn, cn), i * cols + j))
    return out


def whole(shape, rank=0):
    return [((0,) * len(shape), tuple(shape), rank)]


def chunk_of(tensor, offsets, sizes):
    index = tuple(slice(o, o + s) for o, s in zip(offsets, sizes))
    return tensor[index].contiguous().clone()


def torch_save_bytes(tensor):
    buf = io.BytesIO()
    torch.save(tensor, buf)
    return buf.getvalue()


def write_checkpoint(folder, tensors, plans, bytes_items=None, ranks=4, relative_paths=None,
                     chunk_override=None):
    """Writes `tensors` ({fqn: tensor}) chunked per `plans` ({fqn: [(offsets,
    sizes, rank)]}) and `bytes_items` ({fqn: object}, torch.save'd on rank 0)
    into `folder`. `relative_paths` ({fqn: name}) replaces a chunk's file
    name in the metadata; `chunk_override` ({fqn: [(offsets, sizes)]})
    replaces the chunks the metadata declares. Returns a record of where
    each chunk was written: {(fqn, offsets): (file, offset, length)}."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bytes_items = bytes_items or {}
    streams = {r: io.BytesIO() for r in range(ranks)}
    storage_data, written = {}, {}

    def put(rank, fqn, offsets, payload):
        stream = streams[rank]
        at = stream.tell()
        stream.write(payload)
        name = f"__{rank}_0.distcp"
        written[(fqn, offsets)] = (name, at, len(payload))
        key = MetadataIndex(fqn, None if offsets is None else torch.Size(offsets))
        storage_data[key] = _StorageInfo((relative_paths or {}).get(fqn, name), at, len(payload))

    state_dict_metadata = {}
    for fqn, obj in bytes_items.items():  # bytes items first, as the writer does
        put(0, fqn, None, torch_save_bytes(obj))
        state_dict_metadata[fqn] = BytesStorageMetadata()
    for fqn, tensor in tensors.items():
        chunks = []
        for offsets, sizes, rank in plans[fqn]:
            put(rank, fqn, tuple(offsets), torch_save_bytes(chunk_of(tensor, offsets, sizes)))
            chunks.append(ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)))
        if chunk_override and fqn in chunk_override:
            chunks = [ChunkStorageMetadata(torch.Size(o), torch.Size(s)) for o, s in chunk_override[fqn]]
        state_dict_metadata[fqn] = TensorStorageMetadata(
            TensorProperties(dtype=tensor.dtype), torch.Size(tensor.shape), chunks)
    planner_data = {fqn: tuple(fqn.split(".")) for fqn in list(tensors) + list(bytes_items)}
    meta = Metadata(state_dict_metadata, planner_data, storage_data,
                    StorageMeta(checkpoint_id=pathlib.PosixPath(os.path.abspath(folder)), save_id="save-1"),
                    "1.0.0")
    for rank, stream in streams.items():
        (folder / f"__{rank}_0.distcp").write_bytes(stream.getvalue())
    (folder / ".metadata").write_bytes(pickle.dumps(meta))
    return written


def metadata_pickle(meta):
    return pickle.dumps(meta)
