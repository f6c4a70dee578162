# SPDX-License-Identifier: Apache-2.0
"""PT2 archives (torch.export.save) through a real mount, in every layout.

The Debian torch (1.13) has no torch.export, so archives are laid out here
the way torch's writers lay them out (docs/formats.md, "PT2 archives"): the layered archive of
2.8/2.9+ through torch._C.PyTorchFileWriter (the container PT2ArchiveWriter
uses: top folder, 64-byte alignment, data descriptors) with its payload
config JSON and raw storages; the flat 2.1-2.7 layout and early AOTInductor
packages through Python's zipfile, with torch.save'd nested members.

Oracle: the torch tensors each test wrote; every tensor is read back as its
raw file walked by the sidecar's strides and as its .npy."""
import io
import json
import zipfile

import numpy as np
import pytest
import torch

from conftest import index_paths, metadata, mounted, run_modelfs, sidecar
from test_torch_mount import check_tensor, raw_values

SCALAR_CODE = {
    torch.uint8: 1, torch.int8: 2, torch.int16: 3, torch.int32: 4, torch.int64: 5,
    torch.float16: 6, torch.float32: 7, torch.float64: 8, torch.complex64: 10,
    torch.complex128: 11, torch.bool: 12, torch.bfloat16: 13,
}


def saved(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def whole_storage(t):
    """The bytes of the whole storage `t` views, as PT2 writes a payload."""
    flat = torch.empty(0, dtype=t.dtype).set_(t.detach().storage())
    return raw_values(flat).tobytes()


def tensor_meta(t):
    return {"dtype": SCALAR_CODE[t.dtype],
            "sizes": [{"as_int": s} for s in t.shape],
            "requires_grad": t.requires_grad,
            "device": {"type": "cpu", "index": None},
            "strides": [{"as_int": s} for s in t.stride()],
            "storage_offset": {"as_int": t.storage_offset()},
            "layout": 7}


def program(parameters=(), buffers=(), constants=(), user_inputs=("x",), outputs=("out",)):
    """An ExportedProgram JSON with the parts a reader looks at."""
    inputs = [{"parameter": {"arg": {"name": "p_" + n.replace(".", "_")}, "parameter_name": n}}
              for n in parameters]
    inputs += [{"buffer": {"arg": {"name": "b_" + n.replace(".", "_")}, "buffer_name": n,
                           "persistent": True}} for n in buffers]
    inputs += [{"tensor_constant": {"arg": {"name": "c_" + n.replace(".", "_")},
                                    "tensor_constant_name": n}} for n in constants]
    inputs += [{"user_input": {"arg": {"as_tensor": {"name": n}}}} for n in user_inputs]
    return {"graph_module": {"graph": {"nodes": [], "tensor_values": {}},
                             "signature": {"input_specs": inputs,
                                           "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": n}}}}
                                                            for n in outputs]}},
            "opset_version": {"aten": 10}, "range_constraints": {},
            "schema_version": {"major": 8, "minor": 12}, "verifiers": [],
            "torch_version": "2.9.0"}


class LayeredWriter:
    """A 2.9-style PT2 archive: payload configs, deduplicated raw storages."""

    def __init__(self, path):
        self.writer = torch._C.PyTorchFileWriter(str(path))
        self.counters = {"weight": 0, "tensor": 0, "custom_obj": 0}

    def record(self, name, data):
        self.writer.write_record(name, data, len(data))

    def payloads(self, folder, prefix, entries, pickled=()):
        """entries: fqn -> (tensor, is_param) or bytes (a custom object)."""
        config, written = {}, {}
        for fqn, entry in entries.items():
            if isinstance(entry, bytes):
                name = f"custom_obj_{self.counters['custom_obj']}"
                self.counters["custom_obj"] += 1
                self.record(f"{folder}/{name}", entry)
                config[fqn] = {"path_name": name, "is_param": False, "use_pickle": True,
                               "tensor_meta": None}
                continue
            t, is_param = entry
            if fqn in pickled:
                name = f"{prefix}_{self.counters[prefix]}"
                self.counters[prefix] += 1
                self.record(f"{folder}/{name}", saved(t))
            else:
                key = (t.detach().storage().data_ptr(), t.dtype)
                if key not in written or t.numel() == 0:
                    name = f"{prefix}_{self.counters[prefix]}"
                    self.counters[prefix] += 1
                    self.record(f"{folder}/{name}", whole_storage(t))
                    written[key] = name
                name = written[key]
            config[fqn] = {"path_name": name, "is_param": is_param, "use_pickle": fqn in pickled,
                           "tensor_meta": tensor_meta(t)}
        return config

    def model(self, name, weights, constants=None, pickled=(), samples=None, graph=None):
        config = self.payloads("data/weights", "weight", weights, pickled)
        self.record(f"data/weights/{name}_weights_config.json", json.dumps({"config": config}).encode())
        config = self.payloads("data/constants", "tensor", constants or {}, pickled)
        self.record(f"data/constants/{name}_constants_config.json", json.dumps({"config": config}).encode())
        self.record(f"models/{name}.json", json.dumps(graph or program()).encode())
        if samples is not None:
            self.record(f"data/sample_inputs/{name}.pt", saved(samples))

    def close(self):
        self.record("archive_format", b"pt2")
        self.record("archive_version", b"0")
        self.record(".data/version", b"6\n")
        self.record("byteorder", b"little")
        self.writer.write_end_of_file()


def check_all(mnt, expected, kinds=None):
    paths, _ = index_paths(mnt)
    assert set(paths) == set(expected), (sorted(paths), sorted(expected))
    for name, t in expected.items():
        check_tensor(paths[name], name, t, (kinds or {}).get(name))
    return paths


def test_layered_archive_with_ties_views_dtypes_pickles_and_custom_objects(tmp):
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(4, 6))
    base = torch.arange(40, dtype=torch.float32).reshape(5, 8)
    view = base[1:4, 2:7:2]            # offset 10, strides (8, 2)
    transposed = base.t()              # F order: same storage, no copy
    weights = {
        "fc.weight": (weight, True),
        "head.weight": (weight, True),  # tied: one payload, two names
        "fc.bias": (torch.nn.Parameter(torch.randn(6).to(torch.bfloat16)), True),
        "mask": (torch.tensor([True, False, True]), False),
        "steps": (torch.tensor([3, -1, 2**40], dtype=torch.int64), False),
        "empty": (torch.empty(0, 3), False),
        "grid": (base, False),
        "grid_view": (view, False),
        "grid_t": (transposed, False),
        "scalar": (torch.tensor(2.5, dtype=torch.float64), False),
        "sub.packed": (torch.randn(2, 2), False),
    }
    constants = {"const_bias": (torch.randn(3).to(torch.float16), False),
                 "lookup": (torch.arange(6, dtype=torch.int32)[2:], False),
                 "my_obj": b"\x80\x02torchscript object bytes never run"}
    path = tmp / "layered.pt2"
    writer = LayeredWriter(path)
    writer.model("model", weights, constants, pickled={"sub.packed"},
                 samples=((torch.randn(2, 6), torch.ones(3, dtype=torch.int64)),
                          {"mask": torch.tensor([1, 0], dtype=torch.uint8)}),
                 graph=program(parameters=["fc.weight", "fc.bias", "head.weight"],
                               buffers=["mask", "steps", "grid"], constants=["const_bias"]))
    writer.close()
    (args, kwargs) = torch.load(io.BytesIO(zipfile.ZipFile(path).read("layered/data/sample_inputs/model.pt")))

    expected = {name: t for name, (t, _) in weights.items()}
    expected.update({"const_bias": constants["const_bias"][0], "lookup": constants["lookup"][0],
                     "sample_inputs.args.0": args[0], "sample_inputs.args.1": args[1],
                     "sample_inputs.kwargs.mask": kwargs["mask"]})
    kinds = {"fc.weight": "parameter", "mask": "buffer", "empty": "buffer", "const_bias": "constant",
             "lookup": "constant", "sample_inputs.args.0": "sample_input", "sub.packed": "buffer"}
    with mounted(path) as mnt:
        paths = check_all(mnt, expected, kinds)
        assert sidecar(paths["fc.weight"])["requires_grad"] is True
        # Tied and aliased names are served from one payload, in place.
        a, b = sidecar(paths["fc.weight"]), sidecar(paths["head.weight"])
        assert a["source"]["offset"] == b["source"]["offset"]
        assert sidecar(paths["grid_view"])["source"]["offset"] == sidecar(paths["grid"])["source"]["offset"] + 40
        assert sidecar(paths["grid_view"])["payload"]["storage_offset"] == 10
        assert paths["empty"].read_bytes() == b""
        assert sidecar(paths["sub.packed"])["payload"]["pickled"] is True
        meta = metadata(mnt)
        assert meta["format"] == "pt2"
        assert meta["pt2"]["layout"] == "layered" and meta["pt2"]["archive"] == "layered"
        assert meta["pt2"]["archive_version"] == 0 and meta["pt2"]["byteorder"] == "little"
        model = meta["models"]["model"]
        assert model["prefix"] == "" and model["schema_version"] == "8.12"
        assert model["signature"]["parameters"] == ["fc.weight", "fc.bias", "head.weight"]
        assert model["signature"]["buffers"] == ["mask", "steps", "grid"]
        assert model["signature"]["constants"] == ["const_bias"]
        assert model["signature"]["user_inputs"] == ["x"] and model["signature"]["user_outputs"] == ["out"]
        assert model["custom_objects"] == [{"name": "my_obj", "path": "data/constants/custom_obj_0",
                                            "bytes": len(constants["my_obj"])}]
        stored = zipfile.ZipFile(path).read("layered/models/model.json")
        assert (mnt / ".modelfs" / "models" / "model.json").read_bytes() == stored
    assert run_modelfs("--check", path).returncode == 0


def test_two_models_are_prefixed_by_name(tmp):
    enc = {"w": (torch.randn(3, 3), True), "b": (torch.randn(3), True)}
    dec = {"w": (torch.randn(2, 3), True)}
    path = tmp / "pair.pt2"
    writer = LayeredWriter(path)
    writer.model("encoder", enc, samples=((torch.randn(3),), {}))
    writer.model("decoder", dec, samples=((), {"h": torch.randn(2)}))
    writer.close()
    samples = zipfile.ZipFile(path)
    enc_args, _ = torch.load(io.BytesIO(samples.read("pair/data/sample_inputs/encoder.pt")))
    _, dec_kwargs = torch.load(io.BytesIO(samples.read("pair/data/sample_inputs/decoder.pt")))
    expected = {"encoder.w": enc["w"][0], "encoder.b": enc["b"][0], "decoder.w": dec["w"][0],
                "encoder.sample_inputs.args.0": enc_args[0],
                "decoder.sample_inputs.kwargs.h": dec_kwargs["h"]}
    with mounted(path) as mnt:
        check_all(mnt, expected, {"encoder.w": "parameter"})
        assert (mnt / "encoder" / "w").is_file() and (mnt / "decoder" / "w").is_file()
        meta = metadata(mnt)
        assert set(meta["models"]) == {"encoder", "decoder"}
        assert meta["models"]["decoder"]["prefix"] == "decoder."
        assert (mnt / ".modelfs" / "models" / "encoder.json").is_file()


def test_layered_without_top_folder_and_28_style_nested_saves(tmp):
    """Before PyTorchStreamWriter some archives had no top folder; 2.8 wrote
    the state dict as one nested torch.save (here one stored, one deflated)."""
    state = {"lin.weight": torch.nn.Parameter(torch.randn(2, 2)), "lin.bias": torch.randn(2)}
    consts = {"table": torch.arange(5, dtype=torch.int16)}
    path = tmp / "old28.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive_format", "pt2")
        z.writestr("models/model.json", json.dumps(program(parameters=["lin.weight"], buffers=["lin.bias"])))
        z.writestr("data/weights/model.pt", saved(state))
        z.writestr("data/constants/model.pt", saved(consts), compress_type=zipfile.ZIP_DEFLATED)
    expected = dict(state, **consts)
    with mounted(path) as mnt:
        paths = check_all(mnt, expected, {"lin.weight": "parameter", "lin.bias": "buffer", "table": "constant"})
        assert sidecar(paths["lin.bias"])["source"]["offset"] > 0
        assert "offset" not in sidecar(paths["table"])["source"]  # inflated: no place in the file
        meta = metadata(mnt)
        assert meta["pt2"]["archive"] == "" and meta["models"]["model"]["weights"] == "data/weights/model.pt"


def test_flat_layout_with_stored_and_deflated_nested_saves(tmp):
    state = {"conv.weight": torch.nn.Parameter(torch.randn(2, 1, 3)),
             "bn.running_mean": torch.randn(2),
             "bn.num_batches_tracked": torch.tensor(7)}
    consts = {"lifted_tensor_0": torch.randn(2, 2).t()}
    args, kwargs = (torch.randn(1, 1, 5),), {"scale": torch.tensor([0.5], dtype=torch.float64)}
    path = tmp / "flat.pt2"
    graph = program(parameters=["conv.weight"], buffers=["bn.running_mean", "bn.num_batches_tracked"],
                    constants=["lifted_tensor_0"])
    graph["schema_version"] = {"major": 5, "minor": 1}
    graph["torch_version"] = "2.3.1"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("serialized_exported_program.json", json.dumps(graph))
        z.writestr("serialized_state_dict.pt", saved(state))
        z.writestr("serialized_constants.pt", saved(consts), compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("serialized_example_inputs.pt", saved((args, kwargs)))
        z.writestr("version", "5.1")
        z.writestr("extra_files/notes.txt", "hello")
    expected = dict(state, **consts)
    expected.update({"sample_inputs.args.0": args[0], "sample_inputs.kwargs.scale": kwargs["scale"]})
    with mounted(path) as mnt:
        check_all(mnt, expected, {"conv.weight": "parameter", "bn.running_mean": "buffer",
                                  "lifted_tensor_0": "constant", "sample_inputs.args.0": "sample_input"})
        meta = metadata(mnt)
        assert meta["pt2"] == {"layout": "flat", "version": "5.1"}
        model = meta["models"]["model"]
        assert model["torch_version"] == "2.3.1" and model["schema_version"] == "5.1"
        assert model["signature"]["constants"] == ["lifted_tensor_0"]
        stored = zipfile.ZipFile(path).read("serialized_exported_program.json")
        assert (mnt / ".modelfs" / "serialized_exported_program.json").read_bytes() == stored
        assert (mnt / ".modelfs" / "extra" / "notes.txt").read_text() == "hello"


# The unions of torch 2.1-2.2's export schema, as dataclasses.asdict wrote
# them: every variant present, the unused ones null.
INPUT_SPEC_VARIANTS = ["user_input", "parameter", "buffer", "tensor_constant", "custom_obj"]
OUTPUT_SPEC_VARIANTS = ["user_output", "loss_output", "buffer_mutation", "gradient_to_parameter",
                        "gradient_to_user_input", "user_input_mutation"]
ARGUMENT_VARIANTS = ["as_none", "as_tensor", "as_tensors", "as_int", "as_ints", "as_float",
                     "as_floats", "as_string", "as_sym_int", "as_sym_ints", "as_scalar_type",
                     "as_memory_format", "as_layout", "as_device", "as_bool", "as_bools",
                     "as_sym_bool", "as_sym_bools"]


def asdict_union(variants, kind, value):
    return {v: (value if v == kind else None) for v in variants}


def program_21(parameters, buffers, constants, user_inputs, outputs):
    """An ExportedProgram JSON as torch 2.1-2.2 wrote it (dataclasses.asdict)."""
    def tensor_arg(name):
        return asdict_union(ARGUMENT_VARIANTS, "as_tensor", {"name": name})

    inputs = [asdict_union(INPUT_SPEC_VARIANTS, "parameter",
                           {"arg": {"name": "arg_" + n.replace(".", "_")}, "parameter_name": n})
              for n in parameters]
    inputs += [asdict_union(INPUT_SPEC_VARIANTS, "buffer",
                            {"arg": {"name": "arg_" + n.replace(".", "_")}, "buffer_name": n})
               for n in buffers]
    inputs += [asdict_union(INPUT_SPEC_VARIANTS, "tensor_constant",
                            {"arg": {"name": "arg_" + n}, "tensor_constant_name": n})
               for n in constants]
    inputs += [asdict_union(INPUT_SPEC_VARIANTS, "user_input", {"arg": tensor_arg(n)})
               for n in user_inputs]
    outs = [asdict_union(OUTPUT_SPEC_VARIANTS, "user_output", {"arg": tensor_arg(n)}) for n in outputs]
    return {"graph_module": {"graph": {"inputs": [], "outputs": [], "nodes": [], "tensor_values": {},
                                       "sym_int_values": {}, "sym_bool_values": {}},
                             "signature": {"input_specs": inputs, "output_specs": outs},
                             "module_call_graph": []},
            "opset_version": {"aten": 10}, "range_constraints": {}, "equality_constraints": [],
            "schema_version": 1, "dialect": "ATEN"}


def torch21_module():
    torch.manual_seed(21)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, bias=False), torch.nn.BatchNorm2d(8), torch.nn.Flatten(),
        torch.nn.Linear(32, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    net.eval()
    net(torch.randn(2, 3, 6, 6))  # nothing learnt, but every buffer set
    params = dict(net.named_parameters())
    buffers = dict(net.named_buffers())
    return params, buffers


def test_torch21_export_save_json_named_torch_saves_and_null_unions(tmp):
    """torch._export.save of torch 2.1-2.2: serialized_state_dict.json and
    serialized_constants.json are torch.save archives, and the signature's
    unions carry every variant, the unused ones null."""
    params, buffers = torch21_module()
    state = dict(params, **buffers)  # ep.state_dict: Parameters and buffers
    consts = {"lifted_tensor_0": torch.arange(6, dtype=torch.int64).reshape(2, 3)}
    graph = program_21(list(params), list(buffers), list(consts), ["x"], ["out"])
    path = tmp / "torch21.pt2"
    with zipfile.ZipFile(path, "w") as z:  # zipfile's default, as torch 2.1 wrote: stored
        z.writestr("serialized_exported_program.json", json.dumps(graph))
        z.writestr("serialized_state_dict.json", saved(state))
        z.writestr("serialized_constants.json", saved(consts))
        z.writestr("version", "1")
    # The oracle: torch.load of the members as they lie in the archive.
    z = zipfile.ZipFile(path)
    expected = torch.load(io.BytesIO(z.read("serialized_state_dict.json")))
    expected.update(torch.load(io.BytesIO(z.read("serialized_constants.json"))))
    kinds = {n: "parameter" for n in params}
    kinds.update({n: "buffer" for n in buffers})
    kinds["lifted_tensor_0"] = "constant"
    with mounted(path) as mnt:
        paths = check_all(mnt, expected, kinds)
        assert sidecar(paths["0.weight"])["source"]["offset"] > 0  # stored: served in place
        # The archives are read, not shown as documents.
        assert not (mnt / ".modelfs" / "serialized_state_dict.json").exists()
        assert not (mnt / ".modelfs" / "serialized_constants.json").exists()
        meta = metadata(mnt)
        assert meta["pt2"] == {"layout": "flat", "version": "1"}
        model = meta["models"]["model"]
        assert "not_mounted" not in model
        signature = model["signature"]
        assert signature["parameters"] == list(params)
        assert signature["buffers"] == list(buffers)
        assert signature["constants"] == ["lifted_tensor_0"]
        assert signature["user_inputs"] == ["x"] and signature["user_outputs"] == ["out"]
        assert signature["inputs"][0] == {"kind": "parameter", "graph_name": "arg_0_weight",
                                          "parameter_name": "0.weight"}
        assert (mnt / ".modelfs" / "serialized_exported_program.json").read_bytes() == \
            z.read("serialized_exported_program.json")
    assert run_modelfs("--check", path).returncode == 0


def test_torch21_first_schema_signature_maps_and_a_json_member_that_is_json(tmp):
    """The first export schema's signature (inputs_to_parameters, ...); and a
    serialized_*.json member that really is JSON stays a document."""
    params, buffers = torch21_module()
    state = dict(params, **buffers)
    graph = {"graph_module": {"graph": {"nodes": []}, "signature": {
        "inputs_to_parameters": {"arg_" + n.replace(".", "_"): n for n in params},
        "inputs_to_buffers": {"arg_" + n.replace(".", "_"): n for n in buffers},
        "user_inputs": ["x"], "user_outputs": ["out"], "buffers_to_mutate": {},
        "backward_signature": None}}, "opset_version": {"aten": 10}, "schema_version": 1}
    path = tmp / "torch21_first.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("serialized_exported_program.json", json.dumps(graph))
        z.writestr("serialized_state_dict.json", saved(state))
        z.writestr("serialized_constants.json", '{"not": "an archive"}')
        z.writestr("version", "1")
    expected = torch.load(io.BytesIO(zipfile.ZipFile(path).read("serialized_state_dict.json")))
    kinds = {n: "parameter" for n in params}
    kinds.update({n: "buffer" for n in buffers})
    with mounted(path) as mnt:
        check_all(mnt, expected, kinds)
        assert json.loads((mnt / ".modelfs" / "serialized_constants.json").read_text()) == \
            {"not": "an archive"}
        model = metadata(mnt)["models"]["model"]
        assert model["not_mounted"] == ["serialized_constants.json"]
        assert sorted(model["signature"]["parameters"]) == sorted(params)
        assert sorted(model["signature"]["buffers"]) == sorted(buffers)
        assert model["signature"]["user_inputs"] == ["x"]
        assert model["signature"]["user_outputs"] == ["out"]


def test_flat_layout_with_empty_members(tmp):
    path = tmp / "empty.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("serialized_exported_program.json", json.dumps(program()))
        z.writestr("serialized_state_dict.pt", b"")
        z.writestr("serialized_constants.pt", b"")
        z.writestr("serialized_example_inputs.pt", b"")
        z.writestr("version", "7.4")
    with mounted(path) as mnt:
        assert index_paths(mnt)[0] == {}
        assert metadata(mnt)["models"]["model"]["sample_inputs"] == "empty"


def test_aoti_package_with_weights_config(tmp):
    weight, bias = torch.randn(3, 4), torch.randn(3)
    path = tmp / "aoti.pt2"
    writer = LayeredWriter(path)
    writer.record("data/aotinductor/model/model.wrapper.so", b"\x7fELF not really")
    writer.record("data/aotinductor/model/model.wrapper.cpp", b"// generated")
    writer.record("data/aotinductor/model/model_metadata.json", b'{"AOTI_DEVICE_KEY": "cpu"}')
    writer.record("data/aotinductor/model/weights_config.json", json.dumps(
        {"fc.weight": ["weight_0", [3, 4], [4, 1], 0], "fc.bias": ["weight_1", [3], [1], 0]}).encode())
    writer.record("data/weights/weight_0", saved(weight))
    writer.record("data/weights/weight_1", saved(bias))
    writer.close()
    with mounted(path) as mnt:
        check_all(mnt, {"fc.weight": weight, "fc.bias": bias})
        aoti = metadata(mnt)["models"]["model"]["aotinductor"]
        assert aoti["weights"] == "weights_config.json"
        assert "data/aotinductor/model/model.wrapper.so" in aoti["files"]
        assert json.loads((mnt / ".modelfs" / "data" / "aotinductor" / "model" /
                           "model_metadata.json").read_text()) == {"AOTI_DEVICE_KEY": "cpu"}


def test_aoti_package_with_weights_only_in_the_shared_library(tmp):
    """An early (2.6-2.7) AOTInductor package: Python zipfile, no top folder."""
    path = tmp / "so_only.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("version", "0")
        z.writestr("archive_format", "pt2")
        z.writestr("data/aotinductor/model/cabc.wrapper.cpp", "// generated")
        z.writestr("data/aotinductor/model/cabc.wrapper.so", b"\x7fELF")
        z.writestr("data/aotinductor/model/cabc_metadata.json", '{"AOTI_DEVICE_KEY": "cpu"}')
    with mounted(path) as mnt:
        assert index_paths(mnt)[0] == {}
        aoti = metadata(mnt)["models"]["model"]["aotinductor"]
        assert aoti["weights"] == "compiled into the shared library"
        assert aoti["libraries"] == ["data/aotinductor/model/cabc.wrapper.so"]
        assert (mnt / ".modelfs" / "data" / "aotinductor" / "model" / "cabc_metadata.json").is_file()


@pytest.mark.parametrize("change, message", [
    (lambda c: c["w"]["tensor_meta"].update(dtype=21), "dtype code 21"),
    (lambda c: c["w"]["tensor_meta"]["sizes"].__setitem__(0, {"as_expr": {"expr_str": "s0"}}), "symbolic"),
    (lambda c: c["w"]["tensor_meta"].update(storage_offset={"as_int": 5}), "runs past"),
    (lambda c: c["w"].update(path_name="weight_9"), "lacks"),
])
def test_bad_payload_configs_are_refused_clearly(tmp, change, message):
    path = tmp / "bad.pt2"
    config = {"w": {"path_name": "weight_0", "is_param": True, "use_pickle": False,
                    "tensor_meta": tensor_meta(torch.zeros(2, 2))}}
    change(config)
    writer = LayeredWriter(path)
    writer.record("data/weights/weight_0", bytes(16))
    writer.record("data/weights/model_weights_config.json", json.dumps({"config": config}).encode())
    writer.record("models/model.json", json.dumps(program()).encode())
    writer.close()
    result = run_modelfs("--list", path)
    assert result.returncode == 2
    assert "pt2" in result.stderr and message in result.stderr, result.stderr


def test_archive_format_that_is_not_pt2_is_refused(tmp):
    path = tmp / "fake.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x/archive_format", "zzz")
        z.writestr("x/models/model.json", "{}")
    result = run_modelfs("--list", path)
    assert result.returncode == 2 and "not a PT2 archive" in result.stderr


def check_real_layered(mnt, path):
    """The mounted executorch_linear_newlayout.pt2 (local or by URL) against
    the archive's own members read with zipfile and torch.load."""
    z = zipfile.ZipFile(path)
    config = json.loads(z.read("linear_3/data/weights/model_weights_config.json"))["config"]
    paths, _ = index_paths(mnt)
    assert set(config) <= set(paths)
    for name, entry in config.items():
        raw = z.read("linear_3/data/weights/" + entry["path_name"])
        assert paths[name].read_bytes() == raw
        meta = sidecar(paths[name])
        assert meta["kind"] == "parameter" and meta["requires_grad"] is True
        assert meta["shape"] == [s["as_int"] for s in entry["tensor_meta"]["sizes"]]
        assert np.load(str(paths[name]) + ".npy").tobytes() == raw
    (args, kwargs) = torch.load(io.BytesIO(z.read("linear_3/data/sample_inputs/model.pt")))
    check_tensor(paths["sample_inputs.args.0"], "sample_inputs.args.0", args[0], "sample_input")
    meta = metadata(mnt)
    assert meta["pt2"]["archive"] == "linear_3" and meta["pt2"]["container_version"] == "6"
    model = meta["models"]["model"]
    assert model["torch_version"] == "2.9.0a0+fb" and model["schema_version"] == "8.12"
    assert model["signature"]["parameters"] == ["linear.weight", "linear.bias"]
    assert (mnt / ".modelfs" / "models" / "model.json").read_bytes() == z.read("linear_3/models/model.json")


def check_real_flat(mnt, path):
    """The mounted tensorrt_trt_ep_oldlayout_add.pt2 (local or by URL), which
    holds no weights, against its program read with zipfile."""
    assert index_paths(mnt)[0] == {}
    meta = metadata(mnt)
    assert meta["pt2"] == {"layout": "flat", "version": "7.4"}
    model = meta["models"]["model"]
    assert model["signature"]["user_inputs"] == ["a", "b"]
    assert model["torch_version"] == "2.6.0.dev20241014+cu124"
    assert (mnt / ".modelfs" / "serialized_exported_program.json").read_bytes() == \
        zipfile.ZipFile(path).read("serialized_exported_program.json")


REAL_CHECKS = {"executorch_linear_newlayout.pt2": check_real_layered,
               "tensorrt_trt_ep_oldlayout_add.pt2": check_real_flat}


def test_real_layered_archive_is_byte_exact_with_its_raw_weights(shared):
    path = shared / "fixtures" / "real" / "pt2" / "executorch_linear_newlayout.pt2"
    with mounted(path) as mnt:
        check_real_layered(mnt, path)


def test_real_flat_archive_mounts_with_its_program(shared):
    path = shared / "fixtures" / "real" / "pt2" / "tensorrt_trt_ep_oldlayout_add.pt2"
    with mounted(path) as mnt:
        check_real_flat(mnt, path)
