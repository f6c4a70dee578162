"""modelfs as an installed Unix tool: cmake --install with a CMake package
config and a pkg-config file that an example program links against, the
Debian packages (built with dpkg-buildpackage, clean under lintian, installed,
used and purged in a fresh Debian 12 root), the man page, bash completion,
the systemd mount unit of the man page and README."""
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

import safetensors_writer as st
from conftest import MODELFS, REPO, is_mounted, unmount

# This module builds the project (or packages) again; the sanitizer pass of
# scripts/test.sh leaves it to the plain pass.
pytestmark = pytest.mark.skipif(os.environ.get("MODELFS_SANITIZED") == "1",
                                reason="rebuilds the project; run in the plain pass")


BUILD = pathlib.Path(os.environ.get("MODELFS_BUILD_DIR", MODELFS.parent))


def run(*args, **kwargs):
    kwargs.setdefault("check", True)
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)


def sample_model(path):
    tensors = {"encoder.w": np.arange(12, dtype=np.float32).reshape(3, 4),
               "encoder.b": np.array([7, 8, 9], dtype=np.int16),
               "step": np.array(5, dtype=np.int64)}
    st.write(path, tensors)
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    return tensors, 8 + n


def expected_listing(tensors, data_start, filename):
    lines, offset = [], 0
    for name, value in tensors.items():
        code, shape, data = st.entry(value)
        lines.append(f"{name} {st.CODES[code][0]} [{','.join(map(str, shape))}] {filename} "
                     f"{data_start + offset} {len(data)} {data[:4].hex()}")
        offset += len(data)
    return lines


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("prefix")
    run("cmake", "--install", BUILD, "--prefix", prefix)
    return prefix


def test_example_program_links_through_find_package(installed, tmp):
    build = tmp / "example"
    run("cmake", "-S", REPO / "examples" / "list_tensors", "-B", build, f"-DCMAKE_PREFIX_PATH={installed}")
    run("cmake", "--build", build)
    model = tmp / "m.safetensors"
    tensors, data_start = sample_model(model)
    env = dict(os.environ, LD_LIBRARY_PATH=str(installed / "lib"))
    out = run(build / "list_tensors", model, env=env).stdout.splitlines()
    assert out[0] == "# safetensors, 3 tensors"
    assert out[1:] == expected_listing(tensors, data_start, "m.safetensors")
    bad = tmp / "bad.safetensors"
    bad.write_bytes(b"\x10" + b"\0" * 7 + b"{")
    result = run(build / "list_tensors", bad, env=env, check=False)
    assert result.returncode == 2 and "bad.safetensors" in result.stderr


def test_pkg_config_file_compiles_a_program(installed, tmp):
    pkgconfig = next(installed.rglob("modelfs.pc")).parent
    env = dict(os.environ, PKG_CONFIG_PATH=str(pkgconfig))
    flags = run("pkg-config", "--cflags", "--libs", "modelfs", env=env).stdout.split()
    program = tmp / "list_tensors"
    run("g++", REPO / "examples" / "list_tensors" / "list_tensors.cpp", "-o", program, *flags)
    model = tmp / "m.safetensors"
    tensors, data_start = sample_model(model)
    out = run(program, model, env=dict(os.environ, LD_LIBRARY_PATH=str(installed / "lib"))).stdout
    assert out.splitlines()[1:] == expected_listing(tensors, data_start, "m.safetensors")


def man_page(width=80):
    result = run("man", "--warnings", "-l", REPO / "man" / "modelfs.1", env=dict(os.environ, MANWIDTH=str(width)))
    assert result.stderr == ""
    return result.stdout


def test_man_page_is_clean_under_man_warnings():
    text = man_page()
    for section in ("SYNOPSIS", "OPTIONS", "EXIT STATUS", "EXAMPLES", "fstab"):
        assert section in text, section
    synopsis = text[text.index("SYNOPSIS"):text.index("DESCRIPTION")]
    for command in ("--list [--json] MODEL", "--info [--json] MODEL", "--check [--json] MODEL",
                    "-u MOUNTPOINT", "--version | --help"):
        assert f"modelfs {command}" in synopsis, command


def mount_units():
    """The .mount unit of the man page and of the README."""
    from_man = re.search(r"^ *\[Unit\]\n.*?WantedBy=\S+\n", man_page(200), re.S | re.M).group(0)
    readme = (REPO / "README.md").read_text()
    from_readme = re.search(r"```ini\n(\[Unit\]\n.*?)```", readme, re.S).group(1)
    return [re.sub(r"(?m)^ +", "", from_man), from_readme]


def test_systemd_mount_unit_of_man_page_and_readme_verifies(tmp):
    """systemd-analyze verify: the syntax, the keys, and the unit's name
    matching its Where=; then the mount that unit asks for, as systemd
    would run it (mount -t TYPE -o OPTIONS WHAT WHERE), on a model here,
    with the build's binary named by path (type fuse, PROGRAM#MODEL) as
    mount.fuse3 finds `modelfs` on its own PATH only once installed."""
    units = mount_units()
    assert units[0] == units[1], "the man page and README show the same unit"
    unit = units[0]
    fields = dict(re.findall(r"(?m)^(\w+)=(.*)$", unit))
    name = run("systemd-escape", "-p", "--suffix=mount", fields["Where"]).stdout.strip()
    assert name == "mnt-llama.mount"
    (tmp / name).write_text(unit)
    verify = run("systemd-analyze", "verify", "--man=no", tmp / name, check=False)
    assert verify.returncode == 0 and verify.stderr == "", verify.stderr
    broken = tmp / "mnt-other.mount"
    broken.write_text(unit)
    assert run("systemd-analyze", "verify", "--man=no", broken, check=False).returncode != 0

    model = tmp / "m.safetensors"
    tensors, _ = sample_model(model)
    mnt = tmp / "mnt"
    mnt.mkdir()
    assert fields["Type"] == "fuse.modelfs"
    try:
        run("mount", "-t", "fuse", "-o", fields["Options"], f"{MODELFS}#{model}", mnt)
        assert (mnt / "encoder" / "w").read_bytes() == tensors["encoder.w"].tobytes()
        options = next(line for line in open("/proc/self/mountinfo") if f" {mnt} " in line)
        assert "fuse.modelfs" in options and "allow_other" in options
    finally:
        unmount(mnt)


def complete(line, cwd):
    script = f"""
source /usr/share/bash-completion/bash_completion
source {REPO}/packaging/bash-completion/modelfs
COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}
read -ra COMP_WORDS <<< "$COMP_LINE"
[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
_modelfs
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    return sorted(filter(None, run("bash", "-c", script, cwd=cwd).stdout.splitlines()))


def test_bash_completion_of_options_models_and_mountpoints(tmp):
    (tmp / "llama.safetensors").write_bytes(b"")
    (tmp / "notes.txt").write_text("x")
    (tmp / "mnt").mkdir()
    assert complete("modelfs --li", tmp) == ["--list"]
    assert complete("modelfs --ch", tmp) == ["--check"]
    assert "flat" in complete("modelfs -o fl", tmp)
    assert complete("modelfs ", tmp) == ["llama.safetensors", "mnt"]
    assert complete("modelfs llama.safetensors ", tmp) == ["mnt"]


def test_bash_completion_offers_what_modelfs_accepts(tmp):
    (tmp / "llama.safetensors").write_bytes(b"")
    (tmp / "notes.txt").write_text("x")
    (tmp / "mnt").mkdir()
    options = complete("modelfs -o ", tmp)
    for accepted in ("noprefetch", "max_parse_mb=", "xattr", "log_file=", "readahead_kb="):
        assert accepted in options, accepted
    for refused in ("clone_fd", "max_idle_threads="):  # modelfs refuses these
        assert refused not in options, refused
        assert run(MODELFS, "-o", refused.rstrip("=") + ("=1" if refused.endswith("=") else ""),
                   tmp / "llama.safetensors", tmp / "mnt", check=False).returncode == 1
    assert complete("modelfs -o ro,nopre", tmp) == ["ro,noprefetch"]
    assert complete("modelfs -o log_file=no", tmp) == ["log_file=notes.txt"]
    assert complete("modelfs -o flat,log_file=", tmp) == ["flat,log_file=llama.safetensors",
                                                            "flat,log_file=mnt/", "flat,log_file=notes.txt"]
    for command in ("--check", "--list", "--info"):
        assert complete(f"modelfs {command} llama.safetensors ", tmp) == [], command
    assert complete("modelfs -u ", tmp) == ["mnt"]


def test_fstab_line_mounts_through_mount_fuse3(tmp):
    """mount(8) with an fstab line, the build's binary named by path (type
    fuse, source PROGRAM#MODEL), so nothing is installed for this one."""
    model = tmp / "m.safetensors"
    tensors, _ = sample_model(model)
    mnt = tmp / "mnt"
    mnt.mkdir()
    fstab = tmp / "fstab"
    fstab.write_text(f"{MODELFS}#{model} {mnt} fuse ro,noauto,nofail,allow_other 0 0\n")
    try:
        run("mount", "-T", fstab, mnt)
        assert is_mounted(mnt)
        assert (mnt / "encoder" / "w").read_bytes() == tensors["encoder.w"].tobytes()
        options = next(line for line in open("/proc/self/mountinfo") if f" {mnt} " in line)
        assert "fuse.modelfs" in options and " ro," in options
    finally:
        unmount(mnt)


def dpkg_installed(name):
    result = run("dpkg-query", "-W", "-f=${Status}", name, check=False)
    return "install ok installed" in result.stdout


def test_debian_package_installs_and_mounts_from_fstab(tmp):
    out = tmp / "deb"
    run("cpack", "-G", "DEB", "-B", out, cwd=BUILD)
    deb = next(out.glob("modelfs_*.deb"))
    depends = run("dpkg-deb", "-f", deb, "Depends").stdout
    for needed in ("fuse3", "libfuse3-3", "libspdlog", "libstdc++6"):
        assert needed in depends, depends
    contents = run("dpkg-deb", "-c", deb).stdout
    for path in ("./usr/bin/modelfs", "./usr/share/man/man1/modelfs.1", "./usr/include/modelfs/catalog.hpp",
                 "modelfsConfig.cmake", "modelfs.pc", "libmodelfs.so.0",
                 "./usr/share/bash-completion/completions/modelfs", "./usr/share/doc/modelfs/README.md"):
        assert path in contents, path
    if dpkg_installed("modelfs"):
        pytest.skip("a modelfs package is already installed here; not replacing it")
    model = tmp / "m.safetensors"
    tensors, _ = sample_model(model)
    mnt, mnt2 = tmp / "mnt", tmp / "mnt2"
    mnt.mkdir()
    mnt2.mkdir()
    fstab = tmp / "fstab"
    fstab.write_text(f"{model} {mnt} fuse.modelfs ro,noauto,allow_other 0 0\n")
    try:
        run("dpkg", "-i", deb)
        assert run("/usr/bin/modelfs", "--version").stdout.startswith("modelfs ")
        assert run("man", "-w", "modelfs").stdout.strip().endswith("modelfs.1")
        run("mount", "-T", fstab, mnt)
        assert (mnt / "encoder" / "b").read_bytes() == tensors["encoder.b"].tobytes()
        assert np.load(mnt / "encoder" / "w.npy").tolist() == tensors["encoder.w"].tolist()
        run("mount", "-t", "fuse.modelfs", model, mnt2, "-o", "ro")
        assert (mnt2 / "step").read_bytes() == tensors["step"].tobytes()
    finally:
        unmount(mnt)
        unmount(mnt2)
        run("dpkg", "--purge", "modelfs", check=False)
    assert not shutil.which("modelfs", path="/usr/bin")
