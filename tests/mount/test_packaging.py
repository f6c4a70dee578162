# SPDX-License-Identifier: Apache-2.0
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
    for accepted in ("noprefetch", "max_parse_mb=", "xattr", "log_file=", "readahead_kb=", "max_threads="):
        assert accepted in options, accepted
    # libfuse's multi-threaded loop's own options: modelfs refuses them.
    for refused in ("clone_fd", "max_idle_threads="):
        assert refused not in options, refused
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


# ----- the Debian packages -------------------------------------------------

PACKAGES = ("modelfs", "libmodelfs0", "libmodelfs-dev")
CSI_PACKAGES = ("modelfs-csi",)  # the Kubernetes CSI node plugin (docs/kubernetes.md)
DBGSYM = ("modelfs-dbgsym", "libmodelfs0-dbgsym", "modelfs-csi-dbgsym")


def fresh_copy(target):
    """The files a clone would hold: tracked plus new, not ignored."""
    files = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO).stdout
    for name in filter(None, files.split("\0")):
        source = REPO / name
        if source.is_file():
            destination = target / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)


@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    """The README's packaging command, dpkg-buildpackage, in a copy of the
    project: {package name: .deb}, and the folder with the .changes.
    MODELFS_DEBS names a folder of packages built already instead (to work
    on these tests without building again)."""
    if os.environ.get("MODELFS_DEBS"):
        folder = pathlib.Path(os.environ["MODELFS_DEBS"])
        return {deb.name.split("_")[0]: deb for deb in folder.glob("*.deb")}, folder
    folder = tmp_path_factory.mktemp("debian")
    source = folder / "modelfs"
    fresh_copy(source)
    env = dict(os.environ, DEB_BUILD_OPTIONS=f"parallel={os.cpu_count()}")
    # The package is built as Debian builds it: not through scripts/test.sh's ccache.
    for launcher in ("CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_C_COMPILER_LAUNCHER"):
        env.pop(launcher, None)
    result = run("dpkg-buildpackage", "-b", "-us", "-uc", cwd=source, env=env, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return {deb.name.split("_")[0]: deb for deb in folder.glob("*.deb")}, folder


def test_readme_builds_the_packages_as_the_test_does():
    readme = (REPO / "README.md").read_text()
    install = readme[readme.index("## Install"):readme.index("## Usage")]
    assert "dpkg-buildpackage -b -us -uc" in install
    for package in PACKAGES + CSI_PACKAGES + DBGSYM:
        assert f"`{package}`" in install, package


def field(deb, name):
    return run("dpkg-deb", "-f", deb, name).stdout.strip()


def contents(deb):
    return [line.split()[5] for line in run("dpkg-deb", "-c", deb).stdout.splitlines()]


def test_packages_are_split_as_debian_does(debs, tmp):
    packages, _ = debs
    assert sorted(packages) == sorted(PACKAGES + CSI_PACKAGES + DBGSYM)
    tool, library, dev = (packages[name] for name in PACKAGES)
    depends = field(tool, "Depends")
    # The program links the library's code statically (CMakeLists.txt: it
    # uses internals libmodelfs.so does not export), so it needs the
    # library's own dependencies rather than libmodelfs0.
    for needed in ("fuse3", "libfuse3-3", "libspdlog1", "libzip4", "libstdc++6"):
        assert needed in depends, depends
    assert "libzip4" in field(library, "Depends")
    assert "libmodelfs0 (= 0.1.0)" in field(dev, "Depends") and "nlohmann-json3-dev" in field(dev, "Depends")
    assert (field(library, "Section"), field(dev, "Section")) == ("libs", "libdevel")
    for deb in (tool, library, dev):
        description = field(deb, "Description").splitlines()
        assert len(description) > 3, "a long description"
        assert "@localhost" not in field(deb, "Maintainer")

    arch = run("dpkg-architecture", "-qDEB_HOST_MULTIARCH").stdout.strip()
    files = {name: contents(packages[name]) for name in packages}
    assert {"./usr/bin/modelfs", "./usr/share/man/man1/modelfs.1.gz",
            "./usr/share/bash-completion/completions/modelfs", "./usr/share/doc/modelfs/copyright",
            "./usr/share/doc/modelfs/changelog.gz"} <= set(files["modelfs"])
    assert not [f for f in files["modelfs"] if "/include/" in f or ".so" in f]
    assert {"./usr/bin/modelfs-csi", "./usr/share/man/man1/modelfs-csi.1.gz"} <= set(files["modelfs-csi"])
    assert "modelfs (= 0.1.0)" in field(packages["modelfs-csi"], "Depends")
    assert f"./usr/lib/{arch}/libmodelfs.so.0" in files["libmodelfs0"]
    assert f"./usr/lib/{arch}/libmodelfs.so.0.1.0" in files["libmodelfs0"]
    assert not [f for f in files["libmodelfs0"] if f.endswith("libmodelfs.so") or "/include/" in f]
    assert {"./usr/include/modelfs/catalog.hpp", "./usr/include/modelfs/version.hpp",
            f"./usr/lib/{arch}/libmodelfs.so", f"./usr/lib/{arch}/pkgconfig/modelfs.pc",
            f"./usr/lib/{arch}/cmake/modelfs/modelfsConfig.cmake"} <= set(files["libmodelfs-dev"])
    for name in DBGSYM:
        assert [f for f in files[name] if f.startswith("./usr/lib/debug/.build-id/") and f.endswith(".debug")]

    # Stripped, the symbols in the -dbgsym packages.
    root = tmp / "root"
    for name in ("modelfs", "libmodelfs0"):
        run("dpkg-deb", "-x", packages[name], root)
    for binary in (root / "usr/bin/modelfs", root / f"usr/lib/{arch}/libmodelfs.so.0.1.0"):
        sections = run("readelf", "-S", "-W", binary).stdout
        assert ".debug_info" not in sections and ".symtab" not in sections, binary
        assert "RPATH" not in run("readelf", "-d", binary).stdout and "RUNPATH" not in run("readelf", "-d", binary).stdout
    # Installed-Size counts the library once, not once per symlink.
    library_kib = (root / f"usr/lib/{arch}/libmodelfs.so.0.1.0").stat().st_size / 1024
    assert library_kib <= int(field(library, "Installed-Size")) < library_kib * 1.3 + 16
    # ldconfig through a trigger, not called from maintainer scripts.
    control = tmp / "control"
    run("dpkg-deb", "-e", library, control)
    assert "activate-noawait ldconfig" in (control / "triggers").read_text()
    for script in ("postinst", "postrm"):
        assert not (control / script).exists() or "ldconfig" not in (control / script).read_text()


def test_development_package_builds_a_program(debs, tmp):
    """The -dev and library packages' files, unpacked, used as a prefix:
    pkg-config and find_package, with paths relative to where they lie."""
    packages, _ = debs
    root = tmp / "root"
    for name in ("libmodelfs0", "libmodelfs-dev"):
        run("dpkg-deb", "-x", packages[name], root)
    arch = run("dpkg-architecture", "-qDEB_HOST_MULTIARCH").stdout.strip()
    libdir = root / "usr/lib" / arch
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir / "pkgconfig"), LD_LIBRARY_PATH=str(libdir))
    flags = run("pkg-config", "--cflags", "--libs", "modelfs", env=env).stdout.split()
    program = tmp / "list_tensors"
    run("g++", REPO / "examples" / "list_tensors" / "list_tensors.cpp", "-o", program, *flags)
    model = tmp / "m.safetensors"
    tensors, data_start = sample_model(model)
    assert run(program, model, env=env).stdout.splitlines()[1:] == expected_listing(tensors, data_start, "m.safetensors")
    build = tmp / "example"
    run("cmake", "-S", REPO / "examples" / "list_tensors", "-B", build, f"-DCMAKE_PREFIX_PATH={root / 'usr'}")
    run("cmake", "--build", build)
    assert run(build / "list_tensors", model, env=env).stdout.splitlines()[0] == "# safetensors, 3 tensors"


def test_lintian_reports_no_error_and_no_warning(debs):
    _, folder = debs
    changes = next(folder.glob("modelfs_*.changes"))
    result = run("lintian", "--fail-on", "error,warning", "--show-overrides", changes, check=False)
    reported = [line for line in result.stdout.splitlines() if re.match(r"[EW]: ", line)]
    assert result.returncode == 0 and not reported, result.stdout + result.stderr
    # Overrides, if any, each carry a written reason on the line before.
    for overrides in (REPO / "debian").glob("*lintian-overrides"):
        lines = overrides.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() and not line.startswith("#"):
                assert i > 0 and lines[i - 1].startswith("#"), f"{overrides.name}: {line} has no reason"


# ----- a fresh Debian 12 root ----------------------------------------------

@pytest.fixture(scope="module")
def clean_root(tmp_path_factory):
    """A minimal Debian 12 (essential packages and apt) made by mmdebstrap
    from this machine's apt sources, its package lists kept."""
    if os.geteuid() != 0:
        pytest.skip("mmdebstrap and chroot need root")
    root = tmp_path_factory.mktemp("bookworm") / "root"
    sources = next((p for p in (pathlib.Path("/etc/apt/sources.list.d/debian.sources"),
                                pathlib.Path("/etc/apt/sources.list")) if p.is_file() and p.stat().st_size), None)
    result = run("mmdebstrap", "--variant=apt", "--skip=cleanup/apt/lists",
                 "--aptopt=Acquire::Check-Valid-Until \"false\"", "bookworm", root,
                 *([sources] if sources else []), check=False, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return root


def in_root(root, *command, **kwargs):
    return run("chroot", root, *command, **kwargs)


def root_files(root):
    """Every path in the root, less what apt and dpkg keep of their own work."""
    skip = ("var/lib/dpkg/", "var/lib/apt/", "var/cache/", "var/log/", "tmp/", "proc/", "dev/", "etc/ld.so.cache",
            "run/", "debs/", "sample.safetensors", "mnt/")
    paths = set()
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            relative = os.path.relpath(os.path.join(folder, name), root)
            if not relative.startswith(skip) and relative not in ("debs", "mnt", "tmp", "proc", "dev", "run"):
                paths.add(relative)
    return paths


def test_quick_start_installs_no_torch_in_a_clean_root(clean_root):
    """What `scripts/deps.sh --build` (the quick start) asks apt for, asked
    of a fresh Debian 12: nothing of torch, onnx, OpenCV, GDAL or Qt."""
    build = run(REPO / "scripts" / "deps.sh", "--print", "--build").stdout.split()
    everything = run(REPO / "scripts" / "deps.sh", "--print").stdout.split()
    assert "python3-torch" in everything and "python3-torch" not in build
    plan = in_root(clean_root, "apt-get", "install", "-s", "--no-install-recommends", *build).stdout
    installed = re.findall(r"^Inst (\S+)", plan, re.M)
    assert "libfuse3-dev" in installed and "libzip-dev" in installed
    heavy = [p for p in installed if re.match(r"(python3-torch|python3-onnx|libtorch|libopencv|libgdal|libqt|qt6|libvtk)", p)]
    assert not heavy, heavy


def test_packages_install_work_and_purge_in_a_clean_root(debs, clean_root):
    packages, _ = debs
    root = clean_root
    before = root_files(root)
    packages_before = installed_packages(root)
    (root / "debs").mkdir()
    for name in PACKAGES + CSI_PACKAGES:
        shutil.copy2(packages[name], root / "debs")
    shutil.copy2(REPO / "examples" / "sample-model.safetensors", root / "sample.safetensors")
    if not (root / "dev" / "fuse").exists():
        run("mknod", "-m", "0666", root / "dev" / "fuse", "c", "10", "229")
    (root / "mnt" / "a").mkdir(parents=True)
    (root / "mnt" / "b").mkdir()
    run("mount", "-t", "proc", "proc", root / "proc")
    try:
        install = in_root(root, "sh", "-c", "apt-get install -y --no-install-recommends /debs/*.deb",
                          env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), check=False, timeout=600)
        assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
        assert in_root(root, "modelfs", "--version").stdout.startswith("modelfs 0.1.0")
        assert in_root(root, "modelfs-csi", "--version").stdout == "modelfs-csi 0.1.0\n"
        # The bundled sample, mounted by the tool and through mount.fuse3 as
        # fstab and systemd would, read against its own bytes.
        sample = (REPO / "examples" / "sample-model.safetensors").read_bytes()
        (n,) = struct.unpack("<Q", sample[:8])
        header = json.loads(sample[8:8 + n])
        begin, end = header["model.norm.weight"]["data_offsets"]
        expected = sample[8 + n + begin:8 + n + end]
        in_root(root, "modelfs", "/sample.safetensors", "/mnt/a")
        in_root(root, "mount.fuse3", "/sample.safetensors", "/mnt/b", "-t", "modelfs", "-o", "ro")
        for mnt in ("a", "b"):
            assert (root / "mnt" / mnt / "model" / "norm" / "weight").read_bytes() == expected, mnt
        assert "model/norm/weight" in in_root(root, "cat", "/mnt/a/.modelfs/index.json").stdout
        in_root(root, "fusermount3", "-u", "/mnt/a")
        in_root(root, "modelfs", "-u", "/mnt/b")
        assert (root / "usr/include/nlohmann/json.hpp").is_file(), "libmodelfs-dev pulls nlohmann-json3-dev"

        purge = in_root(root, "apt-get", "purge", "-y", "--autoremove", *PACKAGES, *CSI_PACKAGES, check=False,
                        timeout=300)
        assert purge.returncode == 0, purge.stdout[-3000:] + purge.stderr[-3000:]
        status = in_root(root, "dpkg-query", "-W", "-f=${Package} ${Status}\n").stdout
        assert "modelfs" not in status and "libfuse3" not in status and "nlohmann" not in status, status
        assert in_root(root, "dpkg", "--audit").stdout == ""
    finally:
        for mnt in ("a", "b"):
            unmount(root / "mnt" / mnt)
        run("umount", "-l", root / "proc", check=False)
    shutil.rmtree(root / "debs")
    shutil.rmtree(root / "mnt" / "a")
    shutil.rmtree(root / "mnt" / "b")
    (root / "sample.safetensors").unlink()
    # What is left: packages apt never autoremoves (Priority: required, such
    # as mount, which fuse3 pulled in) with their files, and fuse3's lock
    # file that fusermount3 makes on first use; nothing of ours.
    kept = installed_packages(root) - packages_before
    for package in kept:
        assert in_root(root, "dpkg-query", "-W", "-f=${Priority}", package).stdout == "required", package
    owned = set()
    for package in kept:
        for path in in_root(root, "dpkg", "-L", package).stdout.splitlines():
            path = path.lstrip("/")
            owned.add(path)
            owned.add(re.sub(r"^(bin|sbin|lib)/", r"usr/\1/", path))  # merged /usr
    left = (root_files(root) ^ before) - owned - {"etc/mtab.fuselock"}
    assert not left, sorted(left)[:50]


def installed_packages(root):
    status = in_root(root, "dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\n").stdout
    return {line.split()[0] for line in status.splitlines() if line.split()[1:] == ["ii"]}
