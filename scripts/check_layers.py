#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when a layer of src/ can reach a header of a layer it does not
link, or cannot reach its own and those below (ARCHITECTURE.md, "Layers
the build enforces"). Each layer's include flags are taken from the build's
own compile commands (compile_commands.json), so what is checked is what
the compiler is given; the preprocessor is asked, for one header of every
layer, whether it can find it. The public headers (include/modelfs/) are on
every layer's path, so an include of one that a higher layer defines is
found in the sources' text instead.
  scripts/check_layers.py BUILD_DIR"""
import json
import pathlib
import re
import shlex
import subprocess
import sys

REACHES = {
    "io": {"io"},
    "remote": {"io", "remote"},
    "formats": {"io", "remote", "formats"},
    "tree": {"io", "remote", "tree"},
    "fuse": {"io", "remote", "tree", "fuse"},
    "cli": {"io", "remote", "formats", "tree", "fuse", "cli"},
    # modelfs-csi runs the modelfs program and links no layer of it.
    "csi": {"csi"},
}
# Layers a build may leave out (MODELFS_BUILD_CSI off): checked when built.
OPTIONAL = {"csi"}
# Public headers whose functions a layer above io defines.
PUBLIC_OWNER = {"tree.hpp": "tree", "formats.hpp": "formats", "check.hpp": "formats"}
build = pathlib.Path(sys.argv[1])
src = pathlib.Path(__file__).resolve().parent.parent / "src"
commands = json.loads((build / "compile_commands.json").read_text())
# One header a layer (the first by name), asked for by folder path.
probe = {layer: f"{layer}/{sorted(p.name for p in (src / layer).glob('*.hpp'))[0]}" for layer in REACHES}
problems = []
for layer, allowed in REACHES.items():
    entry = next((c for c in commands if f"/src/{layer}/" in c["file"] and "/tests/" not in c["file"]), None)
    if entry is None and layer in OPTIONAL:
        continue
    if entry is None:
        problems.append(f"{layer}: no compile command in {build}/compile_commands.json")
        continue
    argv = entry.get("arguments") or shlex.split(entry["command"])
    flags = [a for i, a in enumerate(argv) if a.startswith(("-I", "-isystem", "-std"))
             or (i > 0 and argv[i - 1] in ("-isystem", "-I"))]
    test = "".join(f'#if __has_include("{probe[other]}")\nreaches {other}\n#endif\n' for other in REACHES)
    # Run from the build folder, as the compile command is; the snippet on
    # standard input has no folder of its own to search first.
    out = subprocess.run([argv[0], "-E", "-P", "-x", "c++", *flags, "-"], input=test, text=True,
                         capture_output=True, cwd=entry["directory"], check=True).stdout
    reached = {line.split()[1] for line in out.splitlines() if line.startswith("reaches ")}
    if reached != allowed:
        problems.append(f"{layer} reaches {sorted(reached)}; it should reach {sorted(allowed)}")
include = re.compile(r'^\s*#\s*include\s+"modelfs/([^"]+)"', re.M)
for layer, allowed in REACHES.items():
    for source in sorted((src / layer).glob("*.[ch]pp")):
        for header in include.findall(source.read_text()):
            owner = PUBLIC_OWNER.get(header, "io")
            if owner not in allowed:
                problems.append(f"{source.relative_to(src.parent)} includes modelfs/{header}, of the {owner} layer")
for line in problems:
    print(line, file=sys.stderr)
sys.exit(1 if problems else 0)
